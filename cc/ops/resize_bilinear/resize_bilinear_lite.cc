// LiteRT registration of resize_bilinear's forward op (common/lite_kernel.h).
#include "common/lite_kernel.h"
#include "ops/resize_bilinear/resize_bilinear_op.h"

namespace opforge {
namespace {

OPFORGE_LITE_OP(ResizeBilinearOp, OPFORGE_RESIZE_IMAGE_TYPES)

}  // namespace
}  // namespace opforge

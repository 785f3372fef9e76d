// LiteRT registration of conv2d_transpose's forward op (common/lite_kernel.h).
#include "common/lite_kernel.h"
#include "ops/conv2d_transpose/conv2d_transpose_op.h"

namespace opforge {
namespace {

OPFORGE_LITE_OP(Conv2DTransposeOp, OPFORGE_CONV2D_TRANSPOSE_TYPES)

}  // namespace
}  // namespace opforge

// LiteRT registration of yolo_decode's forward op (common/lite_kernel.h).
#include "common/lite_kernel.h"
#include "ops/yolo_decode/yolo_decode_op.h"

namespace opforge {
namespace {

// Validate checks the anchors' values (input 1): constant anchors give static output shapes.
OPFORGE_LITE_OP_HOST(YoloDecodeOp, OPFORGE_FLOAT_TYPES, 1)

}  // namespace
}  // namespace opforge

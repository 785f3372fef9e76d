// LiteRT registration of yolo_postprocess's forward op (common/lite_kernel.h).
#include "common/lite_kernel.h"
#include "ops/yolo_postprocess/yolo_postprocess_op.h"

namespace opforge {
namespace {

// Validate reads the anchors and the five scalars: the outputs are sized at invoke unless every
// input is constant (the features never are; it is a model's last op).
OPFORGE_LITE_OP_HOST(YoloPostprocessOp, OPFORGE_YOLO_POSTPROCESS_TYPES, 0)

}  // namespace
}  // namespace opforge

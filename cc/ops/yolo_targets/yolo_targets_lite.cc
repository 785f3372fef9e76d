// LiteRT registration of yolo_targets's forward op (common/lite_kernel.h).
#include "common/lite_kernel.h"
#include "ops/yolo_targets/yolo_targets_op.h"

namespace opforge {
namespace {

OPFORGE_LITE_OP(YoloTargetsOp, OPFORGE_YOLO_TARGETS_TYPES)

}  // namespace
}  // namespace opforge

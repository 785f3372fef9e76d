// ONNX Runtime registration of the YoloTargets kernels: the op structs of
// yolo_targets_op.h, the ones TensorFlow runs (common/ort_kernel.h).
#include "common/ort_kernel.h"
#include "ops/yolo_targets/yolo_targets_op.h"

namespace opforge {

OPFORGE_ORT_KERNELS(YoloTargets, YoloTargetsOp, OPFORGE_YOLO_TARGETS_TYPES)

}  // namespace opforge

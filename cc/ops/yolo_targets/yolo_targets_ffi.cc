// XLA FFI handlers of the YoloTargets kernel: the op structs of yolo_targets_op.h,
// the ones TensorFlow runs (common/xla_ffi.h).
#include "common/xla_ffi.h"
#include "ops/yolo_targets/yolo_targets_op.h"

namespace opforge {

OPFORGE_FFI_KERNELS(YoloTargets, YoloTargetsOp, OPFORGE_YOLO_TARGETS_TYPES)

// The CUDA platform's handlers (XLA:GPU; common/xla_ffi.h), over the GPU kernels' types.
OPFORGE_FFI_GPU_KERNELS(YoloTargets, YoloTargetsOp, OPFORGE_YOLO_TARGETS_TYPES)

}  // namespace opforge

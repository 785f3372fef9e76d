// XLA FFI handlers of the YoloPostprocess kernel: the op structs of yolo_postprocess_op.h,
// the ones TensorFlow runs (common/xla_ffi.h).
#include "common/xla_ffi.h"
#include "ops/yolo_postprocess/yolo_postprocess_op.h"

namespace opforge {

OPFORGE_FFI_KERNELS(YoloPostprocess, YoloPostprocessOp, OPFORGE_YOLO_POSTPROCESS_TYPES)

}  // namespace opforge

// XLA FFI handlers of the YoloDecode, YoloDecodeGrad kernels: the op structs of yolo_decode_op.h,
// the ones TensorFlow runs (common/xla_ffi.h).
#include "common/xla_ffi.h"
#include "ops/yolo_decode/yolo_decode_op.h"

namespace opforge {

OPFORGE_FFI_KERNELS(YoloDecode, YoloDecodeOp, OPFORGE_FLOAT_TYPES)
OPFORGE_FFI_KERNELS(YoloDecodeGrad, YoloDecodeGradOp, OPFORGE_FLOAT_TYPES)

}  // namespace opforge

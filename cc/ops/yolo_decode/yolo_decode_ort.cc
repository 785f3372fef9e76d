// ONNX Runtime registration of the YoloDecode, YoloDecodeGrad kernels: the op structs of
// yolo_decode_op.h, the ones TensorFlow runs (common/ort_kernel.h).
#include "common/ort_kernel.h"
#include "ops/yolo_decode/yolo_decode_op.h"

namespace opforge {

OPFORGE_ORT_KERNELS(YoloDecode, YoloDecodeOp, OPFORGE_FLOAT_TYPES)
OPFORGE_ORT_KERNELS(YoloDecodeGrad, YoloDecodeGradOp, OPFORGE_FLOAT_TYPES)

}  // namespace opforge

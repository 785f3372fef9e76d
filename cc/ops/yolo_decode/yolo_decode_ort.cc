// ONNX Runtime registration of the YoloDecode, YoloDecodeGrad kernels: the op structs of
// yolo_decode_op.h, the ones TensorFlow runs (common/ort_kernel.h).
#include "common/ort_kernel.h"
#include "ops/yolo_decode/yolo_decode_op.h"

namespace opforge {

OPFORGE_ORT_KERNELS(YoloDecode, "YoloDecode", YoloDecodeOp, OPFORGE_FLOAT_TYPES, "T, T", "T, T, int32, T")
OPFORGE_ORT_KERNELS(YoloDecodeGrad, "YoloDecodeGrad", YoloDecodeGradOp, OPFORGE_FLOAT_TYPES, "T, T, T, T, T", "T")

}  // namespace opforge

// ONNX Runtime registration of the FusedBatchNormLeakyRelu, FusedBatchNormLeakyReluGrad kernels: the op structs of
// fused_batch_norm_leaky_relu_op.h, the ones TensorFlow runs (common/ort_kernel.h).
#include "common/ort_kernel.h"
#include "ops/fused_batch_norm_leaky_relu/fused_batch_norm_leaky_relu_op.h"

namespace opforge {

OPFORGE_ORT_KERNELS(FusedBatchNormLeakyRelu, "FusedBatchNormLeakyRelu", BatchNormLeakyOp, OPFORGE_FLOAT_TYPES, "T, U, U", "T, U, U")
OPFORGE_ORT_KERNELS(FusedBatchNormLeakyReluGrad, "FusedBatchNormLeakyReluGrad", BatchNormLeakyGradOp, OPFORGE_FLOAT_TYPES, "T, T, U, U, U, U", "T, U, U")

}  // namespace opforge

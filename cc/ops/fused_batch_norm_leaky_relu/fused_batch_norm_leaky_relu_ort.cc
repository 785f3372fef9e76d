// ONNX Runtime registration of the FusedBatchNormLeakyRelu, FusedBatchNormLeakyReluGrad kernels:
// the op structs of fused_batch_norm_leaky_relu_op.h, the ones TensorFlow runs
// (common/ort_kernel.h).
#include "common/ort_kernel.h"
#include "ops/fused_batch_norm_leaky_relu/fused_batch_norm_leaky_relu_op.h"

namespace opforge {

OPFORGE_ORT_KERNELS(FusedBatchNormLeakyRelu, BatchNormLeakyOp, OPFORGE_FLOAT_TYPES)
OPFORGE_ORT_KERNELS(FusedBatchNormLeakyReluGrad, BatchNormLeakyGradOp, OPFORGE_FLOAT_TYPES)

}  // namespace opforge

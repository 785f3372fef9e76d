// XLA FFI handlers of the FusedBatchNormLeakyRelu, FusedBatchNormLeakyReluGrad kernels: the op
// structs of fused_batch_norm_leaky_relu_op.h, the ones TensorFlow runs (common/xla_ffi.h).
#include "common/xla_ffi.h"
#include "ops/fused_batch_norm_leaky_relu/fused_batch_norm_leaky_relu_op.h"

namespace opforge {

OPFORGE_FFI_KERNELS(FusedBatchNormLeakyRelu, BatchNormLeakyOp, OPFORGE_FLOAT_TYPES)
OPFORGE_FFI_KERNELS(FusedBatchNormLeakyReluGrad, BatchNormLeakyGradOp, OPFORGE_FLOAT_TYPES)

// The CUDA platform's handlers (XLA:GPU; common/xla_ffi.h), over the GPU kernels' types.
OPFORGE_FFI_GPU_KERNELS(FusedBatchNormLeakyRelu, BatchNormLeakyOp, OPFORGE_FLOAT_TYPES)
OPFORGE_FFI_GPU_KERNELS(FusedBatchNormLeakyReluGrad, BatchNormLeakyGradOp, OPFORGE_FLOAT_TYPES)

}  // namespace opforge

// XLA FFI handlers of the BiasLeakyRelu kernel: the op structs of bias_leaky_relu_op.h,
// the ones TensorFlow runs (common/xla_ffi.h).
#include "common/xla_ffi.h"
#include "ops/bias_leaky_relu/bias_leaky_relu_op.h"

namespace opforge {

OPFORGE_FFI_KERNELS(BiasLeakyRelu, BiasLeakyReluOp, OPFORGE_FLOAT_TYPES)

// The CUDA platform's handlers (XLA:GPU; common/xla_ffi.h), over the GPU kernels' types.
OPFORGE_FFI_GPU_KERNELS(BiasLeakyRelu, BiasLeakyReluOp, OPFORGE_FLOAT_TYPES)

}  // namespace opforge

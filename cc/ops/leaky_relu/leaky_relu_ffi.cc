// XLA FFI handlers of the LeakyRelu, LeakyReluWithMask and LeakyReluGrad kernels: the op structs
// of leaky_relu_op.h, the ones TensorFlow runs (common/xla_ffi.h). TensorFlow's XLA runs these ops
// as HLO (leaky_relu_xla.cc); the handlers are for the other XLA hosts (JAX: opforge.jax).
#include "common/xla_ffi.h"
#include "ops/leaky_relu/leaky_relu_op.h"

namespace opforge {

OPFORGE_FFI_KERNELS(LeakyRelu, LeakyReluOp<false>, OPFORGE_FLOAT_TYPES)
OPFORGE_FFI_KERNELS(LeakyReluWithMask, LeakyReluOp<true>, OPFORGE_FLOAT_TYPES)
OPFORGE_FFI_KERNELS(LeakyReluGrad, LeakyReluGradOp, OPFORGE_FLOAT_TYPES)

// The CUDA platform's handlers, over the GPU kernels' types.
OPFORGE_FFI_GPU_KERNELS(LeakyRelu, LeakyReluOp<false>, OPFORGE_FLOAT_TYPES)
OPFORGE_FFI_GPU_KERNELS(LeakyReluWithMask, LeakyReluOp<true>, OPFORGE_FLOAT_TYPES)
OPFORGE_FFI_GPU_KERNELS(LeakyReluGrad, LeakyReluGradOp, OPFORGE_FLOAT_TYPES)

}  // namespace opforge

// XLA FFI handlers of the Swish, SwishGrad kernels: the op structs of swish_op.h, the ones
// TensorFlow runs (common/xla_ffi.h).
#include "common/xla_ffi.h"
#include "ops/swish/swish_op.h"

namespace opforge {

OPFORGE_FFI_KERNELS(Swish, SwishOp, OPFORGE_FLOAT_TYPES)
OPFORGE_FFI_KERNELS(SwishGrad, SwishGradOp, OPFORGE_FLOAT_TYPES)

// The CUDA platform's handlers (XLA:GPU; common/xla_ffi.h), over the GPU kernels' types.
OPFORGE_FFI_GPU_KERNELS(Swish, SwishOp, OPFORGE_FLOAT_TYPES)
OPFORGE_FFI_GPU_KERNELS(SwishGrad, SwishGradOp, OPFORGE_FLOAT_TYPES)

}  // namespace opforge

// XLA FFI handlers of the ClippedIdentity and ClippedIdentityGrad kernels: the op structs of
// clipped_identity_op.h, the ones TensorFlow runs (common/xla_ffi.h). TensorFlow's XLA runs these
// ops as HLO (clipped_identity_xla.cc); the handlers are for the other XLA hosts (opforge.jax).
#include "common/xla_ffi.h"
#include "ops/clipped_identity/clipped_identity_op.h"

namespace opforge {

OPFORGE_FFI_KERNELS(ClippedIdentity, ClippedIdentityOp, OPFORGE_FLOAT_TYPES)
OPFORGE_FFI_KERNELS(ClippedIdentityGrad, ClippedIdentityGradOp, OPFORGE_FLOAT_TYPES)

// The CUDA platform's handlers, over the GPU kernels' types.
OPFORGE_FFI_GPU_KERNELS(ClippedIdentity, ClippedIdentityOp, OPFORGE_FLOAT_TYPES)
OPFORGE_FFI_GPU_KERNELS(ClippedIdentityGrad, ClippedIdentityGradOp, OPFORGE_FLOAT_TYPES)

}  // namespace opforge

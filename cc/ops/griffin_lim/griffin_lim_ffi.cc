// XLA FFI handlers of the GriffinLim kernel: the op structs of griffin_lim_op.h,
// the ones TensorFlow runs (common/xla_ffi.h).
#include "common/xla_ffi.h"
#include "ops/griffin_lim/griffin_lim_op.h"

namespace opforge {

OPFORGE_FFI_KERNELS(GriffinLim, GriffinLimOp, OPFORGE_GRIFFIN_LIM_TYPES)

// The CUDA platform's handlers (XLA:GPU; common/xla_ffi.h), over the GPU kernels' types.
OPFORGE_FFI_GPU_KERNELS(GriffinLim, GriffinLimOp, OPFORGE_GRIFFIN_LIM_TYPES)

}  // namespace opforge

// XLA FFI handlers of the GriffinLim kernel: the op structs of griffin_lim_op.h,
// the ones TensorFlow runs (common/xla_ffi.h).
#include "common/xla_ffi.h"
#include "ops/griffin_lim/griffin_lim_op.h"

namespace opforge {

OPFORGE_FFI_KERNELS(GriffinLim, GriffinLimOp, OPFORGE_GRIFFIN_LIM_TYPES)

}  // namespace opforge

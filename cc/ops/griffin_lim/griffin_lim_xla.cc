// GriffinLim under XLA (tf.function(jit_compile=True)): custom calls to the op structs' FFI
// handlers (griffin_lim_ffi.cc, common/tf_xla_ffi.h), the same core as the TensorFlow kernels: the
// same bits.
#include "common/tf_xla_ffi.h"
#include "ops/griffin_lim/griffin_lim_op.h"

namespace opforge {

OPFORGE_REGISTER_XLA_FFI_OP(GriffinLim, GriffinLimOp)

}  // namespace opforge

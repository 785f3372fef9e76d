// MfccToMel, MfccToMelGrad under XLA (tf.function(jit_compile=True)): custom calls to the op
// structs' FFI handlers (mfcc_to_mel_ffi.cc, common/tf_xla_ffi.h), the same core as the TensorFlow
// kernels: the same bits.
#include "common/tf_xla_ffi.h"
#include "ops/mfcc_to_mel/mfcc_to_mel_op.h"

namespace opforge {

OPFORGE_REGISTER_XLA_FFI_OP(MfccToMel, MfccToMelOp)
OPFORGE_REGISTER_XLA_FFI_OP(MfccToMelGrad, MfccToMelGradOp)

}  // namespace opforge

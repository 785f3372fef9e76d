// MelToStft under XLA (tf.function(jit_compile=True)): custom calls to the op structs' FFI
// handlers (mel_to_stft_ffi.cc, common/tf_xla_ffi.h), the same core as the TensorFlow kernels: the
// same bits.
#include "common/tf_xla_ffi.h"
#include "ops/mel_to_stft/mel_to_stft_op.h"

namespace opforge {

OPFORGE_REGISTER_XLA_FFI_OP(MelToStft, MelToStftOp)

}  // namespace opforge

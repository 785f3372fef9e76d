// XLA FFI handlers of the MelToStft kernel: the op structs of mel_to_stft_op.h,
// the ones TensorFlow runs (common/xla_ffi.h).
#include "common/xla_ffi.h"
#include "ops/mel_to_stft/mel_to_stft_op.h"

namespace opforge {

OPFORGE_FFI_KERNELS(MelToStft, MelToStftOp, OPFORGE_MEL_TO_STFT_TYPES)

// The CUDA platform's handlers (XLA:GPU; common/xla_ffi.h), over the GPU kernels' types.
OPFORGE_FFI_GPU_KERNELS(MelToStft, MelToStftOp, OPFORGE_MEL_TO_STFT_TYPES)

}  // namespace opforge

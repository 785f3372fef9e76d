// ONNX Runtime registration of the MelToStft kernels: the op structs of
// mel_to_stft_op.h, the ones TensorFlow runs (common/ort_kernel.h).
#include "common/ort_kernel.h"
#include "ops/mel_to_stft/mel_to_stft_op.h"

namespace opforge {

OPFORGE_ORT_KERNELS(MelToStft, MelToStftOp, OPFORGE_MEL_TO_STFT_TYPES)

}  // namespace opforge

// ONNX Runtime registration of the MfccToMel, MfccToMelGrad kernels: the op structs of
// mfcc_to_mel_op.h, the ones TensorFlow runs (common/ort_kernel.h).
#include "common/ort_kernel.h"
#include "ops/mfcc_to_mel/mfcc_to_mel_op.h"

namespace opforge {

OPFORGE_ORT_KERNELS(MfccToMel, MfccToMelOp, OPFORGE_MFCC_TO_MEL_TYPES)
OPFORGE_ORT_KERNELS(MfccToMelGrad, MfccToMelGradOp, OPFORGE_MFCC_TO_MEL_TYPES)

}  // namespace opforge

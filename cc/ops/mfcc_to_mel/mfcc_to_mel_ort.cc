// ONNX Runtime registration of the MfccToMel, MfccToMelGrad kernels: the op structs of
// mfcc_to_mel_op.h, the ones TensorFlow runs (common/ort_kernel.h).
#include "common/ort_kernel.h"
#include "ops/mfcc_to_mel/mfcc_to_mel_op.h"

namespace opforge {

OPFORGE_ORT_KERNELS(MfccToMel, "MfccToMel", MfccToMelOp, OPFORGE_MFCC_TO_MEL_TYPES, "T", "T")
OPFORGE_ORT_KERNELS(MfccToMelGrad, "MfccToMelGrad", MfccToMelGradOp, OPFORGE_MFCC_TO_MEL_TYPES, "T, T, T", "T")

}  // namespace opforge

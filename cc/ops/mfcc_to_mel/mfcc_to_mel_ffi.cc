// XLA FFI handlers of the MfccToMel, MfccToMelGrad kernels: the op structs of mfcc_to_mel_op.h,
// the ones TensorFlow runs (common/xla_ffi.h).
#include "common/xla_ffi.h"
#include "ops/mfcc_to_mel/mfcc_to_mel_op.h"

namespace opforge {

OPFORGE_FFI_KERNELS(MfccToMel, MfccToMelOp, OPFORGE_MFCC_TO_MEL_TYPES)
OPFORGE_FFI_KERNELS(MfccToMelGrad, MfccToMelGradOp, OPFORGE_MFCC_TO_MEL_TYPES)

// The CUDA platform's handlers (XLA:GPU; common/xla_ffi.h), over the GPU kernels' types.
OPFORGE_FFI_GPU_KERNELS(MfccToMel, MfccToMelOp, OPFORGE_MFCC_TO_MEL_TYPES)
OPFORGE_FFI_GPU_KERNELS(MfccToMelGrad, MfccToMelGradOp, OPFORGE_MFCC_TO_MEL_TYPES)

}  // namespace opforge

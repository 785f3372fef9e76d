// ONNX Runtime registration of the ClippedIdentity, ClippedIdentityGrad kernels: the op structs of
// clipped_identity_op.h, the ones TensorFlow runs (common/ort_kernel.h).
#include "common/ort_kernel.h"
#include "ops/clipped_identity/clipped_identity_op.h"

namespace opforge {

OPFORGE_ORT_KERNELS(ClippedIdentity, ClippedIdentityOp, OPFORGE_FLOAT_TYPES)
OPFORGE_ORT_KERNELS(ClippedIdentityGrad, ClippedIdentityGradOp, OPFORGE_FLOAT_TYPES)

}  // namespace opforge

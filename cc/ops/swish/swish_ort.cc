// ONNX Runtime registration of the Swish, SwishGrad kernels: the op structs of
// swish_op.h, the ones TensorFlow runs (common/ort_kernel.h).
#include "common/ort_kernel.h"
#include "ops/swish/swish_op.h"

namespace opforge {

OPFORGE_ORT_KERNELS(Swish, SwishOp, OPFORGE_FLOAT_TYPES)
OPFORGE_ORT_KERNELS(SwishGrad, SwishGradOp, OPFORGE_FLOAT_TYPES)

}  // namespace opforge

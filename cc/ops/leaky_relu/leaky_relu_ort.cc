// ONNX Runtime registration of the LeakyRelu, LeakyReluWithMask, LeakyReluGrad kernels: the op
// structs of leaky_relu_op.h, the ones TensorFlow runs (common/ort_kernel.h).
#include "common/ort_kernel.h"
#include "ops/leaky_relu/leaky_relu_op.h"

namespace opforge {

OPFORGE_ORT_KERNELS(LeakyRelu, LeakyReluOp<false>, OPFORGE_FLOAT_TYPES)
OPFORGE_ORT_KERNELS(LeakyReluWithMask, LeakyReluOp<true>, OPFORGE_FLOAT_TYPES)
OPFORGE_ORT_KERNELS(LeakyReluGrad, LeakyReluGradOp, OPFORGE_FLOAT_TYPES)

}  // namespace opforge

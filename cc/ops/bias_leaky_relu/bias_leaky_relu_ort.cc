// ONNX Runtime registration of the BiasLeakyRelu kernels: the op structs of
// bias_leaky_relu_op.h, the ones TensorFlow runs (common/ort_kernel.h).
#include "common/ort_kernel.h"
#include "ops/bias_leaky_relu/bias_leaky_relu_op.h"

namespace opforge {

OPFORGE_ORT_KERNELS(BiasLeakyRelu, BiasLeakyReluOp, OPFORGE_FLOAT_TYPES)

}  // namespace opforge

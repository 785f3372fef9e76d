// XLA FFI handlers of the BiasLeakyRelu kernel: the op structs of bias_leaky_relu_op.h,
// the ones TensorFlow runs (common/xla_ffi.h).
#include "common/xla_ffi.h"
#include "ops/bias_leaky_relu/bias_leaky_relu_op.h"

namespace opforge {

OPFORGE_FFI_KERNELS(BiasLeakyRelu, BiasLeakyReluOp, OPFORGE_FLOAT_TYPES)

}  // namespace opforge

// BiasLeakyRelu under XLA (tf.function(jit_compile=True)): custom calls to the op structs' FFI
// handlers (bias_leaky_relu_ffi.cc, common/tf_xla_ffi.h), the same core as the TensorFlow kernels:
// the same bits.
#include "common/tf_xla_ffi.h"
#include "ops/bias_leaky_relu/bias_leaky_relu_op.h"

namespace opforge {

OPFORGE_REGISTER_XLA_FFI_OP(BiasLeakyRelu, BiasLeakyReluOp)

}  // namespace opforge

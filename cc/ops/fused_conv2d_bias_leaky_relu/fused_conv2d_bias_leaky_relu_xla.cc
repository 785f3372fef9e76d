// FusedConv2DBiasLeakyRelu under XLA (tf.function(jit_compile=True)): custom calls to the op
// structs' FFI handlers (fused_conv2d_bias_leaky_relu_ffi.cc, common/tf_xla_ffi.h), the same core
// as the TensorFlow kernels: the same bits.
#include "common/tf_xla_ffi.h"
#include "ops/fused_conv2d_bias_leaky_relu/fused_conv2d_bias_leaky_relu_op.h"

namespace opforge {

OPFORGE_REGISTER_XLA_FFI_OP(FusedConv2DBiasLeakyRelu, FusedConv2DOp)

}  // namespace opforge

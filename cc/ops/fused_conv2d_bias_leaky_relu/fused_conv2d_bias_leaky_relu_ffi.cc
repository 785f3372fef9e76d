// XLA FFI handlers of the FusedConv2DBiasLeakyRelu kernel: the op structs of
// fused_conv2d_bias_leaky_relu_op.h, the ones TensorFlow runs (common/xla_ffi.h).
#include "common/xla_ffi.h"
#include "ops/fused_conv2d_bias_leaky_relu/fused_conv2d_bias_leaky_relu_op.h"

namespace opforge {

OPFORGE_FFI_KERNELS(FusedConv2DBiasLeakyRelu, FusedConv2DOp, OPFORGE_FLOAT_TYPES)

}  // namespace opforge

// ONNX Runtime registration of the FusedConv2DBiasLeakyRelu kernels: the op structs of
// fused_conv2d_bias_leaky_relu_op.h, the ones TensorFlow runs (common/ort_kernel.h).
#include "common/ort_kernel.h"
#include "ops/fused_conv2d_bias_leaky_relu/fused_conv2d_bias_leaky_relu_op.h"

namespace opforge {

OPFORGE_ORT_KERNELS(FusedConv2DBiasLeakyRelu, FusedConv2DOp, OPFORGE_FLOAT_TYPES)

}  // namespace opforge

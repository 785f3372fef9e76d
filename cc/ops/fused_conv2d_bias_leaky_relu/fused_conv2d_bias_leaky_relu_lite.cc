// LiteRT registration of fused_conv2d_bias_leaky_relu's forward op (common/lite_kernel.h).
#include "common/lite_kernel.h"
#include "ops/fused_conv2d_bias_leaky_relu/fused_conv2d_bias_leaky_relu_op.h"

namespace opforge {
namespace {

OPFORGE_LITE_OP(FusedConv2DOp, OPFORGE_FLOAT_TYPES)

}  // namespace
}  // namespace opforge

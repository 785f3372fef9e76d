// LiteRT registration of bias_leaky_relu's forward op (common/lite_kernel.h).
#include "common/lite_kernel.h"
#include "ops/bias_leaky_relu/bias_leaky_relu_op.h"

namespace opforge {
namespace {

OPFORGE_LITE_OP(BiasLeakyReluOp, OPFORGE_FLOAT_TYPES)

}  // namespace
}  // namespace opforge

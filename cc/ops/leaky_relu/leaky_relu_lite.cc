// LiteRT registration of leaky_relu's forward ops (common/lite_kernel.h).
#include "common/lite_kernel.h"
#include "ops/leaky_relu/leaky_relu_op.h"

namespace opforge {
namespace {

OPFORGE_LITE_OP(LeakyReluOp<false>, OPFORGE_FLOAT_TYPES)
OPFORGE_LITE_OP(LeakyReluOp<true>, OPFORGE_FLOAT_TYPES)

}  // namespace
}  // namespace opforge

// LiteRT registration of fused_batch_norm_leaky_relu's forward op (common/lite_kernel.h).
#include "common/lite_kernel.h"
#include "ops/fused_batch_norm_leaky_relu/fused_batch_norm_leaky_relu_op.h"

namespace opforge {
namespace {

OPFORGE_LITE_OP(BatchNormLeakyOp, OPFORGE_FLOAT_TYPES)

}  // namespace
}  // namespace opforge

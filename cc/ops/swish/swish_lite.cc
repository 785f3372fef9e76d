// LiteRT registration of swish's forward op (common/lite_kernel.h).
#include "common/lite_kernel.h"
#include "ops/swish/swish_op.h"

namespace opforge {
namespace {

OPFORGE_LITE_OP(SwishOp, OPFORGE_FLOAT_TYPES)

}  // namespace
}  // namespace opforge

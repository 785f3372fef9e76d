// LiteRT registration of clipped_identity's forward op (common/lite_kernel.h).
#include "common/lite_kernel.h"
#include "ops/clipped_identity/clipped_identity_op.h"

namespace opforge {
namespace {

OPFORGE_LITE_OP(ClippedIdentityOp, OPFORGE_FLOAT_TYPES)

}  // namespace
}  // namespace opforge

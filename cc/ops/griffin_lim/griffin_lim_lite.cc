// LiteRT registration of griffin_lim's forward op (common/lite_kernel.h).
#include "common/lite_kernel.h"
#include "ops/griffin_lim/griffin_lim_op.h"

namespace opforge {
namespace {

OPFORGE_LITE_OP(GriffinLimOp, OPFORGE_GRIFFIN_LIM_TYPES)

}  // namespace
}  // namespace opforge

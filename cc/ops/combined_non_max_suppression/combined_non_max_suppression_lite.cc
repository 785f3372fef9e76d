// LiteRT registration of combined_non_max_suppression's forward op (common/lite_kernel.h).
#include "common/lite_kernel.h"
#include "ops/combined_non_max_suppression/combined_non_max_suppression_op.h"

namespace opforge {
namespace {

// Validate reads the five scalars (inputs 2-6): constant ones give static output shapes.
OPFORGE_LITE_OP_HOST(CombinedNmsOp, OPFORGE_NMS_TYPES, 2)

}  // namespace
}  // namespace opforge

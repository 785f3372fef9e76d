// XLA FFI handlers of the CombinedNonMaxSuppression kernel: the op structs of
// combined_non_max_suppression_op.h, the ones TensorFlow runs (common/xla_ffi.h).
#include "common/xla_ffi.h"
#include "ops/combined_non_max_suppression/combined_non_max_suppression_op.h"

namespace opforge {

OPFORGE_FFI_KERNELS(CombinedNonMaxSuppression, CombinedNmsOp, OPFORGE_NMS_TYPES)

}  // namespace opforge

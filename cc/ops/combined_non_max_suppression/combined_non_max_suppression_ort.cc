// ONNX Runtime registration of the CombinedNonMaxSuppression kernels: the op structs of
// combined_non_max_suppression_op.h, the ones TensorFlow runs (common/ort_kernel.h).
#include "common/ort_kernel.h"
#include "ops/combined_non_max_suppression/combined_non_max_suppression_op.h"

namespace opforge {

OPFORGE_ORT_KERNELS(CombinedNonMaxSuppression, CombinedNmsOp, OPFORGE_NMS_TYPES)

}  // namespace opforge

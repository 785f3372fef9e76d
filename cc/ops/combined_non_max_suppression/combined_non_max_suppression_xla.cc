// CombinedNonMaxSuppression under XLA (tf.function(jit_compile=True)): custom calls to the op
// structs' FFI handlers (combined_non_max_suppression_ffi.cc, common/tf_xla_ffi.h), the same core
// as the TensorFlow kernels: the same bits. The inputs whose values the op reads on the host
// (iou_threshold, max_output_size_per_class, max_total_size, score_threshold, soft_nms_sigma) must
// be compile-time constants under XLA.
#include "common/tf_xla_ffi.h"
#include "ops/combined_non_max_suppression/combined_non_max_suppression_op.h"

namespace opforge {

OPFORGE_REGISTER_XLA_FFI_OP(CombinedNonMaxSuppression, CombinedNmsOp, "max_output_size_per_class",
                            "max_total_size", "iou_threshold", "score_threshold", "soft_nms_sigma")

}  // namespace opforge

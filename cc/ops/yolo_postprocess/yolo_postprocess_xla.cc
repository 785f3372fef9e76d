// YoloPostprocess under XLA (tf.function(jit_compile=True)): custom calls to the op structs' FFI
// handlers (yolo_postprocess_ffi.cc, common/tf_xla_ffi.h), the same core as the TensorFlow kernels:
// the same bits. The inputs whose values the op reads on the host (anchors, iou_threshold,
// max_detections, max_detections_per_class, score_threshold, soft_nms_sigma) must be compile-time
// constants under XLA.
#include "common/tf_xla_ffi.h"
#include "ops/yolo_postprocess/yolo_postprocess_op.h"

namespace opforge {

OPFORGE_REGISTER_XLA_FFI_OP(YoloPostprocess, YoloPostprocessOp, "anchors",
                            "max_detections_per_class", "max_detections", "iou_threshold",
                            "score_threshold", "soft_nms_sigma")

}  // namespace opforge

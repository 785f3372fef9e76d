// Binding pieces shared by the ops whose outputs are CombinedNonMaxSuppression's
// (CombinedNonMaxSuppression, YoloPostprocess): the output shapes from the shape function's
// inputs (the op structs' helpers are in combined_non_max_suppression_op.h). Included by *_tf.cc
// files only.
#ifndef OPFORGE_OPS_COMBINED_NON_MAX_SUPPRESSION_COMBINED_NON_MAX_SUPPRESSION_TF_H_
#define OPFORGE_OPS_COMBINED_NON_MAX_SUPPRESSION_COMBINED_NON_MAX_SUPPRESSION_TF_H_

#include "common/tf_kernel.h"
#include "ops/combined_non_max_suppression/combined_non_max_suppression_op.h"

namespace opforge {
namespace nms_binding {

// Sets the four outputs [B, D, 4], [B, D], [B, D], [B], with D known when the size inputs
// (per_class_input, then total at per_class_input + 1) are constants of the graph and, for
// pad_per_class, num_classes (-1: unknown) is known.
inline void SetOutputShapes(tensorflow::shape_inference::InferenceContext* c,
                            tensorflow::shape_inference::DimensionHandle batch, bool pad_per_class,
                            int per_class_input, int64_t num_classes) {
  auto constant = [c](int i) -> int64_t {
    const tensorflow::Tensor* t = c->input_tensor(i);
    if (t == nullptr || t->NumElements() != 1) return -1;
    return t->flat<int32_t>()(0);
  };
  const int64_t per_class = constant(per_class_input), total = constant(per_class_input + 1);
  tensorflow::shape_inference::DimensionHandle detections = c->UnknownDim();
  if (total > 0) {
    if (!pad_per_class) {
      detections = c->MakeDim(total);
    } else if (per_class > 0 && num_classes >= 0) {
      CombinedNmsParams p;
      p.pad_per_class = true;
      p.max_output_size_per_class = per_class;
      p.max_total_size = total;
      p.num_classes = num_classes;
      detections = c->MakeDim(p.max_detections());
    }
  }
  c->set_output(0, c->MakeShape({batch, detections, c->MakeDim(4)}));
  c->set_output(1, c->MakeShape({batch, detections}));
  c->set_output(2, c->MakeShape({batch, detections}));
  c->set_output(3, c->MakeShape({batch}));
}

}  // namespace nms_binding
}  // namespace opforge

#endif  // OPFORGE_OPS_COMBINED_NON_MAX_SUPPRESSION_COMBINED_NON_MAX_SUPPRESSION_TF_H_

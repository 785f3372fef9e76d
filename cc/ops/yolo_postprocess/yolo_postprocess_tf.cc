// TensorFlow binding of YoloPostprocess: op registration with its shape function, and the op
// struct that TfKernel (common/tf_kernel.h) runs. CPU only, as CombinedNonMaxSuppression.
#include <string>
#include <vector>

#include "common/tf_kernel.h"
#include "ops/combined_non_max_suppression/combined_non_max_suppression_tf.h"
#include "ops/yolo_postprocess/yolo_postprocess.h"
#include "ops/yolo_postprocess/yolo_postprocess_op.h"

namespace opforge {

namespace {

using namespace yolo_postprocess_op;  // NOLINT: the op's constants and attr reader, shared with its
                                      // kernels

absl::Status PostprocessShape(InferenceContext* c) {
  YoloPostprocessParams p;
  int64_t num_scales = 0;
  TF_RETURN_IF_ERROR(ReadShapeAttrs(c, ReadAttrs, &p, &num_scales));
  TF_RETURN_IF_ERROR(ToTfStatus(ValidateYoloPostprocessAttrs(p)));
  const int k = static_cast<int>(num_scales);
  bool known = true;
  DimensionHandle batch = c->UnknownDim();
  for (int s = 0; s < k; ++s) {
    ShapeHandle f = c->input(s);
    if (c->RankKnown(f) && c->Rank(f) != 4 && c->Rank(f) != 5) {
      return ToTfStatus(InvalidArgument(
          kOp, ("features[" + std::to_string(s) + "]").c_str(),
          "4-D [batch, height, width, num_anchors * (5 + num_classes)] or 5-D [batch, height, "
          "width, num_anchors, 5 + num_classes]",
          "rank " + std::to_string(c->Rank(f))));
    }
    ShapeHandle a = c->input(k + s);
    if (c->RankKnown(a) && c->Rank(a) != 2) {
      return ToTfStatus(InvalidArgument(kOp, ("anchors[" + std::to_string(s) + "]").c_str(),
                                        "[num_anchors, 2] (width, height)",
                                        "rank " + std::to_string(c->Rank(a))));
    }
    known = known && c->FullyDefined(f) && c->FullyDefined(a);
    if (c->RankKnown(f)) {
      DimensionHandle merged;
      if (!c->Merge(batch, c->Dim(f, 0), &merged).ok()) {
        return ToTfStatus(InvalidArgument(kOp, ("features[" + std::to_string(s) + "]").c_str(),
                                          "a map of the batch of the other maps",
                                          "batch " + std::to_string(c->Value(c->Dim(f, 0)))));
      }
      batch = merged;
    }
  }
  for (int i = 0; i < 5; ++i) {
    ShapeHandle v = c->input(2 * k + i);
    if (c->RankKnown(v) && c->Rank(v) != 0) {
      return ToTfStatus(InvalidArgument(kOp, kScalars[i], "a scalar (0-D)",
                                        "rank " + std::to_string(c->Rank(v))));
    }
  }
  if (known) {  // every check of the kernel, with its messages
    std::vector<std::vector<int64_t>> features, anchors;
    for (int s = 0; s < k; ++s) {
      features.push_back(ShapeFn(c, kOp).Dims(c->input(s)));
      anchors.push_back(ShapeFn(c, kOp).Dims(c->input(k + s)));
    }
    YoloPostprocessParams full = p;
    TF_RETURN_IF_ERROR(
        ToTfStatus(ValidateYoloPostprocess(features, anchors, {{}, {}, {}, {}, {}}, &full)));
  }
  nms_binding::SetOutputShapes(c, batch, p.nms.pad_per_class, 2 * k, p.num_classes);
  return absl::OkStatus();
}

}  // namespace

OPFORGE_REGISTER_OP(YoloPostprocessOp)
    .SetShapeFn(PostprocessShape)
    .Doc(
        "A YOLO head's raw maps to detections: YoloDecode of every scale (normalised xyxy) and "
        "CombinedNonMaxSuppression, bit for bit, decoding only the boxes whose objectness can "
        "reach score_threshold.");

namespace {

OPFORGE_REGISTER_KERNELS(Name(YoloPostprocessOp::kSignature.name), YoloPostprocessOp,
                         OPFORGE_YOLO_POSTPROCESS_TYPES, OPFORGE_NO_TYPES)

}  // namespace
}  // namespace opforge

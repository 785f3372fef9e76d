// TensorFlow binding of CombinedNonMaxSuppression: op registration with its shape function, and
// the op struct that TfKernel (common/tf_kernel.h) runs. CPU only (in a CUDA build TensorFlow
// places the op on the CPU, where its scalar inputs and the NMS loop belong).
#include "ops/combined_non_max_suppression/combined_non_max_suppression_tf.h"

#include <vector>

#include "common/tf_kernel.h"
#include "ops/combined_non_max_suppression/combined_non_max_suppression.h"
#include "ops/combined_non_max_suppression/combined_non_max_suppression_op.h"

namespace opforge {

namespace {

using namespace combined_non_max_suppression_op;  // NOLINT: the op's constants and attr reader,
                                                  // shared with its kernels

constexpr char kOp[] = "CombinedNonMaxSuppression";

absl::Status NmsShape(InferenceContext* c) {
  const ShapeFn fn(c, kOp);
  ShapeHandle boxes, scores, scalar;
  TF_RETURN_IF_ERROR(fn.Rank(0, "boxes", 4, &boxes, "4-D [batch, num_boxes, q, 4]"));
  TF_RETURN_IF_ERROR(fn.Rank(1, "scores", 3, &scores, "3-D [batch, num_boxes, num_classes]"));
  static const char* const kScalars[] = {"max_output_size_per_class", "max_total_size",
                                         "iou_threshold", "score_threshold", "soft_nms_sigma"};
  for (int i = 2; i < 7; ++i) {
    TF_RETURN_IF_ERROR(fn.Rank(i, kScalars[i - 2], 0, &scalar, "a scalar (0-D)"));
  }
  // Constant sizes are checked while the graph is built, as TensorFlow's shape function refuses
  // a negative max_total_size (a ValueError in tf.function, where the kernel would only say it
  // when the graph runs).
  for (int i = 2; i < 4; ++i) {
    const tensorflow::Tensor* size = c->input_tensor(i);
    if (size != nullptr && size->NumElements() == 1 && size->flat<int32_t>()(0) <= 0) {
      return fn.Invalid(kScalars[i - 2], "positive", std::to_string(size->flat<int32_t>()(0)));
    }
  }
  const std::string scores_expected =
      "[batch, num_boxes, num_classes] with the batch and num_boxes of boxes " + fn.Text(boxes);
  DimensionHandle batch, count, four;
  TF_RETURN_IF_ERROR(fn.MergeDim(c->Dim(boxes, 0), c->Dim(scores, 0), "scores", scores_expected,
                                 fn.Text(scores), &batch));
  TF_RETURN_IF_ERROR(fn.MergeDim(c->Dim(boxes, 1), c->Dim(scores, 1), "scores", scores_expected,
                                 fn.Text(scores), &count));
  TF_RETURN_IF_ERROR(fn.MergeDim(c->Dim(boxes, 3), c->MakeDim(4), "boxes",
                                 "4-D [batch, num_boxes, q, 4]", fn.Text(boxes), &four));
  const DimensionHandle q = c->Dim(boxes, 2), k = c->Dim(scores, 2);
  if (c->ValueKnown(q) && c->ValueKnown(k) && c->Value(q) != 1 && c->Value(q) != c->Value(k)) {
    return fn.Invalid("boxes", "[batch, num_boxes, q, 4] with q = 1 or num_classes = " + fn.Text(k),
                      fn.Text(boxes));
  }
  bool pad_per_class = false;
  TF_RETURN_IF_ERROR(c->GetAttr("pad_per_class", &pad_per_class));
  const DimensionHandle classes = c->Dim(scores, 2);
  nms_binding::SetOutputShapes(c, batch, pad_per_class, 2,
                               c->ValueKnown(classes) ? c->Value(classes) : -1);
  return absl::OkStatus();
}

}  // namespace

OPFORGE_REGISTER_OP(CombinedNmsOp)
    .SetShapeFn(NmsShape)
    .Doc(
        "Per-class NMS (hard, or Gaussian soft-NMS when soft_nms_sigma > 0) over a batch, the "
        "classes merged by score: tf.image.combined_non_max_suppression's outputs.");

namespace {

OPFORGE_REGISTER_KERNELS(Name(CombinedNmsOp::kSignature.name), CombinedNmsOp, OPFORGE_NMS_TYPES,
                         OPFORGE_NO_TYPES)

}  // namespace
}  // namespace opforge

// TensorFlow binding of YoloTargets: op registration with its shape function, and the op struct
// that TfKernel (common/tf_kernel.h) runs. No gradient (targets are data).
#include <vector>

#include "common/tf_kernel.h"
#include "ops/yolo_targets/yolo_targets.h"
#include "ops/yolo_targets/yolo_targets_op.h"

namespace opforge {

namespace {

using namespace yolo_targets_op;  // NOLINT: the op's constants and attr reader, shared with its
                                  // kernels

// [B, gh, gw, len(mask), 6] per scale; B from boxes or classes.
absl::Status TargetsShape(InferenceContext* c) {
  YoloTargetsParams p;
  TF_RETURN_IF_ERROR(ReadShapeAttrs(c, ReadAttrs, &p));
  TF_RETURN_IF_ERROR(ToTfStatus(ValidateYoloTargetsAttrs(p)));
  int64_t num_scales = 0;
  TF_RETURN_IF_ERROR(c->GetAttr("num_scales", &num_scales));
  if (num_scales != p.num_scales()) {
    return ToTfStatus(InvalidArgument("YoloTargets", "num_scales",
                                      "len(anchors_per_scale) = " + std::to_string(p.num_scales()),
                                      num_scales));
  }
  const ShapeFn fn(c, "YoloTargets");
  ShapeHandle boxes, classes, anchors;
  TF_RETURN_IF_ERROR(
      fn.Rank(0, "boxes", 3, &boxes, "3-D [batch, max_boxes, 4] (normalised x1, y1, x2, y2)"));
  TF_RETURN_IF_ERROR(fn.Rank(1, "classes", 2, &classes, "[batch, max_boxes] (one class per box)"));
  TF_RETURN_IF_ERROR(
      fn.Rank(2, "anchors", 2, &anchors, "[num_anchors, 2] (normalised width, height)"));
  if (fn.Known({boxes, classes, anchors})) {  // every check of the kernel, with its messages
    YoloTargetsParams full = p;
    TF_RETURN_IF_ERROR(
        ToTfStatus(ValidateYoloTargets(fn.Dims(boxes), fn.Dims(classes), fn.Dims(anchors), &full)));
  }
  const std::string classes_expected = "[batch, max_boxes] = the first two dimensions of boxes " +
                                       fn.Text(boxes) + " (one class per box)";
  shape_inference::DimensionHandle batch, count;
  TF_RETURN_IF_ERROR(fn.MergeDim(c->Dim(boxes, 0), c->Dim(classes, 0), "classes", classes_expected,
                                 fn.Text(classes), &batch));
  TF_RETURN_IF_ERROR(fn.MergeDim(c->Dim(boxes, 1), c->Dim(classes, 1), "classes", classes_expected,
                                 fn.Text(classes), &count));
  for (int64_t s = 0; s < p.num_scales(); ++s) {
    const std::vector<int64_t> shape = p.output_shape(s);
    c->set_output(static_cast<int>(s),
                  c->MakeShape({batch, c->MakeDim(shape[1]), c->MakeDim(shape[2]),
                                c->MakeDim(shape[3]), c->MakeDim(6)}));
  }
  return absl::OkStatus();
}

}  // namespace

OPFORGE_REGISTER_OP(YoloTargetsOp)
    .SetShapeFn(TargetsShape)
    .Doc(
        "Ground-truth boxes [B, M, 4] and classes [B, M] to one YOLO-v3 y_true "
        "[B, gh, gw, len(mask), 6] per scale.");

namespace {

OPFORGE_REGISTER_KERNELS(Name(YoloTargetsOp::kSignature.name), YoloTargetsOp,
                         OPFORGE_YOLO_TARGETS_TYPES, OPFORGE_YOLO_TARGETS_TYPES)

}  // namespace
}  // namespace opforge

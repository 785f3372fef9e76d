// TensorFlow binding of YoloTargets: op registration with its shape function, and the op struct
// that TfKernel (common/tf_kernel.h) runs. No gradient (targets are data).
#include <vector>

#include "common/tf_kernel.h"
#include "ops/yolo_targets/yolo_targets.h"

namespace opforge {

namespace shape_inference = tensorflow::shape_inference;
using shape_inference::InferenceContext;
using shape_inference::ShapeHandle;

namespace {

template <typename Context>
absl::Status ReadAttrs(Context* c, YoloTargetsParams* p) {
  TF_RETURN_IF_ERROR(c->GetAttr("anchor_masks", &p->anchor_masks));
  TF_RETURN_IF_ERROR(c->GetAttr("anchors_per_scale", &p->anchors_per_scale));
  TF_RETURN_IF_ERROR(c->GetAttr("grid_sizes", &p->grid_sizes));
  TF_RETURN_IF_ERROR(c->GetAttr("num_classes", &p->num_classes));
  return absl::OkStatus();
}

// [B, gh, gw, len(mask), 6] per scale; B from boxes or classes.
absl::Status TargetsShape(InferenceContext* c) {
  YoloTargetsParams p;
  TF_RETURN_IF_ERROR(ReadAttrs(c, &p));
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

REGISTER_OP("Opforge>YoloTargets")
    .Input("boxes: T")
    .Input("classes: int32")
    .Input("anchors: T")
    .Output("y_true: num_scales * T")
    .Attr("anchor_masks: list(int)")
    .Attr("anchors_per_scale: list(int)")
    .Attr("grid_sizes: list(int)")
    .Attr("num_classes: int = -1")
    .Attr("num_scales: int >= 1")
    .Attr("T: {float, double} = DT_FLOAT")
    .SetShapeFn(TargetsShape)
    .Doc(
        "Ground-truth boxes [B, M, 4] and classes [B, M] to one YOLO-v3 y_true "
        "[B, gh, gw, len(mask), 6] per scale.");

namespace {

struct YoloTargetsOp {
  using Params = YoloTargetsParams;
  YoloTargetsParams attrs;

  Status Init(AttrReader& reader) {
    if (!ReadAttrs(&reader, &attrs).ok()) return Status::Ok();  // reported by TfKernel
    int64_t num_scales = 0;
    reader.Read("num_scales", &num_scales);
    OPFORGE_RETURN_IF_ERROR(ValidateYoloTargetsAttrs(attrs));
    // The shape function checks this too, but eager calls do not run it: without this check a
    // direct call could declare more outputs than the kernel fills.
    if (num_scales != attrs.num_scales()) {
      return InvalidArgument("YoloTargets", "num_scales",
                             "len(anchors_per_scale) = " + std::to_string(attrs.num_scales()),
                             num_scales);
    }
    return Status::Ok();
  }
  Status Validate(TfCall& call, Params* p) const {
    *p = attrs;
    OPFORGE_RETURN_IF_ERROR(ValidateYoloTargets(call.shape(0), call.shape(1), call.shape(2), p));
    for (int64_t s = 0; s < p->num_scales(); ++s)
      call.Output(static_cast<int>(s), p->output_shape(s));
    return Status::Ok();
  }
  template <typename T>
  std::vector<T*> Outputs(const Params& p, const TfCall& call) const {
    std::vector<T*> outputs;
    for (int64_t s = 0; s < p.num_scales(); ++s)
      outputs.push_back(call.out<T>(static_cast<int>(s)));
    return outputs;
  }
  template <typename T>
  Status Cpu(const Params& p, const TfCall& call, const Parallel& parallel) const {
    if (p.max_boxes > 0) {
      OPFORGE_RETURN_IF_ERROR(
          CheckYoloTargetsData<T>(p, call.in<T>(0), call.in<int32_t>(1), call.in<T>(2)));
    }
    YoloTargets<T>(p, call.in<T>(0), call.in<int32_t>(1), call.in<T>(2), Outputs<T>(p, call),
                   parallel);
    return Status::Ok();
  }
  // The device check's results and the masks, allocated by TfKernel.
  int64_t GpuScratchBytes(DType, const Params& p) const { return YoloTargetsGpuScratchBytes(p); }
  Status Gpu(DType dtype, const Params& p, const TfCall& call, void* stream) const {
    std::vector<void*> outputs;
    for (int64_t s = 0; s < p.num_scales(); ++s) outputs.push_back(call.out(static_cast<int>(s)));
    return YoloTargetsGpu(dtype, p, call.in(0), call.in<int32_t>(1), call.in(2), outputs,
                          call.scratch, call.scratch_bytes, stream);
  }
};

OPFORGE_REGISTER_KERNELS(Name("Opforge>YoloTargets"), YoloTargetsOp, OPFORGE_YOLO_TARGETS_TYPES,
                         OPFORGE_YOLO_TARGETS_TYPES)

}  // namespace
}  // namespace opforge

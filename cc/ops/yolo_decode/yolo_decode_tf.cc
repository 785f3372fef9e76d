// TensorFlow binding of YoloDecode and its gradient: op registration with shape functions, and
// the op structs that TfKernel (common/tf_kernel.h) runs.
#include <string>
#include <vector>

#include "common/tf_kernel.h"
#include "ops/yolo_decode/yolo_decode.h"

namespace opforge {

namespace shape_inference = tensorflow::shape_inference;
using shape_inference::DimensionHandle;
using shape_inference::InferenceContext;
using shape_inference::ShapeHandle;

namespace {

// Reads the attrs of both ops (from a kernel's construction or a shape function).
template <typename Context>
absl::Status ReadAttrs(Context* c, YoloDecodeParams* p) {
  int64_t num_classes = 0;
  TF_RETURN_IF_ERROR(c->GetAttr("num_classes", &num_classes));
  p->num_classes = num_classes;
  std::vector<int64_t> input_size;
  TF_RETURN_IF_ERROR(c->GetAttr("input_size", &input_size));
  p->input_size = input_size;
  TF_RETURN_IF_ERROR(c->GetAttr("box_format", &p->box_format));
  TF_RETURN_IF_ERROR(c->GetAttr("normalized", &p->normalized));
  TF_RETURN_IF_ERROR(c->GetAttr("scale_x_y", &p->scale_x_y));
  TF_RETURN_IF_ERROR(c->GetAttr("max_log_scale", &p->max_log_scale));
  return absl::OkStatus();
}

bool FullyDefined(InferenceContext* c, ShapeHandle s, std::vector<int64_t>* dims) {
  if (!c->FullyDefined(s)) return false;
  dims->clear();
  for (int i = 0; i < c->Rank(s); ++i) dims->push_back(c->Value(c->Dim(s, i)));
  return true;
}

// Checks what is known of features and anchors (all of it, with the core's messages, when both
// shapes are known) and returns batch, N = H*W*A and C.
// `f` is the index of features (anchors follows it).
absl::Status DecodeShapes(InferenceContext* c, const char* op, int f, DimensionHandle* batch,
                          DimensionHandle* boxes) {
  YoloDecodeParams p;
  TF_RETURN_IF_ERROR(ReadAttrs(c, &p));
  std::vector<int64_t> features, anchors;
  if (FullyDefined(c, c->input(f), &features) && FullyDefined(c, c->input(f + 1), &anchors)) {
    Status s = ValidateYoloDecode(features, anchors, &p);
    if (!s.ok()) {
      return ToTfStatus(Status::Invalid(op + s.message().substr(std::string("YoloDecode").size())));
    }
    *batch = c->MakeDim(p.batch);
    *boxes = c->MakeDim(p.boxes_per_image());
    return absl::OkStatus();
  }
  TF_RETURN_IF_ERROR(ToTfStatus(ValidateYoloDecodeAttrs(&p)));
  ShapeHandle in = c->input(f);
  ShapeHandle anchor_shape;
  TF_RETURN_IF_ERROR(
      ShapeFn(c, op).Rank(f + 1, "anchors", 2, &anchor_shape, "[num_anchors, 2] (width, height)"));
  *batch = c->UnknownDim();
  *boxes = c->UnknownDim();
  if (!c->RankKnown(in)) return absl::OkStatus();
  const int rank = c->Rank(in);
  if (rank != 4 && rank != 5) {
    return ToTfStatus(InvalidArgument(op, "features",
                                      "4-D [batch, height, width, num_anchors * (5 + num_classes)] "
                                      "or 5-D [batch, height, width, num_anchors, 5 + num_classes]",
                                      "rank " + std::to_string(rank)));
  }
  *batch = c->Dim(in, 0);
  DimensionHandle anchors_dim = c->Dim(anchor_shape, 0);
  if (!c->ValueKnown(anchors_dim)) {
    anchors_dim = rank == 5 ? c->Dim(in, 3) : c->UnknownDim();
    if (rank == 4 && c->ValueKnown(c->Dim(in, 3))) {
      anchors_dim = c->MakeDim(c->Value(c->Dim(in, 3)) / p.channels_per_anchor());
    }
  }
  DimensionHandle cells;
  TF_RETURN_IF_ERROR(c->Multiply(c->Dim(in, 1), c->Dim(in, 2), &cells));
  return c->Multiply(cells, anchors_dim, boxes);
}

absl::Status DecodeShape(InferenceContext* c) {
  DimensionHandle batch, n;
  TF_RETURN_IF_ERROR(DecodeShapes(c, "YoloDecode", 0, &batch, &n));
  int64_t num_classes = 0;
  TF_RETURN_IF_ERROR(c->GetAttr("num_classes", &num_classes));
  c->set_output(0, c->MakeShape({batch, n, c->MakeDim(4)}));
  c->set_output(1, c->MakeShape({batch, n}));
  c->set_output(2, c->MakeShape({batch, n}));
  c->set_output(3, c->MakeShape({batch, n, c->MakeDim(num_classes)}));
  return absl::OkStatus();
}

absl::Status DecodeGradShape(InferenceContext* c) {
  DimensionHandle batch, n;
  TF_RETURN_IF_ERROR(DecodeShapes(c, "YoloDecodeGrad", 3, &batch, &n));
  c->set_output(0, c->input(3));
  return absl::OkStatus();
}

}  // namespace

#define OPFORGE_YOLO_DECODE_ATTRS_         \
  Attr("num_classes: int")                 \
      .Attr("input_size: list(int)")       \
      .Attr("box_format: string = 'xyxy'") \
      .Attr("normalized: bool = false")    \
      .Attr("scale_x_y: float = 1.0")      \
      .Attr("max_log_scale: float = inf")  \
      .Attr("T: {half, bfloat16, float, double} = DT_FLOAT")

REGISTER_OP("Opforge>YoloDecode")
    .Input("features: T")
    .Input("anchors: T")
    .Output("boxes: T")
    .Output("scores: T")
    .Output("class_indices: int32")
    .Output("class_scores: T")
    .OPFORGE_YOLO_DECODE_ATTRS_.SetShapeFn(DecodeShape)
    .Doc(
        "YOLO-v3 head features [B, H, W, A*(5+C)] to boxes [B, N, 4], scores [B, N], "
        "class_indices [B, N] and class_scores [B, N, C], N = H*W*A; bw = exp(min(tw, "
        "max_log_scale)) * anchor_w (max_log_scale +inf: exp(tw) * anchor_w), box coordinates "
        "saturated at T's largest finite value.");

REGISTER_OP("Opforge>YoloDecodeGrad")
    .Input("grad_boxes: T")
    .Input("grad_scores: T")
    .Input("grad_class_scores: T")
    .Input("features: T")
    .Input("anchors: T")
    .Output("grad_features: T")
    .OPFORGE_YOLO_DECODE_ATTRS_.SetShapeFn(DecodeGradShape)
    .Doc("Gradient of Opforge>YoloDecode with respect to features.");

namespace {

struct YoloDecodeAttrs {
  using Params = YoloDecodeParams;
  YoloDecodeParams attrs;

  Status Init(AttrReader& reader) {
    const absl::Status s = ReadAttrs(&reader, &attrs);
    if (!s.ok()) return Status::Ok();  // TfKernel reports the reader's error
    return ValidateYoloDecodeAttrs(&attrs);
  }
  // anchors are host memory on both devices (registered HostMemory: 2A values, where a
  // device-side check would make every call wait for the device), so their values are checked
  // here, before any work, even for an empty batch. The GPU path copies them to the scratch.
  static Status CheckAnchors(const char* op, const TfCall& call, int index, const Params& p) {
    return CheckYoloAnchors(op, "anchors", call.dtype, call.in(index), p.anchors);
  }
  int64_t GpuScratchBytes(DType dtype, const Params& p) const {
    return YoloDecodeGpuScratchBytes(dtype, p);
  }
};

struct YoloDecodeOp : YoloDecodeAttrs {
  Status Validate(TfCall& call, Params* p) const {
    *p = attrs;
    OPFORGE_RETURN_IF_ERROR(ValidateYoloDecode(call.shape(0), call.shape(1), p));
    OPFORGE_RETURN_IF_ERROR(CheckAnchors("YoloDecode", call, 1, *p));
    const int64_t n = p->boxes_per_image();
    call.Output(0, {p->batch, n, 4});
    call.Output(1, {p->batch, n});
    call.Output(2, {p->batch, n});
    call.Output(3, {p->batch, n, p->num_classes});
    return Status::Ok();
  }
  template <typename T>
  void Cpu(const Params& p, const TfCall& call, const Parallel& parallel) const {
    YoloDecodeForward<T>(p, call.in<T>(0), call.in<T>(1), call.out<T>(0), call.out<T>(1),
                         call.out<int32_t>(2), call.out<T>(3), parallel);
  }
  Status Gpu(DType dtype, const Params& p, const TfCall& call, void* stream) const {
    return YoloDecodeForwardGpu(dtype, p, call.in(0), call.in(1), call.out(0), call.out(1),
                                call.out<int32_t>(2), call.out(3), call.scratch, call.scratch_bytes,
                                stream);
  }
};

struct YoloDecodeGradOp : YoloDecodeAttrs {
  // The attrs' messages under this op's name (the core names YoloDecode, whose attrs they are).
  Status Init(AttrReader& reader) {
    const Status s = YoloDecodeAttrs::Init(reader);
    if (s.ok()) return s;
    return Status::Invalid("YoloDecodeGrad" + s.message().substr(std::string("YoloDecode").size()));
  }
  Status Validate(TfCall& call, Params* p) const {
    *p = attrs;
    OPFORGE_RETURN_IF_ERROR(ValidateYoloDecodeGrad(call.shape(0), call.shape(1), call.shape(2),
                                                   call.shape(3), call.shape(4), p));
    OPFORGE_RETURN_IF_ERROR(CheckAnchors("YoloDecodeGrad", call, 4, *p));
    call.Output(0, call.shape(3));
    return Status::Ok();
  }
  template <typename T>
  void Cpu(const Params& p, const TfCall& call, const Parallel& parallel) const {
    YoloDecodeBackward<T>(p, call.in<T>(0), call.in<T>(1), call.in<T>(2), call.in<T>(3),
                          call.in<T>(4), call.out<T>(0), parallel);
  }
  Status Gpu(DType dtype, const Params& p, const TfCall& call, void* stream) const {
    return YoloDecodeBackwardGpu(dtype, p, call.in(0), call.in(1), call.in(2), call.in(3),
                                 call.in(4), call.out(0), call.scratch, call.scratch_bytes, stream);
  }
};

OPFORGE_REGISTER_KERNELS(Name("Opforge>YoloDecode").HostMemory("anchors"), YoloDecodeOp,
                         OPFORGE_FLOAT_TYPES, OPFORGE_FLOAT_TYPES)
OPFORGE_REGISTER_KERNELS(Name("Opforge>YoloDecodeGrad").HostMemory("anchors"), YoloDecodeGradOp,
                         OPFORGE_FLOAT_TYPES, OPFORGE_FLOAT_TYPES)

}  // namespace
}  // namespace opforge

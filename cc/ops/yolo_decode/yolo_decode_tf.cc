// TensorFlow binding of YoloDecode and its gradient: op registration with shape functions, and
// the op structs that TfKernel (common/tf_kernel.h) runs.
#include <string>
#include <vector>

#include "common/tf_kernel.h"
#include "ops/yolo_decode/yolo_decode.h"
#include "ops/yolo_decode/yolo_decode_op.h"

namespace opforge {

namespace {

using namespace yolo_decode_op;  // NOLINT: the op's constants and attr reader, shared with its
                                 // kernels

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
  TF_RETURN_IF_ERROR(ReadShapeAttrs(c, ReadAttrs, &p));
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

OPFORGE_REGISTER_OP(YoloDecodeOp)
    .SetShapeFn(DecodeShape)
    .Doc(
        "YOLO-v3 head features [B, H, W, A*(5+C)] to boxes [B, N, 4], scores [B, N], "
        "class_indices [B, N] and class_scores [B, N, C], N = H*W*A; bw = exp(min(tw, "
        "max_log_scale)) * anchor_w (max_log_scale +inf: exp(tw) * anchor_w), box coordinates "
        "saturated at T's largest finite value.");

OPFORGE_REGISTER_OP(YoloDecodeGradOp)
    .SetShapeFn(DecodeGradShape)
    .Doc("Gradient of Opforge>YoloDecode with respect to features.");

namespace {

OPFORGE_REGISTER_KERNELS(Name(YoloDecodeOp::kSignature.name).HostMemory("anchors"), YoloDecodeOp,
                         OPFORGE_FLOAT_TYPES, OPFORGE_FLOAT_TYPES)
OPFORGE_REGISTER_KERNELS(Name(YoloDecodeGradOp::kSignature.name).HostMemory("anchors"),
                         YoloDecodeGradOp, OPFORGE_FLOAT_TYPES, OPFORGE_FLOAT_TYPES)

}  // namespace
}  // namespace opforge

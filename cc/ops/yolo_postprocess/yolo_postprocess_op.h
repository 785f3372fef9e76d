// The YoloPostprocess op struct, run by every runtime's skeleton (common/op_call.h): attrs,
// validation and outputs, and the core calls. No runtime's header.
#ifndef OPFORGE_OPS_YOLO_POSTPROCESS_YOLO_POSTPROCESS_OP_H_
#define OPFORGE_OPS_YOLO_POSTPROCESS_YOLO_POSTPROCESS_OP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/op_call.h"
#include "ops/combined_non_max_suppression/combined_non_max_suppression_op.h"
#include "ops/yolo_postprocess/yolo_postprocess.h"

namespace opforge {
namespace yolo_postprocess_op {

inline constexpr char kOp[] = "YoloPostprocess";

const char* const kScalars[] = {"max_detections_per_class", "max_detections", "iou_threshold",
                                "score_threshold", "soft_nms_sigma"};

inline Status ReadAttrs(AttrReader* c, YoloPostprocessParams* p, int64_t* num_scales) {
  OPFORGE_RETURN_IF_ERROR(c->GetAttr("num_classes", &p->num_classes));
  std::vector<int64_t> input_size;
  OPFORGE_RETURN_IF_ERROR(c->GetAttr("input_size", &input_size));
  p->input_size = input_size;
  OPFORGE_RETURN_IF_ERROR(c->GetAttr("scale_x_y", &p->scale_x_y));
  OPFORGE_RETURN_IF_ERROR(c->GetAttr("max_log_scale", &p->max_log_scale));
  OPFORGE_RETURN_IF_ERROR(c->GetAttr("pad_per_class", &p->nms.pad_per_class));
  OPFORGE_RETURN_IF_ERROR(c->GetAttr("clip_boxes", &p->nms.clip_boxes));
  OPFORGE_RETURN_IF_ERROR(c->GetAttr("num_scales", num_scales));
  return Status::Ok();
}

// CPU only, so no Gpu: the binding registers no GPU types (OPFORGE_NO_TYPES).
struct YoloPostprocessOp {
  static constexpr OpSignature kSignature{
      "Opforge>YoloPostprocess",
      "features: num_scales * T; anchors: num_scales * T; max_detections_per_class: int32; "
      "max_detections: int32; iou_threshold: float; score_threshold: float; soft_nms_sigma: float",
      "nmsed_boxes: T; nmsed_scores: T; nmsed_classes: float; valid_detections: int32",
      "num_scales: int >= 1; "
      "num_classes: int; "
      "input_size: list(int); "
      "scale_x_y: float = 1.0; "
      "max_log_scale: float = inf; "
      "pad_per_class: bool = false; "
      "clip_boxes: bool = true; "
      "T: {half, bfloat16, float} = DT_FLOAT"};
  using Params = YoloPostprocessParams;
  YoloPostprocessParams attrs;
  int64_t num_scales = 0;

  Status Init(AttrReader& reader) {
    if (!ReadAttrs(&reader, &attrs, &num_scales).ok())
      return Status::Ok();  // reported by the runtime's skeleton
    return ValidateYoloPostprocessAttrs(attrs);
  }
  Status Validate(OpCall& call, Params* p) const {
    *p = attrs;
    const int k = static_cast<int>(num_scales);
    std::vector<std::vector<int64_t>> features, anchors, scalars;
    for (int s = 0; s < k; ++s) {
      features.push_back(call.shape(s));
      anchors.push_back(call.shape(k + s));
    }
    for (int i = 0; i < 5; ++i) scalars.push_back(call.shape(2 * k + i));
    OPFORGE_RETURN_IF_ERROR(ValidateYoloPostprocess(features, anchors, scalars, p));
    for (int s = 0; s < k; ++s) {  // CPU only: the anchors are in host memory
      OPFORGE_RETURN_IF_ERROR(CheckYoloAnchors(kOp, ("anchors[" + std::to_string(s) + "]").c_str(),
                                               call.dtype, call.in(k + s), p->scales[s].anchors));
    }
    nms_binding::ReadScalars(call, 2 * k, &p->nms);
    OPFORGE_RETURN_IF_ERROR(ValidateYoloPostprocessValues(*p));
    nms_binding::DeclareOutputs(call, p->batch, p->nms.max_detections());
    return Status::Ok();
  }
  template <typename T>
  void Cpu(const Params& p, const OpCall& call, const Parallel& parallel) const {
    const int k = static_cast<int>(num_scales);
    std::vector<const T*> features, anchors;
    for (int s = 0; s < k; ++s) {
      features.push_back(call.in<T>(s));
      anchors.push_back(call.in<T>(k + s));
    }
    YoloPostprocess<T>(p, features, anchors, call.out<T>(0), call.out<T>(1), call.out<float>(2),
                       call.out<int32_t>(3), parallel);
  }
};

}  // namespace yolo_postprocess_op

using yolo_postprocess_op::YoloPostprocessOp;

}  // namespace opforge

#endif  // OPFORGE_OPS_YOLO_POSTPROCESS_YOLO_POSTPROCESS_OP_H_

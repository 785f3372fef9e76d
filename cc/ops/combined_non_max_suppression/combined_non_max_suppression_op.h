// The CombinedNonMaxSuppression op struct, run by every runtime's skeleton (common/op_call.h):
// attrs, validation and outputs, and the core calls. No runtime's header.
#ifndef OPFORGE_OPS_COMBINED_NON_MAX_SUPPRESSION_COMBINED_NON_MAX_SUPPRESSION_OP_H_
#define OPFORGE_OPS_COMBINED_NON_MAX_SUPPRESSION_COMBINED_NON_MAX_SUPPRESSION_OP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/op_call.h"
#include "ops/combined_non_max_suppression/combined_non_max_suppression.h"

namespace opforge {
namespace nms_binding {

// The five scalar inputs from input `first` on (host memory: the kernels run on the CPU).
inline void ReadScalars(OpCall& call, int first, CombinedNmsParams* p) {
  p->max_output_size_per_class = *call.in<int32_t>(first);
  p->max_total_size = *call.in<int32_t>(first + 1);
  p->iou_threshold = *call.in<float>(first + 2);
  p->score_threshold = *call.in<float>(first + 3);
  p->soft_nms_sigma = *call.in<float>(first + 4);
}

// Declares the four outputs for `detections` rows per image.
inline void DeclareOutputs(OpCall& call, int64_t batch, int64_t detections) {
  call.Output(0, {batch, detections, 4});
  call.Output(1, {batch, detections});
  call.Output(2, {batch, detections});
  call.Output(3, {batch});
}

}  // namespace nms_binding

namespace combined_non_max_suppression_op {

// CPU only, so no Gpu: the binding registers no GPU types (OPFORGE_NO_TYPES).
struct CombinedNmsOp {
  static constexpr OpSignature kSignature{
      "Opforge>CombinedNonMaxSuppression",
      "boxes: T; scores: T; max_output_size_per_class: int32; max_total_size: int32; "
      "iou_threshold: float; score_threshold: float; soft_nms_sigma: float",
      "nmsed_boxes: T; nmsed_scores: T; nmsed_classes: float; valid_detections: int32",
      "pad_per_class: bool = false; "
      "clip_boxes: bool = true; "
      "T: {half, bfloat16, float} = DT_FLOAT"};
  using Params = CombinedNmsParams;
  bool pad_per_class = false;
  bool clip_boxes = true;

  Status Init(AttrReader& reader) {
    reader.Read("pad_per_class", &pad_per_class);
    reader.Read("clip_boxes", &clip_boxes);
    return Status::Ok();
  }
  // The kernel runs on the CPU only, so the scalar inputs are host memory here.
  Status Validate(OpCall& call, Params* p) const {
    p->pad_per_class = pad_per_class;
    p->clip_boxes = clip_boxes;
    OPFORGE_RETURN_IF_ERROR(ValidateCombinedNms(
        call.shape(0), call.shape(1),
        {call.shape(2), call.shape(3), call.shape(4), call.shape(5), call.shape(6)}, p));
    nms_binding::ReadScalars(call, 2, p);
    OPFORGE_RETURN_IF_ERROR(ValidateCombinedNmsValues(*p));
    nms_binding::DeclareOutputs(call, p->batch, p->max_detections());
    return Status::Ok();
  }
  template <typename T>
  void Cpu(const Params& p, const OpCall& call, const Parallel& parallel) const {
    CombinedNms<T>(p, call.in<T>(0), call.in<T>(1), call.out<T>(0), call.out<T>(1),
                   call.out<float>(2), call.out<int32_t>(3), parallel);
  }
};

}  // namespace combined_non_max_suppression_op

using combined_non_max_suppression_op::CombinedNmsOp;

}  // namespace opforge

#endif  // OPFORGE_OPS_COMBINED_NON_MAX_SUPPRESSION_COMBINED_NON_MAX_SUPPRESSION_OP_H_

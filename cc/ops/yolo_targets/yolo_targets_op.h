// The YoloTargets op struct, run by every runtime's skeleton (common/op_call.h): attrs,
// validation and outputs, and the core calls. No runtime's header.
#ifndef OPFORGE_OPS_YOLO_TARGETS_YOLO_TARGETS_OP_H_
#define OPFORGE_OPS_YOLO_TARGETS_YOLO_TARGETS_OP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/op_call.h"
#include "ops/yolo_targets/yolo_targets.h"

namespace opforge {
namespace yolo_targets_op {

inline Status ReadAttrs(AttrReader* c, YoloTargetsParams* p) {
  OPFORGE_RETURN_IF_ERROR(c->GetAttr("anchor_masks", &p->anchor_masks));
  OPFORGE_RETURN_IF_ERROR(c->GetAttr("anchors_per_scale", &p->anchors_per_scale));
  OPFORGE_RETURN_IF_ERROR(c->GetAttr("grid_sizes", &p->grid_sizes));
  OPFORGE_RETURN_IF_ERROR(c->GetAttr("num_classes", &p->num_classes));
  return Status::Ok();
}

struct YoloTargetsOp {
  static constexpr OpSignature kSignature{
      "Opforge>YoloTargets", "boxes: T; classes: int32; anchors: T", "y_true: num_scales * T",
      "anchor_masks: list(int); "
      "anchors_per_scale: list(int); "
      "grid_sizes: list(int); "
      "num_classes: int = -1; "
      "num_scales: int >= 1; "
      "T: {float, double} = DT_FLOAT"};
  using Params = YoloTargetsParams;
  YoloTargetsParams attrs;

  Status Init(AttrReader& reader) {
    if (!ReadAttrs(&reader, &attrs).ok())
      return Status::Ok();  // reported by the runtime's skeleton
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
  Status Validate(OpCall& call, Params* p) const {
    *p = attrs;
    OPFORGE_RETURN_IF_ERROR(ValidateYoloTargets(call.shape(0), call.shape(1), call.shape(2), p));
    for (int64_t s = 0; s < p->num_scales(); ++s)
      call.Output(static_cast<int>(s), p->output_shape(s));
    return Status::Ok();
  }
  template <typename T>
  std::vector<T*> Outputs(const Params& p, const OpCall& call) const {
    std::vector<T*> outputs;
    for (int64_t s = 0; s < p.num_scales(); ++s)
      outputs.push_back(call.out<T>(static_cast<int>(s)));
    return outputs;
  }
  template <typename T>
  Status Cpu(const Params& p, const OpCall& call, const Parallel& parallel) const {
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
  Status Gpu(DType dtype, const Params& p, const OpCall& call, void* stream) const {
    std::vector<void*> outputs;
    for (int64_t s = 0; s < p.num_scales(); ++s) outputs.push_back(call.out(static_cast<int>(s)));
    return YoloTargetsGpu(dtype, p, call.in(0), call.in<int32_t>(1), call.in(2), outputs,
                          call.scratch, call.scratch_bytes, stream);
  }
};

}  // namespace yolo_targets_op

using yolo_targets_op::YoloTargetsOp;

}  // namespace opforge

#endif  // OPFORGE_OPS_YOLO_TARGETS_YOLO_TARGETS_OP_H_

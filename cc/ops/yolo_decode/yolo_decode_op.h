// The YoloDecode op structs, run by every runtime's skeleton (common/op_call.h): attrs,
// validation and outputs, and the core calls. No runtime's header.
#ifndef OPFORGE_OPS_YOLO_DECODE_YOLO_DECODE_OP_H_
#define OPFORGE_OPS_YOLO_DECODE_YOLO_DECODE_OP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/op_call.h"
#include "ops/yolo_decode/yolo_decode.h"

namespace opforge {
namespace yolo_decode_op {

// Reads the attrs of both ops (from a kernel's construction or a shape function).
inline Status ReadAttrs(AttrReader* c, YoloDecodeParams* p) {
  int64_t num_classes = 0;
  OPFORGE_RETURN_IF_ERROR(c->GetAttr("num_classes", &num_classes));
  p->num_classes = num_classes;
  std::vector<int64_t> input_size;
  OPFORGE_RETURN_IF_ERROR(c->GetAttr("input_size", &input_size));
  p->input_size = input_size;
  OPFORGE_RETURN_IF_ERROR(c->GetAttr("box_format", &p->box_format));
  OPFORGE_RETURN_IF_ERROR(c->GetAttr("normalized", &p->normalized));
  OPFORGE_RETURN_IF_ERROR(c->GetAttr("scale_x_y", &p->scale_x_y));
  OPFORGE_RETURN_IF_ERROR(c->GetAttr("max_log_scale", &p->max_log_scale));
  return Status::Ok();
}

struct YoloDecodeAttrs {
  using Params = YoloDecodeParams;
  YoloDecodeParams attrs;

  Status Init(AttrReader& reader) {
    const Status s = ReadAttrs(&reader, &attrs);
    if (!s.ok()) return Status::Ok();  // the skeleton reports the reader's error
    return ValidateYoloDecodeAttrs(&attrs);
  }
  // anchors are host memory on both devices (registered HostMemory: 2A values, where a
  // device-side check would make every call wait for the device), so their values are checked
  // here, before any work, even for an empty batch. The GPU path copies them to the scratch.
  static Status CheckAnchors(const char* op, const OpCall& call, int index, const Params& p) {
    return CheckYoloAnchors(op, "anchors", call.dtype, call.in(index), p.anchors);
  }
  int64_t GpuScratchBytes(DType dtype, const Params& p) const {
    return YoloDecodeGpuScratchBytes(dtype, p);
  }
};

// The attrs of YoloDecode and its gradient.
#define OPFORGE_YOLO_DECODE_ATTRS                                                             \
  "num_classes: int; input_size: list(int); box_format: string = 'xyxy'; normalized: bool = " \
  "false; scale_x_y: float = 1.0; max_log_scale: float = inf; T: {half, bfloat16, float, "    \
  "double} = DT_FLOAT"

struct YoloDecodeOp : YoloDecodeAttrs {
  static constexpr OpSignature kSignature{
      "Opforge>YoloDecode", "features: T; anchors: T",
      "boxes: T; scores: T; class_indices: int32; class_scores: T", OPFORGE_YOLO_DECODE_ATTRS};
  Status Validate(OpCall& call, Params* p) const {
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
  void Cpu(const Params& p, const OpCall& call, const Parallel& parallel) const {
    YoloDecodeForward<T>(p, call.in<T>(0), call.in<T>(1), call.out<T>(0), call.out<T>(1),
                         call.out<int32_t>(2), call.out<T>(3), parallel);
  }
  Status Gpu(DType dtype, const Params& p, const OpCall& call, void* stream) const {
    return YoloDecodeForwardGpu(dtype, p, call.in(0), call.in(1), call.out(0), call.out(1),
                                call.out<int32_t>(2), call.out(3), call.scratch, call.scratch_bytes,
                                stream);
  }
};

struct YoloDecodeGradOp : YoloDecodeAttrs {
  static constexpr OpSignature kSignature{
      "Opforge>YoloDecodeGrad",
      "grad_boxes: T; grad_scores: T; grad_class_scores: T; features: T; anchors: T",
      "grad_features: T", OPFORGE_YOLO_DECODE_ATTRS};
  // The attrs' messages under this op's name (the core names YoloDecode, whose attrs they are).
  Status Init(AttrReader& reader) {
    const Status s = YoloDecodeAttrs::Init(reader);
    if (s.ok()) return s;
    return Status::Invalid("YoloDecodeGrad" + s.message().substr(std::string("YoloDecode").size()));
  }
  Status Validate(OpCall& call, Params* p) const {
    *p = attrs;
    OPFORGE_RETURN_IF_ERROR(ValidateYoloDecodeGrad(call.shape(0), call.shape(1), call.shape(2),
                                                   call.shape(3), call.shape(4), p));
    OPFORGE_RETURN_IF_ERROR(CheckAnchors("YoloDecodeGrad", call, 4, *p));
    call.Output(0, call.shape(3));
    return Status::Ok();
  }
  template <typename T>
  void Cpu(const Params& p, const OpCall& call, const Parallel& parallel) const {
    YoloDecodeBackward<T>(p, call.in<T>(0), call.in<T>(1), call.in<T>(2), call.in<T>(3),
                          call.in<T>(4), call.out<T>(0), parallel);
  }
  Status Gpu(DType dtype, const Params& p, const OpCall& call, void* stream) const {
    return YoloDecodeBackwardGpu(dtype, p, call.in(0), call.in(1), call.in(2), call.in(3),
                                 call.in(4), call.out(0), call.scratch, call.scratch_bytes, stream);
  }
};

}  // namespace yolo_decode_op

using yolo_decode_op::YoloDecodeAttrs;
using yolo_decode_op::YoloDecodeGradOp;
using yolo_decode_op::YoloDecodeOp;

}  // namespace opforge

#endif  // OPFORGE_OPS_YOLO_DECODE_YOLO_DECODE_OP_H_

// The ResizeBilinear op structs, run by every runtime's skeleton (common/op_call.h): attrs,
// validation and outputs, and the core calls. No runtime's header.
#ifndef OPFORGE_OPS_RESIZE_BILINEAR_RESIZE_BILINEAR_OP_H_
#define OPFORGE_OPS_RESIZE_BILINEAR_RESIZE_BILINEAR_OP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/op_call.h"
#include "ops/resize_bilinear/resize_bilinear.h"

namespace opforge {
namespace resize_bilinear_op {

// The attrs of both kernels, validated once when the kernel is built; `kOp` names the op in the
// message.
template <const char* kOp>
struct ResizeBilinearAttrs {
  using Params = ResizeBilinearParams;
  bool align_corners = false;
  bool half_pixel_centers = false;

  Status Init(AttrReader& reader) {
    reader.Read("align_corners", &align_corners);
    reader.Read("half_pixel_centers", &half_pixel_centers);
    return ValidateResizeBilinearAttrs(kOp, align_corners, half_pixel_centers);
  }
};

inline constexpr char kResizeBilinear[] = "ResizeBilinear";
inline constexpr char kResizeBilinearGrad[] = "ResizeBilinearGrad";

struct ResizeBilinearOp : ResizeBilinearAttrs<kResizeBilinear> {
  static constexpr OpSignature kSignature{
      "Opforge>ResizeBilinear", "images: T; size: int32", "resized_images: float",
      "T: {int8, uint8, int16, uint16, int32, int64, bfloat16, half, float, double}; "
      "align_corners: bool = false; "
      "half_pixel_centers: bool = false"};
  static constexpr int kValuesInput = 1;  // size, read on the host

  Status Validate(OpCall& call, Params* p) const {
    OPFORGE_RETURN_IF_ERROR(ValidateResizeBilinear(call.shape(0), call.shape(1), call.values,
                                                   align_corners, half_pixel_centers, p));
    call.Output(0, {p->batch, p->out_height, p->out_width, p->channels});
    return Status::Ok();
  }
  template <typename T>
  void Cpu(const Params& p, const OpCall& call, const Parallel& parallel) const {
    AdviseHugePages(call.out(0), call.out_bytes(0));
    ResizeBilinearForward<T>(p, call.in<T>(0), call.out<float>(0), parallel);
  }
  Status Gpu(DType dtype, const Params& p, const OpCall& call, void* stream) const {
    return ResizeBilinearForwardGpu(dtype, p, call.in(0), call.out<float>(0), stream);
  }
};

struct ResizeBilinearGradOp : ResizeBilinearAttrs<kResizeBilinearGrad> {
  static constexpr OpSignature kSignature{"Opforge>ResizeBilinearGrad",
                                          "grads: float; original_image: T", "output: T",
                                          "T: {float, bfloat16, half, double}; "
                                          "align_corners: bool = false; "
                                          "half_pixel_centers: bool = false"};
  Status Validate(OpCall& call, Params* p) const {
    OPFORGE_RETURN_IF_ERROR(ValidateResizeBilinearGrad(call.shape(0), call.shape(1), align_corners,
                                                       half_pixel_centers, p));
    call.Output(0, call.shape(1));
    return Status::Ok();
  }
  template <typename T>
  void Cpu(const Params& p, const OpCall& call, const Parallel& parallel) const {
    AdviseHugePages(call.out(0), call.out_bytes(0));
    ResizeBilinearBackward<T>(p, call.in<float>(0), call.out<T>(0), parallel);
  }
  Status Gpu(DType dtype, const Params& p, const OpCall& call, void* stream) const {
    return ResizeBilinearBackwardGpu(dtype, p, call.in<float>(0), call.out(0), stream);
  }
};

// int32 images run on the CPU kernel: TensorFlow keeps int32 tensors of GPU ops in host memory.
#define OPFORGE_RESIZE_IMAGE_GPU_TYPES(X, ...)   \
  OPFORGE_RESIZE_SMALL_INT_TYPES(X, __VA_ARGS__) \
  X(int64_t, __VA_ARGS__)                        \
  OPFORGE_FLOAT_TYPES(X, __VA_ARGS__)

// size is read on the host; the images and the gradient's original_image stay on the device
// (only the latter's shape is used).

}  // namespace resize_bilinear_op

using resize_bilinear_op::ResizeBilinearAttrs;
using resize_bilinear_op::ResizeBilinearGradOp;
using resize_bilinear_op::ResizeBilinearOp;

}  // namespace opforge

#endif  // OPFORGE_OPS_RESIZE_BILINEAR_RESIZE_BILINEAR_OP_H_

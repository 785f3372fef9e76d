// The Conv2DTranspose op structs, run by every runtime's skeleton (common/op_call.h): attrs,
// validation and outputs, and the core calls. No runtime's header.
#ifndef OPFORGE_OPS_CONV2D_TRANSPOSE_CONV2D_TRANSPOSE_OP_H_
#define OPFORGE_OPS_CONV2D_TRANSPOSE_CONV2D_TRANSPOSE_OP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/op_call.h"
#include "ops/conv2d_transpose/conv2d_transpose.h"

namespace opforge {
namespace conv2d_transpose_op {

inline Status ReadAttrs(AttrReader* c, Conv2DTransposeAttrs* a) {
  // list(int) attributes are int64 in the NodeDef; read them as such.
  std::vector<int64_t> strides, dilations, pads;
  OPFORGE_RETURN_IF_ERROR(c->GetAttr("strides", &strides));
  OPFORGE_RETURN_IF_ERROR(c->GetAttr("dilations", &dilations));
  OPFORGE_RETURN_IF_ERROR(c->GetAttr("explicit_paddings", &pads));
  OPFORGE_RETURN_IF_ERROR(c->GetAttr("padding", &a->padding));
  OPFORGE_RETURN_IF_ERROR(c->GetAttr("data_format", &a->data_format));
  a->strides = strides;
  a->dilations = dilations;
  a->explicit_paddings = pads;
  return Status::Ok();
}

// The attrs of all three kernels, validated once when the kernel is built.
// The attrs the three ops share, the tail of their signatures' attrs.
#define OPFORGE_CONV2D_TRANSPOSE_ATTRS                                                     \
  "strides: list(int); padding: {'SAME', 'VALID', 'EXPLICIT'}; "                           \
  "explicit_paddings: list(int) = []; data_format: {'NHWC', 'NCHW'} = 'NHWC'; dilations: " \
  "list(int) = [1, 1, 1, 1]"

struct Conv2DTransposeAttrOp {
  using Params = Conv2DTransposeParams;
  Conv2DTransposeAttrs attrs;

  Status Init(AttrReader& reader) {
    // An error reading them is kept by the reader and reported by the runtime's skeleton.
    if (!ReadAttrs(&reader, &attrs).ok()) return Status::Ok();
    return ValidateConv2DTransposeAttrs(attrs);
  }
};

struct Conv2DTransposeOp : Conv2DTransposeAttrOp {
  static constexpr OpSignature kSignature{
      "Opforge>Conv2DTranspose", "input: T; filter: T; output_shape: Tshape", "output: T",
      "Tshape: {int32, int64} = DT_INT32; "
      "T: {half, bfloat16, float, double, int32}; " OPFORGE_CONV2D_TRANSPOSE_ATTRS};
  static constexpr int kValuesInput = 2;  // output_shape, read on the host

  Status Validate(OpCall& call, Params* p) const {
    if (call.shape(2).size() != 1) {
      return Status::Invalid("Conv2DTranspose: output_shape must be a 1-D tensor, got shape " +
                             ShapeString(call.shape(2)));
    }
    OPFORGE_RETURN_IF_ERROR(
        ValidateConv2DTranspose(attrs, call.shape(0), call.shape(1), call.values, p));
    call.Output(0, p->OutputShape());
    return Status::Ok();
  }
  template <typename T>
  void Cpu(const Params& p, const OpCall& call, const Parallel& parallel) const {
    Conv2DTransposeForward<T>(p, call.in<T>(0), call.in<T>(1), call.out<T>(0), parallel);
  }
  Status Gpu(DType dtype, const Params& p, const OpCall& call, void* stream) const {
    return Conv2DTransposeForwardGpu(dtype, p, call.in(0), call.in(1), call.out(0), stream);
  }
};

struct Conv2DTransposeInputGradOp : Conv2DTransposeAttrOp {
  static constexpr OpSignature kSignature{
      "Opforge>Conv2DTransposeInputGrad", "grad: T; filter: T", "grad_input: T",
      "T: {half, bfloat16, float, double}; " OPFORGE_CONV2D_TRANSPOSE_ATTRS};
  Status Validate(OpCall& call, Params* p) const {
    OPFORGE_RETURN_IF_ERROR(
        ValidateConv2DTransposeInputGrad(attrs, call.shape(0), call.shape(1), p));
    call.Output(0, p->InputShape());
    return Status::Ok();
  }
  template <typename T>
  void Cpu(const Params& p, const OpCall& call, const Parallel& parallel) const {
    Conv2DTransposeInputGrad<T>(p, call.in<T>(0), call.in<T>(1), call.out<T>(0), parallel);
  }
  Status Gpu(DType dtype, const Params& p, const OpCall& call, void* stream) const {
    return Conv2DTransposeInputGradGpu(dtype, p, call.in(0), call.in(1), call.out(0), stream);
  }
};

// The filter input gives only its shape (the gradient's).
struct Conv2DTransposeFilterGradOp : Conv2DTransposeAttrOp {
  static constexpr OpSignature kSignature{
      "Opforge>Conv2DTransposeFilterGrad", "input: T; filter: T; grad: T", "grad_filter: T",
      "T: {half, bfloat16, float, double}; " OPFORGE_CONV2D_TRANSPOSE_ATTRS};
  Status Validate(OpCall& call, Params* p) const {
    OPFORGE_RETURN_IF_ERROR(
        ValidateConv2DTransposeFilterGrad(attrs, call.shape(0), call.shape(1), call.shape(2), p));
    call.Output(0, call.shape(1));
    return Status::Ok();
  }
  template <typename T>
  void Cpu(const Params& p, const OpCall& call, const Parallel& parallel) const {
    Conv2DTransposeFilterGrad<T>(p, call.in<T>(0), call.in<T>(2), call.out<T>(0), parallel);
  }
  // The GPU's slice sums (0 bytes for many shapes), allocated by TfKernel.
  int64_t GpuScratchBytes(DType dtype, const Params& p) const {
    return Conv2DTransposeFilterGradGpuScratchBytes(dtype, p);
  }
  Status Gpu(DType dtype, const Params& p, const OpCall& call, void* stream) const {
    return Conv2DTransposeFilterGradGpu(dtype, p, call.in(0), call.in(2), call.out(0), call.scratch,
                                        call.scratch_bytes, stream);
  }
};

}  // namespace conv2d_transpose_op

using conv2d_transpose_op::Conv2DTransposeAttrOp;
using conv2d_transpose_op::Conv2DTransposeFilterGradOp;
using conv2d_transpose_op::Conv2DTransposeInputGradOp;
using conv2d_transpose_op::Conv2DTransposeOp;

}  // namespace opforge

#endif  // OPFORGE_OPS_CONV2D_TRANSPOSE_CONV2D_TRANSPOSE_OP_H_

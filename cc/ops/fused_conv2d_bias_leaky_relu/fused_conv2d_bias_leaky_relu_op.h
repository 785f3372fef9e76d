// The FusedConv2DBiasLeakyRelu op struct, run by every runtime's skeleton (common/op_call.h):
// attrs, validation and outputs, and the core calls. No runtime's header.
#ifndef OPFORGE_OPS_FUSED_CONV2D_BIAS_LEAKY_RELU_FUSED_CONV2D_BIAS_LEAKY_RELU_OP_H_
#define OPFORGE_OPS_FUSED_CONV2D_BIAS_LEAKY_RELU_FUSED_CONV2D_BIAS_LEAKY_RELU_OP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/op_call.h"
#include "ops/fused_conv2d_bias_leaky_relu/fused_conv2d_bias_leaky_relu.h"

namespace opforge {
namespace fused_conv2d_bias_leaky_relu_op {

inline constexpr char kOp[] = "FusedConv2DBiasLeakyRelu";

inline Status ReadAttrs(AttrReader* c, FusedConv2DParams* p) {
  std::vector<int64_t> strides, dilations, pads;
  OPFORGE_RETURN_IF_ERROR(c->GetAttr("strides", &strides));
  OPFORGE_RETURN_IF_ERROR(c->GetAttr("dilations", &dilations));
  OPFORGE_RETURN_IF_ERROR(c->GetAttr("explicit_paddings", &pads));
  OPFORGE_RETURN_IF_ERROR(c->GetAttr("padding", &p->padding));
  OPFORGE_RETURN_IF_ERROR(c->GetAttr("alpha", &p->alpha));
  p->strides = strides;
  p->dilations = dilations;
  p->explicit_paddings = pads;
  return Status::Ok();
}

// CPU only, so no Gpu: on a GPU the layers run TensorFlow's convolution (cuDNN) and opforge's
// bias + leaky_relu kernel, and the binding registers no GPU types (OPFORGE_NO_TYPES).
struct FusedConv2DOp {
  static constexpr OpSignature kSignature{"Opforge>FusedConv2DBiasLeakyRelu",
                                          "input: T; filter: T; bias: T", "output: T",
                                          "T: {half, bfloat16, float, double} = DT_FLOAT; "
                                          "strides: list(int); "
                                          "padding: {'SAME', 'VALID', 'EXPLICIT'}; "
                                          "explicit_paddings: list(int) = []; "
                                          "dilations: list(int) = [1, 1, 1, 1]; "
                                          "alpha: float = 0.2"};
  using Params = FusedConv2DParams;
  FusedConv2DParams attrs;
  // The transformed filter of the last call (inference calls a kernel with the same weights).
  mutable conv::FilterCache cache;

  Status Init(AttrReader& reader) {
    if (!ReadAttrs(&reader, &attrs).ok())
      return Status::Ok();  // reported by the runtime's skeleton
    return ValidateFusedConv2DAttrs(attrs);
  }
  Status Validate(OpCall& call, Params* p) const {
    *p = attrs;
    OPFORGE_RETURN_IF_ERROR(ValidateFusedConv2D(call.shape(0), call.shape(1), call.shape(2), p));
    call.Output(0, p->OutputShape());
    return Status::Ok();
  }
  template <typename T>
  void Cpu(const Params& p, const OpCall& call, const Parallel& parallel) const {
    FusedConv2DBiasLeakyRelu<T>(p, call.in<T>(0), call.in<T>(1), call.in<T>(2), call.out<T>(0),
                                parallel, &cache);
  }
};

}  // namespace fused_conv2d_bias_leaky_relu_op

using fused_conv2d_bias_leaky_relu_op::FusedConv2DOp;

}  // namespace opforge

#endif  // OPFORGE_OPS_FUSED_CONV2D_BIAS_LEAKY_RELU_FUSED_CONV2D_BIAS_LEAKY_RELU_OP_H_

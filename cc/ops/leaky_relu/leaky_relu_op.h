// The LeakyReLU op structs, run by every runtime's skeleton (common/op_call.h): attrs,
// validation and outputs, and the core calls.
#ifndef OPFORGE_OPS_LEAKY_RELU_LEAKY_RELU_OP_H_
#define OPFORGE_OPS_LEAKY_RELU_LEAKY_RELU_OP_H_

#include "common/op_call.h"
#include "ops/leaky_relu/leaky_relu.h"

namespace opforge {

// The attrs of all three kernels: alpha, validated once when the kernel is built.
struct LeakyReluAttrs {
  // The three ops' attrs, for their signatures (common/op_signature.h).
  static constexpr char kAttrs[] =
      "alpha: float = 0.2; T: {half, bfloat16, float, double} = DT_FLOAT";
  using Params = LeakyReluParams;
  LeakyReluParams attrs;

  Status Init(AttrReader& reader) {
    reader.Read("alpha", &attrs.alpha);
    return ValidateLeakyRelu(attrs);
  }
};

template <bool kWithMask>
struct LeakyReluOp : LeakyReluAttrs {
  static constexpr OpSignature kSignature{
      kWithMask ? "Opforge>LeakyReluWithMask" : "Opforge>LeakyRelu", "features: T",
      kWithMask ? "activations: T; mask: T" : "activations: T", kAttrs};
  Status Validate(OpCall& call, Params* params) const {
    *params = attrs;
    params->size = call.NumElements(0);
    // Reuse the input buffer when nobody else holds it (the built-in does the same).
    call.Output(0, call.shape(0), {0});
    if (kWithMask) call.Output(1, call.shape(0));
    return Status::Ok();
  }
  template <typename T>
  void Cpu(const Params& p, const OpCall& call, const Parallel& parallel) const {
    LeakyReluForward<T>(p, call.in<T>(0), call.out<T>(0), kWithMask ? call.out<T>(1) : nullptr,
                        parallel);
  }
  Status Gpu(DType dtype, const Params& p, const OpCall& call, void* stream) const {
    return LeakyReluForwardGpu(dtype, p, call.in(0), call.out(0), kWithMask ? call.out(1) : nullptr,
                               stream);
  }
};

struct LeakyReluGradOp : LeakyReluAttrs {
  static constexpr OpSignature kSignature{"Opforge>LeakyReluGrad", "gradients: T; features: T",
                                          "backprops: T", kAttrs};
  Status Validate(OpCall& call, Params* params) const {
    *params = attrs;
    OPFORGE_RETURN_IF_ERROR(ValidateLeakyReluGrad(*params, call.shape(0), call.shape(1)));
    params->size = call.NumElements(0);
    call.Output(0, call.shape(0), {0});
    return Status::Ok();
  }
  template <typename T>
  void Cpu(const Params& p, const OpCall& call, const Parallel& parallel) const {
    LeakyReluBackward<T>(p, call.in<T>(0), call.in<T>(1), call.out<T>(0), parallel);
  }
  Status Gpu(DType dtype, const Params& p, const OpCall& call, void* stream) const {
    return LeakyReluBackwardGpu(dtype, p, call.in(0), call.in(1), call.out(0), stream);
  }
};

}  // namespace opforge

#endif  // OPFORGE_OPS_LEAKY_RELU_LEAKY_RELU_OP_H_

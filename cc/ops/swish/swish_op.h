// The Swish op structs, run by every runtime's skeleton (common/op_call.h).
#ifndef OPFORGE_OPS_SWISH_SWISH_OP_H_
#define OPFORGE_OPS_SWISH_SWISH_OP_H_

#include "common/op_call.h"
#include "ops/swish/swish.h"

namespace opforge {

struct SwishOp {
  static constexpr OpSignature kSignature{"Opforge>Swish", "features: T", "activations: T",
                                          "T: {half, bfloat16, float, double} = DT_FLOAT"};
  using Params = SwishParams;
  Status Init(AttrReader&) { return Status::Ok(); }
  Status Validate(OpCall& call, Params* params) const {
    params->size = call.NumElements(0);
    OPFORGE_RETURN_IF_ERROR(ValidateSwish(*params));
    call.Output(0, call.shape(0), {0});
    return Status::Ok();
  }
  template <typename T>
  void Cpu(const Params& p, const OpCall& call, const Parallel& parallel) const {
    SwishForward<T>(p, call.in<T>(0), call.out<T>(0), parallel);
  }
  Status Gpu(DType dtype, const Params& p, const OpCall& call, void* stream) const {
    return SwishForwardGpu(dtype, p, call.in(0), call.out(0), stream);
  }
};

struct SwishGradOp {
  static constexpr OpSignature kSignature{"Opforge>SwishGrad", "gradients: T; features: T",
                                          "backprops: T",
                                          "T: {half, bfloat16, float, double} = DT_FLOAT"};
  using Params = SwishParams;
  Status Init(AttrReader&) { return Status::Ok(); }
  Status Validate(OpCall& call, Params* params) const {
    OPFORGE_RETURN_IF_ERROR(ValidateSwishGrad(*params, call.shape(0), call.shape(1)));
    params->size = call.NumElements(0);
    // The gradient may take the buffer of gradients or of features (same shape and dtype).
    call.Output(0, call.shape(0), {0, 1});
    return Status::Ok();
  }
  template <typename T>
  void Cpu(const Params& p, const OpCall& call, const Parallel& parallel) const {
    SwishBackward<T>(p, call.in<T>(0), call.in<T>(1), call.out<T>(0), parallel);
  }
  Status Gpu(DType dtype, const Params& p, const OpCall& call, void* stream) const {
    return SwishBackwardGpu(dtype, p, call.in(0), call.in(1), call.out(0), stream);
  }
};

}  // namespace opforge

#endif  // OPFORGE_OPS_SWISH_SWISH_OP_H_

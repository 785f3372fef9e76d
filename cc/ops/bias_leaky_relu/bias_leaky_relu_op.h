// The BiasLeakyRelu op struct, run by every runtime's skeleton (common/op_call.h).
#ifndef OPFORGE_OPS_BIAS_LEAKY_RELU_BIAS_LEAKY_RELU_OP_H_
#define OPFORGE_OPS_BIAS_LEAKY_RELU_BIAS_LEAKY_RELU_OP_H_

#include "common/op_call.h"
#include "ops/bias_leaky_relu/bias_leaky_relu.h"

namespace opforge {

struct BiasLeakyReluOp {
  static constexpr OpSignature kSignature{"Opforge>BiasLeakyRelu", "features: T; bias: T",
                                          "output: T",
                                          "T: {half, bfloat16, float, double} = DT_FLOAT; "
                                          "alpha: float = 0.2"};
  using Params = BiasLeakyReluParams;
  float alpha = 0.2f;

  Status Init(AttrReader& reader) {
    reader.Read("alpha", &alpha);
    return Status::Ok();
  }
  Status Validate(OpCall& call, Params* p) const {
    p->alpha = alpha;
    OPFORGE_RETURN_IF_ERROR(ValidateBiasLeakyRelu(call.shape(0), call.shape(1), p));
    call.Output(0, call.shape(0), {0});
    return Status::Ok();
  }
  template <typename T>
  void Cpu(const Params& p, const OpCall& call, const Parallel& parallel) const {
    BiasLeakyRelu<T>(p, call.in<T>(0), call.in<T>(1), call.out<T>(0), parallel);
  }
  Status Gpu(DType dtype, const Params& p, const OpCall& call, void* stream) const {
    return BiasLeakyReluGpu(dtype, p, call.in(0), call.in(1), call.out(0), stream);
  }
};

}  // namespace opforge

#endif  // OPFORGE_OPS_BIAS_LEAKY_RELU_BIAS_LEAKY_RELU_OP_H_

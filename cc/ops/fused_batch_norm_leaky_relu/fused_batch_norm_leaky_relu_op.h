// The FusedBatchNormLeakyRelu op structs, run by every runtime's skeleton (common/op_call.h):
// attrs, validation and outputs, and the core calls. No runtime's header.
#ifndef OPFORGE_OPS_FUSED_BATCH_NORM_LEAKY_RELU_FUSED_BATCH_NORM_LEAKY_RELU_OP_H_
#define OPFORGE_OPS_FUSED_BATCH_NORM_LEAKY_RELU_FUSED_BATCH_NORM_LEAKY_RELU_OP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/op_call.h"
#include "ops/fused_batch_norm_leaky_relu/fused_batch_norm_leaky_relu.h"

namespace opforge {
namespace fused_batch_norm_leaky_relu_op {

inline Status ReadAttrs(AttrReader* c, BatchNormLeakyParams* p) {
  OPFORGE_RETURN_IF_ERROR(c->GetAttr("epsilon", &p->epsilon));
  OPFORGE_RETURN_IF_ERROR(c->GetAttr("alpha", &p->alpha));
  return Status::Ok();
}

// Both ops' attrs, for their signatures (common/op_signature.h).
inline constexpr char kBatchNormLeakyAttrs[] =
    "T: {half, bfloat16, float, double} = DT_FLOAT; U: {float, double} = DT_FLOAT; "
    "epsilon: float = 0.001; alpha: float = 0.2";

struct BatchNormLeakyOp {
  static constexpr OpSignature kSignature{
      "Opforge>FusedBatchNormLeakyRelu", "x: T; scale: U; offset: U",
      "y: T; batch_mean: U; batch_variance: U", kBatchNormLeakyAttrs};
  using Params = BatchNormLeakyParams;
  BatchNormLeakyParams attrs;

  Status Init(AttrReader& reader) {
    if (!ReadAttrs(&reader, &attrs).ok())
      return Status::Ok();  // reported by the runtime's skeleton
    return ValidateBatchNormLeakyAttrs(attrs, "FusedBatchNormLeakyRelu");
  }
  Status Validate(OpCall& call, Params* p) const {
    *p = attrs;
    OPFORGE_RETURN_IF_ERROR(ValidateBatchNormLeaky(call.shape(0), call.shape(1), call.shape(2), p));
    call.Output(0, call.shape(0));  // not in place: the kernel's loops take restrict pointers
    call.Output(1, {p->channels});
    call.Output(2, {p->channels});
    return Status::Ok();
  }
  template <typename T>
  void Cpu(const Params& p, const OpCall& call, const Parallel& parallel) const {
    using U = BnParamType<T>;
    BatchNormLeakyForward<T>(p, call.in<T>(0), call.in<U>(1), call.in<U>(2), call.out<T>(0),
                             call.out<U>(1), call.out<U>(2), parallel);
  }
  // The statistics' partial sums, allocated by TfKernel from TensorFlow's allocator.
  int64_t GpuScratchBytes(DType dtype, const Params& p) const {
    return BatchNormLeakyForwardGpuScratchBytes(dtype, p);
  }
  Status Gpu(DType dtype, const Params& p, const OpCall& call, void* stream) const {
    return BatchNormLeakyForwardGpu(dtype, p, call.in(0), call.in(1), call.in(2), call.out(0),
                                    call.out(1), call.out(2), call.scratch, call.scratch_bytes,
                                    stream);
  }
};

struct BatchNormLeakyGradOp {
  static constexpr OpSignature kSignature{
      "Opforge>FusedBatchNormLeakyReluGrad",
      "grad: T; x: T; scale: U; offset: U; batch_mean: U; batch_variance: U",
      "dx: T; dscale: U; doffset: U", kBatchNormLeakyAttrs};
  using Params = BatchNormLeakyParams;
  BatchNormLeakyParams attrs;

  Status Init(AttrReader& reader) {
    if (!ReadAttrs(&reader, &attrs).ok())
      return Status::Ok();  // reported by the runtime's skeleton
    return ValidateBatchNormLeakyAttrs(attrs, "FusedBatchNormLeakyReluGrad");
  }
  Status Validate(OpCall& call, Params* p) const {
    *p = attrs;
    OPFORGE_RETURN_IF_ERROR(ValidateBatchNormLeakyGrad(call.shape(0), call.shape(1), call.shape(2),
                                                       call.shape(3), call.shape(4), call.shape(5),
                                                       p));
    call.Output(0, call.shape(1));
    call.Output(1, {p->channels});
    call.Output(2, {p->channels});
    return Status::Ok();
  }
  template <typename T>
  void Cpu(const Params& p, const OpCall& call, const Parallel& parallel) const {
    using U = BnParamType<T>;
    BatchNormLeakyBackward<T>(p, call.in<T>(0), call.in<T>(1), call.in<U>(2), call.in<U>(3),
                              call.in<U>(4), call.in<U>(5), call.out<T>(0), call.out<U>(1),
                              call.out<U>(2), parallel);
  }
  int64_t GpuScratchBytes(DType dtype, const Params& p) const {
    return BatchNormLeakyBackwardGpuScratchBytes(dtype, p);
  }
  Status Gpu(DType dtype, const Params& p, const OpCall& call, void* stream) const {
    return BatchNormLeakyBackwardGpu(dtype, p, call.in(0), call.in(1), call.in(2), call.in(3),
                                     call.in(4), call.in(5), call.out(0), call.out(1), call.out(2),
                                     call.scratch, call.scratch_bytes, stream);
  }
};

}  // namespace fused_batch_norm_leaky_relu_op

using fused_batch_norm_leaky_relu_op::BatchNormLeakyGradOp;
using fused_batch_norm_leaky_relu_op::BatchNormLeakyOp;

}  // namespace opforge

#endif  // OPFORGE_OPS_FUSED_BATCH_NORM_LEAKY_RELU_FUSED_BATCH_NORM_LEAKY_RELU_OP_H_

// The ElementMul op structs, run by every runtime's skeleton (common/op_call.h).
#ifndef OPFORGE_OPS_ELEMENT_MUL_ELEMENT_MUL_OP_H_
#define OPFORGE_OPS_ELEMENT_MUL_ELEMENT_MUL_OP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/op_call.h"
#include "ops/element_mul/element_mul.h"

namespace opforge {

struct ElementMulOp {
  static constexpr OpSignature kSignature{
      "Opforge>ElementMul", "a: T; b: T", "product: T",
      "T: {half, bfloat16, float, double, int8, uint8, int16, uint16, int32, uint32, int64, "
      "uint64, complex64, complex128}"};
  using Params = BroadcastPlan;
  Status Init(AttrReader&) { return Status::Ok(); }
  Status Validate(OpCall& call, Params* plan) const {
    OPFORGE_RETURN_IF_ERROR(ValidateElementMul(call.shape(0), call.shape(1), plan));
    // Writes in place into an operand of the output's shape that nobody else holds.
    call.Output(0, plan->out_shape, {0, 1});
    return Status::Ok();
  }
  template <typename T>
  void Cpu(const Params& plan, const OpCall& call, const Parallel& parallel) const {
    ElementMulForward<T>(plan, call.in<T>(0), call.in<T>(1), call.out<T>(0), parallel);
  }
  Status Gpu(DType dtype, const Params& plan, const OpCall& call, void* stream) const {
    return ElementMulForwardGpu(dtype, plan, call.in(0), call.in(1), call.out(0), stream);
  }
};

struct ElementMulGradOp {
  static constexpr OpSignature kSignature{
      "Opforge>ElementMulGrad", "grad: T; a: T; b: T", "grad_a: T; grad_b: T",
      "T: {half, bfloat16, float, double, int32, int64, complex64, complex128}; "
      "need_grad_a: bool = true; "
      "need_grad_b: bool = true"};
  using Params = BroadcastPlan;
  bool need_a = true;
  bool need_b = true;

  Status Init(AttrReader& reader) {
    reader.Read("need_grad_a", &need_a);
    reader.Read("need_grad_b", &need_b);
    return Status::Ok();
  }
  Status Validate(OpCall& call, Params* plan) const {
    OPFORGE_RETURN_IF_ERROR(
        ValidateElementMulGrad(call.shape(0), call.shape(1), call.shape(2), plan));
    // grad_b is computed first into a fresh buffer, so grad_a may then overwrite grad in place.
    // A gradient nobody needs is an empty [0] tensor (its pointer is null: not computed).
    const std::vector<int64_t> skipped = {0};
    call.Output(1, need_b ? call.shape(2) : skipped);
    if (need_a) {
      call.Output(0, call.shape(1), {0});
    } else {
      call.Output(0, skipped);
    }
    return Status::Ok();
  }
  template <typename T>
  void Cpu(const Params& plan, const OpCall& call, const Parallel& parallel) const {
    const T* g = call.in<T>(0);
    const T* a = call.in<T>(1);
    const T* b = call.in<T>(2);
    if (T* gb = call.out<T>(1)) ElementMulBackward<T>(plan, g, a, b, nullptr, gb, parallel);
    if (T* ga = call.out<T>(0)) ElementMulBackward<T>(plan, g, a, b, ga, nullptr, parallel);
  }
  // The two-pass reduction's scratch (0 bytes for most plans), allocated by TfKernel from
  // TensorFlow's allocator: never cudaMallocAsync beside TensorFlow's memory pool.
  int64_t GpuScratchBytes(DType dtype, const Params& plan) const {
    return ElementMulBackwardGpuWorkspaceBytes(dtype, plan, need_a, need_b);
  }
  Status Gpu(DType dtype, const Params& plan, const OpCall& call, void* stream) const {
    // One stream: the two launches run in order, so they can share the scratch.
    OPFORGE_RETURN_IF_ERROR(ElementMulBackwardGpu(dtype, plan, call.in(0), call.in(1), call.in(2),
                                                  nullptr, call.out(1), stream, call.scratch,
                                                  call.scratch_bytes));
    return ElementMulBackwardGpu(dtype, plan, call.in(0), call.in(1), call.in(2), call.out(0),
                                 nullptr, stream, call.scratch, call.scratch_bytes);
  }
};

}  // namespace opforge

#endif  // OPFORGE_OPS_ELEMENT_MUL_ELEMENT_MUL_OP_H_

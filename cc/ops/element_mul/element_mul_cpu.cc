#include <Eigen/Core>
#include <cstdint>

#include "common/arith.h"
#include "common/broadcast.h"
#include "ops/element_mul/element_mul.h"

namespace opforge {

Status ValidateElementMul(const std::vector<int64_t>& a, const std::vector<int64_t>& b,
                          BroadcastPlan* plan) {
  return MakeBroadcastPlan("ElementMul", "a", "b", a, b, plan);
}

Status ValidateElementMulGrad(const std::vector<int64_t>& grad, const std::vector<int64_t>& a,
                              const std::vector<int64_t>& b, BroadcastPlan* plan) {
  OPFORGE_RETURN_IF_ERROR(MakeBroadcastPlan("ElementMulGrad", "a", "b", a, b, plan));
  if (grad != plan->out_shape) {
    return InvalidArgument("ElementMulGrad", "grad",
                           "the broadcast shape of a and b " + ShapeString(plan->out_shape),
                           ShapeString(grad));
  }
  return Status::Ok();
}

template <typename T>
void ElementMulForward(const BroadcastPlan& plan, const T* a, const T* b, T* out,
                       const Parallel& parallel) {
  BroadcastApply(
      plan.dims, plan.a_strides, plan.b_strides, a, b, out, [](T x, T y) { return Mul<T>(x, y); },
      parallel);
}

template <typename T>
void ElementMulBackward(const BroadcastPlan& plan, const T* grad, const T* a, const T* b, T* grad_a,
                        T* grad_b, const Parallel& parallel) {
  // grad * conj(b) and conj(a) * grad (TensorFlow's _MulGrad): the same products for real T.
  auto grad_times_conj = [](T g, T y) { return Mul<T>(g, Conj<T>(y)); };
  auto conj_times_grad = [](T x, T g) { return Mul<T>(Conj<T>(x), g); };
  // An operand that was not broadcast gets one product per element: an element-wise multiply
  // with the other operand read through its broadcast strides. The rest is a reduction.
  const auto& g_strides = plan.out_strides;
  if (grad_a != nullptr) {
    if (plan.a_strides == plan.out_strides) {
      BroadcastApply(plan.dims, g_strides, plan.b_strides, grad, b, grad_a, grad_times_conj,
                     parallel);
    } else {
      BroadcastMulReduce(plan.dims, plan.a_strides, plan.b_strides, grad, b, grad_a, parallel);
    }
  }
  if (grad_b != nullptr) {
    if (plan.b_strides == plan.out_strides) {
      BroadcastApply(plan.dims, plan.a_strides, g_strides, a, grad, grad_b, conj_times_grad,
                     parallel);
    } else {
      BroadcastMulReduce(plan.dims, plan.b_strides, plan.a_strides, grad, a, grad_b, parallel);
    }
  }
}

#define OPFORGE_INSTANTIATE_FORWARD(T, ...) \
  template void ElementMulForward<T>(const BroadcastPlan&, const T*, const T*, T*, const Parallel&);
OPFORGE_ELEMENT_MUL_TYPES(OPFORGE_INSTANTIATE_FORWARD)
#undef OPFORGE_INSTANTIATE_FORWARD
#define OPFORGE_INSTANTIATE_BACKWARD(T, ...)                                                      \
  template void ElementMulBackward<T>(const BroadcastPlan&, const T*, const T*, const T*, T*, T*, \
                                      const Parallel&);
OPFORGE_ELEMENT_MUL_GRAD_TYPES(OPFORGE_INSTANTIATE_BACKWARD)
#undef OPFORGE_INSTANTIATE_BACKWARD

}  // namespace opforge

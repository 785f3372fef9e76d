// ElementMul: out = a * b with NumPy broadcasting, and its gradient, which sums over the
// dimensions each operand was broadcast along. Matches tf.multiply bit for bit in the forward
// pass; the gradient of operands with nothing to sum is bit-exact too (one product each, -0
// included), broadcast ones are sums in an order of their own (element_mul_reduce.h), the same
// on the CPU and the GPU, that differs from TensorFlow's reduction.
//
// Every dtype tf.multiply takes on the CPU: integers of every width wrap on overflow; complex
// products use the plain formula (common/scalar.h's Mul), which is TensorFlow's wherever its
// vectorised kernel runs. (Its scalar tail, the last n % packet-size elements, uses C99 Annex G's
// recovery, which turns some NaN parts of inf * x products into infinities: TensorFlow's own
// answer for non-finite complex operands depends on the position; finite ones are the same
// everywhere.) The gradient of complex operands is TensorFlow's: grad_a = sum grad * conj(b),
// grad_b = sum conj(a) * grad.
#ifndef OPFORGE_OPS_ELEMENT_MUL_ELEMENT_MUL_H_
#define OPFORGE_OPS_ELEMENT_MUL_ELEMENT_MUL_H_

#include <complex>
#include <cstdint>
#include <vector>

#include "common/broadcast_plan.h"
#include "common/dtype.h"
#include "common/parallel.h"
#include "common/status.h"

// The forward op's dtypes (all of tf.multiply's on the CPU), and the gradient's: the floats, the
// complex types and the 32- and 64-bit signed integers.
#define OPFORGE_ELEMENT_MUL_COMPLEX_TYPES(X, ...) \
  X(std::complex<float>, __VA_ARGS__)             \
  X(std::complex<double>, __VA_ARGS__)
#define OPFORGE_ELEMENT_MUL_GRAD_TYPES(X, ...) \
  OPFORGE_FLOAT_INT_TYPES(X, __VA_ARGS__)      \
  OPFORGE_ELEMENT_MUL_COMPLEX_TYPES(X, __VA_ARGS__)
// The forward's types but the complex ones (ONNX Runtime's custom ops take no complex tensors).
#define OPFORGE_ELEMENT_MUL_REAL_TYPES(X, ...) \
  OPFORGE_FLOAT_INT_TYPES(X, __VA_ARGS__)      \
  X(int8_t, __VA_ARGS__)                       \
  X(uint8_t, __VA_ARGS__)                      \
  X(int16_t, __VA_ARGS__)                      \
  X(uint16_t, __VA_ARGS__)                     \
  X(uint32_t, __VA_ARGS__)                     \
  X(uint64_t, __VA_ARGS__)
#define OPFORGE_ELEMENT_MUL_TYPES(X, ...)        \
  OPFORGE_ELEMENT_MUL_REAL_TYPES(X, __VA_ARGS__) \
  OPFORGE_ELEMENT_MUL_COMPLEX_TYPES(X, __VA_ARGS__)
// The GPU kernels' types (TensorFlow's GPU kernels keep int32 tensors in host memory: int32 runs
// on the CPU kernel there).
#define OPFORGE_ELEMENT_MUL_GPU_TYPES(X, ...) \
  OPFORGE_FLOAT_TYPES(X, __VA_ARGS__)         \
  X(int64_t, __VA_ARGS__)

namespace opforge {

// Checks that a and b broadcast and fills the plan (output shape, collapsed strides).
Status ValidateElementMul(const std::vector<int64_t>& a, const std::vector<int64_t>& b,
                          BroadcastPlan* plan);

// Checks the gradient's inputs: `grad` must have the broadcast shape of a and b.
Status ValidateElementMulGrad(const std::vector<int64_t>& grad, const std::vector<int64_t>& a,
                              const std::vector<int64_t>& b, BroadcastPlan* plan);

template <typename T>
void ElementMulForward(const BroadcastPlan& plan, const T* a, const T* b, T* out,
                       const Parallel& parallel);

// grad_a = sum_{broadcast dims of a} grad * conj(b), grad_b = sum_{broadcast dims of b}
// conj(a) * grad (conj: the identity on real types). Either output may be null (not needed).
template <typename T>
void ElementMulBackward(const BroadcastPlan& plan, const T* grad, const T* a, const T* b, T* grad_a,
                        T* grad_b, const Parallel& parallel);

// CUDA versions (element_mul.cu), asynchronous on `stream`. The collapsed plan may have at most
// kElementMulGpuMaxDims dimensions. The gradient's sums follow the CPU kernel's order (see
// element_mul_reduce.h): the same bits.
constexpr int kElementMulGpuMaxDims = 8;
Status ElementMulForwardGpu(DType dtype, const BroadcastPlan& plan, const void* a, const void* b,
                            void* out, void* stream);

// A few targets with long sums (such as the gradient of x * scalar) are summed in two passes,
// segments spread over the whole GPU and then their values combined, which needs device scratch:
// ElementMulBackwardGpuWorkspaceBytes bytes (0 when the plan has no use for it), aligned to 16.
// The first form allocates it on the stream (cudaMallocAsync, freed on the stream after use);
// the second takes the caller's (a TensorFlow temporary, say) and allocates nothing. Without
// enough scratch (an allocation that fails, too small a workspace) each target is summed by one
// block instead: the same bits, more slowly when there are few targets.
int64_t ElementMulBackwardGpuWorkspaceBytes(DType dtype, const BroadcastPlan& plan, bool grad_a,
                                            bool grad_b);
Status ElementMulBackwardGpu(DType dtype, const BroadcastPlan& plan, const void* grad,
                             const void* a, const void* b, void* grad_a, void* grad_b,
                             void* stream);
Status ElementMulBackwardGpu(DType dtype, const BroadcastPlan& plan, const void* grad,
                             const void* a, const void* b, void* grad_a, void* grad_b, void* stream,
                             void* workspace, int64_t workspace_bytes);

}  // namespace opforge

#endif  // OPFORGE_OPS_ELEMENT_MUL_ELEMENT_MUL_H_

// LeakyReLU: y = x > 0 ? x : alpha * x, for any alpha (also alpha > 1 and alpha < 0), exactly
// as TensorFlow's LeakyRelu computes it: alpha is first rounded to the element type, then
// multiplied, so results are bit-identical for half, bfloat16, float and double.
//
// The mask formulation returns, beside y, mask = 1 where x > 0 and alpha elsewhere; it is the
// same kernel with one more output, not a second copy.
#ifndef OPFORGE_OPS_LEAKY_RELU_LEAKY_RELU_H_
#define OPFORGE_OPS_LEAKY_RELU_LEAKY_RELU_H_

#include <cstdint>
#include <vector>

#include "common/dtype.h"
#include "common/parallel.h"
#include "common/status.h"

namespace opforge {

struct LeakyReluParams {
  float alpha = 0.2f;
  int64_t size = 0;  // number of elements
};

// alpha must be finite (a NaN or infinite slope turns every negative input into garbage).
Status ValidateLeakyRelu(const LeakyReluParams& params);

// The gradient's inputs must have one shape.
Status ValidateLeakyReluGrad(const LeakyReluParams& params, const std::vector<int64_t>& gradients,
                             const std::vector<int64_t>& features);

// y[i] = x[i] > 0 ? x[i] : x[i] * T(alpha); mask (if not null) = x[i] > 0 ? 1 : T(alpha).
// y may alias x (the binding forwards the input buffer when it can).
template <typename T>
void LeakyReluForward(const LeakyReluParams& params, const T* x, T* y, T* mask,
                      const Parallel& parallel);

// dx[i] = x[i] > 0 ? g[i] : g[i] * T(alpha). dx may alias g.
template <typename T>
void LeakyReluBackward(const LeakyReluParams& params, const T* g, const T* x, T* dx,
                       const Parallel& parallel);

// CUDA versions (leaky_relu.cu), asynchronous on `stream` (a cudaStream_t; null is the default
// stream). They return an error status if the launch fails. Compiled only where nvcc exists.
Status LeakyReluForwardGpu(DType dtype, const LeakyReluParams& params, const void* x, void* y,
                           void* mask, void* stream);
Status LeakyReluBackwardGpu(DType dtype, const LeakyReluParams& params, const void* g,
                            const void* x, void* dx, void* stream);

}  // namespace opforge

#endif  // OPFORGE_OPS_LEAKY_RELU_LEAKY_RELU_H_

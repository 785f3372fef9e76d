// Swish (SiLU): y = x * sigmoid(x), exactly as TensorFlow computes tf.nn.silu / tf.nn.swish
// (beta = 1): its Sigmoid kernel, then a multiply, each rounded to the element type. The
// gradient is TensorFlow's too: dx = g * (s * (1 + x * (1 - s))) with s = sigmoid(x), every step
// rounded to the element type, in that order.
//
// TensorFlow's Sigmoid is Eigen's logistic functor evaluated by a vectorised tensor expression:
// the packet form of the functor for every whole packet of the tensor, the scalar form for the
// last size % packet_size elements (the two forms differ in the last bits for float and double).
// The CPU kernels here do the same (ops/swish/swish_cpu.cc), so they match TensorFlow's CPU
// results bit for bit when built with the ISA flags of TensorFlow's wheel (-mavx, no FMA
// contraction). The CUDA kernels compute the logistic with CUDA's exp in float (double for
// double), within a few ulps of the CPU kernels (swish_cuda_test.cc states the bound).
#ifndef OPFORGE_OPS_SWISH_SWISH_H_
#define OPFORGE_OPS_SWISH_SWISH_H_

#include <cstdint>
#include <vector>

#include "common/dtype.h"
#include "common/parallel.h"
#include "common/status.h"

namespace opforge {

struct SwishParams {
  int64_t size = 0;  // number of elements
};

// size must be non-negative.
Status ValidateSwish(const SwishParams& params);

// The gradient's inputs must have one shape.
Status ValidateSwishGrad(const SwishParams& params, const std::vector<int64_t>& gradients,
                         const std::vector<int64_t>& features);

// y[i] = x[i] * sigmoid(x[i]). y may alias x (the binding forwards the input buffer).
template <typename T>
void SwishForward(const SwishParams& params, const T* x, T* y, const Parallel& parallel);

// dx[i] = g[i] * (s * (1 + x[i] * (1 - s))), s = sigmoid(x[i]). dx may alias g or x.
template <typename T>
void SwishBackward(const SwishParams& params, const T* g, const T* x, T* dx,
                   const Parallel& parallel);

// CUDA versions (swish.cu), asynchronous on `stream` (a cudaStream_t; null is the default
// stream). They return an error status if the launch fails. Compiled only where nvcc exists.
Status SwishForwardGpu(DType dtype, const SwishParams& params, const void* x, void* y,
                       void* stream);
Status SwishBackwardGpu(DType dtype, const SwishParams& params, const void* g, const void* x,
                        void* dx, void* stream);

}  // namespace opforge

#endif  // OPFORGE_OPS_SWISH_SWISH_H_

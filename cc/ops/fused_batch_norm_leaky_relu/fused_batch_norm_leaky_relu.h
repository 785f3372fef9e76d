// FusedBatchNormLeakyRelu: Keras BatchNormalization in training mode followed by leaky_relu, in
// two passes over x (one for the batch statistics, one for normalise + scale + shift +
// activation), where Keras 3's BatchNormalization is a chain of separate TensorFlow ops (not
// TensorFlow's FusedBatchNorm, which grappler would fuse) and the activation one more.
//
// x [..., C] (channels last, any rank >= 1; N = the number of rows, every position but the last
// axis), gamma, beta [C]. Per channel c, as Keras computes it:
//   mean = sum(x) / N, variance = sum((x - mean)^2) / N (biased: Keras updates its moving
//   variance with it, no Bessel correction),
//   inv = rsqrt(variance + epsilon) * gamma, z = x * inv + (beta - mean * inv)
//   (tf.nn.batch_normalization's formula, in float), y = z > 0 ? z : z * alpha.
// Outputs y (T), batch_mean and batch_variance [C] (U). The sums are accumulated in double over
// fixed chunks of rows (the same bits for any thread count). T half or bfloat16 computes in
// float with U = float (Keras runs batch norm of half inputs in float32); float: U = float;
// double: U = double.
//
// The gradient (FusedBatchNormLeakyReluGrad) takes dy, x, gamma, beta and the batch statistics
// and gives dx, dgamma, dbeta in two passes: per channel sum(g) and sum(g * xhat), where
// g = dy * (z > 0 ? 1 : alpha) and xhat = (x - mean) * rsqrt(variance + epsilon), then
// dx = gamma * rsqrt(variance + epsilon) * (g - sum(g) / N - xhat * sum(g * xhat) / N),
// dgamma = sum(g * xhat), dbeta = sum(g). The batch statistics outputs carry no gradient (as
// TensorFlow's FusedBatchNorm: they feed the moving averages).
#ifndef OPFORGE_OPS_FUSED_BATCH_NORM_LEAKY_RELU_FUSED_BATCH_NORM_LEAKY_RELU_H_
#define OPFORGE_OPS_FUSED_BATCH_NORM_LEAKY_RELU_FUSED_BATCH_NORM_LEAKY_RELU_H_

#include <cstdint>
#include <type_traits>
#include <vector>

#include "common/dtype.h"
#include "common/parallel.h"
#include "common/status.h"

// (T, U) pairs of the kernels.
#define OPFORGE_BN_FLOAT_U_TYPES(X, ...) \
  X(Eigen::half, __VA_ARGS__)            \
  X(Eigen::bfloat16, __VA_ARGS__)        \
  X(float, __VA_ARGS__)
#define OPFORGE_BN_DOUBLE_U_TYPES(X, ...) X(double, __VA_ARGS__)

namespace opforge {

struct BatchNormLeakyParams {
  // Attrs.
  float epsilon = 1e-3f;
  float alpha = 0.2f;
  // From the shapes.
  int64_t rows = 0, channels = 0;
};

// The scalar type of gamma, beta and the statistics for x of type T.
template <typename T>
using BnParamType = std::conditional_t<std::is_same_v<T, double>, double, float>;

// epsilon finite and > 0; alpha finite and >= 0.
Status ValidateBatchNormLeakyAttrs(const BatchNormLeakyParams& params, const char* op);

// x rank >= 1 with C = its last dimension; gamma, beta [C].
Status ValidateBatchNormLeaky(const std::vector<int64_t>& x, const std::vector<int64_t>& gamma,
                              const std::vector<int64_t>& beta, BatchNormLeakyParams* params);

// The gradient's shapes: dy the shape of x, mean and variance [C] as well.
Status ValidateBatchNormLeakyGrad(const std::vector<int64_t>& dy, const std::vector<int64_t>& x,
                                  const std::vector<int64_t>& gamma,
                                  const std::vector<int64_t>& beta,
                                  const std::vector<int64_t>& mean,
                                  const std::vector<int64_t>& variance,
                                  BatchNormLeakyParams* params);

template <typename T>
void BatchNormLeakyForward(const BatchNormLeakyParams& params, const T* x,
                           const BnParamType<T>* gamma, const BnParamType<T>* beta, T* y,
                           BnParamType<T>* mean, BnParamType<T>* variance,
                           const Parallel& parallel);

template <typename T>
void BatchNormLeakyBackward(const BatchNormLeakyParams& params, const T* dy, const T* x,
                            const BnParamType<T>* gamma, const BnParamType<T>* beta,
                            const BnParamType<T>* mean, const BnParamType<T>* variance, T* dx,
                            BnParamType<T>* dgamma, BnParamType<T>* dbeta,
                            const Parallel& parallel);

// CUDA versions (fused_batch_norm_leaky_relu.cu), asynchronous on `stream`; the same bits as
// the CPU kernels. gamma, beta and the statistics are float (double for double x). Each needs
// device scratch memory of the size its *ScratchBytes function gives (the per-chunk partial sums
// and per-channel factors), from the caller: in TensorFlow the binding allocates it from
// TensorFlow's allocator, which owns the GPU's memory. Too little is an error.
int64_t BatchNormLeakyForwardGpuScratchBytes(DType dtype, const BatchNormLeakyParams& params);
int64_t BatchNormLeakyBackwardGpuScratchBytes(DType dtype, const BatchNormLeakyParams& params);
Status BatchNormLeakyForwardGpu(DType dtype, const BatchNormLeakyParams& params, const void* x,
                                const void* gamma, const void* beta, void* y, void* mean,
                                void* variance, void* scratch, int64_t scratch_bytes, void* stream);
Status BatchNormLeakyBackwardGpu(DType dtype, const BatchNormLeakyParams& params, const void* dy,
                                 const void* x, const void* gamma, const void* beta,
                                 const void* mean, const void* variance, void* dx, void* dgamma,
                                 void* dbeta, void* scratch, int64_t scratch_bytes, void* stream);

}  // namespace opforge

#endif  // OPFORGE_OPS_FUSED_BATCH_NORM_LEAKY_RELU_FUSED_BATCH_NORM_LEAKY_RELU_H_

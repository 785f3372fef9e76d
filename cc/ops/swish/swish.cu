// CUDA kernels of Swish: grid-stride element-wise loops. The sigmoid is e / (1 + e) with
// e = exp(x) (CUDA's expf for half, bfloat16 and float, exp for double), x clamped above where
// the sigmoid is 1 (as Eigen's functor does); the formulas around it are the CPU kernels'
// (swish_element.h), computed in float for half and bfloat16 and rounded once.
#include "common/cuda_util.cuh"
#include "ops/swish/swish.h"
#include "ops/swish/swish_element.h"

namespace opforge {
namespace {

__device__ inline float Sigmoid(float x) {
  const float e = expf(x > 16.6355324f ? 16.6355324f : x);
  return e / (1.0f + e);
}

__device__ inline double Sigmoid(double x) {
  // exp overflows past 709.78; the sigmoid is 1 (in double) long before.
  const double e = exp(x > 40.0 ? 40.0 : x);
  return e / (1.0 + e);
}

template <typename T>
__global__ void SwishForwardKernel(int64_t n, const T* x, T* y) {
  using N = cuda::Num<T>;
  using C = typename N::C;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const C c = N::To(x[i]);
    y[i] = N::From(SwishValue(c, Sigmoid(c)));
  }
}

template <typename T>
__global__ void SwishBackwardKernel(int64_t n, const T* g, const T* x, T* dx) {
  using N = cuda::Num<T>;
  using C = typename N::C;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const C c = N::To(x[i]);
    dx[i] = N::From(SwishBackprop(N::To(g[i]), c, Sigmoid(c)));
  }
}

}  // namespace

Status SwishForwardGpu(DType dtype, const SwishParams& params, const void* x, void* y,
                       void* stream) {
  if (params.size == 0) return Status::Ok();
  auto s = static_cast<cudaStream_t>(stream);
  return cuda::DispatchDType<false>(dtype, "Swish", [&](auto tag) {
    using T = typename decltype(tag)::type;
    SwishForwardKernel<T><<<cuda::Blocks(params.size), cuda::kThreads, 0, s>>>(
        params.size, static_cast<const T*>(x), static_cast<T*>(y));
    return cuda::LaunchStatus("Swish");
  });
}

Status SwishBackwardGpu(DType dtype, const SwishParams& params, const void* g, const void* x,
                        void* dx, void* stream) {
  if (params.size == 0) return Status::Ok();
  auto s = static_cast<cudaStream_t>(stream);
  return cuda::DispatchDType<false>(dtype, "SwishGrad", [&](auto tag) {
    using T = typename decltype(tag)::type;
    SwishBackwardKernel<T><<<cuda::Blocks(params.size), cuda::kThreads, 0, s>>>(
        params.size, static_cast<const T*>(g), static_cast<const T*>(x), static_cast<T*>(dx));
    return cuda::LaunchStatus("SwishGrad");
  });
}

}  // namespace opforge

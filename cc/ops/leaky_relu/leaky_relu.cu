// CUDA kernels of LeakyReLU: grid-stride element-wise loops over the CPU kernel's element
// formulas (leaky_relu_element.h: alpha rounded to the element type, one rounding per product).
#include "common/cuda_util.cuh"
#include "ops/leaky_relu/leaky_relu.h"
#include "ops/leaky_relu/leaky_relu_element.h"

namespace opforge {
namespace {

template <typename T>
__global__ void LeakyReluForwardKernel(int64_t n, float alpha_f, const T* x, T* y, T* mask) {
  using N = cuda::Num<T>;
  using C = typename N::C;
  const C alpha = LeakyReluSlope<N>(alpha_f);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const C c = N::To(x[i]);
    y[i] = N::From(LeakyReluValue(c, alpha));
    if (mask != nullptr) mask[i] = N::From(LeakyReluMask(c, alpha));
  }
}

template <typename T>
__global__ void LeakyReluBackwardKernel(int64_t n, float alpha_f, const T* g, const T* x, T* dx) {
  using N = cuda::Num<T>;
  using C = typename N::C;
  const C alpha = LeakyReluSlope<N>(alpha_f);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dx[i] = N::From(LeakyReluBackprop(N::To(g[i]), N::To(x[i]), alpha));
  }
}

template <typename T>
Status Forward(const LeakyReluParams& p, const void* x, void* y, void* mask, cudaStream_t s) {
  LeakyReluForwardKernel<T><<<cuda::Blocks(p.size), cuda::kThreads, 0, s>>>(
      p.size, p.alpha, static_cast<const T*>(x), static_cast<T*>(y), static_cast<T*>(mask));
  return cuda::LaunchStatus("LeakyRelu");
}

template <typename T>
Status Backward(const LeakyReluParams& p, const void* g, const void* x, void* dx, cudaStream_t s) {
  LeakyReluBackwardKernel<T><<<cuda::Blocks(p.size), cuda::kThreads, 0, s>>>(
      p.size, p.alpha, static_cast<const T*>(g), static_cast<const T*>(x), static_cast<T*>(dx));
  return cuda::LaunchStatus("LeakyReluGrad");
}

}  // namespace

Status LeakyReluForwardGpu(DType dtype, const LeakyReluParams& params, const void* x, void* y,
                           void* mask, void* stream) {
  if (params.size == 0) return Status::Ok();
  auto s = static_cast<cudaStream_t>(stream);
  return cuda::DispatchDType<false>(dtype, "LeakyRelu", [&](auto tag) {
    return Forward<typename decltype(tag)::type>(params, x, y, mask, s);
  });
}

Status LeakyReluBackwardGpu(DType dtype, const LeakyReluParams& params, const void* g,
                            const void* x, void* dx, void* stream) {
  if (params.size == 0) return Status::Ok();
  auto s = static_cast<cudaStream_t>(stream);
  return cuda::DispatchDType<false>(dtype, "LeakyReluGrad", [&](auto tag) {
    return Backward<typename decltype(tag)::type>(params, g, x, dx, s);
  });
}

}  // namespace opforge

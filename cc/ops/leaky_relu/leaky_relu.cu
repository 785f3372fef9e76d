// CUDA kernels of LeakyReLU: grid-stride element-wise loops with the CPU kernel's exact
// arithmetic (alpha rounded to the element type, one rounding per product).
#include "common/cuda_util.cuh"
#include "ops/leaky_relu/leaky_relu.h"

namespace opforge {
namespace {

template <typename T>
__global__ void LeakyReluForwardKernel(int64_t n, float alpha_f, const T* x, T* y, T* mask) {
  using N = cuda::Num<T>;
  using C = typename N::C;
  const C alpha = N::To(N::From(static_cast<C>(alpha_f)));
  const C one = static_cast<C>(1);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const T v = x[i];
    const C c = N::To(v);
    const bool positive = c > static_cast<C>(0);
    y[i] = positive ? v : N::From(c * alpha);
    if (mask != nullptr) mask[i] = N::From(positive ? one : alpha);
  }
}

template <typename T>
__global__ void LeakyReluBackwardKernel(int64_t n, float alpha_f, const T* g, const T* x, T* dx) {
  using N = cuda::Num<T>;
  using C = typename N::C;
  const C alpha = N::To(N::From(static_cast<C>(alpha_f)));
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const T gv = g[i];
    dx[i] = N::To(x[i]) > static_cast<C>(0) ? gv : N::From(N::To(gv) * alpha);
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

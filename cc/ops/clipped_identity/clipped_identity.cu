// CUDA kernels of ClippedIdentity: grid-stride element-wise loops over the CPU kernels' element
// formulas (clipped_identity_element.h: attrs rounded to the element type, one rounding per
// product), so the results are the CPU kernels' bits.
#include "common/cuda_util.cuh"
#include "ops/clipped_identity/clipped_identity.h"
#include "ops/clipped_identity/clipped_identity_element.h"

namespace opforge {
namespace {

template <typename T>
__global__ void ClippedIdentityForwardKernel(int64_t n, float lo_f, float hi_f, const T* x, T* y) {
  using N = cuda::Num<T>;
  using C = typename N::C;
  const C lo = ClippedIdentityAttr<N>(lo_f);
  const C hi = ClippedIdentityAttr<N>(hi_f);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] = N::From(ClippedIdentityValue(N::To(x[i]), lo, hi));
  }
}

template <typename T>
__global__ void ClippedIdentityBackwardKernel(int64_t n, float lo_f, float hi_f, float leak_f,
                                              const T* g, const T* x, T* dx) {
  using N = cuda::Num<T>;
  using C = typename N::C;
  const C lo = ClippedIdentityAttr<N>(lo_f);
  const C hi = ClippedIdentityAttr<N>(hi_f);
  const C leak = ClippedIdentityAttr<N>(leak_f);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dx[i] = N::From(ClippedIdentityBackprop(N::To(g[i]), N::To(x[i]), lo, hi, leak));
  }
}

}  // namespace

Status ClippedIdentityForwardGpu(DType dtype, const ClippedIdentityParams& params, const void* x,
                                 void* y, void* stream) {
  if (params.size == 0) return Status::Ok();
  auto s = static_cast<cudaStream_t>(stream);
  return cuda::DispatchDType<false>(dtype, "ClippedIdentity", [&](auto tag) {
    using T = typename decltype(tag)::type;
    ClippedIdentityForwardKernel<T><<<cuda::Blocks(params.size), cuda::kThreads, 0, s>>>(
        params.size, params.clip_min, params.clip_max, static_cast<const T*>(x),
        static_cast<T*>(y));
    return cuda::LaunchStatus("ClippedIdentity");
  });
}

Status ClippedIdentityBackwardGpu(DType dtype, const ClippedIdentityParams& params, const void* g,
                                  const void* x, void* dx, void* stream) {
  if (params.size == 0) return Status::Ok();
  auto s = static_cast<cudaStream_t>(stream);
  return cuda::DispatchDType<false>(dtype, "ClippedIdentityGrad", [&](auto tag) {
    using T = typename decltype(tag)::type;
    ClippedIdentityBackwardKernel<T><<<cuda::Blocks(params.size), cuda::kThreads, 0, s>>>(
        params.size, params.clip_min, params.clip_max, params.leak, static_cast<const T*>(g),
        static_cast<const T*>(x), static_cast<T*>(dx));
    return cuda::LaunchStatus("ClippedIdentityGrad");
  });
}

}  // namespace opforge

// CUDA kernels of ClippedIdentity: element-wise grid-stride loops (cuda::LaunchMap: 16-byte
// vector loads and stores where the buffers are aligned, 32-bit index math below 2^31 elements)
// over the CPU kernels' element formulas (clipped_identity_element.h: attrs rounded to the
// element type, here once on the host, one rounding per product), so the results are the CPU
// kernels' bits.
#include "common/cuda_util.cuh"
#include "ops/clipped_identity/clipped_identity.h"
#include "ops/clipped_identity/clipped_identity_element.h"

namespace opforge {
namespace {

template <typename T>
struct ForwardFn {
  using N = cuda::Num<T>;
  typename N::C lo, hi;
  __device__ T operator()(T x) const { return N::From(ClippedIdentityValue(N::To(x), lo, hi)); }
};

template <typename T>
struct BackwardFn {
  using N = cuda::Num<T>;
  typename N::C lo, hi, leak;
  __device__ T operator()(T g, T x) const {
    return N::From(ClippedIdentityBackprop(N::To(g), N::To(x), lo, hi, leak));
  }
};

}  // namespace

Status ClippedIdentityForwardGpu(DType dtype, const ClippedIdentityParams& params, const void* x,
                                 void* y, void* stream) {
  if (params.size == 0) return Status::Ok();
  return cuda::DispatchDType<false>(dtype, "ClippedIdentity", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using N = cuda::Num<T>;
    const ForwardFn<T> f{ClippedIdentityAttr<N>(params.clip_min),
                         ClippedIdentityAttr<N>(params.clip_max)};
    const T* in[1] = {static_cast<const T*>(x)};
    const bool scalar[1] = {false};
    return cuda::LaunchMap("ClippedIdentity", params.size, f, static_cast<T*>(y), in, scalar,
                           static_cast<cudaStream_t>(stream));
  });
}

Status ClippedIdentityBackwardGpu(DType dtype, const ClippedIdentityParams& params, const void* g,
                                  const void* x, void* dx, void* stream) {
  if (params.size == 0) return Status::Ok();
  return cuda::DispatchDType<false>(dtype, "ClippedIdentityGrad", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using N = cuda::Num<T>;
    const BackwardFn<T> f{ClippedIdentityAttr<N>(params.clip_min),
                          ClippedIdentityAttr<N>(params.clip_max),
                          ClippedIdentityAttr<N>(params.leak)};
    const T* in[2] = {static_cast<const T*>(g), static_cast<const T*>(x)};
    const bool scalar[2] = {false, false};
    return cuda::LaunchMap("ClippedIdentityGrad", params.size, f, static_cast<T*>(dx), in, scalar,
                           static_cast<cudaStream_t>(stream));
  });
}

}  // namespace opforge

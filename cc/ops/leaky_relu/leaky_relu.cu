// CUDA kernels of LeakyReLU: element-wise grid-stride loops (cuda::LaunchElementwise: 16-byte
// vector loads and stores where the buffers are aligned, 32-bit index math below 2^31 elements)
// over the CPU kernel's element formulas (leaky_relu_element.h: alpha rounded to the element
// type, here once on the host, one rounding per product): the CPU's bits.
#include "common/cuda_util.cuh"
#include "ops/leaky_relu/leaky_relu.h"
#include "ops/leaky_relu/leaky_relu_element.h"

namespace opforge {
namespace {

// y = leaky_relu(x) and, where mask is not null, mask = x > 0 ? 1 : alpha. y may alias x.
template <typename T>
struct ForwardBody {
  using N = cuda::Num<T>;
  using C = typename N::C;
  const T* x;
  T* y;
  T* mask;
  C alpha;

  template <typename Index>
  __device__ void Scalar(Index i) const {
    const C c = N::To(x[i]);
    if (mask != nullptr) mask[i] = N::From(LeakyReluMask(c, alpha));
    y[i] = N::From(LeakyReluValue(c, alpha));
  }
  template <typename Index>
  __device__ void Vector(Index i) const {
    constexpr int kN = cuda::VecWidth<T>();
    const cuda::Vec<T, kN> xv = cuda::LoadVec<kN>(x + i);
    cuda::Vec<T, kN> yv, mv;
#pragma unroll
    for (int k = 0; k < kN; ++k) {
      const C c = N::To(xv.v[k]);
      yv.v[k] = N::From(LeakyReluValue(c, alpha));
      mv.v[k] = N::From(LeakyReluMask(c, alpha));
    }
    if (mask != nullptr) cuda::StoreVec(mask + i, mv);
    cuda::StoreVec(y + i, yv);
  }
};

template <typename T>
struct BackwardFn {
  using N = cuda::Num<T>;
  typename N::C alpha;
  __device__ T operator()(T g, T x) const {
    return N::From(LeakyReluBackprop(N::To(g), N::To(x), alpha));
  }
};

}  // namespace

Status LeakyReluForwardGpu(DType dtype, const LeakyReluParams& params, const void* x, void* y,
                           void* mask, void* stream) {
  if (params.size == 0) return Status::Ok();
  return cuda::DispatchDType<false>(dtype, "LeakyRelu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const ForwardBody<T> body{static_cast<const T*>(x), static_cast<T*>(y), static_cast<T*>(mask),
                              LeakyReluSlope<cuda::Num<T>>(params.alpha)};
    return cuda::LaunchElementwise<T>("LeakyRelu", params.size, body, {x, y, mask},
                                      static_cast<cudaStream_t>(stream));
  });
}

Status LeakyReluBackwardGpu(DType dtype, const LeakyReluParams& params, const void* g,
                            const void* x, void* dx, void* stream) {
  if (params.size == 0) return Status::Ok();
  return cuda::DispatchDType<false>(dtype, "LeakyReluGrad", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in[2] = {static_cast<const T*>(g), static_cast<const T*>(x)};
    const bool scalar[2] = {false, false};
    return cuda::LaunchMap("LeakyReluGrad", params.size,
                           BackwardFn<T>{LeakyReluSlope<cuda::Num<T>>(params.alpha)},
                           static_cast<T*>(dx), in, scalar, static_cast<cudaStream_t>(stream));
  });
}

}  // namespace opforge

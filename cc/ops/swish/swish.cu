// CUDA kernels of Swish: element-wise grid-stride loops (cuda::LaunchMap: 16-byte vector loads
// and stores where the buffers are aligned, 32-bit index math below 2^31 elements). The sigmoid
// is e / (1 + e) with e = exp(x) (CUDA's expf for half, bfloat16 and float, exp for double), and
// exactly 1 above where it is 1 (as Eigen's functor clamps); the formulas around it are the
// CPU kernels' (swish_element.h), computed in float for half and bfloat16 and rounded once.
#include "common/cuda_util.cuh"
#include "ops/swish/swish.h"
#include "ops/swish/swish_element.h"

namespace opforge {
namespace {

__device__ inline float Sigmoid(float x) {
  // From ln(2^24) up the sigmoid is 1 in float (Eigen's clamp): returned as such, not as
  // e / (1 + e) at the clamp, which is 1 only where expf rounds to 2^24 or above. CUDA's expf
  // (2 ulp) does not there, and s = 1 - 2^-24 made the gradient's x * (1 - s) overflow: inf at
  // x = inf where TensorFlow gives NaN, and inf for finite x past ~1e31 (found on an H200).
  if (x >= 16.6355324f) return 1.0f;  // NaN goes on to expf, and stays NaN
  const float e = expf(x);
  return e / (1.0f + e);
}

__device__ inline double Sigmoid(double x) {
  // exp overflows past 709.78; the sigmoid is 1 (in double) long before.
  const double e = exp(x > 40.0 ? 40.0 : x);
  return e / (1.0 + e);
}

template <typename T>
struct ForwardFn {
  __device__ T operator()(T x) const {
    using N = cuda::Num<T>;
    const typename N::C c = N::To(x);
    return N::From(SwishValue(c, Sigmoid(c)));
  }
};

template <typename T>
struct BackwardFn {
  __device__ T operator()(T g, T x) const {
    using N = cuda::Num<T>;
    const typename N::C c = N::To(x);
    return N::From(SwishBackprop(N::To(g), c, Sigmoid(c)));
  }
};

}  // namespace

Status SwishForwardGpu(DType dtype, const SwishParams& params, const void* x, void* y,
                       void* stream) {
  if (params.size == 0) return Status::Ok();
  return cuda::DispatchDType<false>(dtype, "Swish", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in[1] = {static_cast<const T*>(x)};
    const bool scalar[1] = {false};
    return cuda::LaunchMap("Swish", params.size, ForwardFn<T>{}, static_cast<T*>(y), in, scalar,
                           static_cast<cudaStream_t>(stream));
  });
}

Status SwishBackwardGpu(DType dtype, const SwishParams& params, const void* g, const void* x,
                        void* dx, void* stream) {
  if (params.size == 0) return Status::Ok();
  return cuda::DispatchDType<false>(dtype, "SwishGrad", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in[2] = {static_cast<const T*>(g), static_cast<const T*>(x)};
    const bool scalar[2] = {false, false};
    return cuda::LaunchMap("SwishGrad", params.size, BackwardFn<T>{}, static_cast<T*>(dx), in,
                           scalar, static_cast<cudaStream_t>(stream));
  });
}

}  // namespace opforge

// CUDA version of BiasLeakyRelu: one thread per element, the CPU's arithmetic (add, compare,
// multiply, in float for half and bfloat16) with round-to-nearest intrinsics so that nvcc
// contracts nothing: the same bits.
#include <cstdint>

#include "common/cuda_util.cuh"
#include "ops/bias_leaky_relu/bias_leaky_relu.h"

namespace opforge {
namespace {

__device__ inline float Add(float a, float b) { return __fadd_rn(a, b); }
__device__ inline float Mul(float a, float b) { return __fmul_rn(a, b); }
__device__ inline double Add(double a, double b) { return __dadd_rn(a, b); }
__device__ inline double Mul(double a, double b) { return __dmul_rn(a, b); }

template <typename T>
__global__ void Kernel(int64_t n, int64_t ch, const T* x, const T* bias, float alpha, T* y) {
  using N = cuda::Num<T>;
  using C = typename N::C;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const C z = Add(N::To(x[i]), N::To(bias[i % ch]));
    y[i] = N::From(z > C(0) ? z : Mul(z, static_cast<C>(alpha)));
  }
}

}  // namespace

Status BiasLeakyReluGpu(DType dtype, const BiasLeakyReluParams& p, const void* features,
                        const void* bias, void* output, void* stream) {
  return cuda::DispatchDType<false>(dtype, "BiasLeakyRelu", [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    const int64_t n = p.rows * p.channels;
    if (n == 0) return Status::Ok();
    Kernel<T><<<cuda::Blocks(n), cuda::kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        n, p.channels, static_cast<const T*>(features), static_cast<const T*>(bias), p.alpha,
        static_cast<T*>(output));
    return cuda::LaunchStatus("BiasLeakyRelu");
  });
}

}  // namespace opforge

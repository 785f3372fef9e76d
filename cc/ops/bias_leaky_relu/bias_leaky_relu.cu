// CUDA version of BiasLeakyRelu: a grid-stride loop over the elements, 16-byte vector loads and
// stores of the features and output where they are aligned, 32-bit index math below 2^31
// elements, and the CPU's arithmetic (add, compare, multiply, in float for half and bfloat16)
// with round-to-nearest intrinsics so that nvcc contracts nothing: the same bits.
//
// The channel of an element is tracked, not divided for: each thread computes it once, then
// advances it by the grid's stride modulo the channel count at every step (and by one per
// element within a vector, wrapping), so the loop has no division at all.
#include <cstdint>

#include "common/cuda_util.cuh"
#include "ops/bias_leaky_relu/bias_leaky_relu.h"

namespace opforge {
namespace {

__device__ inline float Add(float a, float b) { return __fadd_rn(a, b); }
__device__ inline float Mul(float a, float b) { return __fmul_rn(a, b); }
__device__ inline double Add(double a, double b) { return __dadd_rn(a, b); }
__device__ inline double Mul(double a, double b) { return __dmul_rn(a, b); }

// (c + d) mod ch for c, d in [0, ch), without forming c + d (which may pass INT32_MAX).
template <typename Index>
__device__ inline Index AddMod(Index c, Index d, Index ch) {
  return c >= ch - d ? c - (ch - d) : c + d;
}

template <typename T>
__device__ inline T Value(T x, T bias, typename cuda::Num<T>::C alpha) {
  using N = cuda::Num<T>;
  using C = typename N::C;
  const C z = Add(N::To(x), N::To(bias));
  return N::From(z > C(0) ? z : Mul(z, alpha));
}

template <typename T, typename Index>
__global__ void Kernel(Index n, Index ch, bool vectorized, const T* x, const T* bias,
                       typename cuda::Num<T>::C alpha, T* y) {
  constexpr int kN = cuda::VecWidth<T>();
  const Index start = cuda::GridStart<Index>(), step = cuda::GridStep<Index>();
  if (vectorized) {
    const Index vectors = n / kN;
    // c: the channel of element v * kN. step * kN <= 2^24 * 8 fits in int32_t.
    Index c = start < vectors ? (start * kN) % ch : 0;
    const Index dc = (step * kN) % ch;
    for (Index v = start; v < vectors; v = cuda::GridNext(v, step, vectors)) {
      const cuda::Vec<T, kN> xv = cuda::LoadVec<kN>(x + v * kN);
      cuda::Vec<T, kN> yv;
      Index cc = c;
#pragma unroll
      for (int k = 0; k < kN; ++k) {
        yv.v[k] = Value(xv.v[k], bias[cc], alpha);
        cc = cc == ch - 1 ? 0 : cc + 1;
      }
      cuda::StoreVec(y + v * kN, yv);
      c = AddMod(c, dc, ch);
    }
    // The n % kN elements after the last whole vector (compared as a count: the sum may pass
    // INT32_MAX).
    if (start < n - vectors * kN) {
      const Index i = vectors * kN + start;
      y[i] = Value(x[i], bias[i % ch], alpha);
    }
  } else {
    Index c = start < n ? start % ch : 0;
    const Index dc = step % ch;
    for (Index i = start; i < n; i = cuda::GridNext(i, step, n)) {
      y[i] = Value(x[i], bias[c], alpha);
      c = AddMod(c, dc, ch);
    }
  }
}

}  // namespace

Status BiasLeakyReluGpu(DType dtype, const BiasLeakyReluParams& p, const void* features,
                        const void* bias, void* output, void* stream) {
  return cuda::DispatchDType<false>(dtype, "BiasLeakyRelu", [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    using C = typename cuda::Num<T>::C;
    const int64_t n = p.rows * p.channels;
    if (n == 0) return Status::Ok();
    constexpr int kN = cuda::VecWidth<T>();
    const bool vectorized =
        cuda::IsAligned(features, sizeof(T) * kN) && cuda::IsAligned(output, sizeof(T) * kN);
    const int64_t units = vectorized ? n / kN : n;
    auto s = static_cast<cudaStream_t>(stream);
    cuda::DispatchIndex(n, [&](auto index_tag) {
      using Index = typename decltype(index_tag)::type;
      OPFORGE_LAUNCH(cuda::Blocks(units), cuda::kThreads, 0, s, Kernel<T, Index>)
      (static_cast<Index>(n), static_cast<Index>(p.channels), vectorized,
       static_cast<const T*>(features), static_cast<const T*>(bias), static_cast<C>(p.alpha),
       static_cast<T*>(output));
      return 0;
    });
    return cuda::LaunchStatus("BiasLeakyRelu");
  });
}

}  // namespace opforge

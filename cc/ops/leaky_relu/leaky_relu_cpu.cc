#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "common/arith.h"
#include "common/bf16_bits.h"
#include "common/cpu_features.h"
#include "ops/leaky_relu/leaky_relu.h"
#include "ops/leaky_relu/leaky_relu_element.h"

namespace opforge {

Status ValidateLeakyRelu(const LeakyReluParams& params) {
  if (!std::isfinite(params.alpha)) {
    return InvalidArgument("LeakyRelu", "alpha", "a finite number", params.alpha);
  }
  if (params.size < 0) {
    return InvalidArgument("LeakyRelu", "features", "a tensor with a non-negative size",
                           params.size);
  }
  return Status::Ok();
}

Status ValidateLeakyReluGrad(const LeakyReluParams& params, const std::vector<int64_t>& gradients,
                             const std::vector<int64_t>& features) {
  OPFORGE_RETURN_IF_ERROR(ValidateLeakyRelu(params));
  if (gradients != features) {
    return InvalidArgument("LeakyReluGrad", "gradients",
                           "the shape of features " + ShapeString(features),
                           ShapeString(gradients));
  }
  return Status::Ok();
}

// The loops apply the element formulas of leaky_relu_element.h (shared with the CUDA kernels):
// branch-free selects of values (common/scalar.h's by-value Select) over contiguous memory,
// which GCC and Clang vectorise for float and double. They live in functions that take everything
// by value: inside the parallel-for lambda, the captured constants sit in the closure, which the
// compiler must assume a store to y may overwrite, and that alone keeps the loop scalar. The
// product is computed for every element because a conditional floating-point multiply may trap,
// which also blocks the vector select; the results are the same bits.
template <typename T>
void ForwardRange(const T* x, T* y, int64_t n, T alpha) {
  OPFORGE_IVDEP
  for (int64_t i = 0; i < n; ++i) y[i] = LeakyReluValue(x[i], alpha);
}

template <typename T>
void MaskRange(const T* x, T* mask, int64_t n, T alpha) {
  for (int64_t i = 0; i < n; ++i) mask[i] = LeakyReluMask(x[i], alpha);
}

template <typename T>
void BackwardRange(const T* g, const T* x, T* dx, int64_t n, T alpha) {
  OPFORGE_IVDEP
  for (int64_t i = 0; i < n; ++i) dx[i] = LeakyReluBackprop(g[i], x[i], alpha);
}

// bfloat16: the same formulas in float on 16-bit patterns (common/bf16_bits.h), the same bits
// as Eigen::bfloat16's arithmetic, in loops the compiler vectorises (Eigen::bfloat16 converts
// and rounds element by element); `opforge bench leaky_relu --dtype bfloat16` times them against
// TensorFlow's kernel, which computes in Eigen::bfloat16.
// The loops, once as the core is compiled (AVX) and once for AVX2 (256-bit integer operations
// for the conversions), chosen at run time as the *_fma_cpu.cc builds are.
#define OPFORGE_BF16_LEAKY_LOOPS(SUFFIX, ATTR)                                                    \
  ATTR void Bf16Forward##SUFFIX(const uint16_t* xs, uint16_t* ys, int64_t n, float a) {           \
    OPFORGE_IVDEP                                                                                 \
    for (int64_t i = 0; i < n; ++i) {                                                             \
      const float v = Bf16BitsToFloat(xs[i]);                                                     \
      const uint16_t scaled = FloatToBf16Bits(v * a);                                             \
      ys[i] = v > 0.0f ? xs[i] : scaled;                                                          \
    }                                                                                             \
  }                                                                                               \
  ATTR void Bf16Backward##SUFFIX(const uint16_t* gs, const uint16_t* xs, uint16_t* ds, int64_t n, \
                                 float a) {                                                       \
    OPFORGE_IVDEP                                                                                 \
    for (int64_t i = 0; i < n; ++i) {                                                             \
      const uint16_t scaled = FloatToBf16Bits(Bf16BitsToFloat(gs[i]) * a);                        \
      ds[i] = Bf16BitsToFloat(xs[i]) > 0.0f ? gs[i] : scaled;                                     \
    }                                                                                             \
  }
OPFORGE_BF16_LEAKY_LOOPS(Default, )
#if defined(__x86_64__)
OPFORGE_BF16_LEAKY_LOOPS(Avx2, __attribute__((target("avx2"))))
#endif
#undef OPFORGE_BF16_LEAKY_LOOPS

template <>
void ForwardRange<Eigen::bfloat16>(const Eigen::bfloat16* x, Eigen::bfloat16* y, int64_t n,
                                   Eigen::bfloat16 alpha) {
  const auto* xs = reinterpret_cast<const uint16_t*>(x);
  auto* ys = reinterpret_cast<uint16_t*>(y);
#if defined(__x86_64__)
  if (CpuHasAvx2Fma()) return Bf16ForwardAvx2(xs, ys, n, static_cast<float>(alpha));
#endif
  Bf16ForwardDefault(xs, ys, n, static_cast<float>(alpha));
}

template <>
void BackwardRange<Eigen::bfloat16>(const Eigen::bfloat16* g, const Eigen::bfloat16* x,
                                    Eigen::bfloat16* dx, int64_t n, Eigen::bfloat16 alpha) {
  const auto* gs = reinterpret_cast<const uint16_t*>(g);
  const auto* xs = reinterpret_cast<const uint16_t*>(x);
  auto* ds = reinterpret_cast<uint16_t*>(dx);
#if defined(__x86_64__)
  if (CpuHasAvx2Fma()) return Bf16BackwardAvx2(gs, xs, ds, n, static_cast<float>(alpha));
#endif
  Bf16BackwardDefault(gs, xs, ds, n, static_cast<float>(alpha));
}

template <typename T>
void LeakyReluForward(const LeakyReluParams& params, const T* x, T* y, T* mask,
                      const Parallel& parallel) {
  const T alpha = LeakyReluSlope<InElementType<T>>(params.alpha);
  parallel.For(params.size, kCostElementwise, [=](int64_t begin, int64_t end) {
    if (mask == nullptr) {
      ForwardRange(x + begin, y + begin, end - begin, alpha);
      return;
    }
    // Each block is swept twice while it sits in L1: the mask first (y may alias x), then y.
    // (Two stores in one loop defeat GCC's if-conversion.)
    constexpr int64_t kBlock = 2048;
    for (int64_t b = begin; b < end; b += kBlock) {
      const int64_t n = std::min(end - b, kBlock);
      MaskRange(x + b, mask + b, n, alpha);
      ForwardRange(x + b, y + b, n, alpha);
    }
  });
}

template <typename T>
void LeakyReluBackward(const LeakyReluParams& params, const T* g, const T* x, T* dx,
                       const Parallel& parallel) {
  const T alpha = LeakyReluSlope<InElementType<T>>(params.alpha);
  parallel.For(params.size, kCostElementwise, [=](int64_t begin, int64_t end) {
    BackwardRange(g + begin, x + begin, dx + begin, end - begin, alpha);
  });
}

#define OPFORGE_INSTANTIATE(T, ...)                                                             \
  template void LeakyReluForward<T>(const LeakyReluParams&, const T*, T*, T*, const Parallel&); \
  template void LeakyReluBackward<T>(const LeakyReluParams&, const T*, const T*, T*,            \
                                     const Parallel&);
OPFORGE_FLOAT_TYPES(OPFORGE_INSTANTIATE)
#undef OPFORGE_INSTANTIATE

}  // namespace opforge

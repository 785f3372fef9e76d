// BiasLeakyRelu on the CPU: one pass, parallel over rows.
#include <Eigen/Core>
#include <cmath>
#include <string>
#include <type_traits>

#include "ops/bias_leaky_relu/bias_leaky_relu.h"

namespace opforge {

namespace {

constexpr char kOp[] = "BiasLeakyRelu";

template <typename T>
using Compute = std::conditional_t<std::is_same_v<T, double>, double, float>;

// One row; the bias (a copy in the compute type) cannot alias the row.
template <typename T, typename C>
void Row(const T* in, T* out, const C* __restrict bias, C alpha, int64_t ch) {
  for (int64_t c = 0; c < ch; ++c) {
    const C z = static_cast<C>(in[c]) + bias[c];
    out[c] = static_cast<T>(z > C(0) ? z : z * alpha);
  }
}

}  // namespace

Status ValidateBiasLeakyRelu(const std::vector<int64_t>& features, const std::vector<int64_t>& bias,
                             BiasLeakyReluParams* params) {
  BiasLeakyReluParams& p = *params;
  if (!std::isfinite(p.alpha) || p.alpha < 0.0f) {
    return InvalidArgument(kOp, "alpha", "finite and >= 0", p.alpha);
  }
  if (features.empty()) {
    return InvalidArgument(kOp, "features", "at least 1-D [..., channels]", ShapeString(features));
  }
  const int64_t c = features.back();
  if (bias != std::vector<int64_t>{c}) {
    return InvalidArgument(kOp, "bias",
                           "[" + std::to_string(c) + "] (the last dimension of features)",
                           ShapeString(bias));
  }
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < features.size(); ++i) rows *= features[i];
  p.rows = rows;
  p.channels = c;
  return Status::Ok();
}

template <typename T>
void BiasLeakyRelu(const BiasLeakyReluParams& p, const T* features, const T* bias, T* output,
                   const Parallel& parallel) {
  using C = Compute<T>;
  const int64_t ch = p.channels;
  if (p.rows == 0 || ch == 0) return;
  std::vector<C> b(static_cast<size_t>(ch));
  for (int64_t c = 0; c < ch; ++c) b[static_cast<size_t>(c)] = static_cast<C>(bias[c]);
  const C alpha = static_cast<C>(p.alpha);
  parallel.For(p.rows, static_cast<double>(ch) * 2, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      Row<T, C>(features + r * ch, output + r * ch, b.data(), alpha, ch);
    }
  });
}

#define OPFORGE_INSTANTIATE_BIAS_LEAKY_(T, ...)                                      \
  template void BiasLeakyRelu<T>(const BiasLeakyReluParams&, const T*, const T*, T*, \
                                 const Parallel&);
OPFORGE_FLOAT_TYPES(OPFORGE_INSTANTIATE_BIAS_LEAKY_)
#undef OPFORGE_INSTANTIATE_BIAS_LEAKY_

}  // namespace opforge

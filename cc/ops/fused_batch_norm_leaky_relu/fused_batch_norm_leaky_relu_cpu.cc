// FusedBatchNormLeakyRelu and its gradient on the CPU: per-channel sums over fixed chunks of rows
// in double (the chunks' partial sums are added in chunk order, so any thread count gives the
// same bits), then one element-wise pass.
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

#include "ops/fused_batch_norm_leaky_relu/fused_batch_norm_leaky_relu.h"

namespace opforge {

namespace {

constexpr char kOp[] = "FusedBatchNormLeakyRelu";
constexpr char kGradOp[] = "FusedBatchNormLeakyReluGrad";
// Rows per chunk of the per-channel sums.
constexpr int64_t kChunkRows = 256;

// The compute type: float for half, bfloat16 and float; double for double.
template <typename T>
using Compute = BnParamType<T>;

template <typename T>
inline Compute<T> Load(T v) {
  return static_cast<Compute<T>>(v);
}

// Per channel: scale = rsqrt(variance + epsilon) * gamma and shift = beta - mean * scale, in the
// compute type, as tf.nn.batch_normalization computes them.
template <typename C>
void ScaleShift(const BatchNormLeakyParams& p, const C* gamma, const C* beta, const C* mean,
                const C* variance, std::vector<C>* scale, std::vector<C>* shift,
                std::vector<C>* inv) {
  const int64_t ch = p.channels;
  scale->resize(static_cast<size_t>(ch));
  shift->resize(static_cast<size_t>(ch));
  inv->resize(static_cast<size_t>(ch));
  for (int64_t c = 0; c < ch; ++c) {
    const C r = C(1) / std::sqrt(variance[c] + static_cast<C>(p.epsilon));
    (*inv)[static_cast<size_t>(c)] = r;
    const C s = r * gamma[c];
    (*scale)[static_cast<size_t>(c)] = s;
    (*shift)[static_cast<size_t>(c)] = beta[c] - mean[c] * s;
  }
}

// Adds chunk partial sums [chunks, width] into out[width] in chunk order.
void ReduceChunks(const std::vector<double>& partial, int64_t chunks, int64_t width, double* out) {
  std::fill(out, out + width, 0.0);
  for (int64_t k = 0; k < chunks; ++k) {
    const double* src = partial.data() + k * width;
    for (int64_t c = 0; c < width; ++c) out[c] += src[c];
  }
}

// The inner loops, over the channels of one row, with restrict pointers so that the compiler
// vectorises them (the per-channel arrays would otherwise possibly alias the data).
template <typename T>
void AccumulateRow(const T* __restrict row, const double* __restrict pivot, double* __restrict s,
                   double* __restrict q, int64_t ch) {
  for (int64_t c = 0; c < ch; ++c) {
    const double d = static_cast<double>(Load(row[c])) - pivot[c];
    s[c] += d;
    q[c] += d * d;
  }
}

// The per-channel values of the pre-activation z = xhat * gamma + beta, xhat = (x - mean) * inv.
// Folded (the fast path), z = x * scale + shift with scale = inv * gamma, shift = beta - mean *
// scale: one multiply-add, equal to the unfolded form up to rounding while both are finite. A
// channel with a non-finite scale or shift (gamma = inf, say) folds inf - inf into NaN where z
// is +-inf, so a call holding one takes the unfolded form for every element.
template <typename C>
struct Affine {
  const C* __restrict scale;
  const C* __restrict shift;
  const C* __restrict mean;
  const C* __restrict inv;
  const C* __restrict gamma;
  const C* __restrict beta;
  bool folded;
};

template <bool kFolded, typename C>
inline C PreActivation(C x, const Affine<C>& a, int64_t c) {
  if (kFolded) return x * a.scale[c] + a.shift[c];
  return (x - a.mean[c]) * a.inv[c] * a.gamma[c] + a.beta[c];
}

template <typename C>
bool FoldsExactly(const std::vector<C>& scale, const std::vector<C>& shift) {
  for (size_t c = 0; c < scale.size(); ++c) {
    if (!std::isfinite(scale[c]) || !std::isfinite(shift[c])) return false;
  }
  return true;
}

template <bool kFolded, typename T, typename C>
void NormalizeRowT(const T* __restrict in, T* __restrict out, const Affine<C>& a, C alpha,
                   int64_t ch) {
  for (int64_t c = 0; c < ch; ++c) {
    const C z = PreActivation<kFolded>(Load(in[c]), a, c);
    out[c] = static_cast<T>(z > C(0) ? z : z * alpha);
  }
}

template <typename T, typename C>
void NormalizeRow(const T* in, T* out, const Affine<C>& a, C alpha, int64_t ch) {
  if (a.folded) {
    NormalizeRowT<true>(in, out, a, alpha, ch);
  } else {
    NormalizeRowT<false>(in, out, a, alpha, ch);
  }
}

template <bool kFolded, typename T, typename C>
void GradSumsRowT(const T* __restrict xr, const T* __restrict gr, const Affine<C>& a, C alpha,
                  double* __restrict s, double* __restrict q, int64_t ch) {
  for (int64_t c = 0; c < ch; ++c) {
    const C xv = Load(xr[c]);
    const C z = PreActivation<kFolded>(xv, a, c);
    const C gv = Load(gr[c]);
    const C g = z > C(0) ? gv : gv * alpha;
    const C xhat = (xv - a.mean[c]) * a.inv[c];
    s[c] += static_cast<double>(g);
    q[c] += static_cast<double>(g) * static_cast<double>(xhat);
  }
}

template <typename T, typename C>
void GradSumsRow(const T* xr, const T* gr, const Affine<C>& a, C alpha, double* s, double* q,
                 int64_t ch) {
  if (a.folded) {
    GradSumsRowT<true>(xr, gr, a, alpha, s, q, ch);
  } else {
    GradSumsRowT<false>(xr, gr, a, alpha, s, q, ch);
  }
}

template <bool kFolded, typename T, typename C>
void GradRowT(const T* __restrict xr, const T* __restrict gr, T* __restrict out, const Affine<C>& a,
              const C* __restrict k, const C* __restrict mg, const C* __restrict mgx, C alpha,
              int64_t ch) {
  for (int64_t c = 0; c < ch; ++c) {
    const C xv = Load(xr[c]);
    const C z = PreActivation<kFolded>(xv, a, c);
    const C gv = Load(gr[c]);
    const C g = z > C(0) ? gv : gv * alpha;
    const C xhat = (xv - a.mean[c]) * a.inv[c];
    out[c] = static_cast<T>(k[c] * (g - mg[c] - xhat * mgx[c]));
  }
}

template <typename T, typename C>
void GradRow(const T* xr, const T* gr, T* out, const Affine<C>& a, const C* k, const C* mg,
             const C* mgx, C alpha, int64_t ch) {
  if (a.folded) {
    GradRowT<true>(xr, gr, out, a, k, mg, mgx, alpha, ch);
  } else {
    GradRowT<false>(xr, gr, out, a, k, mg, mgx, alpha, ch);
  }
}

Status Named(const Status& s, const char* op) {
  if (s.ok()) return s;
  const std::string& m = s.message();
  return Status::Invalid(op + m.substr(m.find(':')));
}

}  // namespace

Status ValidateBatchNormLeakyAttrs(const BatchNormLeakyParams& p, const char* op) {
  if (!std::isfinite(p.epsilon) || !(p.epsilon > 0.0f)) {
    return InvalidArgument(op, "epsilon", "finite and > 0", p.epsilon);
  }
  if (!std::isfinite(p.alpha) || p.alpha < 0.0f) {
    return InvalidArgument(op, "alpha", "finite and >= 0", p.alpha);
  }
  return Status::Ok();
}

Status ValidateBatchNormLeaky(const std::vector<int64_t>& x, const std::vector<int64_t>& gamma,
                              const std::vector<int64_t>& beta, BatchNormLeakyParams* params) {
  BatchNormLeakyParams& p = *params;
  OPFORGE_RETURN_IF_ERROR(ValidateBatchNormLeakyAttrs(p, kOp));
  if (x.empty()) {
    return InvalidArgument(kOp, "x", "at least 1-D [..., channels]", ShapeString(x));
  }
  const int64_t c = x.back();
  const std::vector<int64_t> channels{c};
  if (gamma != channels) {
    return InvalidArgument(kOp, "scale",
                           "[" + std::to_string(c) + "] (the channels of x, its last axis)",
                           ShapeString(gamma));
  }
  if (beta != channels) {
    return InvalidArgument(kOp, "offset",
                           "[" + std::to_string(c) + "] (the channels of x, its last axis)",
                           ShapeString(beta));
  }
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < x.size(); ++i) {
    if (x[i] < 0) return InvalidArgument(kOp, "x", "non-negative dimensions", ShapeString(x));
    rows *= x[i];
  }
  p.rows = rows;
  p.channels = c;
  return Status::Ok();
}

Status ValidateBatchNormLeakyGrad(const std::vector<int64_t>& dy, const std::vector<int64_t>& x,
                                  const std::vector<int64_t>& gamma,
                                  const std::vector<int64_t>& beta,
                                  const std::vector<int64_t>& mean,
                                  const std::vector<int64_t>& variance,
                                  BatchNormLeakyParams* params) {
  OPFORGE_RETURN_IF_ERROR(Named(ValidateBatchNormLeaky(x, gamma, beta, params), kGradOp));
  if (dy != x) {
    return InvalidArgument(kGradOp, "grad", "the shape of x, " + ShapeString(x), ShapeString(dy));
  }
  if (mean != gamma) {
    return InvalidArgument(kGradOp, "batch_mean", "the shape of scale, " + ShapeString(gamma),
                           ShapeString(mean));
  }
  if (variance != gamma) {
    return InvalidArgument(kGradOp, "batch_variance", "the shape of scale, " + ShapeString(gamma),
                           ShapeString(variance));
  }
  return Status::Ok();
}

template <typename T>
void BatchNormLeakyForward(const BatchNormLeakyParams& p, const T* x, const BnParamType<T>* gamma,
                           const BnParamType<T>* beta, T* y, BnParamType<T>* mean,
                           BnParamType<T>* variance, const Parallel& parallel) {
  using C = Compute<T>;
  const int64_t rows = p.rows, ch = p.channels;
  if (ch == 0) return;
  // 1. Sums and sums of squared deviations from a per-channel pivot (the first row's values),
  // which keeps the one-pass variance accurate when the mean is large against the spread. A
  // non-finite first value pivots at 0 instead: inf - inf would make the mean of a channel
  // holding inf NaN, where its exact value is inf.
  const int64_t chunks = (rows + kChunkRows - 1) / kChunkRows;
  std::vector<double> pivot(static_cast<size_t>(ch), 0.0);
  if (rows > 0) {
    for (int64_t c = 0; c < ch; ++c) {
      const double first = static_cast<double>(Load(x[c]));
      pivot[static_cast<size_t>(c)] = std::isfinite(first) ? first : 0.0;
    }
  }
  std::vector<double> partial(static_cast<size_t>(chunks * 2 * ch));
  parallel.For(chunks, static_cast<double>(kChunkRows * ch) * 2, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      double* s = partial.data() + k * 2 * ch;
      double* q = s + ch;
      std::fill(s, s + 2 * ch, 0.0);
      const int64_t r1 = std::min(rows, (k + 1) * kChunkRows);
      for (int64_t r = k * kChunkRows; r < r1; ++r)
        AccumulateRow(x + r * ch, pivot.data(), s, q, ch);
    }
  });
  std::vector<double> sums(static_cast<size_t>(2 * ch));
  ReduceChunks(partial, chunks, 2 * ch, sums.data());
  const double n = static_cast<double>(rows);
  for (int64_t c = 0; c < ch; ++c) {
    if (rows == 0) {
      // Keras's moments of an empty batch: NaN (0 / 0).
      mean[c] = variance[c] = std::numeric_limits<C>::quiet_NaN();
      continue;
    }
    const double d = sums[static_cast<size_t>(c)] / n;
    const double var = std::max(sums[static_cast<size_t>(ch + c)] / n - d * d, 0.0);
    mean[c] = static_cast<C>(pivot[static_cast<size_t>(c)] + d);
    variance[c] = static_cast<C>(var);
  }
  if (rows == 0) return;
  // 2. y = leaky(x * scale + shift).
  std::vector<C> scale, shift, inv;
  ScaleShift<C>(p, gamma, beta, mean, variance, &scale, &shift, &inv);
  const Affine<C> affine{
      scale.data(), shift.data(), mean, inv.data(), gamma, beta, FoldsExactly(scale, shift)};
  const C alpha = static_cast<C>(p.alpha);
  parallel.For(rows, static_cast<double>(ch) * 2, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      NormalizeRow<T, C>(x + r * ch, y + r * ch, affine, alpha, ch);
    }
  });
}

template <typename T>
void BatchNormLeakyBackward(const BatchNormLeakyParams& p, const T* dy, const T* x,
                            const BnParamType<T>* gamma, const BnParamType<T>* beta,
                            const BnParamType<T>* mean, const BnParamType<T>* variance, T* dx,
                            BnParamType<T>* dgamma, BnParamType<T>* dbeta,
                            const Parallel& parallel) {
  using C = Compute<T>;
  const int64_t rows = p.rows, ch = p.channels;
  if (ch == 0) return;
  std::vector<C> scale, shift, inv;
  ScaleShift<C>(p, gamma, beta, mean, variance, &scale, &shift, &inv);
  const Affine<C> affine{
      scale.data(), shift.data(), mean, inv.data(), gamma, beta, FoldsExactly(scale, shift)};
  const C alpha = static_cast<C>(p.alpha);
  // 1. Per channel sum(g) and sum(g * xhat).
  const int64_t chunks = (rows + kChunkRows - 1) / kChunkRows;
  std::vector<double> partial(static_cast<size_t>(chunks * 2 * ch));
  parallel.For(chunks, static_cast<double>(kChunkRows * ch) * 3, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      double* s = partial.data() + k * 2 * ch;
      double* q = s + ch;
      std::fill(s, s + 2 * ch, 0.0);
      const int64_t r1 = std::min(rows, (k + 1) * kChunkRows);
      for (int64_t r = k * kChunkRows; r < r1; ++r) {
        GradSumsRow<T, C>(x + r * ch, dy + r * ch, affine, alpha, s, q, ch);
      }
    }
  });
  std::vector<double> sums(static_cast<size_t>(2 * ch));
  ReduceChunks(partial, chunks, 2 * ch, sums.data());
  const double n = static_cast<double>(rows);
  std::vector<C> a(static_cast<size_t>(ch)), mg(static_cast<size_t>(ch)),
      mgx(static_cast<size_t>(ch));
  for (int64_t c = 0; c < ch; ++c) {
    const size_t i = static_cast<size_t>(c);
    dbeta[c] = static_cast<C>(sums[i]);
    dgamma[c] = static_cast<C>(sums[static_cast<size_t>(ch) + i]);
    a[i] = gamma[c] * inv[i];
    mg[i] = static_cast<C>(sums[i] / n);
    mgx[i] = static_cast<C>(sums[static_cast<size_t>(ch) + i] / n);
  }
  // 2. dx = gamma * inv * (g - mean(g) - xhat * mean(g * xhat)).
  parallel.For(rows, static_cast<double>(ch) * 4, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      GradRow<T, C>(x + r * ch, dy + r * ch, dx + r * ch, affine, a.data(), mg.data(), mgx.data(),
                    alpha, ch);
    }
  });
}

#define OPFORGE_INSTANTIATE_BN_(T, ...)                                                      \
  template void BatchNormLeakyForward<T>(const BatchNormLeakyParams&, const T*,              \
                                         const BnParamType<T>*, const BnParamType<T>*, T*,   \
                                         BnParamType<T>*, BnParamType<T>*, const Parallel&); \
  template void BatchNormLeakyBackward<T>(const BatchNormLeakyParams&, const T*, const T*,   \
                                          const BnParamType<T>*, const BnParamType<T>*,      \
                                          const BnParamType<T>*, const BnParamType<T>*, T*,  \
                                          BnParamType<T>*, BnParamType<T>*, const Parallel&);
OPFORGE_FLOAT_TYPES(OPFORGE_INSTANTIATE_BN_)
#undef OPFORGE_INSTANTIATE_BN_

}  // namespace opforge

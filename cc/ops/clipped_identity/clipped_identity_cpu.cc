#include <Eigen/Core>
#include <cmath>
#include <sstream>
#include <string>

#include "common/arith.h"
#include "ops/clipped_identity/clipped_identity.h"
#include "ops/clipped_identity/clipped_identity_element.h"

namespace opforge {

Status ValidateClippedIdentity(const ClippedIdentityParams& params) {
  constexpr const char* kOp = "ClippedIdentity";
  if (!std::isfinite(params.clip_min)) {
    return InvalidArgument(kOp, "clip_min", "a finite number", params.clip_min);
  }
  if (!std::isfinite(params.clip_max)) {
    return InvalidArgument(kOp, "clip_max", "a finite number", params.clip_max);
  }
  if (!(params.clip_min <= params.clip_max)) {
    std::ostringstream expected;
    expected << "at least clip_min (" << params.clip_min << ")";
    return InvalidArgument(kOp, "clip_max", expected.str(), params.clip_max);
  }
  if (!std::isfinite(params.leak)) {
    return InvalidArgument(kOp, "leak", "a finite number", params.leak);
  }
  if (params.size < 0) {
    return InvalidArgument(kOp, "x", "a tensor with a non-negative size", params.size);
  }
  return Status::Ok();
}

Status ValidateClippedIdentityGrad(const ClippedIdentityParams& params,
                                   const std::vector<int64_t>& gradients,
                                   const std::vector<int64_t>& features) {
  OPFORGE_RETURN_IF_ERROR(ValidateClippedIdentity(params));
  if (gradients != features) {
    return InvalidArgument("ClippedIdentityGrad", "gradients",
                           "the shape of features " + ShapeString(features),
                           ShapeString(gradients));
  }
  return Status::Ok();
}

namespace {

// The CPU's Num: arithmetic in the element type itself.
template <typename T>
struct InElementType {
  using C = T;
  static T To(T v) { return v; }
  static T From(T v) { return v; }
};

// Loops over contiguous memory in functions taking everything by value (so that the compiler
// vectorises them: see leaky_relu_cpu.cc).
template <typename T>
void ForwardRange(const T* x, T* y, int64_t n, T lo, T hi) {
  OPFORGE_IVDEP
  for (int64_t i = 0; i < n; ++i) y[i] = ClippedIdentityValue(x[i], lo, hi);
}

template <typename T>
void BackwardRange(const T* g, const T* x, T* dx, int64_t n, T lo, T hi, T leak) {
  OPFORGE_IVDEP
  for (int64_t i = 0; i < n; ++i) dx[i] = ClippedIdentityBackprop(g[i], x[i], lo, hi, leak);
}

}  // namespace

template <typename T>
void ClippedIdentityForward(const ClippedIdentityParams& params, const T* x, T* y,
                            const Parallel& parallel) {
  const T lo = ClippedIdentityAttr<InElementType<T>>(params.clip_min);
  const T hi = ClippedIdentityAttr<InElementType<T>>(params.clip_max);
  parallel.For(params.size, kCostElementwise, [=](int64_t begin, int64_t end) {
    ForwardRange(x + begin, y + begin, end - begin, lo, hi);
  });
}

template <typename T>
void ClippedIdentityBackward(const ClippedIdentityParams& params, const T* g, const T* x, T* dx,
                             const Parallel& parallel) {
  const T lo = ClippedIdentityAttr<InElementType<T>>(params.clip_min);
  const T hi = ClippedIdentityAttr<InElementType<T>>(params.clip_max);
  const T leak = ClippedIdentityAttr<InElementType<T>>(params.leak);
  parallel.For(params.size, kCostElementwise, [=](int64_t begin, int64_t end) {
    BackwardRange(g + begin, x + begin, dx + begin, end - begin, lo, hi, leak);
  });
}

#define OPFORGE_INSTANTIATE(T, ...)                                                              \
  template void ClippedIdentityForward<T>(const ClippedIdentityParams&, const T*, T*,            \
                                          const Parallel&);                                      \
  template void ClippedIdentityBackward<T>(const ClippedIdentityParams&, const T*, const T*, T*, \
                                           const Parallel&);
OPFORGE_FLOAT_TYPES(OPFORGE_INSTANTIATE)
#undef OPFORGE_INSTANTIATE

}  // namespace opforge

#include <Eigen/Core>
#include <cmath>

#include "ops/leaky_relu/leaky_relu.h"

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

// Elements per parallel block are chosen by the backend from the cost hint; the loops below are
// branch-free selects over contiguous memory, which GCC and Clang vectorise for float and double.
template <typename T>
void LeakyReluForward(const LeakyReluParams& params, const T* x, T* y, T* mask,
                      const Parallel& parallel) {
  const T alpha = static_cast<T>(params.alpha);
  const T zero = static_cast<T>(0);
  const T one = static_cast<T>(1);
  parallel.For(params.size, kCostElementwise, [=](int64_t begin, int64_t end) {
    if (mask == nullptr) {
      for (int64_t i = begin; i < end; ++i) {
        const T v = x[i];
        y[i] = v > zero ? v : v * alpha;
      }
    } else {
      for (int64_t i = begin; i < end; ++i) {
        const T v = x[i];
        const bool positive = v > zero;
        y[i] = positive ? v : v * alpha;
        mask[i] = positive ? one : alpha;
      }
    }
  });
}

template <typename T>
void LeakyReluBackward(const LeakyReluParams& params, const T* g, const T* x, T* dx,
                       const Parallel& parallel) {
  const T alpha = static_cast<T>(params.alpha);
  const T zero = static_cast<T>(0);
  parallel.For(params.size, kCostElementwise, [=](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const T gv = g[i];
      dx[i] = x[i] > zero ? gv : gv * alpha;
    }
  });
}

#define OPFORGE_INSTANTIATE(T)                                                             \
  template void LeakyReluForward<T>(const LeakyReluParams&, const T*, T*, T*,            \
                                    const Parallel&);                                    \
  template void LeakyReluBackward<T>(const LeakyReluParams&, const T*, const T*, T*,     \
                                     const Parallel&);
OPFORGE_INSTANTIATE(Eigen::half)
OPFORGE_INSTANTIATE(Eigen::bfloat16)
OPFORGE_INSTANTIATE(float)
OPFORGE_INSTANTIATE(double)
#undef OPFORGE_INSTANTIATE

}  // namespace opforge

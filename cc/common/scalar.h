// Scalar arithmetic that the CPU kernels and the CUDA kernels share (OPFORGE_HOST_DEVICE): a
// multiply and an add that wrap on signed-integer overflow (as TensorFlow's kernels do in
// practice) without undefined behaviour, and a select on values. No Eigen or CUDA header: the
// types come from the caller (Eigen::half on the CPU, float or double on the GPU).
#ifndef OPFORGE_COMMON_SCALAR_H_
#define OPFORGE_COMMON_SCALAR_H_

#include <type_traits>

#include "common/host_device.h"

namespace opforge {

template <typename T>
OPFORGE_HOST_DEVICE inline T Mul(T a, T b) {
  if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    return a * b;
  }
}

template <typename T>
OPFORGE_HOST_DEVICE inline T Add(T a, T b) {
  if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}

// A select on values. `c ? a : b` on two named variables is an lvalue (a select of addresses),
// which GCC does not vectorise; through this function's by-value parameters it is a select of
// values, which becomes a vector blend.
template <typename T>
OPFORGE_HOST_DEVICE inline T Select(bool c, T a, T b) {
  return c ? a : b;
}

}  // namespace opforge

#endif  // OPFORGE_COMMON_SCALAR_H_

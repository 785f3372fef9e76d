// Scalar arithmetic that the CPU kernels and the CUDA kernels share (OPFORGE_HOST_DEVICE): a
// multiply and an add that wrap on integer overflow (as TensorFlow's kernels do in practice)
// without undefined behaviour, a complex multiply and conjugate, and a select on values. No
// Eigen or CUDA header: the types come from the caller (Eigen::half on the CPU, float or double
// on the GPU).
#ifndef OPFORGE_COMMON_SCALAR_H_
#define OPFORGE_COMMON_SCALAR_H_

#include <complex>
#include <type_traits>

#include "common/host_device.h"

namespace opforge {

// std::complex<R> (complex64, complex128): multiplied by the plain formula below.
template <typename T>
struct IsComplex : std::false_type {};
template <typename R>
struct IsComplex<std::complex<R>> : std::true_type {};

namespace internal {
// The unsigned type integer arithmetic wraps in: that of T, but at least unsigned int, because
// the operands of narrower types (int8, uint16...) are promoted to (signed) int, whose overflow
// (65535 * 65535) is undefined.
template <typename T>
using WrapType =
    std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
}  // namespace internal

// a * b; integers of every width and signedness wrap modulo 2^bits (as TensorFlow's kernels do
// in practice). Complex numbers: (ac - bd) + (ad + bc)i, two products and one sum per part,
// never fused (opforge_core is compiled with -ffp-contract=off) and without C99 Annex G's
// recovery of inf from NaN parts: the formula of Eigen's vectorised complex product, which is
// what tf.multiply computes (but for its scalar tail, see ops/element_mul/element_mul.h).
template <typename T>
OPFORGE_HOST_DEVICE inline T Mul(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using W = internal::WrapType<T>;
    return static_cast<T>(static_cast<W>(static_cast<W>(a) * static_cast<W>(b)));
  } else if constexpr (IsComplex<T>::value) {
    return T(a.real() * b.real() - a.imag() * b.imag(), a.real() * b.imag() + a.imag() * b.real());
  } else {
    return a * b;
  }
}

template <typename T>
OPFORGE_HOST_DEVICE inline T Add(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using W = internal::WrapType<T>;
    return static_cast<T>(static_cast<W>(static_cast<W>(a) + static_cast<W>(b)));
  } else {
    return a + b;
  }
}

// The complex conjugate; a real value is its own.
template <typename T>
OPFORGE_HOST_DEVICE inline T Conj(T a) {
  if constexpr (IsComplex<T>::value) {
    return T(a.real(), -a.imag());
  } else {
    return a;
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

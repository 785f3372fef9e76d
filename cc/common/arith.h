// Scalar arithmetic shared by the CPU kernels: the accumulator type for each element type and a
// multiply/add that wrap on signed-integer overflow (as TensorFlow's kernels do in practice)
// without undefined behaviour.
#ifndef OPFORGE_COMMON_ARITH_H_
#define OPFORGE_COMMON_ARITH_H_

#include <Eigen/Core>
#include <type_traits>

// Marks an element-wise loop whose output may alias an input only exactly (in place, same
// index), never with an offset. Without it the compiler versions the loop on a runtime overlap
// check and falls back to scalar code in the in-place case.
#if defined(__clang__)
#define OPFORGE_IVDEP _Pragma("clang loop vectorize(assume_safety)")
#elif defined(__GNUC__)
#define OPFORGE_IVDEP _Pragma("GCC ivdep")
#else
#define OPFORGE_IVDEP
#endif

namespace opforge {

// half and bfloat16 accumulate in float; every other type in itself.
template <typename T>
struct AccumulatorOf {
  using type = T;
};
template <>
struct AccumulatorOf<Eigen::half> {
  using type = float;
};
template <>
struct AccumulatorOf<Eigen::bfloat16> {
  using type = float;
};
template <typename T>
using Acc = typename AccumulatorOf<T>::type;

template <typename T>
inline T Mul(T a, T b) {
  if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    return a * b;
  }
}

template <typename T>
inline T Add(T a, T b) {
  if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}

}  // namespace opforge

#endif  // OPFORGE_COMMON_ARITH_H_

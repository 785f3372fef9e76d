// Scalar arithmetic of the CPU kernels: the accumulator type for each element type, and (from
// common/scalar.h, shared with the CUDA kernels) the wrapping Mul/Add and the by-value Select.
#ifndef OPFORGE_COMMON_ARITH_H_
#define OPFORGE_COMMON_ARITH_H_

#include <Eigen/Core>
#include <type_traits>

#include "common/scalar.h"

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

}  // namespace opforge

#endif  // OPFORGE_COMMON_ARITH_H_

// Helpers shared by the .cu files: element-type traits that compute half and bfloat16 in float
// (rounding once, as the CPU kernels do), the dtype conversions, launch geometry and error
// reporting. The scalar maths the CPU kernels share (Mul, Add, Select) is in common/scalar.h.
#ifndef OPFORGE_COMMON_CUDA_UTIL_CUH_
#define OPFORGE_COMMON_CUDA_UTIL_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>
#include <type_traits>

#include "common/dtype.h"
#include "common/scalar.h"
#include "common/status.h"

namespace opforge {
namespace cuda {

// C is the type arithmetic happens in; To/From convert with round-to-nearest-even.
template <typename T>
struct Num {
  using C = T;
  __device__ static C To(T v) { return v; }
  __device__ static T From(C v) { return v; }
};
template <>
struct Num<__half> {
  using C = float;
  __device__ static float To(__half v) { return __half2float(v); }
  __device__ static __half From(float v) { return __float2half_rn(v); }
};
template <>
struct Num<__nv_bfloat16> {
  using C = float;
  __device__ static float To(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ static __nv_bfloat16 From(float v) { return __float2bfloat16_rn(v); }
};

// float from any element type (the resize kernels read every input type as float).
template <typename T>
__device__ inline float ToFloat(T v) {
  return static_cast<float>(Num<T>::To(v));
}

constexpr int kThreads = 256;
inline unsigned Blocks(int64_t n) {
  return static_cast<unsigned>(
      std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads, 1 << 16)));
}

inline Status LaunchStatus(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return Status::Ok();
  return Status::Internal(std::string(what) + ": CUDA launch failed: " + cudaGetErrorString(err));
}

inline Status UnsupportedDType(const char* what, DType dtype) {
  return Status::Invalid(std::string(what) + ": no CUDA kernel for dtype " + DTypeName(dtype));
}

template <typename T>
struct TypeTag {
  using type = T;
};

// --- 32-bit index math ---------------------------------------------------------------------
//
// A kernel templated on its index type Index does its index arithmetic in it: int32_t when every
// index and offset it forms fits (32-bit multiplies, and divisions and remainders several times
// cheaper than the 64-bit ones, which the GPU emulates in software), int64_t otherwise, so that
// it stays correct past 2^31 elements.

// Calls fn(TypeTag<int32_t>{}) when `largest` (the largest index, size or offset the kernel
// forms, non-negative) fits in int32_t, else fn(TypeTag<int64_t>{}); returns what fn returns.
template <typename Fn>
auto DispatchIndex(int64_t largest, Fn&& fn) {
  if (largest <= int64_t{INT32_MAX}) return fn(TypeTag<int32_t>{});
  return fn(TypeTag<int64_t>{});
}

// A grid-stride loop over [0, n) in Index:
//   for (Index i = GridStart<Index>(), step = GridStep<Index>(); i < n;
//        i = GridNext(i, step, n)) { ... }
// GridStart and GridStep are exact in int32_t for launches of at most 2^31 / blockDim.x blocks
// (Blocks() gives at most 2^16). GridNext never forms i + step past n, so an int32_t loop with
// n near 2^31 does not overflow (signed overflow is undefined behaviour, and in practice would
// wrap to a negative index that passes the i < n test).
template <typename Index>
__device__ inline Index GridStart() {
  return static_cast<Index>(blockIdx.x) * static_cast<Index>(blockDim.x) +
         static_cast<Index>(threadIdx.x);
}
template <typename Index>
__device__ inline Index GridStep() {
  return static_cast<Index>(gridDim.x) * static_cast<Index>(blockDim.x);
}
template <typename Index>
__device__ inline Index GridNext(Index i, Index step, Index n) {
  return step < n - i ? i + step : n;
}

// Calls fn(TypeTag<T>{}) with the CUDA type T of `dtype` (__half, __nv_bfloat16, float, double,
// and, with kWithIntegers, int32_t and int64_t) and returns its Status; any other dtype is an
// error naming `what`. One switch for every op's entry points.
template <bool kWithIntegers, typename Fn>
Status DispatchDType(DType dtype, const char* what, Fn&& fn) {
  switch (dtype) {
    case DType::kHalf:
      return fn(TypeTag<__half>{});
    case DType::kBFloat16:
      return fn(TypeTag<__nv_bfloat16>{});
    case DType::kFloat:
      return fn(TypeTag<float>{});
    case DType::kDouble:
      return fn(TypeTag<double>{});
    case DType::kInt32:
      if constexpr (kWithIntegers) return fn(TypeTag<int32_t>{});
      break;
    case DType::kInt64:
      if constexpr (kWithIntegers) return fn(TypeTag<int64_t>{});
      break;
    default:  // the 8- and 16-bit integers: ops that take them dispatch themselves
      break;
  }
  return UnsupportedDType(what, dtype);
}

}  // namespace cuda
}  // namespace opforge

#endif  // OPFORGE_COMMON_CUDA_UTIL_CUH_

// Helpers shared by the .cu files: element-type traits that compute half and bfloat16 in float
// (rounding once, as the CPU kernels do), the dtype conversions, launch geometry and error
// reporting. The scalar maths the CPU kernels share (Mul, Add, Select) is in common/scalar.h.
#ifndef OPFORGE_COMMON_CUDA_UTIL_CUH_
#define OPFORGE_COMMON_CUDA_UTIL_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
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

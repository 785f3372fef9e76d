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
#include <initializer_list>
#include <string>
#include <type_traits>

#include "common/cuda_geometry.h"
#include "common/dtype.h"
#include "common/scalar.h"
#include "common/status.h"

// Kernel<...><<<grid, block, shared_bytes, stream>>>(args...), written
//   OPFORGE_LAUNCH(grid, block, shared_bytes, stream, Kernel<...>)(args...);
// so that the same source also runs on the SIMT runtime (common/simt/simt.h defines it there).
#if !defined(OPFORGE_SIMT)
#define OPFORGE_LAUNCH(grid, block, shared_bytes, stream, ...) \
  __VA_ARGS__<<<(grid), (block), (shared_bytes), (stream)>>>
#endif

namespace opforge {
namespace cuda {

// C is the type arithmetic happens in; To/From convert with round-to-nearest-even. Callable on
// the host too, so that a launcher can round an attr to the element type once (as the kernels
// would) instead of in every thread.
template <typename T>
struct Num {
  using C = T;
  __host__ __device__ static C To(T v) { return v; }
  __host__ __device__ static T From(C v) { return v; }
};
template <>
struct Num<__half> {
  using C = float;
  __host__ __device__ static float To(__half v) { return __half2float(v); }
  __host__ __device__ static __half From(float v) { return __float2half_rn(v); }
};
template <>
struct Num<__nv_bfloat16> {
  using C = float;
  __host__ __device__ static float To(__nv_bfloat16 v) { return __bfloat162float(v); }
  __host__ __device__ static __nv_bfloat16 From(float v) { return __float2bfloat16_rn(v); }
};

// float from any element type (the resize kernels read every input type as float).
template <typename T>
__device__ inline float ToFloat(T v) {
  return static_cast<float>(Num<T>::To(v));
}

constexpr int kThreads = 256;
inline unsigned Blocks(int64_t n) {
  return static_cast<unsigned>(
      std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxGridBlocks)));
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
  if (largest <= kInt32IndexLimit) return fn(TypeTag<int32_t>{});
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

// --- vectorised element-wise kernels ---------------------------------------------------------
//
// An element-wise kernel moves 16 bytes per thread and step where it can (8 half or bfloat16, 4
// float, 2 double): one 128-bit load or store instead of 8 16-bit ones, which for 16-bit types
// is what lets the loop reach the memory bandwidth. The vector path needs every pointer aligned
// to a whole vector (TensorFlow's buffers are; a slice at an odd offset may not be), and leaves
// the last n % width elements to a scalar tail. Each element is still read and written once, at
// its own index, so an output may alias an input (in place), and the results are those of the
// scalar loop, bit for bit.

// kN elements of T in one aligned access.
template <typename T, int kN>
struct alignas(sizeof(T) * kN) Vec {
  T v[kN];
};

// Elements of T per 16-byte access.
template <typename T>
constexpr int VecWidth() {
  return sizeof(T) >= 16 ? 1 : static_cast<int>(16 / sizeof(T));
}

inline bool IsAligned(const void* p, size_t alignment) {
  return reinterpret_cast<uintptr_t>(p) % alignment == 0;
}

template <int kN, typename T>
__device__ inline Vec<T, kN> LoadVec(const T* p) {
  return *reinterpret_cast<const Vec<T, kN>*>(p);
}
template <int kN, typename T>
__device__ inline void StoreVec(T* p, const Vec<T, kN>& v) {
  *reinterpret_cast<Vec<T, kN>*>(p) = v;
}

// A grid-stride loop over n elements: body.Vector(i) handles elements [i, i + kN) (i a multiple
// of kN, all pointers aligned) and body.Scalar(i) element i; both are member templates on Index.
// With `vectorized` the grid walks the n / kN whole vectors, then its first threads take the
// n % kN elements left; otherwise it runs Scalar over every element.
template <int kN, typename Index, typename Body>
__global__ void ElementwiseKernel(Index n, bool vectorized, Body body) {
  const Index start = GridStart<Index>(), step = GridStep<Index>();
  if (vectorized) {
    const Index vectors = n / kN;
    for (Index v = start; v < vectors; v = GridNext(v, step, vectors)) body.Vector(v * kN);
    // Compared with the tail's length, not as vectors * kN + start < n: that sum may pass
    // INT32_MAX when n is close to it.
    if (start < n - vectors * kN) body.Scalar(vectors * kN + start);
  } else {
    for (Index i = start; i < n; i = GridNext(i, step, n)) body.Scalar(i);
  }
}

// Launches ElementwiseKernel for element type T over n elements on `stream`: 32-bit index math
// when n fits in int32_t, 64-bit past it; vectorised when every pointer in `pointers` (nulls
// ignored) is aligned to a whole vector. Returns the launch's status, naming `what`.
template <typename T, typename Body>
Status LaunchElementwise(const char* what, int64_t n, const Body& body,
                         std::initializer_list<const void*> pointers, cudaStream_t stream) {
  if (n <= 0) return Status::Ok();
  constexpr int kN = VecWidth<T>();
  bool vectorized = kN > 1;
  for (const void* p : pointers) {
    if (p != nullptr && !IsAligned(p, sizeof(T) * kN)) vectorized = false;
  }
  const int64_t units = vectorized ? n / kN : n;
  DispatchIndex(n, [&](auto tag) {
    using Index = typename decltype(tag)::type;
    OPFORGE_LAUNCH(Blocks(units), kThreads, 0, stream, ElementwiseKernel<kN, Index>)
    (static_cast<Index>(n), vectorized, body);
    return 0;
  });
  return LaunchStatus(what);
}

// out[i] = f(in0[i]) or f(in0[i], in1[i]) (f: a functor on element values, __device__
// operator()). An input marked as a scalar (scalar[k]) is its element 0 for every i: a broadcast
// operand.
template <typename T, typename F, int kIn>
struct MapBody {
  F f;
  const T* in[kIn];
  bool scalar[kIn];
  T* out;

  template <typename Index>
  __device__ T Read(int k, Index i) const {
    return scalar[k] ? in[k][0] : in[k][i];
  }
  template <typename Index>
  __device__ void Scalar(Index i) const {
    if constexpr (kIn == 1) {
      out[i] = f(Read(0, i));
    } else {
      out[i] = f(Read(0, i), Read(1, i));
    }
  }
  template <typename Index>
  __device__ void Vector(Index i) const {
    constexpr int kN = VecWidth<T>();
    Vec<T, kN> x[kIn];
#pragma unroll
    for (int k = 0; k < kIn; ++k) {
      if (scalar[k]) {
        const T s = in[k][0];
#pragma unroll
        for (int j = 0; j < kN; ++j) x[k].v[j] = s;
      } else {
        x[k] = LoadVec<kN>(in[k] + i);
      }
    }
    Vec<T, kN> y;
#pragma unroll
    for (int j = 0; j < kN; ++j) {
      if constexpr (kIn == 1) {
        y.v[j] = f(x[0].v[j]);
      } else {
        y.v[j] = f(x[0].v[j], x[1].v[j]);
      }
    }
    StoreVec(out + i, y);
  }
};

// Launches out[i] = f(in[0][i], ...) over n elements (see MapBody; scalar inputs are not
// vectorised, and need no alignment).
template <typename T, typename F, int kIn>
Status LaunchMap(const char* what, int64_t n, const F& f, T* out, const T* const (&in)[kIn],
                 const bool (&scalar)[kIn], cudaStream_t stream) {
  MapBody<T, F, kIn> body{f, {}, {}, out};
  const void* pointers[kIn + 1] = {out};
  for (int k = 0; k < kIn; ++k) {
    body.in[k] = in[k];
    body.scalar[k] = scalar[k];
    pointers[k + 1] = scalar[k] ? nullptr : in[k];
  }
  if constexpr (kIn == 1) {
    return LaunchElementwise<T>(what, n, body, {pointers[0], pointers[1]}, stream);
  } else {
    return LaunchElementwise<T>(what, n, body, {pointers[0], pointers[1], pointers[2]}, stream);
  }
}

// The sum of a warp's 32 values in the halving-tree order (for h = 16, 8, 4, 2, 1: lane j < h
// adds lane j + h's value to its own): the same additions, in the same order, as a host loop
// over u[0..31] doing u[j] = u[j] + u[j + h]. The result is in lane 0; every lane must call it.
template <typename A>
__device__ inline A WarpTreeSum(A v) {
#pragma unroll
  for (int h = 16; h >= 1; h /= 2) v = Add(v, __shfl_down_sync(0xffffffffu, v, h));
  return v;
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

// The same for the ops that run in float and double only (the audio ops, YoloTargets).
template <typename Fn>
Status DispatchFloatDouble(DType dtype, const char* what, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat:
      return fn(TypeTag<float>{});
    case DType::kDouble:
      return fn(TypeTag<double>{});
    default:
      return UnsupportedDType(what, dtype);
  }
}

}  // namespace cuda
}  // namespace opforge

#endif  // OPFORGE_COMMON_CUDA_UTIL_CUH_

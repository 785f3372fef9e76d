// The SIMT runtime: opforge's CUDA kernels compiled by the host compiler as C++ and run on the
// CPU, with checks a GPU does not make. This header is the prelude of such a build: it is
// included before a .cu file (cc/common/simt/README.md says how a build does it) and gives the
// host compiler the part of the CUDA language the kernels use:
//
//  - __global__, __device__, __host__, __launch_bounds__ (nothing), __shared__ (one array per
//    OS thread, shared by the threads of the block that runs on it);
//  - threadIdx, blockIdx, blockDim, gridDim, warpSize;
//  - __syncthreads (and _and/_or/_count), __syncwarp, the warp shuffles, votes and ballot:
//    each CUDA thread is a fiber, and a thread that reaches a barrier waits there until the
//    threads it waits for arrive, as on a GPU;
//  - the atomics, the rounding intrinsics (__fadd_rn, ...), rsqrt and the bit intrinsics;
//  - OPFORGE_LAUNCH(grid, block, shared_bytes, stream, Kernel<...>)(args...), the launch that
//    is Kernel<...><<<grid, block, shared_bytes, stream>>>(args...) under nvcc
//    (common/cuda_util.cuh).
//
// The CUDA runtime calls (cudaMalloc, cudaMemcpyAsync, ...) and cuFFT's are the toolkit's
// declarations, defined by the SIMT runtime's library (runtime.cc, cufft.cc) instead of libcudart
// and libcufft. What a run checks and reports: docs/guides/gpu.md.
#ifndef OPFORGE_COMMON_SIMT_SIMT_H_
#define OPFORGE_COMMON_SIMT_SIMT_H_

#if defined(__CUDACC__)
#error "common/simt/simt.h is the prelude of a host-compiler build of CUDA sources, not for nvcc"
#endif

#define OPFORGE_SIMT 1

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

#include "common/simt/simt_api.h"

// --- the language ------------------------------------------------------------------------------
#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __forceinline__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
// A block-scope thread_local has static storage: one array per OS thread, which every fiber of
// the block running on that thread sees, as the threads of a block see one shared memory.
#define __shared__ thread_local
#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif

#undef threadIdx
#undef blockIdx
#undef blockDim
#undef gridDim
#undef warpSize
#define threadIdx (::opforge::simt::internal::Current()->thread_idx)
#define blockIdx (::opforge::simt::internal::Current()->block->block_idx)
#define blockDim (::opforge::simt::internal::Current()->block->block_dim)
#define gridDim (::opforge::simt::internal::Current()->block->grid_dim)
#define warpSize 32

// --- barriers and warp intrinsics --------------------------------------------------------------
// The call site (the default arguments) names the barrier in a report.

inline void __syncthreads(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  ::opforge::simt::internal::BlockBarrier(::opforge::simt::internal::kSync, 0, file, line);
}
inline int __syncthreads_and(int predicate, const char* file = __builtin_FILE(),
                             int line = __builtin_LINE()) {
  return ::opforge::simt::internal::BlockBarrier(::opforge::simt::internal::kSyncAnd, predicate,
                                                 file, line);
}
inline int __syncthreads_or(int predicate, const char* file = __builtin_FILE(),
                            int line = __builtin_LINE()) {
  return ::opforge::simt::internal::BlockBarrier(::opforge::simt::internal::kSyncOr, predicate,
                                                 file, line);
}
inline int __syncthreads_count(int predicate, const char* file = __builtin_FILE(),
                               int line = __builtin_LINE()) {
  return ::opforge::simt::internal::BlockBarrier(::opforge::simt::internal::kSyncCount, predicate,
                                                 file, line);
}

inline void __syncwarp(unsigned mask = 0xffffffffu, const char* file = __builtin_FILE(),
                       int line = __builtin_LINE()) {
  ::opforge::simt::internal::WarpOp(::opforge::simt::internal::kWarpSync, mask, 0, 0, 32, file,
                                    line);
}

namespace opforge {
namespace simt {
namespace internal {

template <typename T>
uint64_t ToBits(T v) {
  static_assert(sizeof(T) <= sizeof(uint64_t) && std::is_trivially_copyable_v<T>,
                "a warp shuffle moves a value of at most 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  return bits;
}
template <typename T>
T FromBits(uint64_t bits) {
  T v;
  std::memcpy(&v, &bits, sizeof(T));
  return v;
}

}  // namespace internal
}  // namespace simt
}  // namespace opforge

template <typename T>
T __shfl_sync(unsigned mask, T var, int src_lane, int width = 32,
              const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  namespace in = ::opforge::simt::internal;
  return in::FromBits<T>(
      in::WarpOp(in::kShflIdx, mask, in::ToBits(var), src_lane, width, file, line));
}
template <typename T>
T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32,
                   const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  namespace in = ::opforge::simt::internal;
  return in::FromBits<T>(
      in::WarpOp(in::kShflDown, mask, in::ToBits(var), static_cast<int>(delta), width, file, line));
}
template <typename T>
T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = 32,
                 const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  namespace in = ::opforge::simt::internal;
  return in::FromBits<T>(
      in::WarpOp(in::kShflUp, mask, in::ToBits(var), static_cast<int>(delta), width, file, line));
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = 32,
                  const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  namespace in = ::opforge::simt::internal;
  return in::FromBits<T>(
      in::WarpOp(in::kShflXor, mask, in::ToBits(var), lane_mask, width, file, line));
}
inline unsigned __ballot_sync(unsigned mask, int predicate, const char* file = __builtin_FILE(),
                              int line = __builtin_LINE()) {
  namespace in = ::opforge::simt::internal;
  return static_cast<unsigned>(
      in::WarpOp(in::kBallot, mask, predicate != 0 ? 1 : 0, 0, 32, file, line));
}
inline int __any_sync(unsigned mask, int predicate, const char* file = __builtin_FILE(),
                      int line = __builtin_LINE()) {
  namespace in = ::opforge::simt::internal;
  return static_cast<int>(in::WarpOp(in::kAny, mask, predicate != 0 ? 1 : 0, 0, 32, file, line));
}
inline int __all_sync(unsigned mask, int predicate, const char* file = __builtin_FILE(),
                      int line = __builtin_LINE()) {
  namespace in = ::opforge::simt::internal;
  return static_cast<int>(in::WarpOp(in::kAll, mask, predicate != 0 ? 1 : 0, 0, 32, file, line));
}

// --- atomics (the GPU's relaxed read-modify-writes) --------------------------------------------

namespace opforge {
namespace simt {
namespace internal {

template <typename T, typename F>
T AtomicUpdate(T* address, F f) {
  T old = __atomic_load_n(address, __ATOMIC_RELAXED);
  while (!__atomic_compare_exchange_n(address, &old, f(old), true, __ATOMIC_RELAXED,
                                      __ATOMIC_RELAXED)) {
  }
  return old;
}
// Floating-point atomics: compare-and-swap on the bits.
template <typename T, typename Bits, typename F>
T AtomicFloatUpdate(T* address, F f) {
  static_assert(sizeof(T) == sizeof(Bits));
  Bits* bits = reinterpret_cast<Bits*>(address);
  Bits old = __atomic_load_n(bits, __ATOMIC_RELAXED);
  for (;;) {
    T value;
    std::memcpy(&value, &old, sizeof(T));
    const T next = f(value);
    Bits next_bits;
    std::memcpy(&next_bits, &next, sizeof(T));
    if (__atomic_compare_exchange_n(bits, &old, next_bits, true, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED)) {
      return value;
    }
  }
}

}  // namespace internal
}  // namespace simt
}  // namespace opforge

template <typename T>
std::enable_if_t<std::is_integral_v<T>, T> atomicAdd(T* address, T value) {
  return __atomic_fetch_add(address, value, __ATOMIC_RELAXED);
}
inline float atomicAdd(float* address, float value) {
  return ::opforge::simt::internal::AtomicFloatUpdate<float, uint32_t>(
      address, [value](float v) { return v + value; });
}
inline double atomicAdd(double* address, double value) {
  return ::opforge::simt::internal::AtomicFloatUpdate<double, uint64_t>(
      address, [value](double v) { return v + value; });
}
template <typename T>
std::enable_if_t<std::is_integral_v<T>, T> atomicSub(T* address, T value) {
  return __atomic_fetch_sub(address, value, __ATOMIC_RELAXED);
}
template <typename T>
std::enable_if_t<std::is_integral_v<T>, T> atomicOr(T* address, T value) {
  return __atomic_fetch_or(address, value, __ATOMIC_RELAXED);
}
template <typename T>
std::enable_if_t<std::is_integral_v<T>, T> atomicAnd(T* address, T value) {
  return __atomic_fetch_and(address, value, __ATOMIC_RELAXED);
}
template <typename T>
std::enable_if_t<std::is_integral_v<T>, T> atomicXor(T* address, T value) {
  return __atomic_fetch_xor(address, value, __ATOMIC_RELAXED);
}
template <typename T>
std::enable_if_t<std::is_integral_v<T>, T> atomicMin(T* address, T value) {
  return ::opforge::simt::internal::AtomicUpdate(address,
                                                 [value](T v) { return value < v ? value : v; });
}
template <typename T>
std::enable_if_t<std::is_integral_v<T>, T> atomicMax(T* address, T value) {
  return ::opforge::simt::internal::AtomicUpdate(address,
                                                 [value](T v) { return value > v ? value : v; });
}
template <typename T>
std::enable_if_t<std::is_integral_v<T>, T> atomicExch(T* address, T value) {
  return __atomic_exchange_n(address, value, __ATOMIC_RELAXED);
}
inline float atomicExch(float* address, float value) {
  return ::opforge::simt::internal::AtomicFloatUpdate<float, uint32_t>(
      address, [value](float) { return value; });
}
template <typename T>
std::enable_if_t<std::is_integral_v<T>, T> atomicCAS(T* address, T compare, T value) {
  __atomic_compare_exchange_n(address, &compare, value, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
  return compare;
}
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

// --- maths the host library lacks ----------------------------------------------------------------
// The _rn intrinsics round once, to nearest even: the host's IEEE operations, never contracted
// (a SIMT build compiles with -ffp-contract=off, as nvcc's --fmad=false).
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
inline float __frcp_rn(float a) { return 1.0f / a; }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __ddiv_rn(double a, double b) { return a / b; }
inline double __dsqrt_rn(double a) { return std::sqrt(a); }
inline double __drcp_rn(double a) { return 1.0 / a; }
inline double __fma_rn(double a, double b, double c) { return std::fma(a, b, c); }
// The fast approximations: the host's correctly rounded functions (within the GPU's stated
// error bounds, so a result that passes here may still differ on a GPU in the last bits).
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __sinf(float x) { return std::sin(x); }
inline float __cosf(float x) { return std::cos(x); }
inline float __powf(float x, float y) { return std::pow(x, y); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __saturatef(float x) { return x > 0.0f ? (x < 1.0f ? x : 1.0f) : 0.0f; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float rcbrtf(float x) { return 1.0f / std::cbrt(x); }
inline double rcbrt(double x) { return 1.0 / std::cbrt(x); }
inline float __int_as_float(int x) {
  return ::opforge::simt::internal::FromBits<float>(
      static_cast<uint64_t>(static_cast<uint32_t>(x)));
}
inline int __float_as_int(float x) {
  return static_cast<int>(static_cast<uint32_t>(::opforge::simt::internal::ToBits(x)));
}
inline float __uint_as_float(unsigned x) {
  return ::opforge::simt::internal::FromBits<float>(static_cast<uint64_t>(x));
}
inline unsigned __float_as_uint(float x) {
  return static_cast<unsigned>(::opforge::simt::internal::ToBits(x));
}
inline double __longlong_as_double(long long x) {
  return ::opforge::simt::internal::FromBits<double>(static_cast<uint64_t>(x));
}
inline long long __double_as_longlong(double x) {
  return static_cast<long long>(::opforge::simt::internal::ToBits(x));
}
inline unsigned __umulhi(unsigned a, unsigned b) {
  return static_cast<unsigned>((static_cast<uint64_t>(a) * b) >> 32);
}
inline int __mulhi(int a, int b) { return static_cast<int>((static_cast<int64_t>(a) * b) >> 32); }
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
  return static_cast<unsigned long long>((static_cast<unsigned __int128>(a) * b) >> 64);
}
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }
inline int __clzll(long long x) {
  return x == 0 ? 64 : __builtin_clzll(static_cast<unsigned long long>(x));
}
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
  unsigned r = 0;
  for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
  return r;
}
// The C library's, in the global namespace as CUDA's device library has them.
using std::isfinite;
using std::isinf;
using std::isnan;

// --- the launch --------------------------------------------------------------------------------

namespace opforge {
namespace simt {
namespace internal {

// The arguments of a launch, copied once when the launch is made (as a GPU copies them into the
// kernel's parameter space), then copied into every thread's parameters by `call`.
template <typename Call>
class Launcher {
 public:
  Launcher(const LaunchSite& site, dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
           Call call)
      : site_(site),
        grid_(grid),
        block_(block),
        shared_bytes_(shared_bytes),
        stream_(stream),
        call_(call) {}

  template <typename... Args>
  void operator()(Args&&... args) {
    std::tuple<std::decay_t<Args>...> params(std::forward<Args>(args)...);
    struct Context {
      Call* call;
      std::tuple<std::decay_t<Args>...>* params;
    } context{&call_, &params};
    RunGrid(
        site_, grid_, block_, shared_bytes_, stream_,
        [](void* p) {
          auto* c = static_cast<Context*>(p);
          std::apply(*c->call, *c->params);
        },
        &context);
  }

 private:
  LaunchSite site_;
  dim3 grid_, block_;
  size_t shared_bytes_;
  cudaStream_t stream_;
  Call call_;
};

template <typename Call>
Launcher<Call> MakeLauncher(const LaunchSite& site, dim3 grid, dim3 block, size_t shared_bytes,
                            cudaStream_t stream, Call call) {
  return Launcher<Call>(site, grid, block, shared_bytes, stream, call);
}

}  // namespace internal
}  // namespace simt
}  // namespace opforge

// Kernel<...><<<grid, block, shared_bytes, stream>>>(args...) on the SIMT runtime. Each thread
// calls the kernel with its own copy of the arguments.
#define OPFORGE_LAUNCH(grid, block, shared_bytes, stream, ...)                                  \
  ::opforge::simt::internal::MakeLauncher(                                                      \
      ::opforge::simt::internal::LaunchSite{#__VA_ARGS__, __FILE__, __LINE__}, (grid), (block), \
      (shared_bytes), (stream),                                                                 \
      [](auto... opforge_simt_args) { __VA_ARGS__(opforge_simt_args...); })

#endif  // OPFORGE_COMMON_SIMT_SIMT_H_

// CUDA version of FusedBatchNormLeakyRelu and its gradient: the CPU kernel's arithmetic step for
// step, so that both devices give the same bits (NaN payloads aside):
//   1. per chunk of kChunkRows rows (the CPU's chunks), one block; one thread per channel sums
//      its chunk's rows in order, in double;
//   2. one thread per channel adds the chunks in order and finishes the statistics and the
//      per-channel coefficients;
//   3. one element-wise pass.
// Every operation is written with a round-to-nearest intrinsic: nvcc would otherwise contract
// a * b + c into one FMA, which the CPU build (-ffp-contract=off) does not do. The partial sums
// and coefficients live in scratch allocated on the stream. Index: int32_t when every index and
// offset fits (cuda::DispatchIndex: the per-element channel i % C in 32 bits, several times
// cheaper than in 64), else int64_t; the arithmetic on values does not depend on it.
#include <cstdint>
#include <string>

#include "common/cuda_util.cuh"
#include "ops/fused_batch_norm_leaky_relu/fused_batch_norm_leaky_relu.h"

namespace opforge {
namespace {

constexpr int64_t kChunkRows = 256;  // as the CPU kernel's

__device__ inline float Mul(float a, float b) { return __fmul_rn(a, b); }
__device__ inline float Add(float a, float b) { return __fadd_rn(a, b); }
__device__ inline float Sub(float a, float b) { return __fsub_rn(a, b); }
__device__ inline float Div(float a, float b) { return __fdiv_rn(a, b); }
__device__ inline float Sqrt(float a) { return __fsqrt_rn(a); }
__device__ inline double Mul(double a, double b) { return __dmul_rn(a, b); }
__device__ inline double Add(double a, double b) { return __dadd_rn(a, b); }
__device__ inline double Sub(double a, double b) { return __dsub_rn(a, b); }
__device__ inline double Div(double a, double b) { return __ddiv_rn(a, b); }
__device__ inline double Sqrt(double a) { return __dsqrt_rn(a); }

// C: float for half, bfloat16 and float; double for double (the CPU's compute type).
template <typename T>
struct Types {
  using C = float;
};
template <>
struct Types<double> {
  using C = double;
};

template <typename T>
__device__ inline typename Types<T>::C Load(T v) {
  return static_cast<typename Types<T>::C>(cuda::Num<T>::To(v));
}
template <typename T, typename C>
__device__ inline T Store(C v) {
  return cuda::Num<T>::From(static_cast<typename cuda::Num<T>::C>(v));
}

// The scratch layout of each pass, in bytes: the per-chunk partial sums (double), then the
// per-channel factors (C), then one int flag. Host code, also behind *GpuScratchBytes.
int64_t Chunks(int64_t rows) { return (rows + kChunkRows - 1) / kChunkRows; }
template <typename C>
int64_t ForwardScratch(int64_t rows, int64_t ch) {
  return static_cast<int64_t>(sizeof(double)) * Chunks(rows) * 2 * ch +
         static_cast<int64_t>(sizeof(C)) * 3 * ch + static_cast<int64_t>(sizeof(int));
}
template <typename C>
int64_t BackwardScratch(int64_t rows, int64_t ch) {
  return static_cast<int64_t>(sizeof(double)) * std::max<int64_t>(Chunks(rows), 1) * 2 * ch +
         static_cast<int64_t>(sizeof(C)) * 6 * ch + static_cast<int64_t>(sizeof(int));
}

Status TooLittleScratch(const char* op, int64_t need, int64_t have) {
  return Status::Internal(std::string(op) + ": the GPU kernel needs " + std::to_string(need) +
                          " bytes of scratch memory, the caller gave " + std::to_string(have));
}

Status Failure(const char* op, const char* what, cudaError_t err) {
  return Status::Internal(std::string(op) + ": " + what + " failed: " + cudaGetErrorString(err));
}

// --- forward -----------------------------------------------------------------------------------

// The pivot of a channel: its first value, or 0 when that is not finite (as the CPU).
template <typename T>
__device__ double Pivot(const T* x, int64_t c) {
  const double first = static_cast<double>(Load(x[c]));
  return isfinite(first) ? first : 0.0;
}

// partial[k] = (sum of d, sum of d * d) over chunk k's rows, d = x - the first row (the pivot).
template <typename T, typename Index>
__global__ void StatsPartial(Index rows, Index ch, Index chunks, const T* x, double* partial) {
  for (Index k = static_cast<Index>(blockIdx.x); k < chunks; k += static_cast<Index>(gridDim.x)) {
    const Index r0 = k * Index{kChunkRows};
    const Index r1 = rows - r0 < Index{kChunkRows} ? rows : r0 + Index{kChunkRows};
    for (Index c = static_cast<Index>(threadIdx.x); c < ch; c += static_cast<Index>(blockDim.x)) {
      const double pivot = Pivot(x, c);
      double s = 0.0, q = 0.0;
      for (Index r = r0; r < r1; ++r) {
        const double d = Sub(static_cast<double>(Load(x[r * ch + c])), pivot);
        s = Add(s, d);
        q = Add(q, Mul(d, d));
      }
      partial[k * 2 * ch + c] = s;
      partial[k * 2 * ch + ch + c] = q;
    }
  }
}

// Per channel, as the CPU: the chunks added in order (from 0.0), mean and variance, then
// scale = rsqrt(variance + epsilon) * gamma, shift = beta - mean * scale.
template <typename T, typename C, typename Index>
__global__ void StatsFinish(Index rows, Index ch, Index chunks, const T* x, const double* partial,
                            C epsilon, const C* gamma, const C* beta, C* mean, C* variance,
                            C* scale, C* shift, C* inv, int* unfolded) {
  for (Index c = cuda::GridStart<Index>(), step = cuda::GridStep<Index>(); c < ch;
       c = cuda::GridNext(c, step, ch)) {
    double s = 0.0, q = 0.0;
    for (Index k = 0; k < chunks; ++k) {
      s = Add(s, partial[k * 2 * ch + c]);
      q = Add(q, partial[k * 2 * ch + ch + c]);
    }
    const double n = static_cast<double>(rows);
    const double d = Div(s, n);
    double var = Sub(Div(q, n), Mul(d, d));
    var = var < 0.0 ? 0.0 : var;  // std::max(var, 0.0), NaN included
    const C m = static_cast<C>(Add(Pivot(x, c), d));
    const C v = static_cast<C>(var);
    mean[c] = m;
    variance[c] = v;
    const C r = Div(C(1), Sqrt(Add(v, epsilon)));
    const C sc = Mul(r, gamma[c]);
    const C sh = Sub(beta[c], Mul(m, sc));
    inv[c] = r;
    scale[c] = sc;
    shift[c] = sh;
    if (!isfinite(sc) || !isfinite(sh)) atomicOr(unfolded, 1);
  }
}

// The pre-activation z = xhat * gamma + beta of channel c, as the CPU computes it: folded,
// x * scale + shift, unless some channel's scale or shift is not finite (*unfolded set), where
// the fold makes inf - inf; then (x - mean) * inv * gamma + beta.
template <typename C, typename Index>
__device__ inline C PreActivation(C x, Index c, const C* scale, const C* shift, const C* mean,
                                  const C* inv, const C* gamma, const C* beta,
                                  const int* unfolded) {
  if (*unfolded == 0) return Add(Mul(x, scale[c]), shift[c]);
  return Add(Mul(Mul(Sub(x, mean[c]), inv[c]), gamma[c]), beta[c]);
}

template <typename T, typename C, typename Index>
__global__ void Normalize(Index n, Index ch, const T* x, const C* scale, const C* shift,
                          const C* mean, const C* inv, const C* gamma, const C* beta,
                          const int* unfolded, C alpha, T* y) {
  for (Index i = cuda::GridStart<Index>(), step = cuda::GridStep<Index>(); i < n;
       i = cuda::GridNext(i, step, n)) {
    const Index c = i % ch;
    const C z = PreActivation(Load(x[i]), c, scale, shift, mean, inv, gamma, beta, unfolded);
    y[i] = Store<T>(z > C(0) ? z : Mul(z, alpha));
  }
}

// --- gradient ----------------------------------------------------------------------------------

// Per channel, from the given statistics: scale, shift and inv = 1 / sqrt(variance + epsilon).
template <typename C, typename Index>
__global__ void Coefficients(Index ch, C epsilon, const C* gamma, const C* beta, const C* mean,
                             const C* variance, C* scale, C* shift, C* inv, int* unfolded) {
  for (Index c = cuda::GridStart<Index>(), step = cuda::GridStep<Index>(); c < ch;
       c = cuda::GridNext(c, step, ch)) {
    const C r = Div(C(1), Sqrt(Add(variance[c], epsilon)));
    inv[c] = r;
    const C s = Mul(r, gamma[c]);
    const C sh = Sub(beta[c], Mul(mean[c], s));
    scale[c] = s;
    shift[c] = sh;
    if (!isfinite(s) || !isfinite(sh)) atomicOr(unfolded, 1);
  }
}

// The per-channel arrays of the gradient kernels.
template <typename C>
struct GradCoefficients {
  const C* scale;
  const C* shift;
  const C* mean;
  const C* inv;
  const C* gamma;
  const C* beta;
  const int* unfolded;
};

template <typename T, typename C, typename Index>
__device__ inline void GradTerms(T xv_t, T gv_t, Index c, const GradCoefficients<C>& k, C alpha,
                                 C* g, C* xhat) {
  const C xv = Load(xv_t);
  const C z = PreActivation(xv, c, k.scale, k.shift, k.mean, k.inv, k.gamma, k.beta, k.unfolded);
  const C gv = Load(gv_t);
  *g = z > C(0) ? gv : Mul(gv, alpha);
  *xhat = Mul(Sub(xv, k.mean[c]), k.inv[c]);
}

template <typename T, typename C, typename Index>
__global__ void GradPartial(Index rows, Index ch, Index chunks, const T* dy, const T* x,
                            GradCoefficients<C> coef, C alpha, double* partial) {
  for (Index k = static_cast<Index>(blockIdx.x); k < chunks; k += static_cast<Index>(gridDim.x)) {
    const Index r0 = k * Index{kChunkRows};
    const Index r1 = rows - r0 < Index{kChunkRows} ? rows : r0 + Index{kChunkRows};
    for (Index c = static_cast<Index>(threadIdx.x); c < ch; c += static_cast<Index>(blockDim.x)) {
      double s = 0.0, q = 0.0;
      for (Index r = r0; r < r1; ++r) {
        C g, xhat;
        GradTerms<T, C>(x[r * ch + c], dy[r * ch + c], c, coef, alpha, &g, &xhat);
        s = Add(s, static_cast<double>(g));
        q = Add(q, Mul(static_cast<double>(g), static_cast<double>(xhat)));
      }
      partial[k * 2 * ch + c] = s;
      partial[k * 2 * ch + ch + c] = q;
    }
  }
}

template <typename C, typename Index>
__global__ void GradFinish(Index rows, Index ch, Index chunks, const double* partial,
                           const C* gamma, const C* inv, C* dgamma, C* dbeta, C* a, C* mg, C* mgx) {
  for (Index c = cuda::GridStart<Index>(), step = cuda::GridStep<Index>(); c < ch;
       c = cuda::GridNext(c, step, ch)) {
    double s = 0.0, q = 0.0;
    for (Index k = 0; k < chunks; ++k) {
      s = Add(s, partial[k * 2 * ch + c]);
      q = Add(q, partial[k * 2 * ch + ch + c]);
    }
    const double n = static_cast<double>(rows);
    dbeta[c] = static_cast<C>(s);
    dgamma[c] = static_cast<C>(q);
    a[c] = Mul(gamma[c], inv[c]);
    mg[c] = static_cast<C>(Div(s, n));
    mgx[c] = static_cast<C>(Div(q, n));
  }
}

template <typename T, typename C, typename Index>
__global__ void GradElementwise(Index n, Index ch, const T* dy, const T* x,
                                GradCoefficients<C> coef, const C* a, const C* mg, const C* mgx,
                                C alpha, T* dx) {
  for (Index i = cuda::GridStart<Index>(), step = cuda::GridStep<Index>(); i < n;
       i = cuda::GridNext(i, step, n)) {
    const Index c = i % ch;
    C g, xhat;
    GradTerms<T, C>(x[i], dy[i], c, coef, alpha, &g, &xhat);
    dx[i] = Store<T>(Mul(a[c], Sub(Sub(g, mg[c]), Mul(xhat, mgx[c]))));
  }
}

constexpr int64_t kMaxChunkBlocks = cuda::kMaxGridBlocks;  // 2^16 on a GPU

unsigned ChunkBlocks(int64_t chunks) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(chunks, kMaxChunkBlocks)));
}

// The largest index or offset the kernels form: the elements of x and of the partial sums, with
// a margin for the strided loops over chunks (k += gridDim.x) and channels (c += blockDim.x),
// which step past their ends once.
int64_t LargestIndex(int64_t rows, int64_t ch, int64_t chunks) {
  return std::max(rows * ch, std::max<int64_t>(chunks, 1) * 2 * ch) + kMaxChunkBlocks +
         cuda::kThreads;
}

template <typename T>
Status Forward(const BatchNormLeakyParams& p, const void* xv, const void* gammav, const void* betav,
               void* yv, void* meanv, void* variancev, void* scratch, int64_t scratch_bytes,
               cudaStream_t stream) {
  using C = typename Types<T>::C;
  constexpr char kOp[] = "FusedBatchNormLeakyRelu";
  const int64_t rows = p.rows, ch = p.channels;
  if (ch == 0) return Status::Ok();
  C* mean = static_cast<C*>(meanv);
  C* variance = static_cast<C*>(variancev);
  if (rows == 0) {
    // NaN statistics, as the CPU (0 / 0): all-ones bits are a quiet NaN in float and double.
    const cudaError_t e1 = cudaMemsetAsync(mean, 0xff, sizeof(C) * ch, stream);
    const cudaError_t e2 = cudaMemsetAsync(variance, 0xff, sizeof(C) * ch, stream);
    if (e1 != cudaSuccess || e2 != cudaSuccess)
      return Failure(kOp, "cudaMemsetAsync", e1 != cudaSuccess ? e1 : e2);
    return Status::Ok();
  }
  const T* x = static_cast<const T*>(xv);
  const int64_t chunks = Chunks(rows);
  if (scratch_bytes < ForwardScratch<C>(rows, ch)) {
    return TooLittleScratch(kOp, ForwardScratch<C>(rows, ch), scratch_bytes);
  }
  char* base = static_cast<char*>(scratch);
  const size_t partial_bytes = sizeof(double) * static_cast<size_t>(chunks * 2 * ch);
  double* partial = reinterpret_cast<double*>(base);
  C* scale = reinterpret_cast<C*>(base + partial_bytes);
  C* shift = scale + ch;
  C* inv = shift + ch;
  int* unfolded = reinterpret_cast<int*>(inv + ch);
  if (const cudaError_t e = cudaMemsetAsync(unfolded, 0, sizeof(int), stream); e != cudaSuccess) {
    return Failure(kOp, "cudaMemsetAsync", e);
  }
  const C* gamma = static_cast<const C*>(gammav);
  const C* beta = static_cast<const C*>(betav);
  return cuda::DispatchIndex(LargestIndex(rows, ch, chunks), [&](auto tag) {
    using Index = typename decltype(tag)::type;
    const Index n_rows = static_cast<Index>(rows), n_ch = static_cast<Index>(ch),
                n_chunks = static_cast<Index>(chunks);
    OPFORGE_LAUNCH(ChunkBlocks(chunks), cuda::kThreads, 0, stream, StatsPartial<T, Index>)
    (n_rows, n_ch, n_chunks, x, partial);
    OPFORGE_LAUNCH(cuda::Blocks(ch), cuda::kThreads, 0, stream, StatsFinish<T, C, Index>)
    (n_rows, n_ch, n_chunks, x, partial, static_cast<C>(p.epsilon), gamma, beta, mean, variance,
     scale, shift, inv, unfolded);
    OPFORGE_LAUNCH(cuda::Blocks(rows * ch), cuda::kThreads, 0, stream, Normalize<T, C, Index>)
    (static_cast<Index>(rows * ch), n_ch, x, scale, shift, mean, inv, gamma, beta, unfolded,
     static_cast<C>(p.alpha), static_cast<T*>(yv));
    return cuda::LaunchStatus(kOp);
  });
}

template <typename T>
Status Backward(const BatchNormLeakyParams& p, const void* dyv, const void* xv, const void* gammav,
                const void* betav, const void* meanv, const void* variancev, void* dxv,
                void* dgammav, void* dbetav, void* scratch, int64_t scratch_bytes,
                cudaStream_t stream) {
  using C = typename Types<T>::C;
  constexpr char kOp[] = "FusedBatchNormLeakyReluGrad";
  const int64_t rows = p.rows, ch = p.channels;
  if (ch == 0) return Status::Ok();
  const int64_t chunks = Chunks(rows);
  if (scratch_bytes < BackwardScratch<C>(rows, ch)) {
    return TooLittleScratch(kOp, BackwardScratch<C>(rows, ch), scratch_bytes);
  }
  char* base = static_cast<char*>(scratch);
  const size_t partial_bytes =
      sizeof(double) * static_cast<size_t>(std::max<int64_t>(chunks, 1) * 2 * ch);
  double* partial = reinterpret_cast<double*>(base);
  C* scale = reinterpret_cast<C*>(base + partial_bytes);
  C* shift = scale + ch;
  C* inv = shift + ch;
  C* a = inv + ch;
  C* mg = a + ch;
  C* mgx = mg + ch;
  int* unfolded = reinterpret_cast<int*>(mgx + ch);
  if (const cudaError_t e = cudaMemsetAsync(unfolded, 0, sizeof(int), stream); e != cudaSuccess) {
    return Failure(kOp, "cudaMemsetAsync", e);
  }
  const C* gamma = static_cast<const C*>(gammav);
  const C* beta = static_cast<const C*>(betav);
  const C* mean = static_cast<const C*>(meanv);
  const C alpha = static_cast<C>(p.alpha);
  const T* x = static_cast<const T*>(xv);
  const T* dy = static_cast<const T*>(dyv);
  return cuda::DispatchIndex(LargestIndex(rows, ch, chunks), [&](auto tag) {
    using Index = typename decltype(tag)::type;
    const Index n_rows = static_cast<Index>(rows), n_ch = static_cast<Index>(ch),
                n_chunks = static_cast<Index>(chunks);
    OPFORGE_LAUNCH(cuda::Blocks(ch), cuda::kThreads, 0, stream, Coefficients<C, Index>)
    (n_ch, static_cast<C>(p.epsilon), gamma, beta, mean, static_cast<const C*>(variancev), scale,
     shift, inv, unfolded);
    const GradCoefficients<C> coef{scale, shift, mean, inv, gamma, beta, unfolded};
    if (chunks > 0) {
      OPFORGE_LAUNCH(ChunkBlocks(chunks), cuda::kThreads, 0, stream, GradPartial<T, C, Index>)
      (n_rows, n_ch, n_chunks, dy, x, coef, alpha, partial);
    }
    OPFORGE_LAUNCH(cuda::Blocks(ch), cuda::kThreads, 0, stream, GradFinish<C, Index>)
    (n_rows, n_ch, n_chunks, partial, gamma, inv, static_cast<C*>(dgammav), static_cast<C*>(dbetav),
     a, mg, mgx);
    if (rows > 0) {
      OPFORGE_LAUNCH(cuda::Blocks(rows * ch), cuda::kThreads, 0, stream,
                     GradElementwise<T, C, Index>)
      (static_cast<Index>(rows * ch), n_ch, dy, x, coef, a, mg, mgx, alpha, static_cast<T*>(dxv));
    }
    return cuda::LaunchStatus(kOp);
  });
}

}  // namespace

int64_t BatchNormLeakyForwardGpuScratchBytes(DType dtype, const BatchNormLeakyParams& params) {
  if (params.channels == 0 || params.rows == 0) return 0;
  return dtype == DType::kDouble ? ForwardScratch<double>(params.rows, params.channels)
                                 : ForwardScratch<float>(params.rows, params.channels);
}

int64_t BatchNormLeakyBackwardGpuScratchBytes(DType dtype, const BatchNormLeakyParams& params) {
  if (params.channels == 0) return 0;
  return dtype == DType::kDouble ? BackwardScratch<double>(params.rows, params.channels)
                                 : BackwardScratch<float>(params.rows, params.channels);
}

Status BatchNormLeakyForwardGpu(DType dtype, const BatchNormLeakyParams& params, const void* x,
                                const void* gamma, const void* beta, void* y, void* mean,
                                void* variance, void* scratch, int64_t scratch_bytes,
                                void* stream) {
  return cuda::DispatchDType<false>(dtype, "FusedBatchNormLeakyRelu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    return Forward<T>(params, x, gamma, beta, y, mean, variance, scratch, scratch_bytes,
                      static_cast<cudaStream_t>(stream));
  });
}

Status BatchNormLeakyBackwardGpu(DType dtype, const BatchNormLeakyParams& params, const void* dy,
                                 const void* x, const void* gamma, const void* beta,
                                 const void* mean, const void* variance, void* dx, void* dgamma,
                                 void* dbeta, void* scratch, int64_t scratch_bytes, void* stream) {
  return cuda::DispatchDType<false>(dtype, "FusedBatchNormLeakyReluGrad", [&](auto tag) {
    using T = typename decltype(tag)::type;
    return Backward<T>(params, dy, x, gamma, beta, mean, variance, dx, dgamma, dbeta, scratch,
                       scratch_bytes, static_cast<cudaStream_t>(stream));
  });
}

}  // namespace opforge

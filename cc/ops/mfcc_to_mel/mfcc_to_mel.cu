// CUDA kernels of MfccToMel and its gradient: the CPU core's arithmetic (mfcc_to_mel_cpu.cc),
// float64 whatever T, each sum in the CPU's order (ascending coefficient for the forward,
// ascending Mel band for the gradient), compiled without FMA contraction.
//
// The basis (lifter and inverse DCT, n_mels x n_mfcc float64) is not uploaded: the entry points
// have no scratch, and a __constant__ or __device__ table would be shared by concurrent calls.
// Each block computes the entries it needs into shared memory, one chunk of kThreads
// coefficients (forward) or bands (gradient) at a time, with the CPU's formula. The device's
// cos and sin are within 2 ulp (CUDA's documented bound) where glibc's are within 1, so a basis
// entry can differ from the CPU's by a few ulp; everything after it is the CPU's operations in
// the CPU's order. The consequence, derived in mfcc_to_mel_cuda_test.cc and checked there: the
// exponent sum x differs by at most ~(n_mfcc + 8) eps * sum_n |basis[k, n] c[n]|, the output
// mel = ref 10^(0.1 x) = exp(0.1 ln 10 x) ref relatively by 0.23 times that plus exp's few ulp
// (float64), which float32 outputs round away except near a rounding boundary (then one float ulp).
//
// Layout: one block row per output row (batch item and band, or batch item and coefficient),
// grid-strided over blockIdx.y; threads over the time axis, grid-strided over blockIdx.x, so that
// every read and write along time is coalesced. Index arithmetic is int64_t: the kernels are
// bound by float64 exp and cos, not by index math.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "common/cuda_util.cuh"
#include "ops/mfcc_to_mel/mfcc_to_mel.h"

namespace opforge {
namespace {

constexpr int kThreads = 256;
// Caps of the launch grid; past them the kernels stride (tested). 4096 x 256 threads already
// fill any current GPU many times over.
constexpr int64_t kMaxBlocksX = cuda::kMaxGridBlocks2DX;  // 4096 on a GPU
constexpr int64_t kMaxBlocksY = cuda::kMaxGridBlocksY;    // 65535 on a GPU

struct Basis {
  int64_t n_mels, n_mfcc;
  int dct_type;
  bool ortho;
  double lifter;
};

// basis[k, n] as MfccToMelBasis computes it (same expressions, same order of operations).
__device__ inline double BasisEntry(const Basis& p, int64_t k, int64_t n) {
  const double N = static_cast<double>(p.n_mels);
  const double pi = 3.14159265358979323846;
  double inv_lifter = 1.0;
  if (p.lifter > 0) {
    const double sine = 1.0 + p.lifter * 0.5 * sin(pi * static_cast<double>(n + 1) / p.lifter);
    inv_lifter = 1.0 / (sine + static_cast<double>(std::numeric_limits<float>::min()));
  }
  double v;
  if (p.dct_type == 2) {  // DCT-III, scaled
    const double c = cos(pi * static_cast<double>(n) * static_cast<double>(2 * k + 1) / (2.0 * N));
    if (p.ortho) {
      v = n == 0 ? 1.0 / sqrt(N) : sqrt(2.0 / N) * c;
    } else {
      v = n == 0 ? 1.0 / (2.0 * N) : c / N;
    }
  } else {  // type 3: DCT-II, scaled
    const double c = cos(pi * static_cast<double>(k) * static_cast<double>(2 * n + 1) / (2.0 * N));
    if (p.ortho) {
      v = (k == 0 ? 1.0 / sqrt(N) : sqrt(2.0 / N)) * c;
    } else {
      v = c / N;
    }
  }
  return v * inv_lifter;
}

// mel[b, k, t] = ref 10^(0.1 sum_n basis[k, n] mfcc[b, n, t]). Row r = b * n_mels + k.
// Every __syncthreads is reached by the whole block: the loop bounds depend on blockIdx only,
// and threads past the time axis stay in the loops with `active` false.
template <typename T>
__global__ void ForwardKernel(Basis p, int64_t rows, int64_t n_frames, double ref, const T* mfcc,
                              T* mel) {
  __shared__ double basis[kThreads];
  const int64_t t_step = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t row = blockIdx.y; row < rows; row += gridDim.y) {
    const int64_t b = row / p.n_mels, k = row - b * p.n_mels;
    for (int64_t t0 = static_cast<int64_t>(blockIdx.x) * kThreads; t0 < n_frames; t0 += t_step) {
      const int64_t t = t0 + threadIdx.x;
      const bool active = t < n_frames;
      const T* in = mfcc + b * p.n_mfcc * n_frames + t;
      double acc = 0.0;
      for (int64_t n0 = 0; n0 < p.n_mfcc; n0 += kThreads) {
        const int len = static_cast<int>(std::min<int64_t>(kThreads, p.n_mfcc - n0));
        __syncthreads();  // the previous chunk's readers are done with `basis`
        if (static_cast<int>(threadIdx.x) < len) {
          basis[threadIdx.x] = BasisEntry(p, k, n0 + threadIdx.x);
        }
        __syncthreads();
        if (active) {
          for (int j = 0; j < len; ++j) {
            acc += basis[j] * static_cast<double>(in[(n0 + j) * n_frames]);
          }
        }
      }
      if (active) mel[row * n_frames + t] = static_cast<T>(exp(acc * kDbToNeper) * ref);
    }
  }
}

// grad_mfcc[b, n, t] = sum_k basis[k, n] (0.1 ln 10) mel[b, k, t] grad[b, k, t], k ascending.
// Row r = b * n_mfcc + n.
template <typename T>
__global__ void BackwardKernel(Basis p, int64_t rows, int64_t n_frames, const T* grad, const T* mel,
                               T* grad_mfcc) {
  __shared__ double basis[kThreads];
  const double scale = kDbToNeper;
  const int64_t t_step = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t row = blockIdx.y; row < rows; row += gridDim.y) {
    const int64_t b = row / p.n_mfcc, n = row - b * p.n_mfcc;
    for (int64_t t0 = static_cast<int64_t>(blockIdx.x) * kThreads; t0 < n_frames; t0 += t_step) {
      const int64_t t = t0 + threadIdx.x;
      const bool active = t < n_frames;
      const int64_t offset = b * p.n_mels * n_frames + t;
      double acc = 0.0;
      for (int64_t k0 = 0; k0 < p.n_mels; k0 += kThreads) {
        const int len = static_cast<int>(std::min<int64_t>(kThreads, p.n_mels - k0));
        __syncthreads();
        if (static_cast<int>(threadIdx.x) < len) {
          basis[threadIdx.x] = BasisEntry(p, k0 + threadIdx.x, n);
        }
        __syncthreads();
        if (active) {
          for (int j = 0; j < len; ++j) {
            const int64_t at = offset + (k0 + j) * n_frames;
            // (scale * mel) * grad, as the CPU's w.
            const double w = scale * static_cast<double>(mel[at]) * static_cast<double>(grad[at]);
            acc += basis[j] * w;
          }
        }
      }
      if (active) grad_mfcc[row * n_frames + t] = static_cast<T>(acc);
    }
  }
}

Basis BasisOf(const MfccToMelParams& p) {
  return {p.n_mels, p.n_mfcc, static_cast<int>(p.dct_type), p.norm == DctNorm::kOrtho, p.lifter};
}

dim3 GridOf(int64_t rows, int64_t n_frames) {
  const int64_t x = std::min<int64_t>((n_frames + kThreads - 1) / kThreads, kMaxBlocksX);
  const int64_t y = std::min<int64_t>(rows, kMaxBlocksY);
  return dim3(static_cast<unsigned>(x), static_cast<unsigned>(y), 1);
}

}  // namespace

Status MfccToMelForwardGpu(DType dtype, const MfccToMelParams& params, const void* mfcc, void* mel,
                           void* stream) {
  return cuda::DispatchFloatDouble(dtype, "MfccToMel", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t rows = params.batch * params.n_mels;
    if (rows == 0 || params.n_frames == 0) return Status::Ok();
    OPFORGE_LAUNCH(GridOf(rows, params.n_frames), kThreads, 0, static_cast<cudaStream_t>(stream),
                   ForwardKernel<T>)
    (BasisOf(params), rows, params.n_frames, params.ref, static_cast<const T*>(mfcc),
     static_cast<T*>(mel));
    return cuda::LaunchStatus("MfccToMel");
  });
}

Status MfccToMelBackwardGpu(DType dtype, const MfccToMelParams& params, const void* grad,
                            const void* mel, void* grad_mfcc, void* stream) {
  return cuda::DispatchFloatDouble(dtype, "MfccToMelGrad", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t rows = params.batch * params.n_mfcc;
    if (rows == 0 || params.n_frames == 0) return Status::Ok();
    OPFORGE_LAUNCH(GridOf(rows, params.n_frames), kThreads, 0, static_cast<cudaStream_t>(stream),
                   BackwardKernel<T>)
    (BasisOf(params), rows, params.n_frames, static_cast<const T*>(grad),
     static_cast<const T*>(mel), static_cast<T*>(grad_mfcc));
    return cuda::LaunchStatus("MfccToMelGrad");
  });
}

}  // namespace opforge

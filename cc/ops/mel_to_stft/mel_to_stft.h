// MelToStft: the non-negative least-squares inverse of a Mel filter bank, as
// librosa.feature.inverse.mel_to_stft (librosa 0.11): for every frame b = mel[..., :, t],
//   s = argmin_{s >= 0} 0.5 * || M s - b ||^2,    stft[..., :, t] = s ** (1 / power)
// with M = librosa.filters.mel(sr, n_fft, n_mels, fmin, fmax, htk, norm, dtype=T) (built here
// exactly as librosa builds it: float64 arithmetic, the triangles rounded to T, then scaled by
// the Slaney area normalisation in float64 and rounded again).
//
// Solver (in place of librosa's L-BFGS-B: `opforge bench mel_to_stft` times the two, and
// BM_MelToStft in griffin_lim_bench.cc the core alone). Every column of M has at most two
// non-zeros, in adjacent rows, so M D M^T is tridiagonal for any diagonal D. The solver is a
// semismooth Newton method on the dual of the slightly regularised problem
//   min_{s >= 0} 0.5 ||M s - b||^2 + mu/2 ||s||^2,   s = max(0, M^T nu),
//   F(nu) = M max(0, M^T nu) + mu nu - b = 0,        J = M D M^T + mu I,  D = [M^T nu > 0]
// (mu = 1e-10 * the largest diagonal entry of M M^T), each step one sparse LDL^T factorisation of
// the tridiagonal J (Eigen's SimplicialLDLT on a fixed pattern) and an Armijo line search on the
// concave dual. It starts where librosa does: nu0 = (M M^T + mu I)^-1 b, i.e. s0 = the
// least-squares (pseudo-inverse) solution clipped at 0, and keeps whichever of s0 and the final s
// has the smaller objective, so its objective is never above librosa's starting point. Where b
// is reachable (M s = b for some s >= 0, as for a real Mel spectrogram) the objective goes to
// ~0; otherwise to the NNLS minimum within O(mu). A few Newton steps per frame (median 1-7).
//
// A caller may give the filter bank M itself instead (tf.signal.linear_to_mel_weight_matrix,
// transposed, for TensorFlow's own MFCC pipeline): [n_mels, n_fft / 2 + 1] values of T, finite,
// >= 0, and with the structure the solver relies on: every frequency column has at most two
// non-zeros, in adjacent rows (overlapping triangular filters); ValidateMelFilterValues checks it.
//
// Layout: mel [..., n_mels, T] -> stft [..., n_fft / 2 + 1, T]. The Mel values must be finite.
#ifndef OPFORGE_OPS_MEL_TO_STFT_MEL_TO_STFT_H_
#define OPFORGE_OPS_MEL_TO_STFT_MEL_TO_STFT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/parallel.h"
#include "common/status.h"

// The element types of MelToStft (X-macro list, common/dtype.h).
#define OPFORGE_MEL_TO_STFT_TYPES(X, ...) \
  X(float, __VA_ARGS__)                   \
  X(double, __VA_ARGS__)

namespace opforge {

enum class MelNorm { kNone, kSlaney };

// librosa.filters.mel's arguments.
struct MelFilterParams {
  double sr = 22050.0;   // > 0
  int64_t n_fft = 2048;  // >= 1; n_fft / 2 + 1 frequency bins
  int64_t n_mels = 128;  // >= 1
  double fmin = 0.0;     // >= 0
  double fmax = -1.0;    // > fmin; a negative value means sr / 2 (librosa's fmax=None)
  bool htk = false;      // HTK's Mel scale instead of Slaney's
  MelNorm norm = MelNorm::kSlaney;
};

// "slaney" -> kSlaney; "none", "None" or "" -> kNone. `op` names the op in the message.
Status ParseMelNorm(const char* op, const std::string& norm, MelNorm* out);

// The filter bank's arguments; `op` names the op in the message.
Status ValidateMelFilter(const char* op, const MelFilterParams& params);

// The Slaney or HTK Mel scale, as librosa.hz_to_mel / librosa.mel_to_hz (float64).
double HzToMel(double hz, bool htk);
double MelToHz(double mel, bool htk);

// librosa.filters.mel(..., dtype=T): n_mels rows of n_fft / 2 + 1 weights, row-major. params
// must be valid. T: float or double.
template <typename T>
std::vector<T> MelFilterBank(const MelFilterParams& params);

struct MelToStftParams {
  MelFilterParams filters;  // filters.n_mels is taken from mel's shape
  // The caller gives M ([n_mels, n_freq] values of T) instead of the attrs in `filters` (whose
  // n_fft still gives n_freq; sr, fmin, fmax, htk and norm are then unused but still checked).
  bool given_filters = false;
  double power = 2.0;     // > 0: stft = s ** (1 / power)
  int64_t max_iter = 50;  // Newton steps per frame, >= 1
  // From the shape of mel (ValidateMelToStft fills them).
  int64_t batch = 0;     // product of the leading axes (may be 0)
  int64_t n_frames = 0;  // T >= 1
  int64_t n_freq = 0;    // n_fft / 2 + 1
};

// Checks the attributes and fills the shape fields (and filters.n_mels) from mel's shape
// [..., n_mels, T] (rank >= 2, n_mels >= 1, T >= 1); librosa's bank (given_filters = false).
Status ValidateMelToStft(const std::vector<int64_t>& mel, MelToStftParams* params);

// The same with the op's filters input: an empty [0, 0] tensor builds librosa's bank from the
// attrs; a shape [n_mels, n_fft / 2 + 1] (n_mels as mel's) is a given bank (given_filters =
// true), whose values ValidateMelFilterValues checks (the kernel does, on the host).
Status ValidateMelToStft(const std::vector<int64_t>& mel, const std::vector<int64_t>& filters,
                         MelToStftParams* params);

// A given bank's values ([n_mels, n_freq], row-major, params validated): finite, >= 0, and in
// every column at most two non-zeros, in adjacent rows. The error names `filters`, the column
// and the rows. T: float or double.
template <typename T>
Status ValidateMelFilterValues(const MelToStftParams& params, const T* filters);

// stft ([batch, n_freq, T]) from mel ([batch, n_mels, T]) with librosa's bank built from
// params.filters, or, where params.given_filters, with the bank `filters` ([n_mels, n_freq];
// checked with ValidateMelFilterValues first; ignored and may be null otherwise). Returns an
// error (and leaves stft unspecified) if a Mel value is NaN or infinite or a given bank is not
// valid. T: float or double.
template <typename T>
Status MelToStftForward(const MelToStftParams& params, const T* mel, const T* filters, T* stft,
                        const Parallel& parallel);
// librosa's bank (params.given_filters must be false).
template <typename T>
Status MelToStftForward(const MelToStftParams& params, const T* mel, T* stft,
                        const Parallel& parallel) {
  return MelToStftForward<T>(params, mel, nullptr, stft, parallel);
}

// CUDA version (mel_to_stft.cu), asynchronous on `stream` (a cudaStream_t); dtype kFloat or
// kDouble; mel, filters_or_null (a given bank, else null) and stft in device memory with the
// layouts above; params validated. A given bank's values are checked as
// ValidateMelFilterValues does (the same message), and non-finite Mel values are an
// InvalidArgument error, as on the CPU. `scratch` is device memory of at least
// MelToStftGpuScratchBytes(params) bytes (the binding takes it from TensorFlow's allocator: no
// cudaMalloc in the kernels), free for the call's kernels in stream order. Compiled only where
// nvcc exists.
int64_t MelToStftGpuScratchBytes(const MelToStftParams& params);
Status MelToStftForwardGpu(DType dtype, const MelToStftParams& params, const void* mel,
                           const void* filters_or_null, void* stft, void* scratch,
                           int64_t scratch_bytes, void* stream);

}  // namespace opforge

#endif  // OPFORGE_OPS_MEL_TO_STFT_MEL_TO_STFT_H_

// MelToStft: the non-negative least-squares inverse of a Mel filter bank, as
// librosa.feature.inverse.mel_to_stft (librosa 0.11): for every frame b = mel[..., :, t],
//   s = argmin_{s >= 0} 0.5 * || M s - b ||^2,    stft[..., :, t] = s ** (1 / power)
// with M = librosa.filters.mel(sr, n_fft, n_mels, fmin, fmax, htk, norm, dtype=T) (built here
// exactly as librosa builds it: float64 arithmetic, the triangles rounded to T, then scaled by
// the Slaney area normalisation in float64 and rounded again).
//
// Solver (measured against librosa's L-BFGS-B and projected gradient: see the closing note of
// issue 13 and mel_to_stft_bench.cc). Every column of M has at most two non-zeros, in adjacent
// rows, so M D M^T is tridiagonal for any diagonal D. The solver is a semismooth Newton method on
// the dual of the slightly regularised problem
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
// Layout: mel [..., n_mels, T] -> stft [..., n_fft / 2 + 1, T]. The Mel values must be finite.
#ifndef OPFORGE_OPS_MEL_TO_STFT_MEL_TO_STFT_H_
#define OPFORGE_OPS_MEL_TO_STFT_MEL_TO_STFT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/parallel.h"
#include "common/status.h"

namespace opforge {

enum class MelNorm { kNone, kSlaney };

// librosa.filters.mel's arguments.
struct MelFilterParams {
  double sr = 22050.0;  // > 0
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
  double power = 2.0;       // > 0: stft = s ** (1 / power)
  int64_t max_iter = 50;    // Newton steps per frame, >= 1
  // From the shape of mel (ValidateMelToStft fills them).
  int64_t batch = 0;     // product of the leading axes (may be 0)
  int64_t n_frames = 0;  // T >= 1
  int64_t n_freq = 0;    // n_fft / 2 + 1
};

// Checks the attributes and fills the shape fields (and filters.n_mels) from mel's shape
// [..., n_mels, T] (rank >= 2, n_mels >= 1, T >= 1).
Status ValidateMelToStft(const std::vector<int64_t>& mel, MelToStftParams* params);

// stft ([batch, n_freq, T]) from mel ([batch, n_mels, T]). Returns an error (and leaves stft
// unspecified) if a Mel value is NaN or infinite. T: float or double.
template <typename T>
Status MelToStftForward(const MelToStftParams& params, const T* mel, T* stft,
                        const Parallel& parallel);

}  // namespace opforge

#endif  // OPFORGE_OPS_MEL_TO_STFT_MEL_TO_STFT_H_

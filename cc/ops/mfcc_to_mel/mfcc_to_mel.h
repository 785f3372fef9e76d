// MfccToMel: Mel-frequency cepstral coefficients back to a Mel power spectrogram, as
// librosa.feature.inverse.mfcc_to_mel (librosa 0.11):
//   1. inverse liftering (lifter > 0):  c[n] <- c[n] / (1 + lifter / 2 * sin(pi * (n + 1) / lifter)
//                                                        + tiny(T)),
//   2. the inverse DCT along the coefficient axis, zero-padded from n_mfcc to n_mels:
//      scipy.fft.idct(c, type=dct_type, norm=norm, n=n_mels), i.e. with N = n_mels
//        type 2, norm none:  x[k] = c[0] / (2N) + 1/N * sum_{n>=1} c[n] cos(pi n (2k + 1) / 2N)
//        type 2, ortho:      x[k] = c[0] / sqrt(N) + sqrt(2/N) * sum_{n>=1} c[n] cos(...)
//        type 3, norm none:  x[k] = 1/N * sum_n c[n] cos(pi k (2n + 1) / 2N)
//        type 3, ortho:      x[k] = s_k * sum_n c[n] cos(pi k (2n + 1) / 2N),
//                            s_0 = 1 / sqrt(N), s_k = sqrt(2 / N)
//   3. dB to power as librosa.db_to_power:  mel = ref * 10^(0.1 x) (as exp(0.1 ln 10 x)).
// Steps 1 and 2 are one matrix, basis[k, n] (n_mels x n_mfcc, float64), so the op is
//   mel[b, k, t] = ref * 10^(0.1 * sum_n basis[k, n] * mfcc[b, n, t])
// computed in float64 for every element type and rounded once to T.
//
// Layout: time is the last axis, leading batch axes allowed: mfcc [..., n_mfcc, T] ->
// mel [..., n_mels, T]. NaN and infinity propagate (no error), as in librosa.
//
// The gradient (the op is smooth):
//   d mfcc[b, n, t] = sum_k basis[k, n] * (0.1 ln 10) * mel[b, k, t] * d mel[b, k, t]
// from the forward's output, in float64, each sum in one fixed order whatever the partition.
#ifndef OPFORGE_OPS_MFCC_TO_MEL_MFCC_TO_MEL_H_
#define OPFORGE_OPS_MFCC_TO_MEL_MFCC_TO_MEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/parallel.h"
#include "common/status.h"

// The element types of MfccToMel and its gradient (X-macro list, common/dtype.h): the kernels
// compute in float64 whatever T, so float32 and float64 are the types that make sense.
#define OPFORGE_MFCC_TO_MEL_TYPES(X, ...) \
  X(float, __VA_ARGS__)                   \
  X(double, __VA_ARGS__)

namespace opforge {

enum class DctNorm { kNone, kOrtho };

// 0.1 ln 10: mel = ref * 10^(0.1 x) is computed as ref * exp(kDbToNeper * x) (exp is several
// times faster than pow, within the same ulp or two), and the gradient scales by it. One
// constant, shared by the CPU and CUDA kernels.
constexpr double kDbToNeper = 0.1 * 2.30258509299404568402;

struct MfccToMelParams {
  // Attributes (the binding sets them; ValidateMfccToMel checks them).
  int64_t n_mels = 128;
  int64_t dct_type = 2;  // 2 or 3
  DctNorm norm = DctNorm::kOrtho;
  double ref = 1.0;     // > 0, finite
  double lifter = 0.0;  // >= 0, finite; 0 = no liftering
  // From the shape of mfcc (ValidateMfccToMel fills them).
  int64_t batch = 0;     // product of the leading axes (may be 0)
  int64_t n_mfcc = 0;    // >= 1, <= n_mels
  int64_t n_frames = 0;  // T >= 1
};

// "ortho" -> kOrtho; "none", "" or "None" -> kNone; anything else is an error naming `norm`.
Status ParseDctNorm(const std::string& norm, DctNorm* out);

// Checks the attributes in `params` and fills its shape fields from mfcc's shape
// [..., n_mfcc, T] (rank >= 2, n_mfcc in [1, n_mels], T >= 1).
Status ValidateMfccToMel(const std::vector<int64_t>& mfcc, MfccToMelParams* params);

// The gradient's shapes: grad and mel are [..., n_mels, T], mfcc is the forward's input (only
// its shape is used); all leading axes equal. Fills params' shape fields.
Status ValidateMfccToMelGrad(const std::vector<int64_t>& grad, const std::vector<int64_t>& mel,
                             const std::vector<int64_t>& mfcc, MfccToMelParams* params);

// basis[k * n_mfcc + n], float64: the lifter and the inverse DCT as one n_mels x n_mfcc matrix
// (row k: mel band, column n: coefficient). params must have been validated.
std::vector<double> MfccToMelBasis(const MfccToMelParams& params);

// mel ([batch, n_mels, T]) from mfcc ([batch, n_mfcc, T]). T: float or double.
template <typename T>
void MfccToMelForward(const MfccToMelParams& params, const T* mfcc, T* mel,
                      const Parallel& parallel);

// grad_mfcc ([batch, n_mfcc, T]) from grad_mel and the forward's output mel ([batch, n_mels, T]).
template <typename T>
void MfccToMelBackward(const MfccToMelParams& params, const T* grad_mel, const T* mel, T* grad_mfcc,
                       const Parallel& parallel);

// CUDA versions (mfcc_to_mel.cu), asynchronous on `stream` (a cudaStream_t); dtype kFloat or
// kDouble, pointers to device memory with the layouts above; params validated. Compiled only
// where nvcc exists (the binding calls them only in a CUDA build).
Status MfccToMelForwardGpu(DType dtype, const MfccToMelParams& params, const void* mfcc, void* mel,
                           void* stream);
Status MfccToMelBackwardGpu(DType dtype, const MfccToMelParams& params, const void* grad,
                            const void* mel, void* grad_mfcc, void* stream);

}  // namespace opforge

#endif  // OPFORGE_OPS_MFCC_TO_MEL_MFCC_TO_MEL_H_

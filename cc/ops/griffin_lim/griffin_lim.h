// GriffinLim: the fast Griffin-Lim algorithm (Perraudin et al., 2013) with momentum, as
// librosa.griffinlim (librosa 0.11): from a magnitude S [..., n_freq, T] and initial phases,
//   for n_iter times:
//     rebuilt = stft(istft(S * angles))
//     angles  = rebuilt - momentum / (1 + momentum) * tprev      (not on the first iteration)
//     angles  = angles / (|angles| + tiny(T)),   tprev = rebuilt
//   audio = istft(S * angles)
// with librosa's STFT and ISTFT: the window scipy.signal.get_window(window, win_length,
// fftbins=True) zero-padded (centred) to n_fft; frames centred (center=True: the signal padded by
// n_fft // 2 on both sides with pad_mode) or left-aligned; rfft / irfft of n_fft points; the
// ISTFT's overlap-add divided by the window's sum of squares where that exceeds tiny(T); `length`
// crops or zero-pads the output (and the ISTFT uses only the frames that reach it).
//
// Initial phases (init):
//   kRandom: angles = exp(i * 2 pi u), u uniform in [0, 1) from MT19937 seeded with `seed`
//            (std::mt19937, the 32-bit Mersenne Twister), two 32-bit draws per value combined into
//            53 bits as ((a >> 5) * 2^26 + (b >> 6)) / 2^53, in the row-major order of S. This is
//            numpy's RandomState(seed).random(S.shape), so the result equals
//            librosa.griffinlim(S, random_state=seed) (librosa's random_state=None draws a fresh
//            seed; the Python layer does that). cos and sin of 2 pi u as common/random_phases.h
//            takes them: numpy's values in double; in float, the correctly rounded ones except
//            within an ulp of a rounding boundary.
//   kOnes:   angles = 1 (librosa's init=None).
//   kPhases: angles = exp(i * phases), phases given in radians with S's shape.
//
// FFTs: DUCC's real FFT (ducc0::pocketfft_r, what TensorFlow's own FFT ops and numpy's
// pocketfft compute with), from TensorFlow's copy (common/ducc.h, common/real_fft.h), on SIMD
// vectors whose lanes are frames: 8 float or 4 double frames per transform (one at a time above
// 2^16 points). Arithmetic is in T (float or double) like librosa's complex64/complex128, with
// |angles| (sqrt(re^2 + im^2)), the overlap-add and the window sums in float64.
//
// Parallelism: a first pass over groups of frames (magnitudes, initial phases' cos/sin, first
// inverse FFT; the seeded draw itself is serial), then each iteration is two passes over all batch
// items together, one over groups of frames (their STFT, phase update and inverse FFT, in cache)
// and one over output samples (the overlap-add, a gather that sums the frames in ascending
// order), so one long signal uses every thread and results do not depend on the partition.
//
// Layout: magnitude [..., n_freq, T] (+ phases of the same shape) -> audio [..., out_length].
#ifndef OPFORGE_OPS_GRIFFIN_LIM_GRIFFIN_LIM_H_
#define OPFORGE_OPS_GRIFFIN_LIM_GRIFFIN_LIM_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/parallel.h"
#include "common/status.h"

// The element types of GriffinLim (X-macro list, common/dtype.h), librosa's complex64 and
// complex128 arithmetic.
#define OPFORGE_GRIFFIN_LIM_TYPES(X, ...) \
  X(float, __VA_ARGS__)                   \
  X(double, __VA_ARGS__)

namespace opforge {

// scipy.signal.get_window names (periodic, fftbins=True).
enum class StftWindow { kHann, kHamming, kBlackman, kBoxcar };
// numpy.pad modes for centred frames.
enum class StftPadMode { kConstant, kEdge, kReflect, kSymmetric };
enum class GriffinLimInit { kRandom, kOnes, kPhases };

struct GriffinLimParams {
  // Attributes (the binding sets them; ValidateGriffinLim checks them and resolves the 0s).
  int64_t n_fft = 0;       // 0: 2 * (n_freq - 1); otherwise n_fft / 2 + 1 must be n_freq
  int64_t hop_length = 0;  // 0: win_length / 4
  int64_t win_length = 0;  // 0: n_fft; at most n_fft
  StftWindow window = StftWindow::kHann;
  bool center = true;
  StftPadMode pad_mode = StftPadMode::kConstant;
  int64_t n_iter = 32;     // >= 0
  double momentum = 0.99;  // >= 0 (librosa warns above 1)
  int64_t length = 0;      // 0: no length (librosa's None); > 0: exact output length
  GriffinLimInit init = GriffinLimInit::kRandom;
  int64_t seed = 0;  // kRandom's seed, in [0, 2^32)
  // From the shapes (ValidateGriffinLim fills them).
  int64_t batch = 0;       // product of the leading axes (may be 0)
  int64_t n_freq = 0;      // n_fft / 2 + 1
  int64_t n_frames = 0;    // T >= 1
  int64_t out_length = 0;  // samples per batch item
};

// "hann" ("hanning"), "hamming", "blackman", "boxcar" ("rectangular", "ones").
Status ParseStftWindow(const std::string& window, StftWindow* out);
// "constant", "edge", "reflect", "symmetric".
Status ParseStftPadMode(const std::string& pad_mode, StftPadMode* out);
// "random"; "none", "None" or "" (ones); "phases".
Status ParseGriffinLimInit(const std::string& init, GriffinLimInit* out);

// Checks the attributes and the shapes (magnitude [..., n_freq, T], rank >= 2, T >= 1; phases
// the same shape when init is kPhases, else null or empty) and fills the derived fields.
Status ValidateGriffinLim(const std::vector<int64_t>& magnitude, const std::vector<int64_t>* phases,
                          GriffinLimParams* params);

// The analysis/synthesis window: get_window(window, win_length, fftbins=True) centred in n_fft
// zeros (librosa.util.pad_center), float64.
std::vector<double> StftWindowValues(StftWindow window, int64_t win_length, int64_t n_fft);

// audio ([batch, out_length]) from magnitude ([batch, n_freq, T]) and, for kPhases, phases (same
// shape; otherwise ignored, may be null). Returns an error if a magnitude or phase is NaN or
// infinite (librosa rejects the non-finite audio that follows). T: float or double.
template <typename T>
Status GriffinLimForward(const GriffinLimParams& params, const T* magnitude, const T* phases,
                         T* audio, const Parallel& parallel);

// CUDA version (griffin_lim.cu, cuFFT), asynchronous on `stream` (a cudaStream_t); dtype kFloat
// or kDouble; magnitude, phases_or_null (kPhases only) and audio in device memory with the
// layouts above; params validated (for kRandom, params.seed is the seed to use: the binding has
// already replaced -1 by a fresh one). `scratch` is device memory of at least
// GriffinLimGpuScratchBytes(params) bytes (the binding takes it from TensorFlow's allocator:
// no cudaMalloc in the kernels), free for the call's kernels to use in stream order. Returns an
// InvalidArgument error for a non-finite magnitude or phase, as the CPU kernel does. Compiled only
// where nvcc exists.
int64_t GriffinLimGpuScratchBytes(const GriffinLimParams& params);
Status GriffinLimForwardGpu(DType dtype, const GriffinLimParams& params, const void* magnitude,
                            const void* phases_or_null, void* audio, void* scratch,
                            int64_t scratch_bytes, void* stream);

}  // namespace opforge

#endif  // OPFORGE_OPS_GRIFFIN_LIM_GRIFFIN_LIM_H_

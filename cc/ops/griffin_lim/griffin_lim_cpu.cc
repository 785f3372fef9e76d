#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>
#ifdef __AVX__
#include <immintrin.h>
#endif

#include "common/arith.h"
#include "common/random_phases.h"
#include "common/real_fft.h"
#include "common/scratch.h"
#include "ops/griffin_lim/griffin_lim.h"
#include "ops/griffin_lim/stft_pad.h"

namespace opforge {
namespace {

constexpr const char* kOp = "GriffinLim";
constexpr double kPi = 3.14159265358979323846;
// Output samples per overlap-add task.
constexpr int64_t kSampleBlock = 4096;

template <typename V>
struct TypeTag {
  using type = V;
};

bool ProductFits(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (__builtin_mul_overflow(n, d, &n)) return false;
  }
  return true;
}

// Frames librosa.stft makes of a signal of `length` samples.
int64_t StftFrames(int64_t length, int64_t n_fft, int64_t hop, bool center) {
  const int64_t padded = center ? length + 2 * (n_fft / 2) : length;
  if (padded < n_fft) return 0;
  return 1 + (padded - n_fft) / hop;
}

// Frames librosa.istft overlap-adds: all, unless `length` cuts them short.
int64_t IstftFrames(const GriffinLimParams& p) {
  if (p.length <= 0) return p.n_frames;
  const int64_t padded = p.center ? p.length + 2 * (p.n_fft / 2) : p.length;
  return std::min(p.n_frames, (padded + p.hop_length - 1) / p.hop_length);
}

}  // namespace

Status ParseStftWindow(const std::string& window, StftWindow* out) {
  if (window == "hann" || window == "hanning") {
    *out = StftWindow::kHann;
  } else if (window == "hamming") {
    *out = StftWindow::kHamming;
  } else if (window == "blackman") {
    *out = StftWindow::kBlackman;
  } else if (window == "boxcar" || window == "rectangular" || window == "ones") {
    *out = StftWindow::kBoxcar;
  } else {
    return InvalidArgument(kOp, "window", "one of \"hann\", \"hamming\", \"blackman\", \"boxcar\"",
                           "\"" + window + "\"");
  }
  return Status::Ok();
}

Status ParseStftPadMode(const std::string& pad_mode, StftPadMode* out) {
  if (pad_mode == "constant") {
    *out = StftPadMode::kConstant;
  } else if (pad_mode == "edge") {
    *out = StftPadMode::kEdge;
  } else if (pad_mode == "reflect") {
    *out = StftPadMode::kReflect;
  } else if (pad_mode == "symmetric") {
    *out = StftPadMode::kSymmetric;
  } else {
    return InvalidArgument(kOp, "pad_mode",
                           "one of \"constant\", \"edge\", \"reflect\", \"symmetric\"",
                           "\"" + pad_mode + "\"");
  }
  return Status::Ok();
}

Status ParseGriffinLimInit(const std::string& init, GriffinLimInit* out) {
  if (init == "random") {
    *out = GriffinLimInit::kRandom;
  } else if (init == "none" || init == "None" || init.empty()) {
    *out = GriffinLimInit::kOnes;
  } else if (init == "phases") {
    *out = GriffinLimInit::kPhases;
  } else {
    return InvalidArgument(kOp, "init", "\"random\", \"none\" or \"phases\"", "\"" + init + "\"");
  }
  return Status::Ok();
}

Status ValidateGriffinLim(const std::vector<int64_t>& magnitude, const std::vector<int64_t>* phases,
                          GriffinLimParams* params) {
  GriffinLimParams p = *params;
  if (magnitude.size() < 2) {
    return InvalidArgument(kOp, "magnitude", "a tensor of rank >= 2 [..., n_freq, time]",
                           "shape " + ShapeString(magnitude));
  }
  for (int64_t d : magnitude) {
    if (d < 0) {
      return InvalidArgument(kOp, "magnitude", "non-negative dimensions", ShapeString(magnitude));
    }
  }
  if (!ProductFits(magnitude)) {
    return InvalidArgument(kOp, "magnitude", "fewer than 2^63 elements",
                           "shape " + ShapeString(magnitude));
  }
  p.n_freq = magnitude[magnitude.size() - 2];
  p.n_frames = magnitude.back();
  if (p.n_frames < 1) {
    return InvalidArgument(kOp, "magnitude", "a non-empty time axis (axis -1)",
                           "shape " + ShapeString(magnitude));
  }
  if (p.n_fft < 0) return InvalidArgument(kOp, "n_fft", "a positive integer (0: default)", p.n_fft);
  // n_fft is at most 2^30 (below), so at most 2^29 + 1 bins; checked first, so that no size
  // arithmetic below can overflow (2 (n_freq - 1), n_fft + hop (T - 1)).
  if (p.n_freq > (int64_t{1} << 29) + 1) {
    return InvalidArgument(kOp, "magnitude", "at most 2^29 + 1 frequency bins (axis -2)",
                           "shape " + ShapeString(magnitude));
  }
  if (p.n_fft == 0) {
    if (p.n_freq < 2) {
      return InvalidArgument(kOp, "magnitude",
                             "at least 2 frequency bins (axis -2) when n_fft is not given",
                             "shape " + ShapeString(magnitude));
    }
    p.n_fft = 2 * (p.n_freq - 1);
  }
  if (p.n_fft > (int64_t{1} << 30)) {
    return InvalidArgument(kOp, "n_fft", "at most 2^30", p.n_fft);
  }
  if (p.n_fft / 2 + 1 != p.n_freq) {
    std::ostringstream s;
    s << "n_fft / 2 + 1 = " << p.n_fft / 2 + 1
      << " frequency bins (axis -2) for n_fft = " << p.n_fft;
    return InvalidArgument(kOp, "magnitude", s.str(), "shape " + ShapeString(magnitude));
  }
  if (p.win_length < 0) {
    return InvalidArgument(kOp, "win_length", "a positive integer (0: n_fft)", p.win_length);
  }
  if (p.win_length == 0) p.win_length = p.n_fft;
  if (p.win_length > p.n_fft) {
    std::ostringstream s;
    s << "at most n_fft = " << p.n_fft;
    return InvalidArgument(kOp, "win_length", s.str(), p.win_length);
  }
  if (p.hop_length < 0) {
    return InvalidArgument(kOp, "hop_length", "a positive integer (0: win_length / 4)",
                           p.hop_length);
  }
  if (p.hop_length == 0) {
    p.hop_length = p.win_length / 4;
    if (p.hop_length == 0) {
      std::ostringstream s;
      s << "0 (win_length / 4 for win_length = " << p.win_length << ")";
      return InvalidArgument(kOp, "hop_length", "a positive integer", s.str());
    }
  }
  if (p.n_iter < 0) return InvalidArgument(kOp, "n_iter", "an integer >= 0", p.n_iter);
  if (!(std::isfinite(p.momentum) && p.momentum >= 0)) {
    return InvalidArgument(kOp, "momentum", "a finite number >= 0", p.momentum);
  }
  if (p.length < 0) return InvalidArgument(kOp, "length", "an integer >= 0 (0: none)", p.length);
  // Bounds that keep every length computation below inside int64 (the audio could not be
  // allocated long before): hop and length at most 2^40 samples, and hop (T - 1) too.
  constexpr int64_t kMaxSamples = int64_t{1} << 40;
  if (p.hop_length > kMaxSamples) {
    return InvalidArgument(kOp, "hop_length", "at most 2^40", p.hop_length);
  }
  if (p.length > kMaxSamples) return InvalidArgument(kOp, "length", "at most 2^40", p.length);
  if (p.n_frames - 1 > kMaxSamples / p.hop_length) {
    std::ostringstream s;
    s << "an audio length n_fft + hop_length * (T - 1) of at most 2^40 samples (hop_length "
      << p.hop_length << ", T " << p.n_frames << ")";
    return InvalidArgument(kOp, "magnitude", s.str(), "shape " + ShapeString(magnitude));
  }
  if (p.init != GriffinLimInit::kRandom && p.init != GriffinLimInit::kOnes &&
      p.init != GriffinLimInit::kPhases) {
    return InvalidArgument(kOp, "init", "\"random\", \"none\" or \"phases\"",
                           static_cast<int>(p.init));
  }
  if (p.init == GriffinLimInit::kRandom && (p.seed < 0 || p.seed > int64_t{0xffffffff})) {
    return InvalidArgument(kOp, "seed", "in [0, 2^32 - 1]", p.seed);
  }
  if (p.init == GriffinLimInit::kPhases) {
    if (phases == nullptr) {
      return InvalidArgument(kOp, "phases", "given when init is \"phases\"", "none");
    }
    if (*phases != magnitude) {
      return InvalidArgument(kOp, "phases", "magnitude's shape " + ShapeString(magnitude),
                             "shape " + ShapeString(*phases));
    }
  }
  if (p.length > 0) {
    p.out_length = p.length;
  } else {
    p.out_length = p.n_fft + p.hop_length * (p.n_frames - 1) - (p.center ? 2 * (p.n_fft / 2) : 0);
  }
  if (p.n_iter > 0) {
    // Each iteration's STFT must give back T frames (librosa fails on a shape mismatch).
    const int64_t frames = StftFrames(p.out_length, p.n_fft, p.hop_length, p.center);
    if (frames != p.n_frames) {
      std::ostringstream s;
      s << "a length whose STFT has the magnitude's " << p.n_frames << " frames (it has " << frames
        << ")";
      return InvalidArgument(kOp, "length", s.str(), p.length);
    }
    if (p.out_length == 0 && p.pad_mode != StftPadMode::kConstant) {
      return InvalidArgument(kOp, "pad_mode", "\"constant\" for a signal of 0 samples",
                             "another mode");
    }
  }
  int64_t batch = 1;
  for (size_t i = 0; i + 2 < magnitude.size(); ++i) batch *= magnitude[i];
  if (!ProductFits({batch, p.out_length}) || !ProductFits({batch, p.n_frames, p.n_fft + 2})) {
    return InvalidArgument(kOp, "magnitude", "small enough for the audio to fit in memory",
                           "shape " + ShapeString(magnitude));
  }
  p.batch = batch;
  *params = p;
  return Status::Ok();
}

std::vector<double> StftWindowValues(StftWindow window, int64_t win_length, int64_t n_fft) {
  std::vector<double> w(static_cast<size_t>(win_length), 1.0);
  std::vector<double> a;
  switch (window) {
    case StftWindow::kHann:
      a = {0.5, 1.0 - 0.5};
      break;
    case StftWindow::kHamming:
      a = {0.54, 1.0 - 0.54};
      break;
    case StftWindow::kBlackman:
      a = {0.42, 0.50, 0.08};
      break;
    case StftWindow::kBoxcar:
      break;
  }
  if (!a.empty() && win_length > 1) {
    // scipy.signal.windows.general_cosine, periodic: M + 1 points of
    // sum_k a_k cos(k fac), fac = linspace(-pi, pi, M + 1), the last dropped.
    const int64_t m = win_length + 1;
    const double step = (kPi - -kPi) / static_cast<double>(m - 1);
    for (int64_t n = 0; n < win_length; ++n) {
      const double fac = static_cast<double>(n) * step + -kPi;
      double v = 0.0;
      for (size_t k = 0; k < a.size(); ++k) v += a[k] * std::cos(static_cast<double>(k) * fac);
      w[static_cast<size_t>(n)] = v;
    }
  }
  std::vector<double> padded(static_cast<size_t>(n_fft), 0.0);
  const int64_t lpad = (n_fft - win_length) / 2;
  std::copy(w.begin(), w.end(), padded.begin() + lpad);
  return padded;
}

namespace {

template <typename T>
Status CheckFinite(const char* argument, const T* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) {
      std::ostringstream s;
      s << x[i] << " at flat index " << i;
      return InvalidArgument(kOp, argument, "finite everywhere", s.str());
    }
  }
  return Status::Ok();
}

// The frame passes transform kFftLanes<T> frames at once: DUCC's real FFT runs on SIMD vectors
// whose lanes are frames (as ducc0::r2c batches the rows of an array), its butterflies then a
// vector operation each. 4 doubles or 8 floats (a 256-bit vector: the core is compiled for AVX).
// Above kKeptFft points a pass transforms one frame at a time (Vec = T), so that its buffers stay
// a few times n_fft values.
constexpr int64_t kKeptFft = int64_t{1} << 16;
template <typename T>
using FftVec = FftLanes<T>;  // kFftLanes<T> frames: DUCC's vector of that width (real_fft.h)
template <typename Vec, typename T>
constexpr int LanesOf() {
  if constexpr (std::is_same_v<Vec, T>) {
    return 1;
  } else {
    static_assert(sizeof(Vec) == sizeof(T) * Vec::size(), "a SIMD vector is its lanes, packed");
    return static_cast<int>(Vec::size());
  }
}

// The per-thread buffers of the frame and overlap-add passes. A thread keeps them from pass to
// pass and from call to call, so that the 2 * n_iter passes of a call allocate nothing; for n_fft
// above kKeptFft a pass uses buffers of its own instead, so that no thread holds on to a large
// block after the call.
template <typename T, typename Vec>
struct FrameScratch {
  std::vector<Vec> a, b;          // FFT data and work buffers (lanes interleaved)
  std::vector<T> zero_lanes;      // kL zeros: the imaginary parts of bins 0 and n_fft / 2
  std::vector<double> acc;        // kSampleBlock: the overlap-add's sums
  std::vector<double> draws;      // n_freq: one frame's uniform draws (kRandom's first pass)
  std::vector<T> cosines, sines;  // n_freq: their angles' cos and sin

  void Reserve(int64_t fft_buffer) {
    auto grow = [](auto* v, int64_t n) {
      if (static_cast<int64_t>(v->size()) < n) v->resize(static_cast<size_t>(n));
    };
    grow(&a, fft_buffer);
    grow(&b, fft_buffer);
    if (zero_lanes.empty()) zero_lanes.assign(static_cast<size_t>(LanesOf<Vec, T>()), T(0));
    grow(&acc, kSampleBlock);
  }
};

// Runs fn(scratch) with this thread's kept scratch, or with a fresh one for a large n_fft.
template <typename T, typename Vec, typename Fn>
void WithScratch(int64_t n_fft, int64_t fft_buffer, const Fn& fn) {
  if (n_fft <= kKeptFft) {
    static thread_local FrameScratch<T, Vec> kept;
    kept.Reserve(fft_buffer);
    fn(&kept);
  } else {
    FrameScratch<T, Vec> s;
    s.Reserve(fft_buffer);
    fn(&s);
  }
}

// Where bin k of a real FFT of n points lies in FFTPACK's half-complex order, DUCC's: r0, then
// (re k, im k) for k in [1, (n - 1) / 2], then r(n/2) for an even n (whose imaginary part, like
// bin 0's, is 0; irfft ignores both).
inline int64_t RealPos(int64_t k, int64_t n) {
  return k == 0 ? 0 : (2 * k < n ? 2 * k - 1 : n - 1);
}
inline bool HasImag(int64_t k, int64_t n) { return k > 0 && 2 * k < n; }

// The STFT and ISTFT of frames, with DUCC's real FFT of n_fft points (RealFft over
// ducc0::pocketfft_r, the FFT TensorFlow's own tf.signal.rfft runs on, from the headers TensorFlow
// ships), a plan made once per call and shared by the threads (its Exec is const). A pass works
// on kL = LanesOf<Vec, T> frames at once, interleaved (value j of lane l at [j kL + l]), unscaled
// both ways (irfft's 1 / n_fft is folded into the synthesis window).
template <typename T>
class FrameTransform {
 public:
  FrameTransform(const GriffinLimParams& p, const std::vector<double>& window)
      : n_fft_(p.n_fft),
        pad_mode_(p.pad_mode),
        plan_(static_cast<size_t>(p.n_fft)),
        analysis_(static_cast<size_t>(p.n_fft)),
        synthesis_(static_cast<size_t>(p.n_fft)) {
    for (int64_t j = 0; j < n_fft_; ++j) {
      analysis_[j] = static_cast<T>(window[j]);
      synthesis_[j] = static_cast<T>(window[j] / static_cast<double>(n_fft_));
    }
  }

  // Values each of a pass's two FFT buffers holds (lanes count as one).
  int64_t BufferSize() const { return n_fft_ + static_cast<int64_t>(plan_.bufsize()); }

  // Lane l < lanes of `data` = analysis window * the frame of y (a signal of `length` samples)
  // that starts at starts[l], outside the signal padded as pad_mode says; lanes from `lanes` on
  // are zeros.
  template <typename Vec>
  void LoadFrames(const T* y, int64_t length, const int64_t* starts, int lanes, Vec* data) const {
    constexpr int kL = LanesOf<Vec, T>();
    T* __restrict d = reinterpret_cast<T*>(data);
    const T* __restrict w = analysis_.data();
    bool inside = lanes == kL;
    for (int l = 0; l < lanes; ++l)
      inside = inside && starts[l] >= 0 && starts[l] + n_fft_ <= length;
    if (inside) {
      const T* src[kL];
      for (int l = 0; l < kL; ++l) src[l] = y + starts[l];
      for (int64_t j = 0; j < n_fft_; ++j) {
        for (int l = 0; l < kL; ++l) d[j * kL + l] = src[l][j] * w[j];
      }
      return;
    }
    for (int l = 0; l < kL; ++l) {
      if (l >= lanes) {
        for (int64_t j = 0; j < n_fft_; ++j) d[j * kL + l] = T(0);
        continue;
      }
      for (int64_t j = 0; j < n_fft_; ++j) {
        const int64_t q = PadSource(starts[l] + j, length, pad_mode_);
        d[j * kL + l] = q < 0 ? T(0) : y[q] * w[j];
      }
    }
  }

  // The forward or inverse real FFT of every lane of `data`; returns where the result is (`data`
  // or `work`).
  template <typename Vec>
  Vec* Run(Vec* data, Vec* work, bool forward) const {
    return plan_.Exec(data, work, T(1), forward);
  }

  // `data` in half-complex order = the spectra (re, im)[0, n_freq) of kL frames (lanes
  // interleaved, [k kL + l]).
  template <typename Vec>
  void WriteSpectra(const T* __restrict re, const T* __restrict im, int64_t n_freq,
                    Vec* data) const {
    constexpr int kL = LanesOf<Vec, T>();
    T* __restrict d = reinterpret_cast<T*>(data);
    for (int64_t k = 0; k < n_freq; ++k) {
      T* dr = d + RealPos(k, n_fft_) * kL;
      for (int l = 0; l < kL; ++l) dr[l] = re[k * kL + l];
      if (HasImag(k, n_fft_)) {
        T* di = d + 2 * k * kL;
        for (int l = 0; l < kL; ++l) di[l] = im[k * kL + l];
      }
    }
  }

  // frames[l][0, n_fft) = synthesis window * lane l of an inverse transform's result, l < lanes
  // (frame l at frames + l n_fft).
  template <typename Vec>
  void StoreFrames(const Vec* result, int lanes, T* __restrict frames) const {
    constexpr int kL = LanesOf<Vec, T>();
    const T* __restrict r = reinterpret_cast<const T*>(result);
    const T* __restrict w = synthesis_.data();
    int64_t j0 = 0;
#ifdef __AVX__
    if constexpr (kL == 8 || kL == 4) {
      if (lanes == kL) {
        // kL x kL blocks transposed in registers: rows (samples) of lanes to rows (lanes) of
        // samples; the same products as below.
        for (; j0 + kL <= n_fft_; j0 += kL) StoreBlock(r + j0 * kL, w + j0, frames + j0);
      }
    }
#endif
    for (int l = 0; l < lanes; ++l) {
      for (int64_t j = j0; j < n_fft_; ++j) frames[l * n_fft_ + j] = r[j * kL + l] * w[j];
    }
  }

 private:
#ifdef __AVX__
  // frames[l n_fft + i] = r[i kL + l] * w[i] for i, l < kL.
  void StoreBlock(const float* r, const float* w, float* frames) const {
    __m256 x[8];
    for (int i = 0; i < 8; ++i) x[i] = _mm256_loadu_ps(r + 8 * i);
    const __m256 t0 = _mm256_unpacklo_ps(x[0], x[1]), t1 = _mm256_unpackhi_ps(x[0], x[1]);
    const __m256 t2 = _mm256_unpacklo_ps(x[2], x[3]), t3 = _mm256_unpackhi_ps(x[2], x[3]);
    const __m256 t4 = _mm256_unpacklo_ps(x[4], x[5]), t5 = _mm256_unpackhi_ps(x[4], x[5]);
    const __m256 t6 = _mm256_unpacklo_ps(x[6], x[7]), t7 = _mm256_unpackhi_ps(x[6], x[7]);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    const __m256 y[8] = {
        _mm256_permute2f128_ps(u0, u4, 0x20), _mm256_permute2f128_ps(u1, u5, 0x20),
        _mm256_permute2f128_ps(u2, u6, 0x20), _mm256_permute2f128_ps(u3, u7, 0x20),
        _mm256_permute2f128_ps(u0, u4, 0x31), _mm256_permute2f128_ps(u1, u5, 0x31),
        _mm256_permute2f128_ps(u2, u6, 0x31), _mm256_permute2f128_ps(u3, u7, 0x31)};
    const __m256 wv = _mm256_loadu_ps(w);
    for (int l = 0; l < 8; ++l) _mm256_storeu_ps(frames + l * n_fft_, _mm256_mul_ps(y[l], wv));
  }
  void StoreBlock(const double* r, const double* w, double* frames) const {
    const __m256d x0 = _mm256_loadu_pd(r), x1 = _mm256_loadu_pd(r + 4);
    const __m256d x2 = _mm256_loadu_pd(r + 8), x3 = _mm256_loadu_pd(r + 12);
    const __m256d t0 = _mm256_unpacklo_pd(x0, x1), t1 = _mm256_unpackhi_pd(x0, x1);
    const __m256d t2 = _mm256_unpacklo_pd(x2, x3), t3 = _mm256_unpackhi_pd(x2, x3);
    const __m256d y[4] = {
        _mm256_permute2f128_pd(t0, t2, 0x20), _mm256_permute2f128_pd(t1, t3, 0x20),
        _mm256_permute2f128_pd(t0, t2, 0x31), _mm256_permute2f128_pd(t1, t3, 0x31)};
    const __m256d wv = _mm256_loadu_pd(w);
    for (int l = 0; l < 4; ++l) _mm256_storeu_pd(frames + l * n_fft_, _mm256_mul_pd(y[l], wv));
  }
#endif

  int64_t n_fft_;
  StftPadMode pad_mode_;
  RealFft<T> plan_;
  std::vector<T> analysis_, synthesis_;
};

#ifdef __AVX__
// UpdateLanes for 8 float lanes in 256-bit registers: the scalar path's arithmetic, |angles| in
// double (each half of the lanes widened to 4 doubles), so that a lane's value never depends on
// the frames beside it.
inline void UpdateLanesAvx(int64_t n_fft, int64_t n_freq, bool first, float momentum,
                           const float* __restrict mag, float* __restrict prev_re,
                           float* __restrict prev_im, float* __restrict r) {
  const __m256 mom = _mm256_set1_ps(momentum);
  const __m256 eps = _mm256_set1_ps(std::numeric_limits<float>::min());
  const __m256 one = _mm256_set1_ps(1.0f);
  auto norm_half = [](__m128 a, __m128 b) {
    const __m256d da = _mm256_cvtps_pd(a), db = _mm256_cvtps_pd(b);
    return _mm256_cvtpd_ps(
        _mm256_sqrt_pd(_mm256_add_pd(_mm256_mul_pd(da, da), _mm256_mul_pd(db, db))));
  };
  for (int64_t k = 0; k < n_freq; ++k) {
    float* xr = r + RealPos(k, n_fft) * 8;
    const bool has_imag = HasImag(k, n_fft);
    float* xi = r + 2 * k * 8;
    const int64_t o = k * 8;
    const __m256 vr = _mm256_loadu_ps(xr);
    const __m256 vi = has_imag ? _mm256_loadu_ps(xi) : _mm256_setzero_ps();
    __m256 re = vr, im = vi;
    if (!first) {
      re = _mm256_sub_ps(vr, _mm256_mul_ps(mom, _mm256_loadu_ps(prev_re + o)));
      im = _mm256_sub_ps(vi, _mm256_mul_ps(mom, _mm256_loadu_ps(prev_im + o)));
    }
    const __m256 norm = _mm256_insertf128_ps(
        _mm256_castps128_ps256(norm_half(_mm256_castps256_ps128(re), _mm256_castps256_ps128(im))),
        norm_half(_mm256_extractf128_ps(re, 1), _mm256_extractf128_ps(im, 1)), 1);
    const __m256 scale = _mm256_div_ps(one, _mm256_add_ps(norm, eps));
    const __m256 mg = _mm256_loadu_ps(mag + o);
    _mm256_storeu_ps(prev_re + o, vr);
    _mm256_storeu_ps(prev_im + o, vi);
    _mm256_storeu_ps(xr, _mm256_mul_ps(_mm256_mul_ps(re, scale), mg));
    if (has_imag) _mm256_storeu_ps(xi, _mm256_mul_ps(_mm256_mul_ps(im, scale), mg));
  }
}

// UpdateLanes for 4 double lanes: the scalar path's arithmetic, in 256-bit registers.
inline void UpdateLanesAvx(int64_t n_fft, int64_t n_freq, bool first, double momentum,
                           const double* __restrict mag, double* __restrict prev_re,
                           double* __restrict prev_im, double* __restrict r) {
  const __m256d mom = _mm256_set1_pd(momentum);
  const __m256d eps = _mm256_set1_pd(std::numeric_limits<double>::min());
  const __m256d one = _mm256_set1_pd(1.0);
  for (int64_t k = 0; k < n_freq; ++k) {
    double* xr = r + RealPos(k, n_fft) * 4;
    const bool has_imag = HasImag(k, n_fft);
    double* xi = r + 2 * k * 4;
    const int64_t o = k * 4;
    const __m256d vr = _mm256_loadu_pd(xr);
    const __m256d vi = has_imag ? _mm256_loadu_pd(xi) : _mm256_setzero_pd();
    __m256d re = vr, im = vi;
    if (!first) {
      re = _mm256_sub_pd(vr, _mm256_mul_pd(mom, _mm256_loadu_pd(prev_re + o)));
      im = _mm256_sub_pd(vi, _mm256_mul_pd(mom, _mm256_loadu_pd(prev_im + o)));
    }
    const __m256d norm =
        _mm256_sqrt_pd(_mm256_add_pd(_mm256_mul_pd(re, re), _mm256_mul_pd(im, im)));
    const __m256d scale = _mm256_div_pd(one, _mm256_add_pd(norm, eps));
    const __m256d mg = _mm256_loadu_pd(mag + o);
    _mm256_storeu_pd(prev_re + o, vr);
    _mm256_storeu_pd(prev_im + o, vi);
    _mm256_storeu_pd(xr, _mm256_mul_pd(_mm256_mul_pd(re, scale), mg));
    if (has_imag) _mm256_storeu_pd(xi, _mm256_mul_pd(_mm256_mul_pd(im, scale), mg));
  }
}
#endif

// librosa's phase update of kL frames at once, in place on their forward FFT (half-complex order,
// lanes interleaved), with their magnitudes and previous spectra laid out [k kL + l]:
//   angles = rebuilt - momentum * tprev (not on the first iteration)
//   spectrum = S * angles / (|angles| + tiny),   tprev = rebuilt
// |angles| in double (as sqrt(re^2 + im^2): no overflow for float, and the formula the CUDA
// kernel replays), rounded to T. With AVX in intrinsics (UpdateLanesAvx: the compiler left the
// float lanes' division and products scalar), otherwise loops over the lanes that the compiler
// vectorises.
template <typename T, typename Vec>
void UpdateLanes(int64_t n_fft, int64_t n_freq, bool first, T momentum, const T* __restrict mag,
                 T* __restrict prev_re, T* __restrict prev_im, Vec* spectrum,
                 FrameScratch<T, Vec>* s) {
  constexpr int kL = LanesOf<Vec, T>();
  if constexpr (kL == 1) {
    T* __restrict r = spectrum;
    const T eps = std::numeric_limits<T>::min();
    for (int64_t k = 0; k < n_freq; ++k) {
      T& xr = r[RealPos(k, n_fft)];
      const bool has_imag = HasImag(k, n_fft);
      const T xi = has_imag ? r[2 * k] : T(0);
      const T re = first ? xr : xr - momentum * prev_re[k];
      const T im = first ? xi : xi - momentum * prev_im[k];
      const double norm = std::sqrt(static_cast<double>(re) * static_cast<double>(re) +
                                    static_cast<double>(im) * static_cast<double>(im));
      const T scale = T(1) / (static_cast<T>(norm) + eps);
      prev_re[k] = xr;
      prev_im[k] = xi;
      xr = re * scale * mag[k];
      if (has_imag) r[2 * k] = im * scale * mag[k];
    }
  }
#ifdef __AVX__
  else if constexpr (kL == 8 && std::is_same_v<T, float>) {
    UpdateLanesAvx(n_fft, n_freq, first, momentum, mag, prev_re, prev_im,
                   reinterpret_cast<float*>(spectrum));
  } else if constexpr (kL == 4 && std::is_same_v<T, double>) {
    UpdateLanesAvx(n_fft, n_freq, first, momentum, mag, prev_re, prev_im,
                   reinterpret_cast<double*>(spectrum));
  }
#endif
  else {
    // The same arithmetic, kL frames at a time in loops over the lanes that the compiler turns
    // into vector instructions (this file is compiled with -fno-math-errno for the square root).
    T* __restrict r = reinterpret_cast<T*>(spectrum);
    const T eps = std::numeric_limits<T>::min();
    alignas(64) T re[kL], im[kL], scale[kL];
    alignas(64) double norm[kL];
    for (int64_t k = 0; k < n_freq; ++k) {
      T* __restrict xr = r + RealPos(k, n_fft) * kL;
      const bool has_imag = HasImag(k, n_fft);
      T* __restrict xi = has_imag ? r + 2 * k * kL : s->zero_lanes.data();
      const int64_t o = k * kL;
      T* __restrict pr = prev_re + o;
      T* __restrict pi = prev_im + o;
      const T* __restrict mg = mag + o;
      if (first) {
        for (int l = 0; l < kL; ++l) {
          re[l] = xr[l];
          im[l] = xi[l];
        }
      } else {
        for (int l = 0; l < kL; ++l) {
          re[l] = xr[l] - momentum * pr[l];
          im[l] = xi[l] - momentum * pi[l];
        }
      }
      for (int l = 0; l < kL; ++l) {
        norm[l] = std::sqrt(static_cast<double>(re[l]) * static_cast<double>(re[l]) +
                            static_cast<double>(im[l]) * static_cast<double>(im[l]));
      }
      for (int l = 0; l < kL; ++l) scale[l] = T(1) / (static_cast<T>(norm[l]) + eps);
      for (int l = 0; l < kL; ++l) {
        pr[l] = xr[l];
        pi[l] = xi[l];
        xr[l] = re[l] * scale[l] * mg[l];
      }
      if (has_imag) {
        for (int l = 0; l < kL; ++l) xi[l] = im[l] * scale[l] * mg[l];
      }
    }
  }
}

}  // namespace

template <typename T>
Status GriffinLimForward(const GriffinLimParams& p, const T* magnitude, const T* phases, T* audio,
                         const Parallel& parallel) {
  const int64_t batch = p.batch, n_freq = p.n_freq, n_frames = p.n_frames;
  const int64_t n_fft = p.n_fft, hop = p.hop_length, length = p.out_length;
  const int64_t total_frames = batch * n_frames;
  if (total_frames == 0) return Status::Ok();
  OPFORGE_RETURN_IF_ERROR(CheckFinite("magnitude", magnitude, total_frames * n_freq));
  if (p.init == GriffinLimInit::kPhases) {
    OPFORGE_RETURN_IF_ERROR(CheckFinite("phases", phases, total_frames * n_freq));
  }

  const std::vector<double> window = StftWindowValues(p.window, p.win_length, n_fft);
  const FrameTransform<T> transform(p, window);
  // librosa.filters.window_sumsquare over the frames the ISTFT uses, in the buffer's coordinates
  // (the centred signal starts at n_fft / 2).
  const int64_t ola_frames = IstftFrames(p);
  const int64_t buffer_length = n_fft + hop * (ola_frames - 1);
  const int64_t offset = p.center ? n_fft / 2 : 0;
  std::vector<double> wss(static_cast<size_t>(buffer_length), 0.0);
  for (int64_t t = 0; t < ola_frames; ++t) {
    for (int64_t j = 0; j < n_fft && t * hop + j < buffer_length; ++j) {
      wss[t * hop + j] += window[j] * window[j];
    }
  }
  const double tiny = static_cast<double>(std::numeric_limits<T>::min());
  // Per output sample: the divisor (T) or 0 where librosa leaves the sample undivided.
  std::vector<T> divisor(static_cast<size_t>(length), T(0));
  for (int64_t j = 0; j < length; ++j) {
    const int64_t q = j + offset;
    const double v = q < buffer_length ? static_cast<double>(static_cast<T>(wss[q])) : 0.0;
    divisor[j] = v > tiny ? static_cast<T>(v) : T(0);
  }

  // Frame by frame ([batch, T, ...]) the windowed inverse FFTs (n_fft) that the overlap-add sums,
  // and the signal they make. Every element is written before it is read.
  Scratch<T> frames(static_cast<size_t>(total_frames * n_fft));
  Scratch<T> signal(static_cast<size_t>(batch * length));
  Scratch<double> uniform(
      p.init == GriffinLimInit::kRandom ? static_cast<size_t>(total_frames * n_freq) : 0);
  if (p.init == GriffinLimInit::kRandom) {
    // numpy's RandomState(seed).random(S.shape), in S's row-major order. The draw is serial
    // (four words at a time); the cos and sin of the phases are taken in the first pass.
    MtUniformDoubles(static_cast<uint32_t>(p.seed), total_frames * n_freq, uniform.data());
  }
  const T momentum = static_cast<T>(p.momentum / (1.0 + p.momentum));
  const double fft_cost = 5.0 * static_cast<double>(n_fft) *
                          std::log2(static_cast<double>(std::max<int64_t>(n_fft, 2)));

  // The overlap-add of one block of kSampleBlock output samples: out[b, j] = sum_t
  // frames[b, t][j + offset - t hop] / divisor[j], the frames summed in ascending order in double
  // whatever the partition.
  const int64_t blocks_per_item = length == 0 ? 0 : (length + kSampleBlock - 1) / kSampleBlock;
  auto overlap_add = [&](int64_t task, T* out) {
    WithScratch<T, T>(n_fft, 0, [&](FrameScratch<T, T>* s) {
      double* __restrict acc = s->acc.data();
      const int64_t b = task / blocks_per_item;
      const int64_t j0 = (task - b * blocks_per_item) * kSampleBlock;
      const int64_t j1 = std::min(length, j0 + kSampleBlock);
      const int64_t q0 = j0 + offset, q1 = std::min(j1 + offset, buffer_length);
      std::fill(acc, acc + kSampleBlock, 0.0);
      if (q1 > q0) {
        const int64_t t_first = q0 >= n_fft ? (q0 - n_fft) / hop + 1 : 0;
        const int64_t t_last = std::min(ola_frames - 1, (q1 - 1) / hop);
        for (int64_t t = t_first; t <= t_last; ++t) {
          const T* __restrict frame = frames.data() + (b * n_frames + t) * n_fft;
          const int64_t lo = std::max(q0, t * hop), hi = std::min(q1, t * hop + n_fft);
          double* __restrict a = acc + (lo - q0);
          const T* __restrict src = frame + (lo - t * hop);
          for (int64_t i = 0; i < hi - lo; ++i) a[i] += static_cast<double>(src[i]);
        }
      }
      T* __restrict o = out + b * length + j0;
      const T* __restrict d = divisor.data() + j0;
      for (int64_t j = 0; j < j1 - j0; ++j) {
        const T v = static_cast<T>(acc[j]);
        o[j] = d[j] != T(0) ? v / d[j] : v;
      }
    });
  };

  // The frame passes, kL = kFftLanes<T> frames per FFT (1 above kKeptFft points), frames grouped by
  // their index alone: lanes never mix, so results do not depend on the partition. Per group of
  // kL frames ([batch, T] flattened; a last group's missing frames are zeros), lanes interleaved
  // ([k kL + l]): the magnitudes (n_freq x kL) and the spectrum's state (n_freq x kL real parts,
  // then as many imaginary parts: first S * the initial angles, then tprev).
  // The whole algorithm is one sequence of steps (RunSteps): the first frame pass, then per
  // iteration the overlap-add and the frame pass, then the last overlap-add into the audio.
  const int64_t fft_buffer = transform.BufferSize();
  auto frame_passes = [&](auto vec_tag) {
    using Vec = typename decltype(vec_tag)::type;
    constexpr int kL = LanesOf<Vec, T>();
    const int64_t groups = (total_frames + kL - 1) / kL;
    const int64_t group_bins = n_freq * kL;
    Scratch<T> mag(static_cast<size_t>(groups * group_bins));
    Scratch<T> state(static_cast<size_t>(groups * 2 * group_bins));
    auto lanes_of = [&](int64_t g) {
      return static_cast<int>(std::min<int64_t>(kL, total_frames - g * kL));
    };
    // Group g's magnitudes and initial spectrum S * angles, and the first ISTFT's frames.
    auto first_pass = [&](int64_t g, FrameScratch<T, Vec>* s) {
      const int lanes = lanes_of(g);
      T* m = mag.data() + g * group_bins;
      T* re = state.data() + g * 2 * group_bins;
      T* im = re + group_bins;
      for (int l = 0; l < kL; ++l) {
        if (l >= lanes) {
          for (int64_t f = 0; f < n_freq; ++f)
            m[f * kL + l] = re[f * kL + l] = im[f * kL + l] = T(0);
          continue;
        }
        const int64_t u = g * kL + l;
        const int64_t b = u / n_frames, t = u - b * n_frames;
        const int64_t in = b * n_freq * n_frames + t;  // S[b, 0, t]
        if (p.init == GriffinLimInit::kRandom) {
          // This frame's draws, then the cos and sin of 2 pi u for all of them at once.
          if (static_cast<int64_t>(s->draws.size()) < n_freq) {
            s->draws.resize(static_cast<size_t>(n_freq));
            s->cosines.resize(static_cast<size_t>(n_freq));
            s->sines.resize(static_cast<size_t>(n_freq));
          }
          for (int64_t f = 0; f < n_freq; ++f) s->draws[f] = uniform[in + f * n_frames];
          CosSin2Pi(s->draws.data(), n_freq, s->cosines.data(), s->sines.data());
        }
        for (int64_t f = 0; f < n_freq; ++f) {
          const T mf = magnitude[in + f * n_frames];
          m[f * kL + l] = mf;
          if (p.init == GriffinLimInit::kOnes) {
            re[f * kL + l] = mf;
            im[f * kL + l] = T(0) * mf;
          } else if (p.init == GriffinLimInit::kRandom) {
            re[f * kL + l] = s->cosines[f] * mf;
            im[f * kL + l] = s->sines[f] * mf;
          } else {
            const double phase = static_cast<double>(phases[in + f * n_frames]);
            re[f * kL + l] = static_cast<T>(std::cos(phase)) * mf;
            im[f * kL + l] = static_cast<T>(std::sin(phase)) * mf;
          }
        }
      }
      transform.WriteSpectra(re, im, n_freq, s->a.data());
      const Vec* out = transform.Run(s->a.data(), s->b.data(), false);
      transform.StoreFrames(out, lanes, frames.data() + g * kL * n_fft);
    };
    // Group g in an iteration: its frames' STFT, the phase update and their inverse FFTs, all in
    // cache.
    auto iteration = [&](int64_t g, bool first, FrameScratch<T, Vec>* s) {
      const int lanes = lanes_of(g);
      // Frames of one group may belong to two batch items: one start per lane.
      int64_t starts[kL] = {};
      const T* signals[kL] = {};
      bool one_item = true;
      for (int l = 0; l < lanes; ++l) {
        const int64_t u = g * kL + l;
        const int64_t b = u / n_frames, t = u - b * n_frames;
        starts[l] = t * hop - offset;
        signals[l] = signal.data() + b * length;
        one_item = one_item && signals[l] == signals[0];
      }
      if (one_item) {
        transform.LoadFrames(signals[0], length, starts, lanes, s->a.data());
      } else {
        // Lane by lane (the other lanes of each call then written over by the next).
        for (int l = 0; l < lanes; ++l) {
          transform.LoadFrames(signals[l], length, starts, lanes, s->b.data());
          T* d = reinterpret_cast<T*>(s->a.data());
          const T* from = reinterpret_cast<const T*>(s->b.data());
          for (int64_t j = 0; j < n_fft; ++j) d[j * kL + l] = from[j * kL + l];
        }
        T* d = reinterpret_cast<T*>(s->a.data());
        for (int l = lanes; l < kL; ++l) {
          for (int64_t j = 0; j < n_fft; ++j) d[j * kL + l] = T(0);
        }
      }
      Vec* spectrum = transform.Run(s->a.data(), s->b.data(), true);
      Vec* work = spectrum == s->a.data() ? s->b.data() : s->a.data();
      T* prev = state.data() + g * 2 * group_bins;
      UpdateLanes<T, Vec>(n_fft, n_freq, first, momentum, mag.data() + g * group_bins, prev,
                          prev + group_bins, spectrum, s);
      const Vec* out = transform.Run(spectrum, work, false);
      transform.StoreFrames(out, lanes, frames.data() + g * kL * n_fft);
    };
    const int64_t ola_tasks = batch * blocks_per_item;
    std::vector<int64_t> tasks{groups};
    for (int64_t iter = 0; iter < p.n_iter; ++iter) {
      tasks.push_back(ola_tasks);
      tasks.push_back(groups);
    }
    tasks.push_back(ola_tasks);
    const double group_cost = kL * (2.0 * fft_cost + 40.0 * static_cast<double>(n_freq));
    const int64_t last = static_cast<int64_t>(tasks.size()) - 1;
    RunSteps(parallel, tasks, group_cost, [&](int64_t step, int64_t task) {
      if (step == last || step % 2 == 1) {
        overlap_add(task, step == last ? audio : signal.data());
        return;
      }
      WithScratch<T, Vec>(n_fft, fft_buffer, [&](FrameScratch<T, Vec>* s) {
        if (step == 0) {
          first_pass(task, s);
        } else {
          iteration(task, step == 2, s);
        }
      });
    });
  };
  if (n_fft <= kKeptFft) {
    frame_passes(TypeTag<FftVec<T>>{});
  } else {
    frame_passes(TypeTag<T>{});
  }
  return Status::Ok();
}

template Status GriffinLimForward<float>(const GriffinLimParams&, const float*, const float*,
                                         float*, const Parallel&);
template Status GriffinLimForward<double>(const GriffinLimParams&, const double*, const double*,
                                          double*, const Parallel&);

}  // namespace opforge

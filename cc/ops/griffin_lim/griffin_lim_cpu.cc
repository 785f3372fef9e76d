#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <unsupported/Eigen/FFT>
#include <vector>

#include "common/arith.h"
#include "common/scratch.h"
#include "ops/griffin_lim/griffin_lim.h"

namespace opforge {
namespace {

constexpr const char* kOp = "GriffinLim";
constexpr double kPi = 3.14159265358979323846;
// Output samples per overlap-add task.
constexpr int64_t kSampleBlock = 4096;

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

// The sample of a signal of `length` samples at position p (which may lie outside it) under
// numpy.pad's mode; -1 for a zero.
int64_t PadSource(int64_t p, int64_t length, StftPadMode mode) {
  if (p >= 0 && p < length) return p;
  if (length == 0) return -1;
  switch (mode) {
    case StftPadMode::kConstant:
      return -1;
    case StftPadMode::kEdge:
      return p < 0 ? 0 : length - 1;
    case StftPadMode::kReflect: {
      if (length == 1) return 0;
      const int64_t period = 2 * (length - 1);
      int64_t q = p % period;
      if (q < 0) q += period;
      return q < length ? q : period - q;
    }
    case StftPadMode::kSymmetric: {
      const int64_t period = 2 * length;
      int64_t q = p % period;
      if (q < 0) q += period;
      return q < length ? q : period - 1 - q;
    }
  }
  return -1;
}

// One FFT object per thread: Eigen's FFT caches its plans (twiddles) in the object, which is
// therefore not safe to share; a thread keeps its plans from call to call.
template <typename T>
Eigen::FFT<T>& ThreadFft() {
  static thread_local Eigen::FFT<T> fft = [] {
    Eigen::FFT<T> f;
    f.SetFlag(Eigen::FFT<T>::HalfSpectrum);
    f.SetFlag(Eigen::FFT<T>::Unscaled);
    return f;
  }();
  return fft;
}

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

// The per-thread buffers of the frame and overlap-add passes (a few times n_fft values). A thread
// keeps them from pass to pass and from call to call, so that the 2 * n_iter passes of a call
// allocate nothing; for n_fft above kKeptFft a pass uses buffers of its own instead, so that no
// thread holds on to a large block after the call.
constexpr int64_t kKeptFft = int64_t{1} << 16;

template <typename T>
struct FrameScratch {
  std::vector<T> segment;             // n_fft: the windowed frame; the inverse FFT's output
  std::vector<std::complex<T>> bins;  // n_freq: the FFT's complex input or output
  std::vector<T> x_re, x_im;          // n_freq: the re-analysed spectrum (rebuilt)
  std::vector<T> s_re, s_im;          // n_freq: the updated spectrum (S * angles)
  std::vector<T> z_re, z_im;          // n_freq: the half-length complex FFT's bins
  std::vector<double> norm2;          // n_freq: |angles|^2
  std::vector<double> acc;            // kSampleBlock: the overlap-add's sums

  void Reserve(int64_t n_fft, int64_t n_freq) {
    auto grow = [](auto* v, int64_t n) {
      if (static_cast<int64_t>(v->size()) < n) v->resize(static_cast<size_t>(n));
    };
    grow(&segment, n_fft);
    grow(&bins, n_freq);
    for (std::vector<T>* v : {&x_re, &x_im, &s_re, &s_im, &z_re, &z_im}) grow(v, n_freq);
    grow(&norm2, n_freq);
    grow(&acc, kSampleBlock);
  }
};

template <typename T>
FrameScratch<T>& ThreadScratch() {
  static thread_local FrameScratch<T> scratch;
  return scratch;
}

// Runs fn(scratch) with this thread's kept scratch, or with a fresh one for a large n_fft.
template <typename T, typename Fn>
void WithScratch(int64_t n_fft, int64_t n_freq, const Fn& fn) {
  if (n_fft <= kKeptFft) {
    FrameScratch<T>& s = ThreadScratch<T>();
    s.Reserve(n_fft, n_freq);
    fn(&s);
  } else {
    FrameScratch<T> s;
    s.Reserve(n_fft, n_freq);
    fn(&s);
  }
}

// The STFT and ISTFT of one frame, with a real FFT of n_fft points. Where n_fft is a multiple of
// 4 it is computed as Eigen's kissfft_impl computes it for real data (one complex FFT of
// m = n_fft / 2 points of the even and odd samples, then twiddles that separate the two halves;
// the inverse the other way round), but with the twiddle loops written over split real and
// imaginary arrays, which the compiler vectorises, instead of std::complex products, which it does
// not (each carries a NaN check and a call to __mulsc3), and with the twiddles computed in double.
// Other sizes use Eigen's real FFT as it is.
template <typename T>
class FrameTransform {
 public:
  FrameTransform(const GriffinLimParams& p, const std::vector<double>& window)
      : n_fft_(p.n_fft),
        n_freq_(p.n_freq),
        pad_mode_(p.pad_mode),
        analysis_(static_cast<size_t>(p.n_fft)),
        synthesis_(static_cast<size_t>(p.n_fft)) {
    for (int64_t j = 0; j < n_fft_; ++j) {
      analysis_[j] = static_cast<T>(window[j]);
      // irfft's 1 / n_fft folded into the window (the FFT runs unscaled).
      synthesis_[j] = static_cast<T>(window[j] / static_cast<double>(n_fft_));
    }
    if (n_fft_ % 4 == 0) {
      // w[k] = exp(-i pi (k / m + 1/2)) = (-sin(pi k / m), -cos(pi k / m)), k in [0, m / 2];
      // above pi / 4 from the complementary angle, so that w[m / 2] is -1 exactly.
      m_ = n_fft_ / 2;
      const int64_t h = m_ / 2;
      tw_re_.resize(static_cast<size_t>(h + 1));
      tw_im_.resize(static_cast<size_t>(h + 1));
      const double step = kPi / static_cast<double>(m_);
      for (int64_t k = 0; k <= h; ++k) {
        double c, s;
        if (2 * k <= h) {
          c = std::cos(step * static_cast<double>(k));
          s = std::sin(step * static_cast<double>(k));
        } else {
          c = std::sin(step * static_cast<double>(h - k));
          s = std::cos(step * static_cast<double>(h - k));
        }
        tw_re_[k] = static_cast<T>(-s);
        tw_im_[k] = static_cast<T>(-c);
      }
    }
  }

  // (s->x_re, s->x_im)[0, n_freq) = rfft(analysis window * the frame of y (a signal of `length`
  // samples) that starts at `start`, outside the signal padded as pad_mode says).
  void Forward(const T* y, int64_t length, int64_t start, FrameScratch<T>* s) const {
    T* __restrict seg = s->segment.data();
    const T* __restrict w = analysis_.data();
    if (start >= 0 && start + n_fft_ <= length) {
      const T* __restrict src = y + start;
      for (int64_t j = 0; j < n_fft_; ++j) seg[j] = src[j] * w[j];
    } else {
      for (int64_t j = 0; j < n_fft_; ++j) {
        const int64_t q = PadSource(start + j, length, pad_mode_);
        seg[j] = q < 0 ? T(0) : y[q] * w[j];
      }
    }
    T* __restrict xr = s->x_re.data();
    T* __restrict xi = s->x_im.data();
    if (m_ == 0) {
      ThreadFft<T>().fwd(s->bins.data(), seg, n_fft_);
      const T* __restrict b = reinterpret_cast<const T*>(s->bins.data());
      for (int64_t k = 0; k < n_freq_; ++k) {
        xr[k] = b[2 * k];
        xi[k] = b[2 * k + 1];
      }
      return;
    }
    const int64_t m = m_, h = m / 2;
    ThreadFft<T>().fwd(s->bins.data(), reinterpret_cast<const std::complex<T>*>(seg), m);
    T* __restrict zr = s->z_re.data();
    T* __restrict zi = s->z_im.data();
    const T* __restrict b = reinterpret_cast<const T*>(s->bins.data());
    for (int64_t k = 0; k < m; ++k) {
      zr[k] = b[2 * k];
      zi[k] = b[2 * k + 1];
    }
    // Z = fft(even + i odd); X[k] = (Z[k] + conj Z[m-k]) / 2 + (Z[k] - conj Z[m-k]) w[k] / 2 and
    // X[m-k] = conj((Z[k] + conj Z[m-k]) / 2 - (Z[k] - conj Z[m-k]) w[k] / 2).
    xr[0] = zr[0] + zi[0];
    xi[0] = T(0);
    xr[m] = zr[0] - zi[0];
    xi[m] = T(0);
    const T* __restrict wr = tw_re_.data();
    const T* __restrict wi = tw_im_.data();
    // Bins k in [1, h) and m - k in (h, m) never meet: no dependence between iterations.
    OPFORGE_IVDEP
    for (int64_t k = 1; k < h; ++k) {
      const int64_t n = m - k;
      const T f1r = zr[k] + zr[n], f1i = zi[k] - zi[n];
      const T f2r = zr[k] - zr[n], f2i = zi[k] + zi[n];
      const T twr = f2r * wr[k] - f2i * wi[k], twi = f2r * wi[k] + f2i * wr[k];
      xr[k] = (f1r + twr) * T(0.5);
      xi[k] = (f1i + twi) * T(0.5);
      xr[n] = (f1r - twr) * T(0.5);
      xi[n] = (twi - f1i) * T(0.5);
    }
    // Bin h (k = m - k, twiddle -1): conj Z[h], as kissfft's last write there gives it.
    xr[h] = zr[h];
    xi[h] = -zi[h];
  }

  // frame[0, n_fft) = synthesis window * irfft(re + i im), the spectrum's n_freq bins (irfft
  // ignores the imaginary parts of bin 0 and, for an even n_fft, bin n_fft / 2).
  void Inverse(const T* re, const T* im, T* frame, FrameScratch<T>* s) const {
    T* __restrict seg = s->segment.data();
    T* __restrict b = reinterpret_cast<T*>(s->bins.data());
    if (m_ == 0) {
      for (int64_t k = 0; k < n_freq_; ++k) {
        b[2 * k] = re[k];
        b[2 * k + 1] = im[k];
      }
      ThreadFft<T>().inv(seg, s->bins.data(), n_fft_);
    } else {
      // The inverse of Forward's twiddles: Y[k] = F[k] + i O[k], the even and odd samples' DFTs
      // (twice over), from X[k] and conj X[m-k]; then one inverse complex FFT of m points.
      const int64_t m = m_, h = m / 2;
      T* __restrict yr = s->z_re.data();
      T* __restrict yi = s->z_im.data();
      const T* __restrict wr = tw_re_.data();
      const T* __restrict wi = tw_im_.data();
      yr[0] = re[0] + re[m];
      yi[0] = re[0] - re[m];
      OPFORGE_IVDEP
      for (int64_t k = 1; k < h; ++k) {
        const int64_t n = m - k;
        const T fer = re[k] + re[n], fei = im[k] - im[n];
        const T tr = re[k] - re[n], ti = im[k] + im[n];
        const T okr = tr * wr[k] + ti * wi[k], oki = ti * wr[k] - tr * wi[k];
        yr[k] = fer + okr;
        yi[k] = fei + oki;
        yr[n] = fer - okr;
        yi[n] = oki - fei;
      }
      // Bin h (twiddle -1): 2 conj X[h].
      yr[h] = re[h] + re[h];
      yi[h] = -(im[h] + im[h]);
      for (int64_t k = 0; k < m; ++k) {
        b[2 * k] = yr[k];
        b[2 * k + 1] = yi[k];
      }
      ThreadFft<T>().inv(reinterpret_cast<std::complex<T>*>(seg), s->bins.data(), m);
    }
    const T* __restrict w = synthesis_.data();
    T* __restrict out = frame;
    for (int64_t j = 0; j < n_fft_; ++j) out[j] = seg[j] * w[j];
  }

 private:
  int64_t n_fft_, n_freq_;
  int64_t m_ = 0;  // n_fft / 2 where n_fft is a multiple of 4, else 0 (Eigen's real FFT)
  StftPadMode pad_mode_;
  std::vector<T> analysis_, synthesis_, tw_re_, tw_im_;
};

// librosa's phase update of n bins, on split real and imaginary arrays:
//   angles = rebuilt - momentum * tprev (not on the first iteration)
//   spectrum = S * angles / (|angles| + tiny),   tprev = rebuilt
// |angles| in double (as sqrt(re^2 + im^2): no overflow for float, and the formula the CUDA
// kernel replays), rounded to T. Three loops the compiler vectorises (and Eigen's vectorised
// sqrt in between: a plain std::sqrt loop stays scalar, for errno's sake).
template <typename T>
void UpdateBins(int64_t n, bool first, T momentum, const T* __restrict x_re,
                const T* __restrict x_im, const T* __restrict mag, T* __restrict prev_re,
                T* __restrict prev_im, T* __restrict s_re, T* __restrict s_im,
                double* __restrict norm2) {
  if (first) {
    for (int64_t k = 0; k < n; ++k) {
      const T re = x_re[k], im = x_im[k];
      s_re[k] = re;
      s_im[k] = im;
      norm2[k] = static_cast<double>(re) * static_cast<double>(re) +
                 static_cast<double>(im) * static_cast<double>(im);
    }
  } else {
    for (int64_t k = 0; k < n; ++k) {
      const T re = x_re[k] - momentum * prev_re[k], im = x_im[k] - momentum * prev_im[k];
      s_re[k] = re;
      s_im[k] = im;
      norm2[k] = static_cast<double>(re) * static_cast<double>(re) +
                 static_cast<double>(im) * static_cast<double>(im);
    }
  }
  Eigen::Map<Eigen::ArrayXd> norm(norm2, n);
  norm = norm.sqrt();
  const T eps = std::numeric_limits<T>::min();
  for (int64_t k = 0; k < n; ++k) {
    const T scale = T(1) / (static_cast<T>(norm2[k]) + eps);
    s_re[k] = s_re[k] * scale * mag[k];
    s_im[k] = s_im[k] * scale * mag[k];
    prev_re[k] = x_re[k];
    prev_im[k] = x_im[k];
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

  // Frame by frame ([batch, T, ...]): the magnitudes (n_freq), the spectrum's state (n_freq real
  // parts, then n_freq imaginary parts: first S * the initial angles, then tprev) and the
  // windowed inverse FFTs (n_fft) that the overlap-add sums. Every element is written before it
  // is read.
  Scratch<T> mag(static_cast<size_t>(total_frames * n_freq));
  Scratch<T> state(static_cast<size_t>(total_frames * 2 * n_freq));
  Scratch<T> frames(static_cast<size_t>(total_frames * n_fft));
  Scratch<T> signal(static_cast<size_t>(batch * length));
  std::vector<double> uniform;
  if (p.init == GriffinLimInit::kRandom) {
    // numpy's RandomState(seed).random(): MT19937 with init_genrand(seed) (std::mt19937's
    // seeding) and 53-bit doubles from two draws, in S's row-major order. The draw is serial;
    // the cos and sin of the phases are not.
    uniform.resize(static_cast<size_t>(total_frames * n_freq));
    std::mt19937 gen(static_cast<uint32_t>(p.seed));
    for (double& u : uniform) {
      const uint32_t hi = static_cast<uint32_t>(gen()) >> 5;
      const uint32_t lo = static_cast<uint32_t>(gen()) >> 6;
      u = (static_cast<double>(hi) * 67108864.0 + static_cast<double>(lo)) / 9007199254740992.0;
    }
  }
  const T momentum = static_cast<T>(p.momentum / (1.0 + p.momentum));
  const double fft_cost = 5.0 * static_cast<double>(n_fft) *
                          std::log2(static_cast<double>(std::max<int64_t>(n_fft, 2)));

  // The overlap-add: out[b, j] = sum_t frames[b, t][j + offset - t hop] / divisor[j], the frames
  // summed in ascending order in double whatever the partition.
  const int64_t blocks_per_item = (length + kSampleBlock - 1) / kSampleBlock;
  auto overlap_add = [&](T* out) {
    if (length == 0) return;
    const double cost = 4.0 * static_cast<double>(kSampleBlock * (n_fft / hop + 1));
    parallel.For(batch * blocks_per_item, cost, [&](int64_t begin, int64_t end) {
      WithScratch<T>(n_fft, n_freq, [&](FrameScratch<T>* s) {
        double* __restrict acc = s->acc.data();
        for (int64_t task = begin; task < end; ++task) {
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
        }
      });
    });
  };

  // The magnitudes and the initial spectrum S * angles, frame by frame, and the first ISTFT's
  // frames.
  parallel.For(total_frames, fft_cost + 40.0 * static_cast<double>(n_freq),
               [&](int64_t begin, int64_t end) {
                 WithScratch<T>(n_fft, n_freq, [&](FrameScratch<T>* s) {
                   for (int64_t u = begin; u < end; ++u) {
                     const int64_t b = u / n_frames, t = u - b * n_frames;
                     T* m = mag.data() + u * n_freq;
                     T* re = state.data() + u * 2 * n_freq;
                     T* im = re + n_freq;
                     const int64_t in = b * n_freq * n_frames + t;  // S[b, 0, t]
                     for (int64_t f = 0; f < n_freq; ++f) m[f] = magnitude[in + f * n_frames];
                     if (p.init == GriffinLimInit::kOnes) {
                       for (int64_t f = 0; f < n_freq; ++f) {
                         re[f] = m[f];
                         im[f] = T(0) * m[f];
                       }
                     } else {
                       for (int64_t f = 0; f < n_freq; ++f) {
                         const double phase =
                             p.init == GriffinLimInit::kRandom
                                 ? 2.0 * kPi * uniform[static_cast<size_t>(in + f * n_frames)]
                                 : static_cast<double>(phases[in + f * n_frames]);
                         re[f] = static_cast<T>(std::cos(phase)) * m[f];
                         im[f] = static_cast<T>(std::sin(phase)) * m[f];
                       }
                     }
                     transform.Inverse(re, im, frames.data() + u * n_fft, s);
                   }
                 });
               });
  for (int64_t iter = 0; iter < p.n_iter; ++iter) {
    overlap_add(signal.data());
    const bool first = iter == 0;
    parallel.For(total_frames, 2.0 * fft_cost + 40.0 * static_cast<double>(n_freq),
                 [&](int64_t begin, int64_t end) {
                   WithScratch<T>(n_fft, n_freq, [&](FrameScratch<T>* s) {
                     for (int64_t u = begin; u < end; ++u) {
                       const int64_t b = u / n_frames, t = u - b * n_frames;
                       transform.Forward(signal.data() + b * length, length, t * hop - offset, s);
                       T* prev = state.data() + u * 2 * n_freq;
                       UpdateBins<T>(n_freq, first, momentum, s->x_re.data(), s->x_im.data(),
                                     mag.data() + u * n_freq, prev, prev + n_freq, s->s_re.data(),
                                     s->s_im.data(), s->norm2.data());
                       transform.Inverse(s->s_re.data(), s->s_im.data(), frames.data() + u * n_fft,
                                         s);
                     }
                   });
                 });
  }
  overlap_add(audio);
  return Status::Ok();
}

template Status GriffinLimForward<float>(const GriffinLimParams&, const float*, const float*,
                                         float*, const Parallel&);
template Status GriffinLimForward<double>(const GriffinLimParams&, const double*, const double*,
                                          double*, const Parallel&);

}  // namespace opforge

#include <unsupported/Eigen/FFT>
#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

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

Status ValidateGriffinLim(const std::vector<int64_t>& magnitude,
                          const std::vector<int64_t>* phases, GriffinLimParams* params) {
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
    s << "n_fft / 2 + 1 = " << p.n_fft / 2 + 1 << " frequency bins (axis -2) for n_fft = "
      << p.n_fft;
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
      s << "a length whose STFT has the magnitude's " << p.n_frames << " frames (it has "
        << frames << ")";
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

}  // namespace

template <typename T>
Status GriffinLimForward(const GriffinLimParams& p, const T* magnitude, const T* phases, T* audio,
                         const Parallel& parallel) {
  using C = std::complex<T>;
  const int64_t batch = p.batch, n_freq = p.n_freq, n_frames = p.n_frames;
  const int64_t n_fft = p.n_fft, hop = p.hop_length, length = p.out_length;
  const int64_t total_frames = batch * n_frames;
  if (total_frames == 0) return Status::Ok();
  OPFORGE_RETURN_IF_ERROR(CheckFinite("magnitude", magnitude, total_frames * n_freq));
  if (p.init == GriffinLimInit::kPhases) {
    OPFORGE_RETURN_IF_ERROR(CheckFinite("phases", phases, total_frames * n_freq));
  }

  const std::vector<double> window = StftWindowValues(p.window, p.win_length, n_fft);
  std::vector<T> analysis(static_cast<size_t>(n_fft)), synthesis(static_cast<size_t>(n_fft));
  for (int64_t j = 0; j < n_fft; ++j) {
    analysis[j] = static_cast<T>(window[j]);
    // irfft's 1 / n_fft folded into the window (the FFT runs unscaled).
    synthesis[j] = static_cast<T>(window[j] / static_cast<double>(n_fft));
  }
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

  // Magnitudes and phases frame by frame: [batch, T, n_freq].
  std::vector<T> mag(static_cast<size_t>(total_frames * n_freq));
  std::vector<C> angles(static_cast<size_t>(total_frames * n_freq));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t f = 0; f < n_freq; ++f) {
      for (int64_t t = 0; t < n_frames; ++t) {
        mag[(b * n_frames + t) * n_freq + f] = magnitude[(b * n_freq + f) * n_frames + t];
      }
    }
  }
  if (p.init == GriffinLimInit::kRandom) {
    // numpy's RandomState(seed).random(): MT19937 with init_genrand(seed) (std::mt19937's
    // seeding) and 53-bit doubles from two draws, in S's row-major order.
    std::mt19937 gen(static_cast<uint32_t>(p.seed));
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t f = 0; f < n_freq; ++f) {
        for (int64_t t = 0; t < n_frames; ++t) {
          const uint32_t hi = static_cast<uint32_t>(gen()) >> 5;
          const uint32_t lo = static_cast<uint32_t>(gen()) >> 6;
          const double u = (static_cast<double>(hi) * 67108864.0 + static_cast<double>(lo)) /
                           9007199254740992.0;
          const double phase = 2.0 * kPi * u;
          angles[(b * n_frames + t) * n_freq + f] =
              C(static_cast<T>(std::cos(phase)), static_cast<T>(std::sin(phase)));
        }
      }
    }
  } else if (p.init == GriffinLimInit::kOnes) {
    std::fill(angles.begin(), angles.end(), C(T(1), T(0)));
  } else {
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t f = 0; f < n_freq; ++f) {
        for (int64_t t = 0; t < n_frames; ++t) {
          const double phase = static_cast<double>(phases[(b * n_freq + f) * n_frames + t]);
          angles[(b * n_frames + t) * n_freq + f] =
              C(static_cast<T>(std::cos(phase)), static_cast<T>(std::sin(phase)));
        }
      }
    }
  }
  for (size_t i = 0; i < angles.size(); ++i) {
    angles[i] = C(angles[i].real() * mag[i], angles[i].imag() * mag[i]);  // angles *= S
  }

  std::vector<C> tprev(angles.size());
  std::vector<T> frames(static_cast<size_t>(total_frames * n_fft));
  std::vector<T> signal(static_cast<size_t>(batch * length));
  const T eps = std::numeric_limits<T>::min();
  const T momentum = static_cast<T>(p.momentum / (1.0 + p.momentum));
  const double fft_cost = 5.0 * static_cast<double>(n_fft) *
                          std::log2(static_cast<double>(std::max<int64_t>(n_fft, 2)));

  // Frame pass, part 2: frames[u] = synthesis window * irfft(spectrum).
  auto inverse_frame = [&](int64_t u, const C* spectrum, T* scratch) {
    ThreadFft<T>().inv(scratch, spectrum, n_fft);
    T* out = frames.data() + u * n_fft;
    for (int64_t j = 0; j < n_fft; ++j) out[j] = scratch[j] * synthesis[j];
  };
  // The overlap-add: out[b, j] = sum_t frames[b, t][j + offset - t hop] / divisor[j].
  const int64_t blocks_per_item = (length + kSampleBlock - 1) / kSampleBlock;
  auto overlap_add = [&](T* out) {
    if (length == 0) return;
    const double cost = 4.0 * static_cast<double>(kSampleBlock * (n_fft / hop + 1));
    parallel.For(batch * blocks_per_item, cost, [&](int64_t begin, int64_t end) {
      std::vector<double> acc(static_cast<size_t>(kSampleBlock));
      for (int64_t task = begin; task < end; ++task) {
        const int64_t b = task / blocks_per_item;
        const int64_t j0 = (task - b * blocks_per_item) * kSampleBlock;
        const int64_t j1 = std::min(length, j0 + kSampleBlock);
        const int64_t q0 = j0 + offset, q1 = std::min(j1 + offset, buffer_length);
        std::fill(acc.begin(), acc.end(), 0.0);
        if (q1 > q0) {
          const int64_t t_first = q0 >= n_fft ? (q0 - n_fft) / hop + 1 : 0;
          const int64_t t_last = std::min(ola_frames - 1, (q1 - 1) / hop);
          for (int64_t t = t_first; t <= t_last; ++t) {
            const T* frame = frames.data() + (b * n_frames + t) * n_fft;
            const int64_t lo = std::max(q0, t * hop), hi = std::min(q1, t * hop + n_fft);
            double* a = acc.data() - q0;
            const T* src = frame - t * hop;
            for (int64_t q = lo; q < hi; ++q) a[q] += static_cast<double>(src[q]);
          }
        }
        T* o = out + b * length;
        for (int64_t j = j0; j < j1; ++j) {
          const T v = static_cast<T>(acc[static_cast<size_t>(j - j0)]);
          const T d = divisor[static_cast<size_t>(j)];
          o[j] = d != T(0) ? v / d : v;
        }
      }
    });
  };

  // The first ISTFT's frames.
  parallel.For(total_frames, fft_cost, [&](int64_t begin, int64_t end) {
    std::vector<T> scratch(static_cast<size_t>(n_fft));
    for (int64_t u = begin; u < end; ++u) {
      inverse_frame(u, angles.data() + u * n_freq, scratch.data());
    }
  });
  for (int64_t iter = 0; iter < p.n_iter; ++iter) {
    overlap_add(signal.data());
    const bool first = iter == 0;
    parallel.For(total_frames, 2.0 * fft_cost + 20.0 * static_cast<double>(n_freq),
                 [&](int64_t begin, int64_t end) {
                   std::vector<T> segment(static_cast<size_t>(n_fft));
                   std::vector<C> rebuilt(static_cast<size_t>(n_freq));
                   std::vector<C> spectrum(static_cast<size_t>(n_freq));
                   for (int64_t u = begin; u < end; ++u) {
                     const int64_t b = u / n_frames, t = u - b * n_frames;
                     const T* y = signal.data() + b * length;
                     const int64_t start = t * hop - offset;
                     if (start >= 0 && start + n_fft <= length) {
                       for (int64_t j = 0; j < n_fft; ++j) segment[j] = y[start + j] * analysis[j];
                     } else {
                       for (int64_t j = 0; j < n_fft; ++j) {
                         const int64_t src = PadSource(start + j, length, p.pad_mode);
                         segment[j] = src < 0 ? T(0) : y[src] * analysis[j];
                       }
                     }
                     ThreadFft<T>().fwd(rebuilt.data(), segment.data(), n_fft);
                     C* prev = tprev.data() + u * n_freq;
                     const T* s = mag.data() + u * n_freq;
                     for (int64_t f = 0; f < n_freq; ++f) {
                       const C r = rebuilt[f];
                       T re = r.real(), im = r.imag();
                       if (!first) {
                         re -= momentum * prev[f].real();
                         im -= momentum * prev[f].imag();
                       }
                       const double dre = re, dim = im;
                       const T norm = static_cast<T>(std::sqrt(dre * dre + dim * dim)) + eps;
                       const T scale = T(1) / norm;
                       spectrum[f] = C(re * scale * s[f], im * scale * s[f]);
                       prev[f] = r;
                     }
                     inverse_frame(u, spectrum.data(), segment.data());
                   }
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

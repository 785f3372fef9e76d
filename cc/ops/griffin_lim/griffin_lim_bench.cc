// Google Benchmark of the inverse-MFCC chain, no TensorFlow in the process (`make core-bench`):
// 5 s of 22.05 kHz audio (T = 216 frames), n_mfcc = 20, n_mels = 128, n_fft = 2048, hop 512,
// 32 Griffin-Lim iterations, float32: MfccToMel, MelToStft (NNLS), GriffinLim and the three in a
// row, with 1 and 2 threads. Real time is 5 s; the chain's target is at least 20x real time
// (250 ms for the clip).
// Also Eigen's FFTs both ways: the 2048-point real FFT, and the 1024-point complex FFT through
// which GriffinLim computes it (n_fft a multiple of 4): 2 x 32 x 216 of those are the floor of
// BM_GriffinLim/1 (the rest is the windows, twiddles, phase update and overlap-add).
#include <benchmark/benchmark.h>

#include <cmath>
#include <complex>
#include <unsupported/Eigen/FFT>
#include <vector>

#include "common/bench_util.h"
#include "ops/griffin_lim/griffin_lim.h"
#include "ops/mel_to_stft/mel_to_stft.h"
#include "ops/mfcc_to_mel/mfcc_to_mel.h"

namespace opforge {
namespace {

constexpr int64_t kFrames = 216, kMfcc = 20, kMels = 128, kFft = 2048;

// Smoothly varying MFCC-like frames: a large negative c0, decaying higher coefficients.
std::vector<float> SyntheticMfcc() {
  std::vector<float> c(static_cast<size_t>(kMfcc * kFrames));
  for (int64_t n = 0; n < kMfcc; ++n) {
    for (int64_t t = 0; t < kFrames; ++t) {
      const double x = 2 * 3.141592653589793 * double(t) / double(kFrames);
      const double v = n == 0 ? -250 + 60 * std::sin(5 * x)
                              : 40.0 / double(n) * std::sin(double(n + 2) * x + 0.7 * double(n));
      c[static_cast<size_t>(n * kFrames + t)] = static_cast<float>(v);
    }
  }
  return c;
}

struct Chain {
  MfccToMelParams mfcc;
  MelToStftParams mel;
  GriffinLimParams gl;
  std::vector<float> coefficients, mel_spec, magnitude, audio;
  Chain() : coefficients(SyntheticMfcc()) {
    Status s = ValidateMfccToMel({kMfcc, kFrames}, &mfcc);
    if (s.ok()) s = ValidateMelToStft({kMels, kFrames}, &mel);
    gl.seed = 0;
    if (s.ok()) s = ValidateGriffinLim({kFft / 2 + 1, kFrames}, nullptr, &gl);
    if (!s.ok()) std::abort();
    mel_spec.resize(static_cast<size_t>(kMels * kFrames));
    magnitude.resize(static_cast<size_t>((kFft / 2 + 1) * kFrames));
    audio.resize(static_cast<size_t>(gl.out_length));
  }
  void ToMel(const Parallel& p) {
    MfccToMelForward<float>(mfcc, coefficients.data(), mel_spec.data(), p);
  }
  void ToStft(const Parallel& p) {
    if (!MelToStftForward<float>(mel, mel_spec.data(), magnitude.data(), p).ok()) std::abort();
  }
  void ToAudio(const Parallel& p) {
    if (!GriffinLimForward<float>(gl, magnitude.data(), nullptr, audio.data(), p).ok())
      std::abort();
  }
};

void BM_MfccToMel(benchmark::State& state) {
  Chain c;
  const ThreadParallel parallel(static_cast<int>(state.range(0)));
  for (auto _ : state) c.ToMel(parallel);
}

void BM_MelToStft(benchmark::State& state) {
  Chain c;
  const ThreadParallel parallel(static_cast<int>(state.range(0)));
  c.ToMel(parallel);
  for (auto _ : state) c.ToStft(parallel);
}

void BM_GriffinLim(benchmark::State& state) {
  Chain c;
  const ThreadParallel parallel(static_cast<int>(state.range(0)));
  c.ToMel(parallel);
  c.ToStft(parallel);
  for (auto _ : state) c.ToAudio(parallel);
}

void BM_MfccToAudio(benchmark::State& state) {
  Chain c;
  const ThreadParallel parallel(static_cast<int>(state.range(0)));
  for (auto _ : state) {
    c.ToMel(parallel);
    c.ToStft(parallel);
    c.ToAudio(parallel);
  }
  state.counters["x_real_time"] =
      benchmark::Counter(5.0 * double(state.iterations()), benchmark::Counter::kIsRate);
}

void BM_EigenRealFft2048(benchmark::State& state) {
  Eigen::FFT<float> fft;
  fft.SetFlag(Eigen::FFT<float>::HalfSpectrum);
  fft.SetFlag(Eigen::FFT<float>::Unscaled);
  std::vector<float> x = bench::RandomFloats(kFft, 5), y(kFft);
  std::vector<std::complex<float>> spectrum(kFft / 2 + 1);
  const bool inverse = state.range(0) != 0;
  for (auto _ : state) {
    if (inverse) {
      fft.inv(y.data(), spectrum.data(), kFft);
    } else {
      fft.fwd(spectrum.data(), x.data(), kFft);
    }
    benchmark::ClobberMemory();
  }
}

void BM_EigenComplexFft1024(benchmark::State& state) {
  Eigen::FFT<float> fft;
  fft.SetFlag(Eigen::FFT<float>::Unscaled);
  const std::vector<float> x = bench::RandomFloats(kFft, 5);
  std::vector<std::complex<float>> in(kFft / 2), out(kFft / 2);
  for (int64_t k = 0; k < kFft / 2; ++k) in[k] = {x[2 * k], x[2 * k + 1]};
  const bool inverse = state.range(0) != 0;
  for (auto _ : state) {
    if (inverse) {
      fft.inv(out.data(), in.data(), kFft / 2);
    } else {
      fft.fwd(out.data(), in.data(), kFft / 2);
    }
    benchmark::ClobberMemory();
  }
}

void Threads(benchmark::internal::Benchmark* b) {
  b->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
}

BENCHMARK(BM_MfccToMel)->Apply(Threads);
BENCHMARK(BM_MelToStft)->Apply(Threads);
BENCHMARK(BM_GriffinLim)->Apply(Threads);
BENCHMARK(BM_MfccToAudio)->Apply(Threads);
BENCHMARK(BM_EigenRealFft2048)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_EigenComplexFft1024)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace opforge

// The GriffinLim CUDA kernels (cuFFT) against the CPU core (Eigen's kissfft, SerialParallel), on
// a non-blocking stream, in float and double: librosa's test magnitude (testdata) in a batch of
// three, from ones, seeded random phases (the GPU must start from the CPU's exact angles) and
// given phases, after 0, 1 and 32 iterations; every window, win_length < n_fft, odd n_fft,
// center off, every pad mode, length shorter and longer, momentum 0, a hop that does not divide
// n_fft; more frames than one grid's rows (grid stride); the errors (non-finite magnitude or
// phases: the CPU's messages), the empty batch, a short scratch; two streams and repeated calls
// (the plan cache) giving the same bits. Without a CUDA device every test says "skipped: no CUDA
// device".
//
// Tolerances. The two run the same operations except the FFTs (cuFFT's algorithms round
// differently from kissfft's), and Griffin-Lim amplifies such differences through its
// normalisation. How much was measured by the CPU core's own tests between two FFT libraries
// (kissfft against librosa's pocketfft) on this magnitude: float32 differences of 1e-7 of the
// peak after one iteration, 3e-5 after 32 from ones, 4e-4 after 32 from random phases; float64
// below 1e-9. The GPU is held to the bounds the CPU meets there: max |gpu - cpu| <= tol * max
// |cpu| with tol 1e-5 (float, <= 1 iteration), 1e-4 (float, 32 from ones), 2e-3 (float, 32 from
// random phases), 1e-8 (double, 32 iterations), 1e-10 (double, <= 2 iterations: a few FFTs'
// rounding, ~1e-15 of the peak, times the normalisation's amplification |S| / |rebuilt| in the
// weakest bins, which these tolerances allow up to 1e5). Zero iterations (one inverse FFT
// and the overlap-add) are held to 1e-5 / 1e-12. The structural cases run on random magnitudes in
// double for 2 iterations, where an indexing or padding error shows at the size of the signal.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/cuda_geometry.h"
#include "common/cuda_test_util.h"
#include "common/dtype.h"
#include "common/parallel.h"
#include "common/status.h"
#include "common/test_util.h"
#include "ops/griffin_lim/griffin_lim.h"

namespace opforge {
namespace {

#include "ops/griffin_lim/testdata/griffin_lim_refs.inc"

using test::DeviceBuffer;
using test::DownloadOn;
using test::TestStream;
using test::UploadOn;

// One call: the params (unvalidated), the magnitude's shape and values, phases when given.
template <typename T>
struct Call {
  GriffinLimParams p;
  std::vector<int64_t> shape;
  std::vector<T> magnitude, phases;
};

template <typename T>
std::vector<T> RunCpu(Call<T>* c) {
  const bool given = c->p.init == GriffinLimInit::kPhases;
  Status s = ValidateGriffinLim(c->shape, given ? &c->shape : nullptr, &c->p);
  EXPECT_TRUE(s.ok()) << s.message();
  std::vector<T> audio(static_cast<size_t>(c->p.batch * c->p.out_length));
  s = GriffinLimForward<T>(c->p, c->magnitude.data(), given ? c->phases.data() : nullptr,
                           audio.data(), SerialParallel());
  EXPECT_TRUE(s.ok()) << s.message();
  return audio;
}

// The GPU's audio for validated params; `status` the call's result.
template <typename T>
void RunGpu(const Call<T>& c, cudaStream_t stream, std::vector<T>* audio, Status* status,
            int64_t scratch_bytes = -1) {
  const bool given = c.p.init == GriffinLimInit::kPhases;
  audio->assign(static_cast<size_t>(c.p.batch * c.p.out_length), T(0));
  DeviceBuffer dmag, dphases, daudio, dscratch;
  ASSERT_NO_FATAL_FAILURE(UploadOn(stream, c.magnitude, &dmag));
  if (given) {
    ASSERT_NO_FATAL_FAILURE(UploadOn(stream, c.phases, &dphases));
  }
  OPFORGE_ASSERT_CUDA(daudio.Allocate(audio->size() * sizeof(T)));
  if (!audio->empty()) {
    OPFORGE_ASSERT_CUDA(cudaMemsetAsync(daudio.get(), 0xff, audio->size() * sizeof(T), stream));
  }
  const int64_t bytes = scratch_bytes >= 0 ? scratch_bytes : GriffinLimGpuScratchBytes(c.p);
  ASSERT_GT(bytes, 0);
  OPFORGE_ASSERT_CUDA(dscratch.Allocate(static_cast<size_t>(bytes)));
  *status =
      GriffinLimForwardGpu(DTypeOf<T>::value, c.p, dmag.get(), given ? dphases.get() : nullptr,
                           daudio.get(), dscratch.get(), bytes, stream);
  ASSERT_NO_FATAL_FAILURE(DownloadOn(stream, daudio, audio));
}

// max |a - ref| <= tol * max |ref| (and every value finite).
template <typename T>
::testing::AssertionResult CloseToCpu(const std::vector<T>& gpu, const std::vector<T>& cpu,
                                      double tol) {
  if (gpu.size() != cpu.size()) return ::testing::AssertionFailure() << "sizes differ";
  double peak = 0, worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    if (!std::isfinite(double(gpu[i]))) {
      return ::testing::AssertionFailure() << "gpu[" << i << "] = " << gpu[i];
    }
    peak = std::max(peak, std::abs(double(cpu[i])));
    const double d = std::abs(double(gpu[i]) - double(cpu[i]));
    if (d > worst) worst = d, at = i;
  }
  if (worst <= tol * peak) {
    return ::testing::AssertionSuccess() << "max diff " << worst / peak << " of the peak";
  }
  return ::testing::AssertionFailure()
         << "max diff " << worst << " = " << worst / peak << " of the peak " << peak << " at " << at
         << " (gpu " << gpu[at] << ", cpu " << cpu[at] << "), tolerance " << tol;
}

// librosa's test magnitude (65 bins, 16 frames, n_fft 128, hop 32) in a batch of three, scaled.
template <typename T>
Call<T> RefCall(GriffinLimInit init, int64_t n_iter) {
  Call<T> c;
  c.p.n_fft = kRefNFft;
  c.p.hop_length = kRefHop;
  c.p.init = init;
  c.p.n_iter = n_iter;
  c.p.seed = 1234;
  c.shape = {3, kRefNFreq, kRefFrames};
  for (double scale : {1.0, 0.5, 4.0}) {
    for (float v : kRefMagnitude) c.magnitude.push_back(static_cast<T>(scale * v));
  }
  if (init == GriffinLimInit::kPhases) {
    std::mt19937_64 rng(99);
    c.phases = test::UniformVector<T>(rng, static_cast<int64_t>(c.magnitude.size()), -3.2, 3.2);
  }
  return c;
}

template <typename T>
class GriffinLimCuda : public ::testing::Test {};
using Types = ::testing::Types<float, double>;
TYPED_TEST_SUITE(GriffinLimCuda, Types, test::TypeNames);

TYPED_TEST(GriffinLimCuda, LibrosaMagnitudeMatchesCpu) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  constexpr bool kFloat = std::is_same_v<T, float>;
  TestStream stream;
  OPFORGE_ASSERT_CUDA(stream.Create());
  struct Run {
    GriffinLimInit init;
    int64_t n_iter;
    double tol_float, tol_double;
  };
  const std::vector<Run> runs = {
      {GriffinLimInit::kOnes, 0, 1e-5, 1e-12},   {GriffinLimInit::kOnes, 1, 1e-5, 1e-10},
      {GriffinLimInit::kOnes, 32, 1e-4, 1e-8},   {GriffinLimInit::kRandom, 0, 1e-5, 1e-12},
      {GriffinLimInit::kRandom, 1, 1e-5, 1e-10}, {GriffinLimInit::kRandom, 32, 2e-3, 1e-8},
      {GriffinLimInit::kPhases, 1, 1e-5, 1e-10}, {GriffinLimInit::kPhases, 32, 2e-3, 1e-8},
  };
  for (const Run& r : runs) {
    SCOPED_TRACE("init " + std::to_string(int(r.init)) + ", " + std::to_string(r.n_iter) +
                 " iterations");
    Call<T> c = RefCall<T>(r.init, r.n_iter);
    const std::vector<T> cpu = RunCpu(&c);
    std::vector<T> gpu;
    Status s;
    ASSERT_NO_FATAL_FAILURE(RunGpu(c, stream.get(), &gpu, &s));
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_TRUE(CloseToCpu(gpu, cpu, kFloat ? r.tol_float : r.tol_double));
  }
}

// Random magnitudes, every option that changes an index; double, 2 iterations.
TEST(GriffinLimCudaGeometry, EveryOptionMatchesCpu) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  TestStream stream;
  OPFORGE_ASSERT_CUDA(stream.Create());
  struct Geo {
    const char* name;
    int64_t batch, n_fft, frames, hop, win_length, length, n_iter;
    StftWindow window;
    bool center;
    StftPadMode pad;
    double momentum;
  };
  const std::vector<Geo> geos = {
      {"hann, constant", 2, 64, 9, 16, 0, 0, 2, StftWindow::kHann, true, StftPadMode::kConstant,
       0.99},
      {"hamming, short window, reflect", 2, 64, 9, 12, 40, 0, 2, StftWindow::kHamming, true,
       StftPadMode::kReflect, 0.5},
      {"blackman, edge, odd n_fft", 1, 63, 11, 10, 0, 0, 2, StftWindow::kBlackman, true,
       StftPadMode::kEdge, 0.99},
      {"boxcar, symmetric, hop 7", 2, 32, 13, 7, 20, 0, 2, StftWindow::kBoxcar, true,
       StftPadMode::kSymmetric, 0.0},
      {"not centred", 2, 64, 9, 16, 0, 0, 2, StftWindow::kHann, false, StftPadMode::kConstant,
       0.99},
      {"length 140 (9 frames still)", 2, 64, 9, 16, 0, 140, 2, StftWindow::kHann, true,
       StftPadMode::kReflect, 0.99},
      {"length 50, no iteration (fewer OLA frames)", 2, 64, 9, 16, 0, 50, 0, StftWindow::kHann,
       true, StftPadMode::kConstant, 0.99},
      {"length 400, no iteration (zero tail)", 1, 64, 9, 16, 0, 400, 0, StftWindow::kHann, true,
       StftPadMode::kConstant, 0.99},
      {"one frame, not centred", 3, 16, 1, 4, 0, 0, 2, StftWindow::kHann, false,
       StftPadMode::kConstant, 0.99},
  };
  std::mt19937_64 rng(5);
  for (const Geo& geo : geos) {
    SCOPED_TRACE(geo.name);
    Call<double> c;
    c.p.n_fft = geo.n_fft;
    c.p.hop_length = geo.hop;
    c.p.win_length = geo.win_length;
    c.p.window = geo.window;
    c.p.center = geo.center;
    c.p.pad_mode = geo.pad;
    c.p.momentum = geo.momentum;
    c.p.length = geo.length;
    c.p.n_iter = geo.n_iter;
    c.p.init = GriffinLimInit::kRandom;
    c.p.seed = 77;
    const int64_t n_freq = geo.n_fft / 2 + 1;
    c.shape = {geo.batch, n_freq, geo.frames};
    c.magnitude = test::UniformVector<double>(rng, geo.batch * n_freq * geo.frames, 0.0, 1.0);
    const std::vector<double> cpu = RunCpu(&c);
    std::vector<double> gpu;
    Status s;
    ASSERT_NO_FATAL_FAILURE(RunGpu(c, stream.get(), &gpu, &s));
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_TRUE(CloseToCpu(gpu, cpu, 1e-10));
  }
}

// More frames than the kernels' grid rows (cuda::kMaxGridBlocksY, 65535 on a GPU): the frame and
// bin kernels stride over y; more samples than cuda::kMaxGridBlocks2DX (4096) blocks of 256
// threads: the overlap-add strides over x.
TEST(GriffinLimCudaGeometry, GridStride) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  const int64_t frames = cuda::kSimtGeometry ? 300 : 300000;
  ASSERT_GT(frames, cuda::kMaxGridBlocksY);
  ASSERT_GT(4 * (frames - 1) + 16, cuda::kMaxGridBlocks2DX * 256);
  TestStream stream;
  OPFORGE_ASSERT_CUDA(stream.Create());
  Call<double> c;
  c.p.n_fft = 16;
  c.p.hop_length = 4;
  c.p.n_iter = 1;
  c.p.init = GriffinLimInit::kOnes;
  c.shape = {1, 9, frames};
  std::mt19937_64 rng(6);
  c.magnitude = test::UniformVector<double>(rng, 9 * frames, 0.0, 1.0);
  const std::vector<double> cpu = RunCpu(&c);
  std::vector<double> gpu;
  Status s;
  ASSERT_NO_FATAL_FAILURE(RunGpu(c, stream.get(), &gpu, &s));
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(CloseToCpu(gpu, cpu, 1e-10));
}

// Two streams, shapes that alternate (plans from the cache, their stream and work area reset on
// every call), the same bits every time.
TEST(GriffinLimCudaPlans, StreamsAndRepeatsGiveTheSameBits) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  TestStream a, b;
  OPFORGE_ASSERT_CUDA(a.Create());
  OPFORGE_ASSERT_CUDA(b.Create());
  Call<float> big = RefCall<float>(GriffinLimInit::kRandom, 4);
  Call<float> small = RefCall<float>(GriffinLimInit::kOnes, 3);
  small.shape = {1, kRefNFreq, kRefFrames};
  small.magnitude.resize(static_cast<size_t>(kRefNFreq * kRefFrames));
  RunCpu(&big);
  RunCpu(&small);
  std::vector<float> first_big, first_small, again;
  Status s;
  ASSERT_NO_FATAL_FAILURE(RunGpu(big, a.get(), &first_big, &s));
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_NO_FATAL_FAILURE(RunGpu(small, b.get(), &first_small, &s));
  ASSERT_TRUE(s.ok()) << s.message();
  for (int round = 0; round < 3; ++round) {
    ASSERT_NO_FATAL_FAILURE(RunGpu(big, round % 2 ? a.get() : b.get(), &again, &s));
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(0, std::memcmp(again.data(), first_big.data(), again.size() * sizeof(float)));
    ASSERT_NO_FATAL_FAILURE(RunGpu(small, round % 2 ? b.get() : a.get(), &again, &s));
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(0, std::memcmp(again.data(), first_small.data(), again.size() * sizeof(float)));
  }
}

TEST(GriffinLimCudaErrors, NonFiniteInputsGiveTheCpuMessages) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  TestStream stream;
  OPFORGE_ASSERT_CUDA(stream.Create());
  Call<float> c = RefCall<float>(GriffinLimInit::kPhases, 2);
  RunCpu(&c);  // validates c.p
  std::vector<float> audio(static_cast<size_t>(c.p.batch * c.p.out_length));
  auto cpu_status = [&]() {
    return GriffinLimForward<float>(c.p, c.magnitude.data(), c.phases.data(), audio.data(),
                                    SerialParallel());
  };
  std::vector<float> gpu;
  Status s;
  c.phases[40] = std::numeric_limits<float>::infinity();
  ASSERT_NO_FATAL_FAILURE(RunGpu(c, stream.get(), &gpu, &s));
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(s.message(), cpu_status().message());
  EXPECT_TRUE(test::NamesWord(s.message(), "phases")) << s.message();
  // The magnitude is reported first, at its first non-finite flat index.
  c.magnitude[900] = std::nanf("");
  c.magnitude[77] = -std::numeric_limits<float>::infinity();
  ASSERT_NO_FATAL_FAILURE(RunGpu(c, stream.get(), &gpu, &s));
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(s.message(), cpu_status().message());
  EXPECT_TRUE(test::Contains(s.message(), "at flat index 77")) << s.message();
}

TEST(GriffinLimCudaErrors, EmptyBatchShortScratchAndOtherDTypes) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  TestStream stream;
  OPFORGE_ASSERT_CUDA(stream.Create());
  GriffinLimParams p;
  ASSERT_TRUE(ValidateGriffinLim({0, 1025, 4}, nullptr, &p).ok());
  EXPECT_TRUE(
      GriffinLimForwardGpu(DType::kFloat, p, nullptr, nullptr, nullptr, nullptr, 0, stream.get())
          .ok());
  Call<double> c = RefCall<double>(GriffinLimInit::kOnes, 2);
  RunCpu(&c);
  std::vector<double> gpu;
  Status s;
  ASSERT_NO_FATAL_FAILURE(RunGpu(c, stream.get(), &gpu, &s, 1024));
  EXPECT_EQ(s.code(), Status::Code::kInternal);
  EXPECT_TRUE(test::Contains(s.message(), "scratch")) << s.message();
  const Status d =
      GriffinLimForwardGpu(DType::kHalf, c.p, nullptr, nullptr, nullptr, nullptr, 0, stream.get());
  EXPECT_FALSE(d.ok());
  EXPECT_TRUE(test::Contains(d.message(), "GriffinLim")) << d.message();
}

}  // namespace
}  // namespace opforge

// The MfccToMel CUDA kernels against the CPU core (SerialParallel), on a non-blocking stream, in
// float and double, with batches, every DCT type and norm, lifters, more coefficients or bands
// than one shared-memory chunk (256), the grid-stride paths of both grid axes, and the empty
// case. Without a CUDA device every test says "skipped: no CUDA device".
//
// Tolerance, derived per element (u = 2^-53, the float64 unit roundoff). The GPU computes the
// basis entries with the device's cos and sin (CUDA documents 2 ulp), the CPU with glibc's
// (1 ulp), so an entry may differ relatively by ~6 ulp ~ 12u, times a_n = 1 + |l/2 sin| / |1 +
// l/2 sin| for a lifter l (the sine's error grows where 1 + l/2 sin(...) cancels). Everything
// else is the same operations in the same order on the two, so the exponent
// x = sum_n basis[k, n] c[n] differs by at most
//   |dx| <= sum_n (12 a_n + 2 n_mfcc) u |basis[k, n] c[n]|
// (the entries' error, plus the two sums' rounding errors, each <= n u S, on different inputs).
// Then mel = exp(0.1 ln 10 x) ref with exp within 1 ulp (device) and ~2 ulp (host, Eigen's):
//   |dmel| / mel <= 0.1 ln 10 |dx| + 10 u,
// and rounding to float32 adds at most one float ulp of the result. The gradient is
// sum_k basis[k, n] w[k] with the same w on both sides: |d| <= (12 a_n + 2 n_mels) u S' with
// S' = sum_k |basis[k, n] w[k]|, plus one ulp of T. The tests use 4x these bounds (a margin, not
// a fudge: a wrong index or order gives errors of the size of the values).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
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
#include "ops/mfcc_to_mel/mfcc_to_mel.h"

namespace opforge {
namespace {

using test::DeviceBuffer;
using test::DownloadOn;
using test::TestStream;
using test::UploadOn;

constexpr double kU = 1.1102230246251565e-16;  // 2^-53

struct Case {
  int64_t batch, n_mfcc, n_mels, n_frames;
  int dct_type;
  bool ortho;
  double lifter, ref, amplitude;  // mfcc uniform in [-amplitude, amplitude]
};

std::string Describe(const Case& c) {
  std::ostringstream s;
  s << "batch " << c.batch << ", n_mfcc " << c.n_mfcc << ", n_mels " << c.n_mels << ", T "
    << c.n_frames << ", dct " << c.dct_type << (c.ortho ? " ortho" : " none") << ", lifter "
    << c.lifter << ", ref " << c.ref;
  return s.str();
}

std::vector<Case> Cases() {
  return {
      {2, 20, 128, 37, 2, true, 0.0, 1.0, 30.0},    // librosa's defaults
      {3, 13, 40, 5, 3, false, 22.0, 2.5, 30.0},    // type 3, no norm, lifter
      {2, 13, 40, 300, 2, false, 22.0, 1.0, 30.0},  // T > one block of threads
      {1, 7, 9, 1, 3, true, 0.5, 1e-3, 30.0},       // one frame, tiny lifter
      {2, 300, 300, 3, 2, true, 0.0, 1.0, 2.0},     // chunks of coefficients and of bands
      {2, 257, 513, 4, 3, false, 0.0, 1.0, 20.0},   // chunk boundaries + 1
      // rows (batch * n_mels) > cuda::kMaxGridBlocksY: blockIdx.y strides
      {cuda::kMaxGridBlocksY / 128 + 1, 4, 128, 2, 2, true, 0.0, 1.0, 30.0},
      // T > cuda::kMaxGridBlocks2DX blocks of 256 threads: blockIdx.x strides
      {1, 1, 2, cuda::kMaxGridBlocks2DX * 256 * 17 / 16, 2, true, 0.0, 1.0, 30.0},
      {3, 128, 128, 2, 2, true, 3.0, 1.0, 3.0},  // n_mfcc = n_mels
  };
}

MfccToMelParams ParamsOf(const Case& c) {
  MfccToMelParams p;
  p.n_mels = c.n_mels;
  p.dct_type = c.dct_type;
  p.norm = c.ortho ? DctNorm::kOrtho : DctNorm::kNone;
  p.ref = c.ref;
  p.lifter = c.lifter;
  const Status s = ValidateMfccToMel({c.batch, c.n_mfcc, c.n_frames}, &p);
  EXPECT_TRUE(s.ok()) << s.message();
  return p;
}

// a_n above: how much the lifter's sine amplifies the relative error of sin (1 without lifter).
double LifterAmplification(const MfccToMelParams& p, int64_t n) {
  if (!(p.lifter > 0)) return 1.0;
  const double half_sine =
      p.lifter * 0.5 * std::sin(3.14159265358979323846 * double(n + 1) / p.lifter);
  return 1.0 + std::abs(half_sine) / std::abs(1.0 + half_sine);
}

// The spacing of T at |v| (one ulp), for the final rounding to float.
template <typename T>
double UlpOf(double v) {
  const T t = static_cast<T>(std::abs(v));
  return static_cast<double>(std::nextafter(t, std::numeric_limits<T>::infinity()) - t);
}

// Counts elements outside their bound, describing the first few.
template <typename T>
::testing::AssertionResult WithinBounds(const std::vector<T>& gpu, const std::vector<T>& cpu,
                                        const std::vector<double>& bound) {
  int64_t bad = 0;
  std::ostringstream s;
  for (size_t i = 0; i < cpu.size(); ++i) {
    const double g = gpu[i], c = cpu[i];
    const bool same_inf = std::isinf(c) && g == c;
    if (same_inf || std::abs(g - c) <= bound[i]) continue;
    if (bad++ < 5) {
      s << "\n  [" << i << "] gpu " << g << " cpu " << c << " |diff| " << std::abs(g - c)
        << " bound " << bound[i];
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << cpu.size() << " outside" << s.str();
}

// Fills a device buffer with NaN bytes on the stream, so that an element the kernel does not
// write fails the comparison.
void PoisonOn(cudaStream_t stream, DeviceBuffer* dev, size_t bytes) {
  OPFORGE_ASSERT_CUDA(dev->Allocate(bytes));
  OPFORGE_ASSERT_CUDA(cudaMemsetAsync(dev->get(), 0xff, bytes, stream));
}

template <typename T>
class MfccToMelCuda : public ::testing::Test {};
using Types = ::testing::Types<float, double>;
TYPED_TEST_SUITE(MfccToMelCuda, Types, test::TypeNames);

TYPED_TEST(MfccToMelCuda, ForwardMatchesCpu) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  TestStream stream;
  OPFORGE_ASSERT_CUDA(stream.Create());
  std::mt19937_64 rng(13);
  for (const Case& c : Cases()) {
    SCOPED_TRACE(Describe(c));
    const MfccToMelParams p = ParamsOf(c);
    const auto mfcc =
        test::UniformVector<T>(rng, c.batch * c.n_mfcc * c.n_frames, -c.amplitude, c.amplitude);
    std::vector<T> cpu(static_cast<size_t>(c.batch * c.n_mels * c.n_frames));
    MfccToMelForward<T>(p, mfcc.data(), cpu.data(), SerialParallel());

    DeviceBuffer din, dout;
    ASSERT_NO_FATAL_FAILURE(UploadOn(stream.get(), mfcc, &din));
    ASSERT_NO_FATAL_FAILURE(PoisonOn(stream.get(), &dout, cpu.size() * sizeof(T)));
    const Status s = MfccToMelForwardGpu(DTypeOf<T>::value, p, din.get(), dout.get(), stream.get());
    ASSERT_TRUE(s.ok()) << s.message();
    std::vector<T> gpu(cpu.size());
    ASSERT_NO_FATAL_FAILURE(DownloadOn(stream.get(), dout, &gpu));

    const std::vector<double> basis = MfccToMelBasis(p);
    std::vector<double> bound(cpu.size());
    for (int64_t b = 0; b < c.batch; ++b) {
      for (int64_t k = 0; k < c.n_mels; ++k) {
        for (int64_t t = 0; t < c.n_frames; ++t) {
          double dx = 0;
          for (int64_t n = 0; n < c.n_mfcc; ++n) {
            dx += (12.0 * LifterAmplification(p, n) + 2.0 * double(c.n_mfcc)) * kU *
                  std::abs(basis[k * c.n_mfcc + n] *
                           double(mfcc[(b * c.n_mfcc + n) * c.n_frames + t]));
          }
          const size_t i = static_cast<size_t>((b * c.n_mels + k) * c.n_frames + t);
          const double rel = 0.1 * std::log(10.0) * dx + 10.0 * kU;
          const double v = double(cpu[i]);
          bound[i] =
              4.0 * (rel * std::abs(v) + (std::is_same_v<T, float> ? UlpOf<float>(v) : 0.0)) +
              std::numeric_limits<double>::min();
        }
      }
    }
    EXPECT_TRUE(WithinBounds(gpu, cpu, bound));
  }
}

TYPED_TEST(MfccToMelCuda, BackwardMatchesCpu) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  TestStream stream;
  OPFORGE_ASSERT_CUDA(stream.Create());
  std::mt19937_64 rng(14);
  for (const Case& c : Cases()) {
    SCOPED_TRACE(Describe(c));
    const MfccToMelParams p = ParamsOf(c);
    const auto mfcc =
        test::UniformVector<T>(rng, c.batch * c.n_mfcc * c.n_frames, -c.amplitude, c.amplitude);
    const int64_t n_out = c.batch * c.n_mels * c.n_frames;
    std::vector<T> mel(static_cast<size_t>(n_out));
    MfccToMelForward<T>(p, mfcc.data(), mel.data(), SerialParallel());
    const auto grad = test::UniformVector<T>(rng, n_out, -1.0, 1.0);
    std::vector<T> cpu(mfcc.size());
    MfccToMelBackward<T>(p, grad.data(), mel.data(), cpu.data(), SerialParallel());

    DeviceBuffer dgrad, dmel, dout;
    ASSERT_NO_FATAL_FAILURE(UploadOn(stream.get(), grad, &dgrad));
    ASSERT_NO_FATAL_FAILURE(UploadOn(stream.get(), mel, &dmel));
    ASSERT_NO_FATAL_FAILURE(PoisonOn(stream.get(), &dout, cpu.size() * sizeof(T)));
    const Status s = MfccToMelBackwardGpu(DTypeOf<T>::value, p, dgrad.get(), dmel.get(), dout.get(),
                                          stream.get());
    ASSERT_TRUE(s.ok()) << s.message();
    std::vector<T> gpu(cpu.size());
    ASSERT_NO_FATAL_FAILURE(DownloadOn(stream.get(), dout, &gpu));

    const std::vector<double> basis = MfccToMelBasis(p);
    const double scale = 0.1 * std::log(10.0);
    std::vector<double> bound(cpu.size());
    for (int64_t b = 0; b < c.batch; ++b) {
      for (int64_t n = 0; n < c.n_mfcc; ++n) {
        for (int64_t t = 0; t < c.n_frames; ++t) {
          double sum = 0;
          for (int64_t k = 0; k < c.n_mels; ++k) {
            const size_t at = static_cast<size_t>((b * c.n_mels + k) * c.n_frames + t);
            sum += std::abs(basis[k * c.n_mfcc + n] * scale * double(mel[at]) * double(grad[at]));
          }
          const size_t i = static_cast<size_t>((b * c.n_mfcc + n) * c.n_frames + t);
          const double v = double(cpu[i]);
          const double factor = 12.0 * LifterAmplification(p, n) + 2.0 * double(c.n_mels);
          bound[i] =
              4.0 * (factor * kU * sum + (std::is_same_v<T, float> ? UlpOf<float>(v) : 0.0)) +
              std::numeric_limits<double>::min();
        }
      }
    }
    EXPECT_TRUE(WithinBounds(gpu, cpu, bound));
  }
}

TEST(MfccToMelCudaEdge, EmptyBatchIsANoOpAndOtherDTypesAreErrors) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  TestStream stream;
  OPFORGE_ASSERT_CUDA(stream.Create());
  MfccToMelParams p;
  p.n_mels = 8;
  ASSERT_TRUE(ValidateMfccToMel({0, 4, 3}, &p).ok());
  // Nothing is launched for an empty batch: null pointers are never touched.
  EXPECT_TRUE(MfccToMelForwardGpu(DType::kFloat, p, nullptr, nullptr, stream.get()).ok());
  EXPECT_TRUE(
      MfccToMelBackwardGpu(DType::kDouble, p, nullptr, nullptr, nullptr, stream.get()).ok());
  ASSERT_NO_FATAL_FAILURE(test::SyncStream(stream.get()));
  ASSERT_TRUE(ValidateMfccToMel({1, 4, 3}, &p).ok());
  const Status s = MfccToMelForwardGpu(DType::kHalf, p, nullptr, nullptr, stream.get());
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(test::Contains(s.message(), "MfccToMel"));
  EXPECT_FALSE(
      MfccToMelBackwardGpu(DType::kInt32, p, nullptr, nullptr, nullptr, stream.get()).ok());
}

}  // namespace
}  // namespace opforge

// The FusedBatchNormLeakyRelu CUDA kernels against the CPU kernels: the same bits (NaN matching
// any NaN) for the statistics, the output and the three gradients, in every element type, over
// rows that span many chunks, one row, an empty batch, alphas 0 and 0.2, and special values (inf,
// NaN, -0, subnormals) in every input of the forward pass and of the gradient, the batch
// statistics included. Everything runs on a non-blocking stream (as TensorFlow's) that alone is
// synchronised. Large cases: past the first round of every grid-stride loop (2^24 elements,
// 2^24 channels, 2^16 chunks), and over 2^31 elements (the int64 index path) in half, skipped
// when the device lacks the memory. Without a CUDA device every test says "skipped: no CUDA
// device".
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <cstdint>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include "common/cuda_geometry.h"
#include "common/cuda_test_util.h"
#include "common/dtype.h"
#include "common/parallel.h"
#include "common/status.h"
#include "common/test_util.h"
#include "ops/fused_batch_norm_leaky_relu/fused_batch_norm_leaky_relu.h"

namespace opforge {
namespace {

using test::DeviceBuffer;
using test::DownloadOn;
using test::FloatTypes;
using test::SameBitsOrBothNan;
using test::TestStream;
using test::TypeNames;
using test::UploadOn;

template <typename T>
class BatchNormLeakyCudaTest : public ::testing::Test {};
TYPED_TEST_SUITE(BatchNormLeakyCudaTest, FloatTypes, TypeNames);

// About 1 in `one_in` elements of v replaced by +-inf, NaN, -0 and +-the smallest subnormal.
template <typename V>
void SprinkleSpecials(std::mt19937& rng, std::vector<V>* v, unsigned one_in) {
  using L = std::numeric_limits<V>;
  const V pool[] = {L::infinity(), -L::infinity(),  L::quiet_NaN(),
                    V(-0.0f),      L::denorm_min(), -L::denorm_min()};
  for (auto& x : *v) {
    if (rng() % one_in == 0) x = pool[rng() % 6];
  }
}

template <typename T>
struct Inputs {
  using U = BnParamType<T>;
  std::vector<T> x, dy;
  std::vector<U> gamma, beta;
};

template <typename T>
Inputs<T> RandomInputs(int64_t rows, int64_t ch, bool specials, unsigned seed) {
  using U = BnParamType<T>;
  std::mt19937 rng(seed);
  Inputs<T> in;
  if (rows * ch > (int64_t{1} << 24)) {  // large: a hash per element, on every thread
    in.x = test::HashedUniform<T>(rows * ch, seed, -2.5, 3.1);
    in.dy = test::HashedUniform<T>(rows * ch, seed + 1, -1.0, 1.0);
  } else {
    std::normal_distribution<float> normal(0.3f, 1.7f);
    in.x.resize(static_cast<size_t>(rows * ch));
    in.dy.resize(in.x.size());
    for (auto& v : in.x) v = static_cast<T>(normal(rng));
    for (auto& v : in.dy) v = static_cast<T>(normal(rng));
  }
  std::normal_distribution<float> normal(0.0f, 1.0f);
  in.gamma.resize(static_cast<size_t>(ch));
  in.beta.resize(static_cast<size_t>(ch));
  for (auto& v : in.gamma) v = static_cast<U>(1.0f + 0.2f * normal(rng));
  for (auto& v : in.beta) v = static_cast<U>(0.3f * normal(rng));
  if (specials) {
    SprinkleSpecials(rng, &in.x, 97);
    SprinkleSpecials(rng, &in.dy, 89);
    SprinkleSpecials(rng, &in.gamma, 7);
    SprinkleSpecials(rng, &in.beta, 7);
  }
  return in;
}

template <typename T>
struct Results {
  using U = BnParamType<T>;
  std::vector<T> y, dx;
  std::vector<U> mean, var, dgamma, dbeta;
};

// The GPU's forward pass, then its gradient from the given statistics (the GPU's own where
// `stats` is null); outputs filled with 0xFF bytes first (an element left unwritten shows).
template <typename T>
void RunGpu(const BatchNormLeakyParams& p, const Inputs<T>& in, const Results<T>* stats,
            Results<T>* out) {
  using U = BnParamType<T>;
  TestStream stream;
  OPFORGE_ASSERT_CUDA(stream.Create());
  const cudaStream_t s = stream.get();
  DeviceBuffer x, dy, gamma, beta, y, dx, mean, var, dg, db, given_mean, given_var;
  ASSERT_NO_FATAL_FAILURE(UploadOn(s, in.x, &x));
  ASSERT_NO_FATAL_FAILURE(UploadOn(s, in.dy, &dy));
  ASSERT_NO_FATAL_FAILURE(UploadOn(s, in.gamma, &gamma));
  ASSERT_NO_FATAL_FAILURE(UploadOn(s, in.beta, &beta));
  out->y.assign(in.x.size(), T(0.0f));
  out->dx.assign(in.x.size(), T(0.0f));
  for (auto* v : {&out->mean, &out->var, &out->dgamma, &out->dbeta}) v->assign(in.gamma.size(), 0);
  const std::pair<DeviceBuffer*, size_t> outputs[] = {
      {&y, in.x.size() * sizeof(T)},        {&dx, in.x.size() * sizeof(T)},
      {&mean, in.gamma.size() * sizeof(U)}, {&var, in.gamma.size() * sizeof(U)},
      {&dg, in.gamma.size() * sizeof(U)},   {&db, in.gamma.size() * sizeof(U)}};
  for (const auto& [buffer, bytes] : outputs) {
    OPFORGE_ASSERT_CUDA(buffer->Allocate(bytes));
    if (bytes > 0) OPFORGE_ASSERT_CUDA(cudaMemsetAsync(buffer->get(), 0xFF, bytes, s));
  }
  // The scratch the binding allocates from TensorFlow's allocator, poisoned as the outputs are.
  DeviceBuffer fwd_scratch, bwd_scratch;
  const int64_t fwd_bytes = BatchNormLeakyForwardGpuScratchBytes(DTypeOf<T>::value, p);
  const int64_t bwd_bytes = BatchNormLeakyBackwardGpuScratchBytes(DTypeOf<T>::value, p);
  for (const auto& [buffer, bytes] : {std::pair<DeviceBuffer*, int64_t>{&fwd_scratch, fwd_bytes},
                                      std::pair<DeviceBuffer*, int64_t>{&bwd_scratch, bwd_bytes}}) {
    OPFORGE_ASSERT_CUDA(buffer->Allocate(static_cast<size_t>(bytes)));
    if (bytes > 0) OPFORGE_ASSERT_CUDA(cudaMemsetAsync(buffer->get(), 0xFF, bytes, s));
  }
  OPFORGE_ASSERT_OK(BatchNormLeakyForwardGpu(DTypeOf<T>::value, p, x.get(), gamma.get(), beta.get(),
                                             y.get(), mean.get(), var.get(), fwd_scratch.get(),
                                             fwd_bytes, s));
  const void* m = mean.get();
  const void* v = var.get();
  if (stats != nullptr) {
    ASSERT_NO_FATAL_FAILURE(UploadOn(s, stats->mean, &given_mean));
    ASSERT_NO_FATAL_FAILURE(UploadOn(s, stats->var, &given_var));
    m = given_mean.get();
    v = given_var.get();
  }
  OPFORGE_ASSERT_OK(BatchNormLeakyBackwardGpu(DTypeOf<T>::value, p, dy.get(), x.get(), gamma.get(),
                                              beta.get(), m, v, dx.get(), dg.get(), db.get(),
                                              bwd_scratch.get(), bwd_bytes, s));
  ASSERT_NO_FATAL_FAILURE(DownloadOn(s, y, &out->y));
  ASSERT_NO_FATAL_FAILURE(DownloadOn(s, dx, &out->dx));
  ASSERT_NO_FATAL_FAILURE(DownloadOn(s, mean, &out->mean));
  ASSERT_NO_FATAL_FAILURE(DownloadOn(s, var, &out->var));
  ASSERT_NO_FATAL_FAILURE(DownloadOn(s, dg, &out->dgamma));
  ASSERT_NO_FATAL_FAILURE(DownloadOn(s, db, &out->dbeta));
}

// The CPU's results, the gradient from `stats` where given, else from its own statistics.
template <typename T>
Results<T> RunCpu(const BatchNormLeakyParams& p, const Inputs<T>& in, const Results<T>* stats,
                  const Parallel& parallel) {
  Results<T> r;
  r.y.resize(in.x.size());
  r.dx.resize(in.x.size());
  for (auto* v : {&r.mean, &r.var, &r.dgamma, &r.dbeta}) v->resize(in.gamma.size());
  BatchNormLeakyForward<T>(p, in.x.data(), in.gamma.data(), in.beta.data(), r.y.data(),
                           r.mean.data(), r.var.data(), parallel);
  const Results<T>& s = stats != nullptr ? *stats : r;
  BatchNormLeakyBackward<T>(p, in.dy.data(), in.x.data(), in.gamma.data(), in.beta.data(),
                            s.mean.data(), s.var.data(), r.dx.data(), r.dgamma.data(),
                            r.dbeta.data(), parallel);
  return r;
}

template <typename T>
void ExpectSameBits(const Results<T>& gpu, const Results<T>& cpu) {
  EXPECT_TRUE(SameBitsOrBothNan(gpu.mean, cpu.mean)) << "batch_mean";
  EXPECT_TRUE(SameBitsOrBothNan(gpu.var, cpu.var)) << "batch_variance";
  EXPECT_TRUE(SameBitsOrBothNan(gpu.y, cpu.y)) << "y";
  EXPECT_TRUE(SameBitsOrBothNan(gpu.dx, cpu.dx)) << "dx";
  EXPECT_TRUE(SameBitsOrBothNan(gpu.dgamma, cpu.dgamma)) << "dscale";
  EXPECT_TRUE(SameBitsOrBothNan(gpu.dbeta, cpu.dbeta)) << "doffset";
}

// Forward, then the gradient from the batch statistics (each device its own: equal when the
// forward passes).
template <typename T>
void CheckCase(int64_t rows, int64_t ch, float alpha, bool specials, unsigned seed,
               const Parallel& parallel = SerialParallel()) {
  SCOPED_TRACE(::testing::Message() << rows << " x " << ch << ", alpha " << alpha
                                    << (specials ? ", with inf, NaN, -0, subnormals" : ""));
  BatchNormLeakyParams p;
  p.alpha = alpha;
  OPFORGE_ASSERT_OK(ValidateBatchNormLeaky({rows, ch}, {ch}, {ch}, &p));
  const Inputs<T> in = RandomInputs<T>(rows, ch, specials, seed);
  Results<T> gpu;
  ASSERT_NO_FATAL_FAILURE(RunGpu<T>(p, in, nullptr, &gpu));
  ExpectSameBits(gpu, RunCpu<T>(p, in, nullptr, parallel));
}

TYPED_TEST(BatchNormLeakyCudaTest, SameBitsAsCpu) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  CheckCase<T>(3 * 256 + 17, 37, 0.2f, false, 1);  // rows across chunks, odd channels
  CheckCase<T>(2000, 300, 0.0f, false, 2);         // more channels than threads per block
  CheckCase<T>(1, 5, 0.1f, false, 3);              // one row: variance 0
  CheckCase<T>(600, 4, 0.1f, true, 4);             // special values in x, dy, gamma, beta
  CheckCase<T>(1000, 40, 0.2f, true, 6);
  CheckCase<T>(0, 6, 0.1f, false, 5);  // empty batch: NaN statistics
}

// The gradient from given statistics with special values: NaN and infinite means, infinite,
// zero, -0 and negative variances, besides specials in dy, x, gamma and beta.
TYPED_TEST(BatchNormLeakyCudaTest, GradientOfSpecialStatistics) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  using U = BnParamType<T>;
  const int64_t rows = 700, ch = 24;
  BatchNormLeakyParams p;
  OPFORGE_ASSERT_OK(ValidateBatchNormLeaky({rows, ch}, {ch}, {ch}, &p));
  const Inputs<T> in = RandomInputs<T>(rows, ch, true, 9);
  Results<T> stats = RunCpu<T>(p, in, nullptr, SerialParallel());
  using L = std::numeric_limits<U>;
  const U special[] = {L::quiet_NaN(), L::infinity(), -L::infinity(),  U(0.0f),
                       U(-0.0f),       U(-0.5f),      L::denorm_min(), L::max()};
  for (size_t k = 0; k < 8; ++k) {
    stats.mean[2 * k] = special[k];
    stats.var[2 * k + 1] = special[k];
  }
  Results<T> gpu;
  ASSERT_NO_FATAL_FAILURE(RunGpu<T>(p, in, &stats, &gpu));
  const Results<T> cpu = RunCpu<T>(p, in, &stats, SerialParallel());
  EXPECT_TRUE(SameBitsOrBothNan(gpu.dx, cpu.dx)) << "dx";
  EXPECT_TRUE(SameBitsOrBothNan(gpu.dgamma, cpu.dgamma)) << "dscale";
  EXPECT_TRUE(SameBitsOrBothNan(gpu.dbeta, cpu.dbeta)) << "doffset";
}

// Past the first round of every grid-stride loop: 17.8M elements (Blocks() stops at 2^16
// blocks of 256 threads: 2^24), 2^24 + 5 channels, 2^16 + 2 chunks of rows. On the SIMT runtime
// the grids stop at cuda::kMaxGridBlocks (64) blocks: the same cases, scaled to 16384.
TEST(BatchNormLeakyCudaLarge, GridStrideLoops) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  const ThreadParallel parallel(static_cast<int>(std::thread::hardware_concurrency()));
  const int64_t grid = cuda::kMaxGridBlocks * 256;  // blocks of 256 threads: 2^24 on a GPU
  CheckCase<float>(grid / 256 + grid / 4096 + 4, 256, 0.2f, false, 11, parallel);
  CheckCase<float>(2, grid + 5, 0.2f, false, 12, parallel);
  CheckCase<float>(grid + 300, 1, 0.1f, false, 13, parallel);
}

// Over 2^31 elements in half: (2^24 + 1) rows of 128 channels, 2^31 + 128 elements (the int64
// index path; past cuda::kInt32IndexLimit, 2^22 - 1, on the SIMT runtime). Skipped, saying so,
// when the device lacks the memory (~9 bytes an element: 19 GB on a GPU).
TEST(BatchNormLeakyCudaLarge, OverTwoTo31Elements) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  const int64_t rows = (cuda::kInt32IndexLimit + 1) / 128 + 1;
  const size_t need = static_cast<size_t>(rows) * 128 * 9;
  size_t free_bytes = 0, total_bytes = 0;
  OPFORGE_ASSERT_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (free_bytes < need) {
    GTEST_SKIP() << "skipped: needs " << (need >> 20) << " MB of free device memory, "
                 << (free_bytes >> 20) << " MB free";
  }
  const ThreadParallel parallel(static_cast<int>(std::thread::hardware_concurrency()));
  CheckCase<Eigen::half>(rows, 128, 0.2f, false, 21, parallel);
}

}  // namespace
}  // namespace opforge

// The BiasLeakyRelu CUDA kernel against the CPU kernel: the same bits (NaN matching any NaN) in
// every element type, special values included. The kernel tracks each element's channel across
// its grid-stride steps instead of dividing, so the cases run channel counts below, at and above
// the vector width, ones that divide the grid's stride and ones that do not, aligned (vector)
// and misaligned (scalar) buffers, past one grid and past 2^31 elements; on a non-blocking
// stream, as TensorFlow's, in place as the binding forwards. Without a CUDA device: "skipped: no
// CUDA device".
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/cuda_geometry.h"
#include "common/cuda_test_util.h"
#include "common/dtype.h"
#include "common/parallel.h"
#include "common/status.h"
#include "common/test_util.h"
#include "ops/bias_leaky_relu/bias_leaky_relu.h"

namespace opforge {
namespace {

using test::CopyFromDeviceOn;
using test::CopyToDeviceOn;
using test::DeviceBuffer;
using test::DownloadOn;
using test::FloatTypes;
using test::Placed;
using test::PlaceOn;
using test::SameBitsOrBothNan;
using test::TypeNames;
using test::UploadOn;

// rows * ch features: the special values first, then normal values.
template <typename T>
std::vector<T> Features(int64_t rows, int64_t ch, uint32_t seed) {
  std::vector<T> x = test::SpecialValues<T>();
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  while (static_cast<int64_t>(x.size()) < rows * ch) x.push_back(static_cast<T>(normal(rng)));
  x.resize(static_cast<size_t>(rows * ch));
  return x;
}

// A bias with special values among normal ones.
template <typename T>
std::vector<T> Bias(int64_t ch, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<T> b(static_cast<size_t>(ch));
  const std::vector<T> specials = test::SpecialValues<T>();
  for (int64_t c = 0; c < ch; ++c) {
    b[c] = c % 17 == 5 ? specials[(c / 17) % specials.size()] : static_cast<T>(normal(rng));
  }
  return b;
}

BiasLeakyReluParams Params(int64_t rows, int64_t ch, float alpha) {
  BiasLeakyReluParams p;
  p.alpha = alpha;
  EXPECT_TRUE(ValidateBiasLeakyRelu({rows, ch}, {ch}, &p).ok());
  return p;
}

// The GPU's output for features placed `offset` elements into their buffer (1: misaligned),
// out of place or (in_place) over the features.
template <typename T>
void RunGpu(cudaStream_t stream, const BiasLeakyReluParams& p, const std::vector<T>& x,
            const std::vector<T>& b, int offset, bool in_place, std::vector<T>* y) {
  Placed<T> dx;
  DeviceBuffer db, dy;
  ASSERT_NO_FATAL_FAILURE(PlaceOn(stream, x, offset, &dx));
  OPFORGE_ASSERT_CUDA(dy.Allocate((x.size() + offset) * sizeof(T)));
  T* py = in_place ? dx.ptr : static_cast<T*>(dy.get()) + offset;
  ASSERT_NO_FATAL_FAILURE(UploadOn(stream, b, &db));
  OPFORGE_ASSERT_OK(BiasLeakyReluGpu(DTypeOf<T>::value, p, dx.ptr, db.get(), py, stream));
  y->assign(x.size(), static_cast<T>(0));
  ASSERT_NO_FATAL_FAILURE(CopyFromDeviceOn(stream, py, y));
}

template <typename T>
class BiasLeakyReluCudaTest : public ::testing::Test {};
TYPED_TEST_SUITE(BiasLeakyReluCudaTest, FloatTypes, TypeNames);

TYPED_TEST(BiasLeakyReluCudaTest, SameBitsAsCpu) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  OPFORGE_TEST_STREAM(stream);
  const std::pair<int64_t, int64_t> shapes[] = {{4097, 37}, {1000, 1}, {333, 3},    {129, 8},
                                                {65, 16},   {7, 4096}, {3, 100003}, {1, 19}};
  for (const auto& [rows, ch] : shapes) {
    for (const int offset : {0, 1}) {
      for (const bool in_place : {false, true}) {
        SCOPED_TRACE(::testing::Message() << rows << " x " << ch << ", offset " << offset
                                          << (in_place ? ", in place" : ""));
        const std::vector<T> x = Features<T>(rows, ch, 2);
        const std::vector<T> b = Bias<T>(ch, 3);
        const BiasLeakyReluParams p = Params(rows, ch, 0.1f);
        std::vector<T> want(x.size()), got;
        BiasLeakyRelu<T>(p, x.data(), b.data(), want.data(), SerialParallel());
        ASSERT_NO_FATAL_FAILURE(RunGpu(stream, p, x, b, offset, in_place, &got));
        ASSERT_TRUE(SameBitsOrBothNan(got, want, x));
      }
    }
  }
}

TYPED_TEST(BiasLeakyReluCudaTest, Empty) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  OPFORGE_TEST_STREAM(stream);
  for (const auto& [rows, ch] : {std::pair<int64_t, int64_t>{0, 5}, {4, 0}}) {
    const BiasLeakyReluParams p = Params(rows, ch, 0.2f);
    OPFORGE_ASSERT_OK(BiasLeakyReluGpu(DTypeOf<T>::value, p, nullptr, nullptr, nullptr, stream));
  }
  ASSERT_NO_FATAL_FAILURE(test::SyncStream(stream));
}

// More elements than one grid covers (cuda::kMaxGridBlocks blocks of 256 threads), so each thread's
// channel is carried over many grid-stride steps: half vectors (8 elements a step) and float
// through the scalar path, with channel counts that divide the stride (8, 1024) and ones that do
// not.
TEST(BiasLeakyReluCudaLargeTest, GridStrideLoopKeepsTheChannel) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  OPFORGE_TEST_STREAM(stream);
  const ThreadParallel parallel(8);
  for (const int64_t ch : {int64_t{3}, int64_t{8}, int64_t{1000}, int64_t{1024}, int64_t{65537}}) {
    SCOPED_TRACE(::testing::Message() << ch << " channels");
    {
      using T = Eigen::half;
      const int64_t rows = ((cuda::kMaxGridBlocks * 256 * 8) + 4099 * 8 + 5) / ch + 1;
      const std::vector<T> x = test::PatternVector<T>(rows * ch, 40503);
      const std::vector<T> b = Bias<T>(ch, 4);
      const BiasLeakyReluParams p = Params(rows, ch, 0.3f);
      std::vector<T> want(x.size()), got;
      BiasLeakyRelu<T>(p, x.data(), b.data(), want.data(), parallel);
      ASSERT_NO_FATAL_FAILURE(RunGpu(stream, p, x, b, 0, true, &got));
      EXPECT_TRUE(SameBitsOrBothNan(got, want));
    }
    {
      using T = float;
      const int64_t rows = ((cuda::kMaxGridBlocks * 256) + 4099) / ch + 1;
      const std::vector<T> x = Features<T>(rows, ch, 5);
      const std::vector<T> b = Bias<T>(ch, 6);
      const BiasLeakyReluParams p = Params(rows, ch, 0.3f);
      std::vector<T> want(x.size()), got;
      BiasLeakyRelu<T>(p, x.data(), b.data(), want.data(), parallel);
      ASSERT_NO_FATAL_FAILURE(RunGpu(stream, p, x, b, 1, false, &got));
      EXPECT_TRUE(SameBitsOrBothNan(got, want));
    }
  }
}

// More than 2^31 elements (the 64-bit index path; past cuda::kInt32IndexLimit on the SIMT runtime),
// in half, in place over one 4 GiB buffer, with 3 channels (which do not divide the grid's stride).
// Skipped with a message without the memory.
TEST(BiasLeakyReluCudaLargeTest, MoreThan2To31Elements) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = Eigen::half;
  const int64_t ch = 3, rows = (cuda::kInt32IndexLimit + 4) / ch + 1;  // 2^31 + 3 on a GPU
  const int64_t n = rows * ch;
  const size_t bytes = static_cast<size_t>(n) * sizeof(T);
  DeviceBuffer dx, db;
  std::string why;
  if (!test::AllocateLarge(bytes, {&dx}, &why)) GTEST_SKIP() << why;
  OPFORGE_TEST_STREAM(stream);
  const std::vector<T> x = test::PatternVector<T>(n, 40503);
  const std::vector<T> b = {static_cast<T>(0.5f), static_cast<T>(-1.25f), static_cast<T>(3.0f)};
  ASSERT_NO_FATAL_FAILURE(CopyToDeviceOn(stream, x, dx.get()));
  ASSERT_NO_FATAL_FAILURE(UploadOn(stream, b, &db));
  const BiasLeakyReluParams p = Params(rows, ch, 0.2f);
  OPFORGE_ASSERT_OK(BiasLeakyReluGpu(DType::kHalf, p, dx.get(), db.get(), dx.get(), stream));
  std::vector<T> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
  BiasLeakyRelu<T>(p, x.data(), b.data(), want.data(), ThreadParallel(16));
  ASSERT_NO_FATAL_FAILURE(CopyFromDeviceOn(stream, dx.get(), &got));
  EXPECT_TRUE(SameBitsOrBothNan(got, want));
}

}  // namespace
}  // namespace opforge

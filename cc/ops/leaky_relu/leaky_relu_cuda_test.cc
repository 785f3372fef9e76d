// The LeakyRelu CUDA kernels against the CPU kernels (SerialParallel): same bits for every
// element type. Compiled by the host compiler against the CUDA kernels library; without a CUDA
// device every test says "skipped: no CUDA device".
//
// One allowance: a NaN result may have other bits on the GPU (CUDA arithmetic returns the
// canonical NaN, x86 keeps the NaN operand's payload), so NaN matches any NaN. Every other value,
// signed zeros and infinities included, must match bit for bit.
//
// The kernels run on a non-blocking stream, as TensorFlow's, and the tests wait for that stream
// only. Inputs: every bit pattern of half and bfloat16, special values in both the gradient and
// the features of the backward pass; buffers aligned (16-byte vectors and a tail) and not (the
// scalar path); in place; empty; more elements than one grid; more than 2^31 elements.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/cuda_test_util.h"
#include "common/dtype.h"
#include "common/parallel.h"
#include "common/status.h"
#include "common/test_util.h"
#include "ops/leaky_relu/leaky_relu.h"

namespace opforge {
namespace {

using test::BitPatternInputs;
using test::CopyFromDeviceOn;
using test::CopyToDeviceOn;
using test::DeviceBuffer;
using test::DownloadOn;
using test::FloatTypes;
using test::SameBitsOrBothNan;
using test::TypeNames;
using test::UploadOn;

constexpr float kAlphas[] = {0.0f, 0.2f, 1.5f, -0.3f};

// Every bit pattern for half and bfloat16; for float and double special values, random bit
// patterns and ordinary values, enough of them to need many blocks.
template <typename T>
std::vector<T> TestInputs(uint64_t seed) {
  return BitPatternInputs<T>(seed, test::SpecialValues<T>(), /*random_patterns=*/1 << 18,
                             /*ordinary=*/(1 << 19) + 13);
}

LeakyReluParams Params(float alpha, size_t size) {
  LeakyReluParams p;
  p.alpha = alpha;
  p.size = static_cast<int64_t>(size);
  return p;
}

template <typename T>
class LeakyReluCudaTest : public ::testing::Test {};
TYPED_TEST_SUITE(LeakyReluCudaTest, FloatTypes, TypeNames);

// Device copies placed `offset` elements into their buffers: 0 aligned (the vector path), 1 not
// (the scalar path).
template <typename T>
struct Placed {
  DeviceBuffer buffer;
  T* ptr = nullptr;
};

template <typename T>
void Place(cudaStream_t stream, const std::vector<T>& host, int offset, Placed<T>* p) {
  OPFORGE_ASSERT_CUDA(p->buffer.Allocate((host.size() + offset) * sizeof(T)));
  p->ptr = static_cast<T*>(p->buffer.get()) + offset;
  ASSERT_NO_FATAL_FAILURE(CopyToDeviceOn(stream, host, p->ptr));
}

TYPED_TEST(LeakyReluCudaTest, ForwardMatchesCpu) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  OPFORGE_TEST_STREAM(stream);
  const std::vector<T> x = TestInputs<T>(1);
  for (const int offset : {0, 1}) {
    Placed<T> dx, dy, dmask;
    ASSERT_NO_FATAL_FAILURE(Place(stream, x, offset, &dx));
    ASSERT_NO_FATAL_FAILURE(Place(stream, x, offset, &dy));
    ASSERT_NO_FATAL_FAILURE(Place(stream, x, offset, &dmask));
    for (float alpha : kAlphas) {
      SCOPED_TRACE(::testing::Message() << "alpha " << alpha << ", offset " << offset);
      const LeakyReluParams params = Params(alpha, x.size());
      std::vector<T> cpu_y(x.size()), cpu_mask(x.size());
      LeakyReluForward<T>(params, x.data(), cpu_y.data(), cpu_mask.data(), SerialParallel());

      // Without the mask.
      OPFORGE_ASSERT_OK(
          LeakyReluForwardGpu(DTypeOf<T>::value, params, dx.ptr, dy.ptr, nullptr, stream));
      std::vector<T> y(x.size());
      ASSERT_NO_FATAL_FAILURE(CopyFromDeviceOn(stream, dy.ptr, &y));
      EXPECT_TRUE(SameBitsOrBothNan(y, cpu_y, x));

      // With the mask.
      OPFORGE_ASSERT_CUDA(cudaMemsetAsync(dy.ptr, 0x7F, x.size() * sizeof(T), stream));
      OPFORGE_ASSERT_OK(
          LeakyReluForwardGpu(DTypeOf<T>::value, params, dx.ptr, dy.ptr, dmask.ptr, stream));
      std::vector<T> mask(x.size());
      ASSERT_NO_FATAL_FAILURE(CopyFromDeviceOn(stream, dy.ptr, &y));
      ASSERT_NO_FATAL_FAILURE(CopyFromDeviceOn(stream, dmask.ptr, &mask));
      EXPECT_TRUE(SameBitsOrBothNan(y, cpu_y, x));
      EXPECT_TRUE(SameBitsOrBothNan(mask, cpu_mask, x));
    }
  }
}

// Special values in both inputs: g runs through the same patterns as x, shuffled.
TYPED_TEST(LeakyReluCudaTest, BackwardMatchesCpu) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  OPFORGE_TEST_STREAM(stream);
  const std::vector<T> x = TestInputs<T>(2);
  std::vector<T> g = TestInputs<T>(3);
  std::shuffle(g.begin(), g.end(), std::mt19937_64(4));
  for (const int offset : {0, 1}) {
    Placed<T> dg, dx, ddx;
    ASSERT_NO_FATAL_FAILURE(Place(stream, g, offset, &dg));
    ASSERT_NO_FATAL_FAILURE(Place(stream, x, offset, &dx));
    ASSERT_NO_FATAL_FAILURE(Place(stream, x, offset, &ddx));
    for (float alpha : kAlphas) {
      SCOPED_TRACE(::testing::Message() << "alpha " << alpha << ", offset " << offset);
      const LeakyReluParams params = Params(alpha, x.size());
      std::vector<T> cpu(x.size());
      LeakyReluBackward<T>(params, g.data(), x.data(), cpu.data(), SerialParallel());
      OPFORGE_ASSERT_OK(
          LeakyReluBackwardGpu(DTypeOf<T>::value, params, dg.ptr, dx.ptr, ddx.ptr, stream));
      std::vector<T> gpu(x.size());
      ASSERT_NO_FATAL_FAILURE(CopyFromDeviceOn(stream, ddx.ptr, &gpu));
      EXPECT_TRUE(SameBitsOrBothNan(gpu, cpu, x));
    }
  }
}

// y aliasing x, and dx aliasing g, as the binding does when it forwards a buffer.
TYPED_TEST(LeakyReluCudaTest, InPlaceMatchesCpu) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  OPFORGE_TEST_STREAM(stream);
  const std::vector<T> x = TestInputs<T>(5);
  std::vector<T> g = TestInputs<T>(6);
  std::shuffle(g.begin(), g.end(), std::mt19937_64(7));
  const LeakyReluParams params = Params(0.2f, x.size());
  std::vector<T> cpu_y(x.size()), cpu_mask(x.size()), cpu_dx(x.size());
  LeakyReluForward<T>(params, x.data(), cpu_y.data(), cpu_mask.data(), SerialParallel());
  LeakyReluBackward<T>(params, g.data(), x.data(), cpu_dx.data(), SerialParallel());

  DeviceBuffer dbuf, dmask, dx, dg;
  ASSERT_NO_FATAL_FAILURE(UploadOn(stream, x, &dbuf));
  OPFORGE_ASSERT_CUDA(dmask.Allocate(x.size() * sizeof(T)));
  OPFORGE_ASSERT_OK(
      LeakyReluForwardGpu(DTypeOf<T>::value, params, dbuf.get(), dbuf.get(), dmask.get(), stream));
  std::vector<T> y(x.size()), mask(x.size());
  ASSERT_NO_FATAL_FAILURE(DownloadOn(stream, dbuf, &y));
  ASSERT_NO_FATAL_FAILURE(DownloadOn(stream, dmask, &mask));
  EXPECT_TRUE(SameBitsOrBothNan(y, cpu_y, x));
  EXPECT_TRUE(SameBitsOrBothNan(mask, cpu_mask, x));

  ASSERT_NO_FATAL_FAILURE(UploadOn(stream, g, &dg));
  ASSERT_NO_FATAL_FAILURE(UploadOn(stream, x, &dx));
  OPFORGE_ASSERT_OK(
      LeakyReluBackwardGpu(DTypeOf<T>::value, params, dg.get(), dx.get(), dg.get(), stream));
  std::vector<T> dxv(x.size());
  ASSERT_NO_FATAL_FAILURE(DownloadOn(stream, dg, &dxv));
  EXPECT_TRUE(SameBitsOrBothNan(dxv, cpu_dx, x));
}

// Sizes around the vector width: tails of every length, one element, none.
TYPED_TEST(LeakyReluCudaTest, SmallSizesAndEmpty) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  OPFORGE_TEST_STREAM(stream);
  OPFORGE_ASSERT_OK(
      LeakyReluForwardGpu(DTypeOf<T>::value, Params(0.2f, 0), nullptr, nullptr, nullptr, stream));
  OPFORGE_ASSERT_OK(
      LeakyReluBackwardGpu(DTypeOf<T>::value, Params(0.2f, 0), nullptr, nullptr, nullptr, stream));
  const std::vector<T> all = TestInputs<T>(8);
  for (size_t n = 1; n <= 19; ++n) {
    SCOPED_TRACE(::testing::Message() << n << " elements");
    const std::vector<T> x(all.end() - n, all.end()), g(all.begin(), all.begin() + n);
    const LeakyReluParams params = Params(-0.3f, n);
    std::vector<T> cpu_y(n), cpu_dx(n), y(n), dxv(n);
    LeakyReluForward<T>(params, x.data(), cpu_y.data(), nullptr, SerialParallel());
    LeakyReluBackward<T>(params, g.data(), x.data(), cpu_dx.data(), SerialParallel());
    DeviceBuffer dx, dg, dy, ddx;
    ASSERT_NO_FATAL_FAILURE(UploadOn(stream, x, &dx));
    ASSERT_NO_FATAL_FAILURE(UploadOn(stream, g, &dg));
    OPFORGE_ASSERT_CUDA(dy.Allocate(n * sizeof(T)));
    OPFORGE_ASSERT_CUDA(ddx.Allocate(n * sizeof(T)));
    OPFORGE_ASSERT_OK(
        LeakyReluForwardGpu(DTypeOf<T>::value, params, dx.get(), dy.get(), nullptr, stream));
    OPFORGE_ASSERT_OK(
        LeakyReluBackwardGpu(DTypeOf<T>::value, params, dg.get(), dx.get(), ddx.get(), stream));
    ASSERT_NO_FATAL_FAILURE(DownloadOn(stream, dy, &y));
    ASSERT_NO_FATAL_FAILURE(DownloadOn(stream, ddx, &dxv));
    EXPECT_TRUE(SameBitsOrBothNan(y, cpu_y, x));
    EXPECT_TRUE(SameBitsOrBothNan(dxv, cpu_dx, x));
  }
}

// More elements than one grid covers (65536 blocks of 256 threads), so every thread takes
// several steps of the grid-stride loop: half in 8-element vectors (2^27 + a tail), and float
// through the scalar path (a misaligned buffer).
TEST(LeakyReluCudaLargeTest, GridStrideLoopCoversEveryElement) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  OPFORGE_TEST_STREAM(stream);
  {
    using T = Eigen::half;
    const int64_t n = (int64_t{65536} * 256 * 8) + 4099 * 8 + 5;
    const std::vector<T> x = test::PatternVector<T>(n, 40503);
    const std::vector<T> g = test::PatternVector<T>(n, 30011);
    const LeakyReluParams params = Params(0.2f, static_cast<size_t>(n));
    std::vector<T> cpu_y(n), cpu_mask(n), cpu_dx(n);
    const ThreadParallel parallel(8);
    LeakyReluForward<T>(params, x.data(), cpu_y.data(), cpu_mask.data(), parallel);
    LeakyReluBackward<T>(params, g.data(), x.data(), cpu_dx.data(), parallel);
    DeviceBuffer dx, dg, dy, dmask;
    ASSERT_NO_FATAL_FAILURE(UploadOn(stream, x, &dx));
    ASSERT_NO_FATAL_FAILURE(UploadOn(stream, g, &dg));
    OPFORGE_ASSERT_CUDA(dy.Allocate(n * sizeof(T)));
    OPFORGE_ASSERT_CUDA(dmask.Allocate(n * sizeof(T)));
    OPFORGE_ASSERT_OK(
        LeakyReluForwardGpu(DType::kHalf, params, dx.get(), dy.get(), dmask.get(), stream));
    std::vector<T> y(n), mask(n);
    ASSERT_NO_FATAL_FAILURE(DownloadOn(stream, dy, &y));
    ASSERT_NO_FATAL_FAILURE(DownloadOn(stream, dmask, &mask));
    EXPECT_TRUE(SameBitsOrBothNan(y, cpu_y));
    EXPECT_TRUE(SameBitsOrBothNan(mask, cpu_mask));
    OPFORGE_ASSERT_OK(
        LeakyReluBackwardGpu(DType::kHalf, params, dg.get(), dx.get(), dg.get(), stream));
    ASSERT_NO_FATAL_FAILURE(DownloadOn(stream, dg, &y));
    EXPECT_TRUE(SameBitsOrBothNan(y, cpu_dx));
  }
  {
    const size_t n = (size_t{65536} * 256) + 4099;
    std::vector<float> x(n);
    std::mt19937_64 rng(8);
    std::uniform_real_distribution<float> value(-4.0f, 4.0f);
    for (auto& v : x) v = value(rng);
    const LeakyReluParams params = Params(0.2f, n);
    std::vector<float> cpu_y(n), cpu_dx(n);
    LeakyReluForward<float>(params, x.data(), cpu_y.data(), nullptr, SerialParallel());
    LeakyReluBackward<float>(params, x.data(), x.data(), cpu_dx.data(), SerialParallel());
    Placed<float> dx, dy;
    ASSERT_NO_FATAL_FAILURE(Place(stream, x, 1, &dx));
    ASSERT_NO_FATAL_FAILURE(Place(stream, x, 1, &dy));
    OPFORGE_ASSERT_OK(LeakyReluForwardGpu(DType::kFloat, params, dx.ptr, dy.ptr, nullptr, stream));
    std::vector<float> y(n);
    ASSERT_NO_FATAL_FAILURE(CopyFromDeviceOn(stream, dy.ptr, &y));
    EXPECT_EQ(std::memcmp(y.data(), cpu_y.data(), n * sizeof(float)), 0);
    OPFORGE_ASSERT_OK(LeakyReluBackwardGpu(DType::kFloat, params, dx.ptr, dx.ptr, dy.ptr, stream));
    ASSERT_NO_FATAL_FAILURE(CopyFromDeviceOn(stream, dy.ptr, &y));
    EXPECT_EQ(std::memcmp(y.data(), cpu_dx.data(), n * sizeof(float)), 0);
  }
}

// More than 2^31 elements (the 64-bit index path), in half: two 4 GiB buffers, the forward pass
// in place and the backward pass in place over g. Skipped with a message without the memory.
TEST(LeakyReluCudaLargeTest, MoreThan2To31Elements) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = Eigen::half;
  const int64_t n = (int64_t{1} << 31) + 3;
  const size_t bytes = static_cast<size_t>(n) * sizeof(T);
  std::string why;
  if (!test::DeviceHasRoom(2 * bytes, &why)) GTEST_SKIP() << why;
  OPFORGE_TEST_STREAM(stream);
  DeviceBuffer dx, dg;
  if (!test::TryAllocate(&dx, bytes) || !test::TryAllocate(&dg, bytes)) {
    GTEST_SKIP() << "skipped: could not allocate two buffers of " << (bytes >> 20) << " MiB";
  }
  const std::vector<T> x = test::PatternVector<T>(n, 40503);
  const std::vector<T> g = test::PatternVector<T>(n, 30011);
  ASSERT_NO_FATAL_FAILURE(CopyToDeviceOn(stream, x, dx.get()));
  ASSERT_NO_FATAL_FAILURE(CopyToDeviceOn(stream, g, dg.get()));
  const LeakyReluParams params = Params(-0.3f, static_cast<size_t>(n));
  const ThreadParallel parallel(16);
  std::vector<T> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
  OPFORGE_ASSERT_OK(
      LeakyReluBackwardGpu(DType::kHalf, params, dg.get(), dx.get(), dg.get(), stream));
  LeakyReluBackward<T>(params, g.data(), x.data(), want.data(), parallel);
  ASSERT_NO_FATAL_FAILURE(CopyFromDeviceOn(stream, dg.get(), &got));
  EXPECT_TRUE(SameBitsOrBothNan(got, want)) << "backward";
  OPFORGE_ASSERT_OK(LeakyReluForwardGpu(DType::kHalf, params, dx.get(), dx.get(), nullptr, stream));
  LeakyReluForward<T>(params, x.data(), want.data(), nullptr, parallel);
  ASSERT_NO_FATAL_FAILURE(CopyFromDeviceOn(stream, dx.get(), &got));
  EXPECT_TRUE(SameBitsOrBothNan(got, want)) << "forward";
}

TEST(LeakyReluCudaErrorTest, IntegerTypesHaveNoKernel) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  for (DType t : {DType::kInt32, DType::kInt64}) {
    const Status f = LeakyReluForwardGpu(t, Params(0.2f, 4), nullptr, nullptr, nullptr, nullptr);
    ASSERT_FALSE(f.ok());
    EXPECT_NE(f.message().find(DTypeName(t)), std::string::npos) << f.message();
    const Status b = LeakyReluBackwardGpu(t, Params(0.2f, 4), nullptr, nullptr, nullptr, nullptr);
    ASSERT_FALSE(b.ok());
    EXPECT_NE(b.message().find(DTypeName(t)), std::string::npos) << b.message();
  }
}

}  // namespace
}  // namespace opforge

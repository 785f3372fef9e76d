// The ClippedIdentity CUDA kernels against the CPU kernels (SerialParallel): the same bits for
// every element type (any NaN matches any NaN: CUDA returns the canonical NaN). The kernels run
// on a non-blocking stream, as TensorFlow's; special values in both inputs of the backward pass
// (every bit pattern of half and bfloat16); aligned (vector) and misaligned (scalar) buffers; in
// place; empty; past one grid and past 2^31 elements. Without a CUDA device every test says
// "skipped: no CUDA device".
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/cuda_test_util.h"
#include "common/dtype.h"
#include "common/parallel.h"
#include "common/status.h"
#include "common/test_util.h"
#include "ops/clipped_identity/clipped_identity.h"

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

struct Attrs {
  float clip_min, clip_max, leak;
};
constexpr Attrs kAttrs[] = {{-1.0f, 1.0f, 0.01f}, {0.0f, 6.0f, 0.1f}, {-0.0f, 0.0f, -1.5f}};

ClippedIdentityParams Params(const Attrs& a, size_t size) {
  ClippedIdentityParams p;
  p.clip_min = a.clip_min;
  p.clip_max = a.clip_max;
  p.leak = a.leak;
  p.size = static_cast<int64_t>(size);
  return p;
}

template <typename T>
std::vector<T> TestInputs(uint64_t seed) {
  return BitPatternInputs<T>(seed, test::SpecialValues<T>(), /*random_patterns=*/1 << 18,
                             /*ordinary=*/(1 << 19) + 13);
}

template <typename T>
class ClippedIdentityCudaTest : public ::testing::Test {};
TYPED_TEST_SUITE(ClippedIdentityCudaTest, FloatTypes, TypeNames);

// A device copy placed `offset` elements into its buffer: 0 aligned (the vector path), 1 not
// (the scalar path).
template <typename T>
T* Place(cudaStream_t stream, const std::vector<T>& host, int offset, DeviceBuffer* buffer) {
  EXPECT_EQ(buffer->Allocate((host.size() + offset) * sizeof(T)), cudaSuccess);
  T* ptr = static_cast<T*>(buffer->get()) + offset;
  CopyToDeviceOn(stream, host, ptr);
  return ptr;
}

TYPED_TEST(ClippedIdentityCudaTest, ForwardAndBackwardMatchCpu) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  OPFORGE_TEST_STREAM(stream);
  const std::vector<T> x = TestInputs<T>(1);
  std::vector<T> g = TestInputs<T>(2);
  std::shuffle(g.begin(), g.end(), std::mt19937_64(3));
  for (const int offset : {0, 1}) {
    DeviceBuffer bx, bg, by;
    T* dx = Place(stream, x, offset, &bx);
    T* dg = Place(stream, g, offset, &bg);
    T* dy = Place(stream, x, offset, &by);
    for (const Attrs& a : kAttrs) {
      SCOPED_TRACE(::testing::Message()
                   << "clip " << a.clip_min << ".." << a.clip_max << ", offset " << offset);
      const ClippedIdentityParams p = Params(a, x.size());
      std::vector<T> cpu(x.size()), gpu(x.size());
      ClippedIdentityForward<T>(p, x.data(), cpu.data(), SerialParallel());
      OPFORGE_ASSERT_OK(ClippedIdentityForwardGpu(DTypeOf<T>::value, p, dx, dy, stream));
      ASSERT_NO_FATAL_FAILURE(CopyFromDeviceOn(stream, dy, &gpu));
      EXPECT_TRUE(SameBitsOrBothNan(gpu, cpu, x));

      ClippedIdentityBackward<T>(p, g.data(), x.data(), cpu.data(), SerialParallel());
      OPFORGE_ASSERT_OK(ClippedIdentityBackwardGpu(DTypeOf<T>::value, p, dg, dx, dy, stream));
      ASSERT_NO_FATAL_FAILURE(CopyFromDeviceOn(stream, dy, &gpu));
      EXPECT_TRUE(SameBitsOrBothNan(gpu, cpu, x));
    }
  }
}

// y aliasing x, and dx aliasing g or x, as the binding does when it forwards a buffer.
TYPED_TEST(ClippedIdentityCudaTest, InPlaceMatchesCpu) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  OPFORGE_TEST_STREAM(stream);
  const std::vector<T> x = TestInputs<T>(4);
  std::vector<T> g = TestInputs<T>(5);
  std::shuffle(g.begin(), g.end(), std::mt19937_64(6));
  const ClippedIdentityParams p = Params(kAttrs[0], x.size());
  std::vector<T> cpu_y(x.size()), cpu_dx(x.size()), gpu(x.size());
  ClippedIdentityForward<T>(p, x.data(), cpu_y.data(), SerialParallel());
  ClippedIdentityBackward<T>(p, g.data(), x.data(), cpu_dx.data(), SerialParallel());
  DeviceBuffer dx, dg;
  ASSERT_NO_FATAL_FAILURE(UploadOn(stream, x, &dx));
  OPFORGE_ASSERT_OK(ClippedIdentityForwardGpu(DTypeOf<T>::value, p, dx.get(), dx.get(), stream));
  ASSERT_NO_FATAL_FAILURE(DownloadOn(stream, dx, &gpu));
  EXPECT_TRUE(SameBitsOrBothNan(gpu, cpu_y, x));
  for (const bool over_g : {true, false}) {
    SCOPED_TRACE(over_g ? "dx over g" : "dx over x");
    ASSERT_NO_FATAL_FAILURE(UploadOn(stream, x, &dx));
    ASSERT_NO_FATAL_FAILURE(UploadOn(stream, g, &dg));
    void* out = over_g ? dg.get() : dx.get();
    OPFORGE_ASSERT_OK(
        ClippedIdentityBackwardGpu(DTypeOf<T>::value, p, dg.get(), dx.get(), out, stream));
    ASSERT_NO_FATAL_FAILURE(DownloadOn(stream, over_g ? dg : dx, &gpu));
    EXPECT_TRUE(SameBitsOrBothNan(gpu, cpu_dx, x));
  }
}

// Sizes around the vector width (tails of every length) and none.
TYPED_TEST(ClippedIdentityCudaTest, SmallSizesAndEmpty) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  OPFORGE_TEST_STREAM(stream);
  const ClippedIdentityParams empty = Params(kAttrs[0], 0);
  OPFORGE_ASSERT_OK(ClippedIdentityForwardGpu(DTypeOf<T>::value, empty, nullptr, nullptr, stream));
  OPFORGE_ASSERT_OK(
      ClippedIdentityBackwardGpu(DTypeOf<T>::value, empty, nullptr, nullptr, nullptr, stream));
  const std::vector<T> all = TestInputs<T>(7);
  for (size_t n = 1; n <= 19; ++n) {
    SCOPED_TRACE(::testing::Message() << n << " elements");
    const std::vector<T> x(all.end() - n, all.end()), g(all.begin(), all.begin() + n);
    const ClippedIdentityParams p = Params(kAttrs[2], n);
    std::vector<T> cpu_y(n), cpu_dx(n), y(n), dxv(n);
    ClippedIdentityForward<T>(p, x.data(), cpu_y.data(), SerialParallel());
    ClippedIdentityBackward<T>(p, g.data(), x.data(), cpu_dx.data(), SerialParallel());
    DeviceBuffer dx, dg, dy, ddx;
    ASSERT_NO_FATAL_FAILURE(UploadOn(stream, x, &dx));
    ASSERT_NO_FATAL_FAILURE(UploadOn(stream, g, &dg));
    OPFORGE_ASSERT_CUDA(dy.Allocate(n * sizeof(T)));
    OPFORGE_ASSERT_CUDA(ddx.Allocate(n * sizeof(T)));
    OPFORGE_ASSERT_OK(ClippedIdentityForwardGpu(DTypeOf<T>::value, p, dx.get(), dy.get(), stream));
    OPFORGE_ASSERT_OK(
        ClippedIdentityBackwardGpu(DTypeOf<T>::value, p, dg.get(), dx.get(), ddx.get(), stream));
    ASSERT_NO_FATAL_FAILURE(DownloadOn(stream, dy, &y));
    ASSERT_NO_FATAL_FAILURE(DownloadOn(stream, ddx, &dxv));
    EXPECT_TRUE(SameBitsOrBothNan(y, cpu_y, x));
    EXPECT_TRUE(SameBitsOrBothNan(dxv, cpu_dx, x));
  }
}

// More elements than one grid of 8-element half vectors covers (65536 blocks of 256 threads):
// every thread takes several steps of the grid-stride loop.
TEST(ClippedIdentityCudaLargeTest, GridStrideLoopCoversEveryElement) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = Eigen::half;
  OPFORGE_TEST_STREAM(stream);
  const int64_t n = (int64_t{65536} * 256 * 8) + 4099 * 8 + 5;
  const std::vector<T> x = test::PatternVector<T>(n, 40503);
  const std::vector<T> g = test::PatternVector<T>(n, 30011);
  const ClippedIdentityParams p = Params(kAttrs[0], static_cast<size_t>(n));
  const ThreadParallel parallel(8);
  std::vector<T> cpu(n), gpu(n);
  DeviceBuffer dx, dg, dy;
  ASSERT_NO_FATAL_FAILURE(UploadOn(stream, x, &dx));
  ASSERT_NO_FATAL_FAILURE(UploadOn(stream, g, &dg));
  OPFORGE_ASSERT_CUDA(dy.Allocate(n * sizeof(T)));
  OPFORGE_ASSERT_OK(ClippedIdentityForwardGpu(DType::kHalf, p, dx.get(), dy.get(), stream));
  ClippedIdentityForward<T>(p, x.data(), cpu.data(), parallel);
  ASSERT_NO_FATAL_FAILURE(DownloadOn(stream, dy, &gpu));
  EXPECT_TRUE(SameBitsOrBothNan(gpu, cpu));
  OPFORGE_ASSERT_OK(
      ClippedIdentityBackwardGpu(DType::kHalf, p, dg.get(), dx.get(), dy.get(), stream));
  ClippedIdentityBackward<T>(p, g.data(), x.data(), cpu.data(), parallel);
  ASSERT_NO_FATAL_FAILURE(DownloadOn(stream, dy, &gpu));
  EXPECT_TRUE(SameBitsOrBothNan(gpu, cpu));
}

// More than 2^31 elements (the 64-bit index path), in half: two 4 GiB buffers, the backward
// pass in place over g, then the forward pass in place. Skipped with a message without the
// memory.
TEST(ClippedIdentityCudaLargeTest, MoreThan2To31Elements) {
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
  const ClippedIdentityParams p = Params(kAttrs[1], static_cast<size_t>(n));
  const ThreadParallel parallel(16);
  std::vector<T> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
  OPFORGE_ASSERT_OK(
      ClippedIdentityBackwardGpu(DType::kHalf, p, dg.get(), dx.get(), dg.get(), stream));
  ClippedIdentityBackward<T>(p, g.data(), x.data(), want.data(), parallel);
  ASSERT_NO_FATAL_FAILURE(CopyFromDeviceOn(stream, dg.get(), &got));
  EXPECT_TRUE(SameBitsOrBothNan(got, want)) << "backward";
  OPFORGE_ASSERT_OK(ClippedIdentityForwardGpu(DType::kHalf, p, dx.get(), dx.get(), stream));
  ClippedIdentityForward<T>(p, x.data(), want.data(), parallel);
  ASSERT_NO_FATAL_FAILURE(CopyFromDeviceOn(stream, dx.get(), &got));
  EXPECT_TRUE(SameBitsOrBothNan(got, want)) << "forward";
}

}  // namespace
}  // namespace opforge

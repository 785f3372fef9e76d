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
#include <vector>

#include "common/cuda_test_util.h"
#include "common/dtype.h"
#include "common/elementwise_cuda_test.h"
#include "common/parallel.h"
#include "common/status.h"
#include "common/test_util.h"
#include "ops/clipped_identity/clipped_identity.h"

namespace opforge {
namespace {

using test::BitPatternInputs;
using test::CopyFromDeviceOn;
using test::DeviceBuffer;
using test::DownloadOn;
using test::FloatTypes;
using test::Placed;
using test::PlaceOn;
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

// ClippedIdentity as the shared cases run it (common/elementwise_cuda_test.h): the same
// bits, NaN matching any NaN.
struct ClippedIdentityUnderTest {
  static constexpr bool kMask = false;
  Attrs attrs;

  template <typename T>
  void Forward(const T* x, T* y, T* /*mask*/, int64_t n, const Parallel& parallel) const {
    ClippedIdentityForward<T>(Params(attrs, static_cast<size_t>(n)), x, y, parallel);
  }
  template <typename T>
  void Backward(const T* g, const T* x, T* dx, int64_t n, const Parallel& parallel) const {
    ClippedIdentityBackward<T>(Params(attrs, static_cast<size_t>(n)), g, x, dx, parallel);
  }
  Status ForwardGpu(DType dtype, const void* x, void* y, void* /*mask*/, int64_t n,
                    cudaStream_t stream) const {
    return ClippedIdentityForwardGpu(dtype, Params(attrs, static_cast<size_t>(n)), x, y, stream);
  }
  Status BackwardGpu(DType dtype, const void* g, const void* x, void* dx, int64_t n,
                     cudaStream_t stream) const {
    return ClippedIdentityBackwardGpu(dtype, Params(attrs, static_cast<size_t>(n)), g, x, dx,
                                      stream);
  }
  template <typename T>
  ::testing::AssertionResult Agree(const std::vector<T>& gpu, const std::vector<T>& cpu,
                                   const std::vector<T>& x, const std::vector<T>*) const {
    return SameBitsOrBothNan(gpu, cpu, x);
  }
  std::vector<Eigen::half> LargeGradients(int64_t n) const {
    return test::PatternVector<Eigen::half>(n, 30011);
  }
};

template <typename T>
class ClippedIdentityCudaTest : public ::testing::Test {};
TYPED_TEST_SUITE(ClippedIdentityCudaTest, FloatTypes, TypeNames);

TYPED_TEST(ClippedIdentityCudaTest, ForwardAndBackwardMatchCpu) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  OPFORGE_TEST_STREAM(stream);
  const std::vector<T> x = TestInputs<T>(1);
  std::vector<T> g = TestInputs<T>(2);
  std::shuffle(g.begin(), g.end(), std::mt19937_64(3));
  for (const int offset : {0, 1}) {
    Placed<T> px, pg, py;
    ASSERT_NO_FATAL_FAILURE(PlaceOn(stream, x, offset, &px));
    ASSERT_NO_FATAL_FAILURE(PlaceOn(stream, g, offset, &pg));
    ASSERT_NO_FATAL_FAILURE(PlaceOn(stream, x, offset, &py));
    T* const dx = px.ptr;
    T* const dg = pg.ptr;
    T* const dy = py.ptr;
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
  const std::vector<TypeParam> all = TestInputs<TypeParam>(7);
  test::CheckSmallSizesAndEmpty(ClippedIdentityUnderTest{kAttrs[2]}, all, [&](size_t n) {
    return std::vector<TypeParam>(all.begin(), all.begin() + static_cast<int64_t>(n));
  });
}

TEST(ClippedIdentityCudaLargeTest, GridStrideLoopCoversEveryElement) {
  test::CheckGridStrideLoops(ClippedIdentityUnderTest{kAttrs[0]});
}

TEST(ClippedIdentityCudaLargeTest, MoreThan2To31Elements) {
  test::CheckMoreThan2To31Elements(ClippedIdentityUnderTest{kAttrs[1]});
}

}  // namespace
}  // namespace opforge

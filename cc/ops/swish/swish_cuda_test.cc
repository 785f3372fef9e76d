// The Swish CUDA kernels against the CPU kernels (SerialParallel). The CPU kernels use Eigen's
// logistic (TensorFlow's), the CUDA kernels CUDA's exp, and half and bfloat16 round once on the
// GPU where TensorFlow's chain rounds every step; so the two agree within a few ulps, not bit
// for bit. The bound, per element: |gpu - cpu| <= 8 eps (|cpu| + m) with m = |x| * the smallest
// normal (forward; the sigmoid of very negative x is subnormal in half) or |g| (1 + |x|)
// (backward: the terms of g * s * (1 + x (1 - s)) before they cancel), plus the smallest
// subnormal of T (a half result that is a tie between two subnormals rounds either way with
// sigmoids a float ulp apart; the SIMT runtime's first run found it). NaN exactly where the CPU
// has NaN, the same infinities. The kernels run on a non-blocking stream, as TensorFlow's, with
// aligned (vector) and misaligned (scalar) buffers, in place, empty, past one grid and past 2^31
// elements. Without a CUDA device every test says "skipped: no CUDA device".
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "common/cuda_test_util.h"
#include "common/dtype.h"
#include "common/elementwise_cuda_test.h"
#include "common/parallel.h"
#include "common/status.h"
#include "common/test_util.h"
#include "ops/swish/swish.h"

namespace opforge {
namespace {

using test::BitPatternInputs;
using test::CopyFromDeviceOn;
using test::DeviceBuffer;
using test::DownloadOn;
using test::FloatTypes;
using test::Placed;
using test::PlaceOn;
using test::TypeNames;
using test::UploadOn;
using test::Wide;

template <typename T>
std::vector<T> TestInputs(uint64_t seed) {
  return BitPatternInputs<T>(seed, test::SpecialValues<T>(), /*random_patterns=*/1 << 16,
                             /*ordinary=*/(1 << 18) + 13);
}

// Ordinary upstream gradients in [-8, 8) (no overflow at the edge of the range).
template <typename T>
std::vector<T> Gradients(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  return test::UniformVector<T>(rng, static_cast<int64_t>(n), -8.0, 8.0);
}

// Counts the elements outside the bound; prints the first few.
template <typename T>
int64_t Mismatches(const std::vector<T>& gpu, const std::vector<T>& cpu, const std::vector<T>& x,
                   const std::vector<T>* g) {
  const double eps = Wide(std::numeric_limits<T>::epsilon());
  const double tiny = Wide(std::numeric_limits<T>::min());
  const double denorm = Wide(std::numeric_limits<T>::denorm_min());
  int64_t bad = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    const double a = Wide(gpu[i]), b = Wide(cpu[i]), xi = Wide(x[i]);
    bool ok;
    if (std::isnan(b) || std::isnan(a)) {
      ok = std::isnan(a) && std::isnan(b);
    } else if (std::isinf(b) || std::isinf(a)) {
      ok = a == b;
    } else {
      const double m =
          g == nullptr ? std::fabs(xi) * tiny : std::fabs(Wide((*g)[i])) * (1 + std::fabs(xi));
      // Plus one unit of the smallest subnormal: two sigmoids a float ulp apart can round a
      // subnormal result (x = the smallest half, swish(x) = x / 2 + a hair, a tie) either way.
      ok = std::fabs(a - b) <= 8 * eps * (std::fabs(b) + m) + denorm;
    }
    if (!ok && ++bad <= 5) {
      ADD_FAILURE() << "element " << i << ": x " << xi << ", gpu " << a << ", cpu " << b;
    }
  }
  return bad;
}

// n ordinary gradients in [-7.8, 7.8], cheap to make for billions of elements.
template <typename T>
std::vector<T> CheapGradients(int64_t n) {
  std::vector<T> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    v[static_cast<size_t>(i)] = static_cast<T>(static_cast<float>((i * 7919) % 251 - 125) / 16.0f);
  }
  return v;
}

SwishParams Params(size_t size) {
  SwishParams p;
  p.size = static_cast<int64_t>(size);
  return p;
}

// Swish as the shared cases run it (common/elementwise_cuda_test.h): within the bound above
// (Mismatches); ordinary upstream gradients (CheapGradients) in the large cases.
struct SwishUnderTest {
  static constexpr bool kMask = false;

  template <typename T>
  void Forward(const T* x, T* y, T* /*mask*/, int64_t n, const Parallel& parallel) const {
    SwishForward<T>(Params(static_cast<size_t>(n)), x, y, parallel);
  }
  template <typename T>
  void Backward(const T* g, const T* x, T* dx, int64_t n, const Parallel& parallel) const {
    SwishBackward<T>(Params(static_cast<size_t>(n)), g, x, dx, parallel);
  }
  Status ForwardGpu(DType dtype, const void* x, void* y, void* /*mask*/, int64_t n,
                    cudaStream_t stream) const {
    return SwishForwardGpu(dtype, Params(static_cast<size_t>(n)), x, y, stream);
  }
  Status BackwardGpu(DType dtype, const void* g, const void* x, void* dx, int64_t n,
                     cudaStream_t stream) const {
    return SwishBackwardGpu(dtype, Params(static_cast<size_t>(n)), g, x, dx, stream);
  }
  template <typename T>
  ::testing::AssertionResult Agree(const std::vector<T>& gpu, const std::vector<T>& cpu,
                                   const std::vector<T>& x, const std::vector<T>* g) const {
    const int64_t bad = Mismatches<T>(gpu, cpu, x, g);
    if (bad == 0) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << bad << " elements outside the bound";
  }
  std::vector<Eigen::half> LargeGradients(int64_t n) const {
    return CheapGradients<Eigen::half>(n);
  }
};

template <typename T>
class SwishCudaTest : public ::testing::Test {};
TYPED_TEST_SUITE(SwishCudaTest, FloatTypes, TypeNames);

TYPED_TEST(SwishCudaTest, ForwardMatchesCpu) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  OPFORGE_TEST_STREAM(stream);
  const std::vector<T> x = TestInputs<T>(1);
  std::vector<T> cpu(x.size()), gpu(x.size());
  SwishForward<T>(Params(x.size()), x.data(), cpu.data(), SerialParallel());
  for (const int offset : {0, 1}) {
    SCOPED_TRACE(::testing::Message() << "offset " << offset);
    Placed<T> dx, dy;
    ASSERT_NO_FATAL_FAILURE(PlaceOn(stream, x, offset, &dx));
    ASSERT_NO_FATAL_FAILURE(PlaceOn(stream, x, offset, &dy));
    OPFORGE_ASSERT_OK(SwishForwardGpu(DTypeOf<T>::value, Params(x.size()), dx.ptr, dy.ptr, stream));
    ASSERT_NO_FATAL_FAILURE(CopyFromDeviceOn(stream, dy.ptr, &gpu));
    EXPECT_EQ(Mismatches<T>(gpu, cpu, x, nullptr), 0);
  }
}

TYPED_TEST(SwishCudaTest, BackwardMatchesCpu) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  OPFORGE_TEST_STREAM(stream);
  const std::vector<T> x = TestInputs<T>(2);
  const std::vector<T> g = Gradients<T>(x.size(), 3);
  std::vector<T> cpu(x.size()), gpu(x.size());
  SwishBackward<T>(Params(x.size()), g.data(), x.data(), cpu.data(), SerialParallel());
  for (const int offset : {0, 1}) {
    SCOPED_TRACE(::testing::Message() << "offset " << offset);
    Placed<T> dg, dx, ddx;
    ASSERT_NO_FATAL_FAILURE(PlaceOn(stream, g, offset, &dg));
    ASSERT_NO_FATAL_FAILURE(PlaceOn(stream, x, offset, &dx));
    ASSERT_NO_FATAL_FAILURE(PlaceOn(stream, x, offset, &ddx));
    OPFORGE_ASSERT_OK(
        SwishBackwardGpu(DTypeOf<T>::value, Params(x.size()), dg.ptr, dx.ptr, ddx.ptr, stream));
    ASSERT_NO_FATAL_FAILURE(CopyFromDeviceOn(stream, ddx.ptr, &gpu));
    EXPECT_EQ(Mismatches<T>(gpu, cpu, x, &g), 0);
  }
}

// Special values in the upstream gradient too (the features already run through them). Where
// g is infinite or NaN both results are non-finite, but not necessarily the same: g * slope is
// NaN where one device's slope is exactly 0 and infinite where the other's is an ulp off. Where
// g is finite, the bound above, except that a result may overflow to infinity on one device and
// stay just below the largest value on the other.
TYPED_TEST(SwishCudaTest, BackwardWithSpecialGradients) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  OPFORGE_TEST_STREAM(stream);
  const std::vector<T> x = TestInputs<T>(9);
  std::vector<T> g = TestInputs<T>(10);
  std::shuffle(g.begin(), g.end(), std::mt19937_64(11));
  std::vector<T> cpu(x.size()), gpu(x.size());
  SwishBackward<T>(Params(x.size()), g.data(), x.data(), cpu.data(), SerialParallel());
  DeviceBuffer dg, dx, ddx;
  ASSERT_NO_FATAL_FAILURE(UploadOn(stream, g, &dg));
  ASSERT_NO_FATAL_FAILURE(UploadOn(stream, x, &dx));
  OPFORGE_ASSERT_CUDA(ddx.Allocate(x.size() * sizeof(T)));
  OPFORGE_ASSERT_OK(
      SwishBackwardGpu(DTypeOf<T>::value, Params(x.size()), dg.get(), dx.get(), ddx.get(), stream));
  ASSERT_NO_FATAL_FAILURE(DownloadOn(stream, ddx, &gpu));
  const double near_overflow = Wide(std::numeric_limits<T>::max()) / 2;
  int64_t bad = 0;
  std::vector<T> finite_gpu, finite_cpu, finite_x, finite_g;
  for (size_t i = 0; i < x.size(); ++i) {
    const double a = Wide(gpu[i]), b = Wide(cpu[i]);
    bool ok = true;
    if (!std::isfinite(Wide(g[i]))) {
      ok = !std::isfinite(a) && !std::isfinite(b);
    } else if (std::isfinite(a) != std::isfinite(b)) {
      ok = !std::isnan(a) && !std::isnan(b) && std::fabs(std::isfinite(a) ? a : b) > near_overflow;
    } else {
      finite_gpu.push_back(gpu[i]);
      finite_cpu.push_back(cpu[i]);
      finite_x.push_back(x[i]);
      finite_g.push_back(g[i]);
    }
    if (!ok && ++bad <= 5) {
      ADD_FAILURE() << "element " << i << ": g " << Wide(g[i]) << ", x " << Wide(x[i]) << ", gpu "
                    << a << ", cpu " << b;
    }
  }
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(Mismatches<T>(finite_gpu, finite_cpu, finite_x, &finite_g), 0);
}

// y aliasing x and dx aliasing g, as the binding does when it forwards a buffer.
TYPED_TEST(SwishCudaTest, InPlaceEqualsOutOfPlace) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  OPFORGE_TEST_STREAM(stream);
  const std::vector<T> x = TestInputs<T>(4);
  const std::vector<T> g = Gradients<T>(x.size(), 5);
  DeviceBuffer dx, dy, dg;
  ASSERT_NO_FATAL_FAILURE(UploadOn(stream, x, &dx));
  ASSERT_NO_FATAL_FAILURE(UploadOn(stream, x, &dy));
  OPFORGE_ASSERT_CUDA(dg.Allocate(x.size() * sizeof(T)));
  OPFORGE_ASSERT_OK(
      SwishForwardGpu(DTypeOf<T>::value, Params(x.size()), dx.get(), dg.get(), stream));
  OPFORGE_ASSERT_OK(
      SwishForwardGpu(DTypeOf<T>::value, Params(x.size()), dy.get(), dy.get(), stream));
  std::vector<T> out(x.size()), in_place(x.size());
  ASSERT_NO_FATAL_FAILURE(DownloadOn(stream, dg, &out));
  ASSERT_NO_FATAL_FAILURE(DownloadOn(stream, dy, &in_place));
  EXPECT_TRUE(test::SameBits(in_place, out, x));

  ASSERT_NO_FATAL_FAILURE(UploadOn(stream, g, &dg));
  OPFORGE_ASSERT_CUDA(dy.Allocate(x.size() * sizeof(T)));
  OPFORGE_ASSERT_OK(
      SwishBackwardGpu(DTypeOf<T>::value, Params(x.size()), dg.get(), dx.get(), dy.get(), stream));
  OPFORGE_ASSERT_OK(
      SwishBackwardGpu(DTypeOf<T>::value, Params(x.size()), dg.get(), dx.get(), dg.get(), stream));
  ASSERT_NO_FATAL_FAILURE(DownloadOn(stream, dy, &out));
  ASSERT_NO_FATAL_FAILURE(DownloadOn(stream, dg, &in_place));
  EXPECT_TRUE(test::SameBits(in_place, out, x));
}

// Sizes around the vector width (tails of every length) and none.
TYPED_TEST(SwishCudaTest, SmallSizesAndEmpty) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  test::CheckSmallSizesAndEmpty(SwishUnderTest{}, TestInputs<TypeParam>(12),
                                [](size_t n) { return Gradients<TypeParam>(n, 13); });
}

TEST(SwishCudaLargeTest, GridStrideLoopCoversEveryElement) {
  test::CheckGridStrideLoops(SwishUnderTest{});
}

TEST(SwishCudaLargeTest, MoreThan2To31Elements) {
  test::CheckMoreThan2To31Elements(SwishUnderTest{});
}

}  // namespace
}  // namespace opforge

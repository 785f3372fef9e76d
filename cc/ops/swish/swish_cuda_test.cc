// The Swish CUDA kernels against the CPU kernels (SerialParallel). The CPU kernels use Eigen's
// logistic (TensorFlow's), the CUDA kernels CUDA's exp, and half and bfloat16 round once on the
// GPU where TensorFlow's chain rounds every step; so the two agree within a few ulps, not bit
// for bit. The bound, per element: |gpu - cpu| <= 8 eps (|cpu| + m) with m = |x| * the smallest
// normal (forward; the sigmoid of very negative x is subnormal in half) or |g| (1 + |x|)
// (backward: the terms of g * s * (1 + x (1 - s)) before they cancel). NaN exactly where the CPU
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
#include <string>
#include <vector>

#include "common/cuda_test_util.h"
#include "common/dtype.h"
#include "common/parallel.h"
#include "common/status.h"
#include "common/test_util.h"
#include "ops/swish/swish.h"

namespace opforge {
namespace {

using test::BitPatternInputs;
using test::CopyFromDeviceOn;
using test::CopyToDeviceOn;
using test::DeviceBuffer;
using test::DownloadOn;
using test::FloatTypes;
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
      ok = std::fabs(a - b) <= 8 * eps * (std::fabs(b) + m);
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

template <typename T>
class SwishCudaTest : public ::testing::Test {};
TYPED_TEST_SUITE(SwishCudaTest, FloatTypes, TypeNames);

// Device copies placed `offset` elements into their buffers: 0 aligned (the vector path), 1 not
// (the scalar path).
template <typename T>
T* Place(cudaStream_t stream, const std::vector<T>& host, int offset, DeviceBuffer* buffer) {
  EXPECT_EQ(buffer->Allocate((host.size() + offset) * sizeof(T)), cudaSuccess);
  T* ptr = static_cast<T*>(buffer->get()) + offset;
  CopyToDeviceOn(stream, host, ptr);
  return ptr;
}

TYPED_TEST(SwishCudaTest, ForwardMatchesCpu) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  OPFORGE_TEST_STREAM(stream);
  const std::vector<T> x = TestInputs<T>(1);
  std::vector<T> cpu(x.size()), gpu(x.size());
  SwishForward<T>(Params(x.size()), x.data(), cpu.data(), SerialParallel());
  for (const int offset : {0, 1}) {
    SCOPED_TRACE(::testing::Message() << "offset " << offset);
    DeviceBuffer bx, by;
    T* dx = Place(stream, x, offset, &bx);
    T* dy = Place(stream, x, offset, &by);
    OPFORGE_ASSERT_OK(SwishForwardGpu(DTypeOf<T>::value, Params(x.size()), dx, dy, stream));
    ASSERT_NO_FATAL_FAILURE(CopyFromDeviceOn(stream, dy, &gpu));
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
    DeviceBuffer bg, bx, bdx;
    T* dg = Place(stream, g, offset, &bg);
    T* dx = Place(stream, x, offset, &bx);
    T* ddx = Place(stream, x, offset, &bdx);
    OPFORGE_ASSERT_OK(SwishBackwardGpu(DTypeOf<T>::value, Params(x.size()), dg, dx, ddx, stream));
    ASSERT_NO_FATAL_FAILURE(CopyFromDeviceOn(stream, ddx, &gpu));
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
  using T = TypeParam;
  OPFORGE_TEST_STREAM(stream);
  OPFORGE_ASSERT_OK(SwishForwardGpu(DTypeOf<T>::value, Params(0), nullptr, nullptr, stream));
  OPFORGE_ASSERT_OK(
      SwishBackwardGpu(DTypeOf<T>::value, Params(0), nullptr, nullptr, nullptr, stream));
  const std::vector<T> all = TestInputs<T>(12);
  for (size_t n = 1; n <= 19; ++n) {
    SCOPED_TRACE(::testing::Message() << n << " elements");
    const std::vector<T> x(all.end() - n, all.end());
    const std::vector<T> g = Gradients<T>(n, 13);
    std::vector<T> cpu_y(n), cpu_dx(n), y(n), dxv(n);
    SwishForward<T>(Params(n), x.data(), cpu_y.data(), SerialParallel());
    SwishBackward<T>(Params(n), g.data(), x.data(), cpu_dx.data(), SerialParallel());
    DeviceBuffer dx, dg, dy, ddx;
    ASSERT_NO_FATAL_FAILURE(UploadOn(stream, x, &dx));
    ASSERT_NO_FATAL_FAILURE(UploadOn(stream, g, &dg));
    OPFORGE_ASSERT_CUDA(dy.Allocate(n * sizeof(T)));
    OPFORGE_ASSERT_CUDA(ddx.Allocate(n * sizeof(T)));
    OPFORGE_ASSERT_OK(SwishForwardGpu(DTypeOf<T>::value, Params(n), dx.get(), dy.get(), stream));
    OPFORGE_ASSERT_OK(
        SwishBackwardGpu(DTypeOf<T>::value, Params(n), dg.get(), dx.get(), ddx.get(), stream));
    ASSERT_NO_FATAL_FAILURE(DownloadOn(stream, dy, &y));
    ASSERT_NO_FATAL_FAILURE(DownloadOn(stream, ddx, &dxv));
    EXPECT_EQ(Mismatches<T>(y, cpu_y, x, nullptr), 0);
    EXPECT_EQ(Mismatches<T>(dxv, cpu_dx, x, &g), 0);
  }
}

// More elements than one grid of 8-element half vectors covers (65536 blocks of 256 threads):
// every thread takes several steps of the grid-stride loop.
TEST(SwishCudaLargeTest, GridStrideLoopCoversEveryElement) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = Eigen::half;
  OPFORGE_TEST_STREAM(stream);
  const int64_t n = (int64_t{65536} * 256 * 8) + 4099 * 8 + 5;
  const std::vector<T> x = test::PatternVector<T>(n, 40503);
  const std::vector<T> g = CheapGradients<T>(n);
  std::vector<T> cpu(n), gpu(n);
  const ThreadParallel parallel(8);
  DeviceBuffer dx, dg, dy;
  ASSERT_NO_FATAL_FAILURE(UploadOn(stream, x, &dx));
  ASSERT_NO_FATAL_FAILURE(UploadOn(stream, g, &dg));
  OPFORGE_ASSERT_CUDA(dy.Allocate(n * sizeof(T)));
  OPFORGE_ASSERT_OK(SwishForwardGpu(DType::kHalf, Params(n), dx.get(), dy.get(), stream));
  SwishForward<T>(Params(n), x.data(), cpu.data(), parallel);
  ASSERT_NO_FATAL_FAILURE(DownloadOn(stream, dy, &gpu));
  EXPECT_EQ(Mismatches<T>(gpu, cpu, x, nullptr), 0);
  OPFORGE_ASSERT_OK(
      SwishBackwardGpu(DType::kHalf, Params(n), dg.get(), dx.get(), dy.get(), stream));
  SwishBackward<T>(Params(n), g.data(), x.data(), cpu.data(), parallel);
  ASSERT_NO_FATAL_FAILURE(DownloadOn(stream, dy, &gpu));
  EXPECT_EQ(Mismatches<T>(gpu, cpu, x, &g), 0);
}

// More than 2^31 elements (the 64-bit index path), in half: two 4 GiB buffers, the backward
// pass in place over g, then the forward pass in place. Skipped with a message without the
// memory.
TEST(SwishCudaLargeTest, MoreThan2To31Elements) {
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
  const std::vector<T> g = CheapGradients<T>(n);
  ASSERT_NO_FATAL_FAILURE(CopyToDeviceOn(stream, x, dx.get()));
  ASSERT_NO_FATAL_FAILURE(CopyToDeviceOn(stream, g, dg.get()));
  const ThreadParallel parallel(16);
  std::vector<T> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
  OPFORGE_ASSERT_OK(
      SwishBackwardGpu(DType::kHalf, Params(n), dg.get(), dx.get(), dg.get(), stream));
  SwishBackward<T>(Params(n), g.data(), x.data(), want.data(), parallel);
  ASSERT_NO_FATAL_FAILURE(CopyFromDeviceOn(stream, dg.get(), &got));
  EXPECT_EQ(Mismatches<T>(got, want, x, &g), 0) << "backward";
  OPFORGE_ASSERT_OK(SwishForwardGpu(DType::kHalf, Params(n), dx.get(), dx.get(), stream));
  SwishForward<T>(Params(n), x.data(), want.data(), parallel);
  ASSERT_NO_FATAL_FAILURE(CopyFromDeviceOn(stream, dx.get(), &got));
  EXPECT_EQ(Mismatches<T>(got, want, x, nullptr), 0) << "forward";
}

}  // namespace
}  // namespace opforge

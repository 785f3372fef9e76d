// The Swish CUDA kernels against the CPU kernels (SerialParallel). The CPU kernels use Eigen's
// logistic (TensorFlow's), the CUDA kernels CUDA's exp, and half and bfloat16 round once on the
// GPU where TensorFlow's chain rounds every step; so the two agree within a few ulps, not bit
// for bit. The bound, per element: |gpu - cpu| <= 8 eps (|cpu| + m) with m = |x| * the smallest
// normal (forward; the sigmoid of very negative x is subnormal in half) or |g| (1 + |x|)
// (backward: the terms of g * s * (1 + x (1 - s)) before they cancel). NaN exactly where the CPU
// has NaN, the same infinities. Without a CUDA device every test says "skipped: no CUDA device".
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
#include "common/parallel.h"
#include "common/status.h"
#include "common/test_util.h"
#include "ops/swish/swish.h"

namespace opforge {
namespace {

using test::BitPatternInputs;
using test::DeviceBuffer;
using test::Download;
using test::FloatTypes;
using test::Sync;
using test::TypeNames;
using test::Upload;
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

SwishParams Params(size_t size) {
  SwishParams p;
  p.size = static_cast<int64_t>(size);
  return p;
}

template <typename T>
class SwishCudaTest : public ::testing::Test {};
TYPED_TEST_SUITE(SwishCudaTest, FloatTypes, TypeNames);

TYPED_TEST(SwishCudaTest, ForwardMatchesCpu) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  const std::vector<T> x = TestInputs<T>(1);
  DeviceBuffer dx, dy;
  ASSERT_NO_FATAL_FAILURE(Upload(x, &dx));
  OPFORGE_ASSERT_CUDA(dy.Allocate(x.size() * sizeof(T)));
  std::vector<T> cpu(x.size()), gpu(x.size());
  SwishForward<T>(Params(x.size()), x.data(), cpu.data(), SerialParallel());
  OPFORGE_ASSERT_OK(SwishForwardGpu(DTypeOf<T>::value, Params(x.size()), dx.get(), dy.get(),
                                    /*stream=*/nullptr));
  ASSERT_NO_FATAL_FAILURE(Sync());
  ASSERT_NO_FATAL_FAILURE(Download(dy, &gpu));
  EXPECT_EQ(Mismatches<T>(gpu, cpu, x, nullptr), 0);
}

TYPED_TEST(SwishCudaTest, BackwardMatchesCpu) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  const std::vector<T> x = TestInputs<T>(2);
  const std::vector<T> g = Gradients<T>(x.size(), 3);
  DeviceBuffer dg, dx, ddx;
  ASSERT_NO_FATAL_FAILURE(Upload(g, &dg));
  ASSERT_NO_FATAL_FAILURE(Upload(x, &dx));
  OPFORGE_ASSERT_CUDA(ddx.Allocate(x.size() * sizeof(T)));
  std::vector<T> cpu(x.size()), gpu(x.size());
  SwishBackward<T>(Params(x.size()), g.data(), x.data(), cpu.data(), SerialParallel());
  OPFORGE_ASSERT_OK(SwishBackwardGpu(DTypeOf<T>::value, Params(x.size()), dg.get(), dx.get(),
                                     ddx.get(), nullptr));
  ASSERT_NO_FATAL_FAILURE(Sync());
  ASSERT_NO_FATAL_FAILURE(Download(ddx, &gpu));
  EXPECT_EQ(Mismatches<T>(gpu, cpu, x, &g), 0);
}

// y aliasing x and dx aliasing g, as the binding does when it forwards a buffer.
TYPED_TEST(SwishCudaTest, InPlaceEqualsOutOfPlace) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  const std::vector<T> x = TestInputs<T>(4);
  const std::vector<T> g = Gradients<T>(x.size(), 5);
  DeviceBuffer dx, dy, dg;
  ASSERT_NO_FATAL_FAILURE(Upload(x, &dx));
  ASSERT_NO_FATAL_FAILURE(Upload(x, &dy));
  OPFORGE_ASSERT_CUDA(dg.Allocate(x.size() * sizeof(T)));
  OPFORGE_ASSERT_OK(
      SwishForwardGpu(DTypeOf<T>::value, Params(x.size()), dx.get(), dg.get(), nullptr));
  OPFORGE_ASSERT_OK(
      SwishForwardGpu(DTypeOf<T>::value, Params(x.size()), dy.get(), dy.get(), nullptr));
  ASSERT_NO_FATAL_FAILURE(Sync());
  std::vector<T> out(x.size()), in_place(x.size());
  ASSERT_NO_FATAL_FAILURE(Download(dg, &out));
  ASSERT_NO_FATAL_FAILURE(Download(dy, &in_place));
  EXPECT_TRUE(test::SameBits(in_place, out, x));

  ASSERT_NO_FATAL_FAILURE(Upload(g, &dg));
  OPFORGE_ASSERT_CUDA(dy.Allocate(x.size() * sizeof(T)));
  OPFORGE_ASSERT_OK(
      SwishBackwardGpu(DTypeOf<T>::value, Params(x.size()), dg.get(), dx.get(), dy.get(), nullptr));
  OPFORGE_ASSERT_OK(
      SwishBackwardGpu(DTypeOf<T>::value, Params(x.size()), dg.get(), dx.get(), dg.get(), nullptr));
  ASSERT_NO_FATAL_FAILURE(Sync());
  ASSERT_NO_FATAL_FAILURE(Download(dy, &out));
  ASSERT_NO_FATAL_FAILURE(Download(dg, &in_place));
  EXPECT_TRUE(test::SameBits(in_place, out, x));
}

TEST(SwishCudaTest, EmptyIsANoOp) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  OPFORGE_ASSERT_OK(SwishForwardGpu(DType::kFloat, Params(0), nullptr, nullptr, nullptr));
  OPFORGE_ASSERT_OK(SwishBackwardGpu(DType::kFloat, Params(0), nullptr, nullptr, nullptr, nullptr));
}

}  // namespace
}  // namespace opforge

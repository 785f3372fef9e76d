// The LeakyRelu CUDA kernels against the CPU kernels (SerialParallel): same bits for every
// element type. Compiled by the host compiler against the CUDA kernels library; without a CUDA
// device every test says "skipped: no CUDA device".
//
// One allowance: a NaN result may have other bits on the GPU (CUDA arithmetic returns the
// canonical NaN, x86 keeps the NaN operand's payload), so NaN matches any NaN. Every other value,
// signed zeros and infinities included, must match bit for bit.
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
using test::DeviceBuffer;
using test::Download;
using test::FloatTypes;
using test::SameBitsOrBothNan;
using test::Sync;
using test::TypeNames;
using test::Upload;

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

TYPED_TEST(LeakyReluCudaTest, ForwardMatchesCpu) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  const std::vector<T> x = TestInputs<T>(1);
  DeviceBuffer dx, dy, dmask;
  ASSERT_NO_FATAL_FAILURE(Upload(x, &dx));
  OPFORGE_ASSERT_CUDA(dy.Allocate(x.size() * sizeof(T)));
  OPFORGE_ASSERT_CUDA(dmask.Allocate(x.size() * sizeof(T)));
  for (float alpha : kAlphas) {
    SCOPED_TRACE(::testing::Message() << "alpha " << alpha);
    const LeakyReluParams params = Params(alpha, x.size());
    std::vector<T> cpu_y(x.size()), cpu_mask(x.size());
    LeakyReluForward<T>(params, x.data(), cpu_y.data(), cpu_mask.data(), SerialParallel());

    // Without the mask.
    OPFORGE_ASSERT_OK(LeakyReluForwardGpu(DTypeOf<T>::value, params, dx.get(), dy.get(), nullptr,
                                          /*stream=*/nullptr));
    ASSERT_NO_FATAL_FAILURE(Sync());
    std::vector<T> y(x.size());
    ASSERT_NO_FATAL_FAILURE(Download(dy, &y));
    EXPECT_TRUE(SameBitsOrBothNan(y, cpu_y, x));

    // With the mask.
    OPFORGE_ASSERT_CUDA(cudaMemset(dy.get(), 0x7F, x.size() * sizeof(T)));
    OPFORGE_ASSERT_OK(
        LeakyReluForwardGpu(DTypeOf<T>::value, params, dx.get(), dy.get(), dmask.get(), nullptr));
    ASSERT_NO_FATAL_FAILURE(Sync());
    std::vector<T> mask(x.size());
    ASSERT_NO_FATAL_FAILURE(Download(dy, &y));
    ASSERT_NO_FATAL_FAILURE(Download(dmask, &mask));
    EXPECT_TRUE(SameBitsOrBothNan(y, cpu_y, x));
    EXPECT_TRUE(SameBitsOrBothNan(mask, cpu_mask, x));
  }
}

TYPED_TEST(LeakyReluCudaTest, BackwardMatchesCpu) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  const std::vector<T> x = TestInputs<T>(2);
  std::vector<T> g = TestInputs<T>(3);
  std::shuffle(g.begin(), g.end(), std::mt19937_64(4));
  DeviceBuffer dg, dx, ddx;
  ASSERT_NO_FATAL_FAILURE(Upload(g, &dg));
  ASSERT_NO_FATAL_FAILURE(Upload(x, &dx));
  OPFORGE_ASSERT_CUDA(ddx.Allocate(x.size() * sizeof(T)));
  for (float alpha : kAlphas) {
    SCOPED_TRACE(::testing::Message() << "alpha " << alpha);
    const LeakyReluParams params = Params(alpha, x.size());
    std::vector<T> cpu(x.size());
    LeakyReluBackward<T>(params, g.data(), x.data(), cpu.data(), SerialParallel());
    OPFORGE_ASSERT_OK(
        LeakyReluBackwardGpu(DTypeOf<T>::value, params, dg.get(), dx.get(), ddx.get(), nullptr));
    ASSERT_NO_FATAL_FAILURE(Sync());
    std::vector<T> gpu(x.size());
    ASSERT_NO_FATAL_FAILURE(Download(ddx, &gpu));
    EXPECT_TRUE(SameBitsOrBothNan(gpu, cpu, x));
  }
}

// y aliasing x, and dx aliasing g, as the binding does when it forwards a buffer.
TYPED_TEST(LeakyReluCudaTest, InPlaceMatchesCpu) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  const std::vector<T> x = TestInputs<T>(5);
  std::vector<T> g = TestInputs<T>(6);
  std::shuffle(g.begin(), g.end(), std::mt19937_64(7));
  const LeakyReluParams params = Params(0.2f, x.size());
  std::vector<T> cpu_y(x.size()), cpu_dx(x.size());
  LeakyReluForward<T>(params, x.data(), cpu_y.data(), nullptr, SerialParallel());
  LeakyReluBackward<T>(params, g.data(), x.data(), cpu_dx.data(), SerialParallel());

  DeviceBuffer dbuf, dx;
  ASSERT_NO_FATAL_FAILURE(Upload(x, &dbuf));
  OPFORGE_ASSERT_OK(
      LeakyReluForwardGpu(DTypeOf<T>::value, params, dbuf.get(), dbuf.get(), nullptr, nullptr));
  ASSERT_NO_FATAL_FAILURE(Sync());
  std::vector<T> y(x.size());
  ASSERT_NO_FATAL_FAILURE(Download(dbuf, &y));
  EXPECT_TRUE(SameBitsOrBothNan(y, cpu_y, x));

  DeviceBuffer dg;
  ASSERT_NO_FATAL_FAILURE(Upload(g, &dg));
  ASSERT_NO_FATAL_FAILURE(Upload(x, &dx));
  OPFORGE_ASSERT_OK(
      LeakyReluBackwardGpu(DTypeOf<T>::value, params, dg.get(), dx.get(), dg.get(), nullptr));
  ASSERT_NO_FATAL_FAILURE(Sync());
  std::vector<T> dxv(x.size());
  ASSERT_NO_FATAL_FAILURE(Download(dg, &dxv));
  EXPECT_TRUE(SameBitsOrBothNan(dxv, cpu_dx, x));
}

TYPED_TEST(LeakyReluCudaTest, SizeZero) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  OPFORGE_ASSERT_OK(
      LeakyReluForwardGpu(DTypeOf<T>::value, Params(0.2f, 0), nullptr, nullptr, nullptr, nullptr));
  OPFORGE_ASSERT_OK(
      LeakyReluBackwardGpu(DTypeOf<T>::value, Params(0.2f, 0), nullptr, nullptr, nullptr, nullptr));
  ASSERT_NO_FATAL_FAILURE(Sync());
}

// More elements than one grid covers (65536 blocks of 256 threads): the grid-stride loop.
TEST(LeakyReluCudaLargeTest, GridStrideLoopCoversEveryElement) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  const size_t n = (size_t{65536} * 256) + 4099;
  std::vector<float> x(n);
  std::mt19937_64 rng(8);
  std::uniform_real_distribution<float> value(-4.0f, 4.0f);
  for (auto& v : x) v = value(rng);
  const LeakyReluParams params = Params(0.2f, n);
  std::vector<float> cpu_y(n), cpu_mask(n), cpu_dx(n);
  LeakyReluForward<float>(params, x.data(), cpu_y.data(), cpu_mask.data(), SerialParallel());
  LeakyReluBackward<float>(params, x.data(), x.data(), cpu_dx.data(), SerialParallel());
  DeviceBuffer dx, dy, dmask, ddx;
  ASSERT_NO_FATAL_FAILURE(Upload(x, &dx));
  OPFORGE_ASSERT_CUDA(dy.Allocate(n * sizeof(float)));
  OPFORGE_ASSERT_CUDA(dmask.Allocate(n * sizeof(float)));
  OPFORGE_ASSERT_CUDA(ddx.Allocate(n * sizeof(float)));
  OPFORGE_ASSERT_OK(
      LeakyReluForwardGpu(DType::kFloat, params, dx.get(), dy.get(), dmask.get(), nullptr));
  OPFORGE_ASSERT_OK(
      LeakyReluBackwardGpu(DType::kFloat, params, dx.get(), dx.get(), ddx.get(), nullptr));
  ASSERT_NO_FATAL_FAILURE(Sync());
  std::vector<float> y(n), mask(n), dxv(n);
  ASSERT_NO_FATAL_FAILURE(Download(dy, &y));
  ASSERT_NO_FATAL_FAILURE(Download(dmask, &mask));
  ASSERT_NO_FATAL_FAILURE(Download(ddx, &dxv));
  EXPECT_EQ(std::memcmp(y.data(), cpu_y.data(), n * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(mask.data(), cpu_mask.data(), n * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(dxv.data(), cpu_dx.data(), n * sizeof(float)), 0);
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

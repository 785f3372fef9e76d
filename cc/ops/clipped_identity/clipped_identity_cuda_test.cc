// The ClippedIdentity CUDA kernels against the CPU kernels (SerialParallel): the same bits for
// every element type (any NaN matches any NaN: CUDA returns the canonical NaN). Without a CUDA
// device every test says "skipped: no CUDA device".
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <algorithm>
#include <cstdint>
#include <random>
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
using test::DeviceBuffer;
using test::Download;
using test::FloatTypes;
using test::SameBitsOrBothNan;
using test::Sync;
using test::TypeNames;
using test::Upload;

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

TYPED_TEST(ClippedIdentityCudaTest, ForwardAndBackwardMatchCpu) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  const std::vector<T> x = TestInputs<T>(1);
  std::vector<T> g = TestInputs<T>(2);
  std::shuffle(g.begin(), g.end(), std::mt19937_64(3));
  DeviceBuffer dx, dg, dy;
  ASSERT_NO_FATAL_FAILURE(Upload(x, &dx));
  ASSERT_NO_FATAL_FAILURE(Upload(g, &dg));
  OPFORGE_ASSERT_CUDA(dy.Allocate(x.size() * sizeof(T)));
  for (const Attrs& a : kAttrs) {
    SCOPED_TRACE(::testing::Message() << "clip " << a.clip_min << ".." << a.clip_max);
    const ClippedIdentityParams p = Params(a, x.size());
    std::vector<T> cpu(x.size()), gpu(x.size());
    ClippedIdentityForward<T>(p, x.data(), cpu.data(), SerialParallel());
    OPFORGE_ASSERT_OK(
        ClippedIdentityForwardGpu(DTypeOf<T>::value, p, dx.get(), dy.get(), /*stream=*/nullptr));
    ASSERT_NO_FATAL_FAILURE(Sync());
    ASSERT_NO_FATAL_FAILURE(Download(dy, &gpu));
    EXPECT_TRUE(SameBitsOrBothNan(gpu, cpu, x));

    ClippedIdentityBackward<T>(p, g.data(), x.data(), cpu.data(), SerialParallel());
    OPFORGE_ASSERT_OK(
        ClippedIdentityBackwardGpu(DTypeOf<T>::value, p, dg.get(), dx.get(), dy.get(), nullptr));
    ASSERT_NO_FATAL_FAILURE(Sync());
    ASSERT_NO_FATAL_FAILURE(Download(dy, &gpu));
    EXPECT_TRUE(SameBitsOrBothNan(gpu, cpu, x));
  }
}

TEST(ClippedIdentityCudaTest, EmptyIsANoOp) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  const ClippedIdentityParams p = Params(kAttrs[0], 0);
  OPFORGE_ASSERT_OK(ClippedIdentityForwardGpu(DType::kFloat, p, nullptr, nullptr, nullptr));
  OPFORGE_ASSERT_OK(
      ClippedIdentityBackwardGpu(DType::kFloat, p, nullptr, nullptr, nullptr, nullptr));
}

}  // namespace
}  // namespace opforge

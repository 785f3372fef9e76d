// The ElementMul CUDA kernels against the CPU kernels (SerialParallel). Compiled by the host
// compiler against the CUDA kernels library; without a CUDA device every test says
// "skipped: no CUDA device".
//
// Forward: the same bits for every type (a NaN matches any NaN: CUDA returns the canonical NaN,
// x86 keeps an operand's payload). Backward: exact for integers; for floating types, an operand
// that was not broadcast gets one product per element, the same bits as on the CPU; a broadcast
// operand gets a sum in the same order as on the CPU, but nvcc may fuse its multiply-adds, so it
// is compared with a tolerance.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "common/broadcast_plan.h"
#include "common/cuda_test_util.h"
#include "common/dtype.h"
#include "common/parallel.h"
#include "common/status.h"
#include "common/test_util.h"
#include "ops/element_mul/element_mul.h"

namespace opforge {
namespace {

using test::AllTypes;
using test::Describe;
using test::DeviceBuffer;
using test::Download;
using test::IsNan;
using test::kIsInt;
using test::NumElements;
using test::RandomShapePair;
using test::RandomVector;
using test::SameBitsOrBothNan;
using test::Shape;
using test::ShapePair;
using test::Sync;
using test::TypeNames;
using test::Upload;
using test::Wide;

// A random broadcast-compatible pair of rank <= 6 (so the collapsed plan fits the GPU's 8
// dimensions), with 129 among the sizes and some output dimensions 0.
std::pair<Shape, Shape> RandomGpuShapePair(std::mt19937_64& rng, int64_t max_elements) {
  const ShapePair p = RandomShapePair(rng, /*max_rank=*/6, max_elements, /*zero_percent=*/8,
                                      /*sizes=*/{1, 2, 3, 4, 5, 7, 8, 16, 33, 129});
  return {p.a, p.b};
}

// The special values that RandomVector mixes into floating inputs.
template <typename T>
std::vector<T> Specials() {
  using L = std::numeric_limits<T>;
  return {L::infinity(),         -L::infinity(), L::quiet_NaN(),  static_cast<T>(0.0f),
          static_cast<T>(-0.0f), L::max(),       L::denorm_min(), L::min()};
}

// Compares one gradient. `abs_sum` is the CPU gradient computed in double from |grad|, |a|, |b|
// (the sum of the absolute values of the terms), `terms` the number of terms per element.
template <typename T>
::testing::AssertionResult GradMatches(const std::vector<T>& gpu, const std::vector<T>& cpu,
                                       const std::vector<double>& abs_sum, int64_t terms,
                                       bool broadcast) {
  using L = std::numeric_limits<T>;
  auto failure = ::testing::AssertionFailure();
  int64_t count = 0;
  for (size_t i = 0; i < gpu.size(); ++i) {
    bool ok;
    if constexpr (kIsInt<T>) {
      ok = gpu[i] == cpu[i];
    } else if (!broadcast) {
      ok = std::memcmp(&gpu[i], &cpu[i], sizeof(T)) == 0 || (IsNan(gpu[i]) && IsNan(cpu[i]));
    } else {
      const double acc_eps = std::is_same_v<T, double> ? std::numeric_limits<double>::epsilon()
                                                       : std::numeric_limits<float>::epsilon();
      const double tol = Wide(L::epsilon()) * std::fabs(Wide(cpu[i])) +
                         2.0 * static_cast<double>(terms + 1) * acc_eps * abs_sum[i] +
                         Wide(L::denorm_min());
      ok = std::fabs(Wide(gpu[i]) - Wide(cpu[i])) <= tol;
    }
    if (!ok && count++ < 8) {
      failure << "\n  [" << i << "] gpu " << Describe(gpu[i]) << ", cpu " << Describe(cpu[i]);
    }
  }
  if (count == 0) return ::testing::AssertionSuccess();
  return failure << "\n  " << count << " of " << gpu.size() << " elements differ";
}

template <typename T>
std::vector<double> AbsAsDouble(const std::vector<T>& v) {
  std::vector<double> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if constexpr (kIsInt<T>) {
      r[i] = std::fabs(static_cast<double>(v[i]));
    } else {
      r[i] = std::fabs(Wide(v[i]));
    }
  }
  return r;
}

template <typename T>
class ElementMulCudaTest : public ::testing::Test {};
TYPED_TEST_SUITE(ElementMulCudaTest, AllTypes, TypeNames);

TYPED_TEST(ElementMulCudaTest, ForwardMatchesCpu) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  std::mt19937_64 rng(201);
  std::vector<std::pair<Shape, Shape>> cases = {
      {{}, {}},
      {{1 << 20}, {1 << 20}},
      {{1000, 1000}, {1000}},
      {{1000, 1}, {1, 1000}},
      {{(1 << 24) + 3}, {}},  // more elements than one grid
  };
  for (int i = 0; i < 60; ++i) cases.push_back(RandomGpuShapePair(rng, 200000));
  for (const auto& [as, bs] : cases) {
    SCOPED_TRACE(ShapeString(as) + " * " + ShapeString(bs));
    BroadcastPlan plan;
    OPFORGE_ASSERT_OK(ValidateElementMul(as, bs, &plan));
    const auto a = RandomVector<T>(rng, NumElements(as), Specials<T>());
    const auto b = RandomVector<T>(rng, NumElements(bs), Specials<T>());
    std::vector<T> cpu(plan.out_size);
    ElementMulForward<T>(plan, a.data(), b.data(), cpu.data(), SerialParallel());
    DeviceBuffer da, db, dout;
    ASSERT_NO_FATAL_FAILURE(Upload(a, &da));
    ASSERT_NO_FATAL_FAILURE(Upload(b, &db));
    OPFORGE_ASSERT_CUDA(dout.Allocate(cpu.size() * sizeof(T)));
    OPFORGE_ASSERT_OK(
        ElementMulForwardGpu(DTypeOf<T>::value, plan, da.get(), db.get(), dout.get(), nullptr));
    ASSERT_NO_FATAL_FAILURE(Sync());
    std::vector<T> gpu(cpu.size());
    ASSERT_NO_FATAL_FAILURE(Download(dout, &gpu));
    ASSERT_TRUE(SameBitsOrBothNan(gpu, cpu));
  }
}

TYPED_TEST(ElementMulCudaTest, BackwardMatchesCpu) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  std::mt19937_64 rng(202);
  std::vector<std::pair<Shape, Shape>> cases = {
      {{}, {}},
      {{1 << 16}, {}},
      {{513, 257}, {257}},
      {{513, 257}, {513, 1}},
      {{64, 1, 128}, {1, 33, 128}},
      {{3, 1}, {3, 0}},
      {{2, 3}, {0, 1, 3}},
  };
  for (int i = 0; i < 60; ++i) cases.push_back(RandomGpuShapePair(rng, 100000));
  for (const auto& [as, bs] : cases) {
    SCOPED_TRACE(ShapeString(as) + " * " + ShapeString(bs));
    BroadcastPlan plan;
    ASSERT_TRUE(ValidateElementMul(as, bs, &plan).ok());
    OPFORGE_ASSERT_OK(ValidateElementMulGrad(plan.out_shape, as, bs, &plan));
    const auto a = RandomVector<T>(rng, NumElements(as));
    const auto b = RandomVector<T>(rng, NumElements(bs));
    const auto g = RandomVector<T>(rng, plan.out_size);
    std::vector<T> cpu_a(a.size()), cpu_b(b.size());
    ElementMulBackward<T>(plan, g.data(), a.data(), b.data(), cpu_a.data(), cpu_b.data(),
                          SerialParallel());
    // Sums of |terms|, for the tolerance.
    std::vector<double> abs_a(a.size()), abs_b(b.size());
    {
      const auto ga = AbsAsDouble(g), aa = AbsAsDouble(a), ba = AbsAsDouble(b);
      ElementMulBackward<double>(plan, ga.data(), aa.data(), ba.data(), abs_a.data(), abs_b.data(),
                                 SerialParallel());
    }

    DeviceBuffer dg, da, db, dga, dgb;
    ASSERT_NO_FATAL_FAILURE(Upload(g, &dg));
    ASSERT_NO_FATAL_FAILURE(Upload(a, &da));
    ASSERT_NO_FATAL_FAILURE(Upload(b, &db));
    // Filled with a value the kernel must overwrite (zeros where the output is empty).
    ASSERT_NO_FATAL_FAILURE(Upload(std::vector<T>(a.size(), static_cast<T>(77)), &dga));
    ASSERT_NO_FATAL_FAILURE(Upload(std::vector<T>(b.size(), static_cast<T>(77)), &dgb));
    OPFORGE_ASSERT_OK(ElementMulBackwardGpu(DTypeOf<T>::value, plan, dg.get(), da.get(), db.get(),
                                            dga.get(), dgb.get(), nullptr));
    ASSERT_NO_FATAL_FAILURE(Sync());
    std::vector<T> gpu_a(a.size()), gpu_b(b.size());
    ASSERT_NO_FATAL_FAILURE(Download(dga, &gpu_a));
    ASSERT_NO_FATAL_FAILURE(Download(dgb, &gpu_b));
    const bool a_broadcast = NumElements(as) != plan.out_size;
    const bool b_broadcast = NumElements(bs) != plan.out_size;
    const int64_t terms_a = a.empty() ? 0 : plan.out_size / static_cast<int64_t>(a.size());
    const int64_t terms_b = b.empty() ? 0 : plan.out_size / static_cast<int64_t>(b.size());
    ASSERT_TRUE(GradMatches(gpu_a, cpu_a, abs_a, terms_a, a_broadcast)) << "grad_a";
    ASSERT_TRUE(GradMatches(gpu_b, cpu_b, abs_b, terms_b, b_broadcast)) << "grad_b";

    // The GPU reduction is deterministic too: a second run gives the same bits.
    OPFORGE_ASSERT_OK(ElementMulBackwardGpu(DTypeOf<T>::value, plan, dg.get(), da.get(), db.get(),
                                            dga.get(), dgb.get(), nullptr));
    ASSERT_NO_FATAL_FAILURE(Sync());
    std::vector<T> again_a(a.size()), again_b(b.size());
    ASSERT_NO_FATAL_FAILURE(Download(dga, &again_a));
    ASSERT_NO_FATAL_FAILURE(Download(dgb, &again_b));
    EXPECT_TRUE(a.empty() || std::memcmp(again_a.data(), gpu_a.data(), a.size() * sizeof(T)) == 0);
    EXPECT_TRUE(b.empty() || std::memcmp(again_b.data(), gpu_b.data(), b.size() * sizeof(T)) == 0);
  }
}

// One null gradient output: only the other is computed.
TYPED_TEST(ElementMulCudaTest, BackwardWithOneOutput) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  std::mt19937_64 rng(203);
  const Shape as = {4, 1, 3}, bs = {5, 1};
  BroadcastPlan plan;
  OPFORGE_ASSERT_OK(ValidateElementMulGrad({4, 5, 3}, as, bs, &plan));
  const auto a = RandomVector<T>(rng, NumElements(as));
  const auto b = RandomVector<T>(rng, NumElements(bs));
  const auto g = RandomVector<T>(rng, plan.out_size);
  DeviceBuffer dg, da, db, dga, dgb;
  ASSERT_NO_FATAL_FAILURE(Upload(g, &dg));
  ASSERT_NO_FATAL_FAILURE(Upload(a, &da));
  ASSERT_NO_FATAL_FAILURE(Upload(b, &db));
  ASSERT_NO_FATAL_FAILURE(Upload(std::vector<T>(a.size(), static_cast<T>(77)), &dga));
  ASSERT_NO_FATAL_FAILURE(Upload(std::vector<T>(b.size(), static_cast<T>(77)), &dgb));
  std::vector<T> both_a(a.size()), both_b(b.size()), only_a(a.size()), only_b(b.size());
  OPFORGE_ASSERT_OK(ElementMulBackwardGpu(DTypeOf<T>::value, plan, dg.get(), da.get(), db.get(),
                                          dga.get(), dgb.get(), nullptr));
  ASSERT_NO_FATAL_FAILURE(Sync());
  ASSERT_NO_FATAL_FAILURE(Download(dga, &both_a));
  ASSERT_NO_FATAL_FAILURE(Download(dgb, &both_b));
  ASSERT_NO_FATAL_FAILURE(Upload(std::vector<T>(a.size(), static_cast<T>(77)), &dga));
  OPFORGE_ASSERT_OK(ElementMulBackwardGpu(DTypeOf<T>::value, plan, dg.get(), da.get(), db.get(),
                                          dga.get(), nullptr, nullptr));
  ASSERT_NO_FATAL_FAILURE(Sync());
  ASSERT_NO_FATAL_FAILURE(Download(dga, &only_a));
  ASSERT_NO_FATAL_FAILURE(Upload(std::vector<T>(b.size(), static_cast<T>(77)), &dgb));
  OPFORGE_ASSERT_OK(ElementMulBackwardGpu(DTypeOf<T>::value, plan, dg.get(), da.get(), db.get(),
                                          nullptr, dgb.get(), nullptr));
  ASSERT_NO_FATAL_FAILURE(Sync());
  ASSERT_NO_FATAL_FAILURE(Download(dgb, &only_b));
  EXPECT_TRUE(SameBitsOrBothNan(only_a, both_a));
  EXPECT_TRUE(SameBitsOrBothNan(only_b, both_b));
}

TEST(ElementMulCudaIntTest, OverflowWraps) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  const std::vector<int32_t> a = {INT32_MAX, INT32_MIN, INT32_MAX};
  const std::vector<int32_t> b = {2, -1, INT32_MAX};
  BroadcastPlan plan;
  OPFORGE_ASSERT_OK(ValidateElementMul({3}, {3}, &plan));
  DeviceBuffer da, db, dout;
  ASSERT_NO_FATAL_FAILURE(Upload(a, &da));
  ASSERT_NO_FATAL_FAILURE(Upload(b, &db));
  OPFORGE_ASSERT_CUDA(dout.Allocate(3 * sizeof(int32_t)));
  OPFORGE_ASSERT_OK(
      ElementMulForwardGpu(DType::kInt32, plan, da.get(), db.get(), dout.get(), nullptr));
  ASSERT_NO_FATAL_FAILURE(Sync());
  std::vector<int32_t> out(3);
  ASSERT_NO_FATAL_FAILURE(Download(dout, &out));
  EXPECT_EQ(out, (std::vector<int32_t>{-2, INT32_MIN, 1}));
}

// The GPU kernels take at most kElementMulGpuMaxDims collapsed dimensions and say so.
TEST(ElementMulCudaErrorTest, TooManyCollapsedDimensions) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  Shape as, bs;
  for (int d = 0; d <= kElementMulGpuMaxDims; ++d) {
    as.push_back(d % 2 == 0 ? 2 : 1);
    bs.push_back(d % 2 == 0 ? 1 : 2);
  }
  BroadcastPlan plan;
  OPFORGE_ASSERT_OK(ValidateElementMul(as, bs, &plan));
  ASSERT_GT(plan.dims.size(), static_cast<size_t>(kElementMulGpuMaxDims));
  const std::vector<float> a(NumElements(as), 1.0f), b(NumElements(bs), 1.0f);
  DeviceBuffer da, db, dout, dg;
  ASSERT_NO_FATAL_FAILURE(Upload(a, &da));
  ASSERT_NO_FATAL_FAILURE(Upload(b, &db));
  ASSERT_NO_FATAL_FAILURE(Upload(std::vector<float>(plan.out_size, 1.0f), &dg));
  OPFORGE_ASSERT_CUDA(dout.Allocate(plan.out_size * sizeof(float)));
  const Status f =
      ElementMulForwardGpu(DType::kFloat, plan, da.get(), db.get(), dout.get(), nullptr);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.message().find(std::to_string(kElementMulGpuMaxDims)), std::string::npos)
      << f.message();
  const Status g = ElementMulBackwardGpu(DType::kFloat, plan, dg.get(), da.get(), db.get(),
                                         dout.get(), nullptr, nullptr);
  EXPECT_FALSE(g.ok());
}

}  // namespace
}  // namespace opforge

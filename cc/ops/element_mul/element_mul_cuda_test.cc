// The ElementMul CUDA kernels against the CPU kernels, bit for bit: the forward pass (one
// rounding per product), and the gradient, whose broadcast sums follow one order on both
// (element_mul_reduce.h). A NaN matches any NaN (CUDA returns the canonical NaN, x86 keeps an
// operand's payload); every other value, signed zeros included, must match exactly.
//
// Everything runs on a non-blocking stream, as TensorFlow's: the kernels must launch on the
// stream they are given and the tests wait for that stream only. The cases reach every kernel:
// the vectorised map (aligned or not), the broadcast map, the sums of up to 32 terms, of one
// segment, the one-pass sums (a warp group or a block per target), the two-pass sums with the
// caller's scratch and with scratch allocated on the stream; special values in every input;
// empty outputs; in-place products; grid-stride loops; a case of more than 2^31 elements.
// Without a CUDA device every test says "skipped: no CUDA device".
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/broadcast_plan.h"
#include "common/cuda_geometry.h"
#include "common/cuda_test_util.h"
#include "common/dtype.h"
#include "common/parallel.h"
#include "common/status.h"
#include "common/test_util.h"
#include "ops/element_mul/element_mul.h"

namespace opforge {
namespace {

using test::AllTypes;
using test::CopyFromDeviceOn;
using test::CopyToDeviceOn;
using test::DeviceBuffer;
using test::DownloadOn;
using test::kIsInt;
using test::NumElements;
using test::Placed;
using test::PlaceOn;
using test::RandomShapePair;
using test::RandomVector;
using test::SameBitsOrBothNan;
using test::Shape;
using test::ShapePair;
using test::SyncStream;
using test::TestStream;
using test::TypeNames;
using test::UploadOn;

// A random broadcast-compatible pair of rank <= 6 (so the collapsed plan fits the GPU's 8
// dimensions), with 129 among the sizes and some output dimensions 0.
std::pair<Shape, Shape> RandomGpuShapePair(std::mt19937_64& rng, int64_t max_elements) {
  const ShapePair p = RandomShapePair(rng, /*max_rank=*/6, max_elements, /*zero_percent=*/8,
                                      /*sizes=*/{1, 2, 3, 4, 5, 7, 8, 16, 33, 129});
  return {p.a, p.b};
}

// n inputs: ordinary values, or with `specials` 4% of them infinities, NaNs, signed zeros,
// subnormals and the extremes (which turn most long sums into NaN or infinity, so both kinds
// are run).
template <typename T>
std::vector<T> Inputs(std::mt19937_64& rng, int64_t n, bool specials) {
  if constexpr (kIsInt<T>) {
    return RandomVector<T>(rng, n);
  } else {
    return RandomVector<T>(rng, n, specials ? test::SpecialValues<T>() : std::vector<T>{});
  }
}

// --- forward ------------------------------------------------------------------------------------

template <typename T>
class ElementMulCudaTest : public ::testing::Test {};
TYPED_TEST_SUITE(ElementMulCudaTest, AllTypes, TypeNames);

// The forward pass on `stream` from device copies of a and b placed `offset` elements into
// their buffers (1: not aligned to a vector).
template <typename T>
void ForwardOnce(cudaStream_t stream, const BroadcastPlan& plan, const std::vector<T>& a,
                 const std::vector<T>& b, int offset, std::vector<T>* out) {
  Placed<T> da, db, dout;
  ASSERT_NO_FATAL_FAILURE(PlaceOn(stream, a, offset, &da));
  ASSERT_NO_FATAL_FAILURE(PlaceOn(stream, b, offset, &db));
  ASSERT_NO_FATAL_FAILURE(PlaceOn(stream, *out, offset, &dout));  // the kernel overwrites it
  OPFORGE_ASSERT_OK(
      ElementMulForwardGpu(DTypeOf<T>::value, plan, da.ptr, db.ptr, dout.ptr, stream));
  ASSERT_NO_FATAL_FAILURE(CopyFromDeviceOn(stream, dout.ptr, out));
}

TYPED_TEST(ElementMulCudaTest, ForwardMatchesCpu) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  OPFORGE_TEST_STREAM(stream);
  std::mt19937_64 rng(201);
  std::vector<std::pair<Shape, Shape>> cases = {
      {{}, {}},
      {{1 << 20}, {1 << 20}},
      {{(1 << 20) + 5}, {}},  // vectors and a tail
      {{}, {7}},
      {{1000, 1000}, {1000}},
      {{1000, 1}, {1, 1000}},
      {{4097, 4097}, {4097}},  // more elements than one grid of the broadcast kernel
      {{3, 0}, {3, 1}},
  };
  for (int i = 0; i < 60; ++i) cases.push_back(RandomGpuShapePair(rng, 200000));
  for (const auto& [as, bs] : cases) {
    for (const int offset : {0, 1}) {
      SCOPED_TRACE(ShapeString(as) + " * " + ShapeString(bs) + " offset " + std::to_string(offset));
      BroadcastPlan plan;
      OPFORGE_ASSERT_OK(ValidateElementMul(as, bs, &plan));
      const auto a = Inputs<T>(rng, NumElements(as), true);
      const auto b = Inputs<T>(rng, NumElements(bs), true);
      std::vector<T> cpu(plan.out_size), gpu(plan.out_size);
      ElementMulForward<T>(plan, a.data(), b.data(), cpu.data(), SerialParallel());
      ASSERT_NO_FATAL_FAILURE(ForwardOnce(stream, plan, a, b, offset, &gpu));
      ASSERT_TRUE(SameBitsOrBothNan(gpu, cpu));
    }
  }
}

// out aliasing a (the binding forwards an operand of the output's shape).
TYPED_TEST(ElementMulCudaTest, ForwardInPlace) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  OPFORGE_TEST_STREAM(stream);
  std::mt19937_64 rng(204);
  const std::pair<Shape, Shape> cases[] = {
      {{(1 << 18) + 3}, {(1 << 18) + 3}}, {{513, 1000}, {1000}}, {{5000}, {}}};
  for (const auto& [as, bs] : cases) {
    SCOPED_TRACE(ShapeString(as) + " * " + ShapeString(bs));
    BroadcastPlan plan;
    OPFORGE_ASSERT_OK(ValidateElementMul(as, bs, &plan));
    const auto a = Inputs<T>(rng, NumElements(as), true);
    const auto b = Inputs<T>(rng, NumElements(bs), true);
    std::vector<T> cpu(plan.out_size), gpu(plan.out_size);
    ElementMulForward<T>(plan, a.data(), b.data(), cpu.data(), SerialParallel());
    DeviceBuffer da, db;
    ASSERT_NO_FATAL_FAILURE(UploadOn(stream, a, &da));
    ASSERT_NO_FATAL_FAILURE(UploadOn(stream, b, &db));
    OPFORGE_ASSERT_OK(
        ElementMulForwardGpu(DTypeOf<T>::value, plan, da.get(), db.get(), da.get(), stream));
    ASSERT_NO_FATAL_FAILURE(DownloadOn(stream, da, &gpu));
    ASSERT_TRUE(SameBitsOrBothNan(gpu, cpu));
  }
}

// --- backward -----------------------------------------------------------------------------------

// How the gradient gets its scratch: allocated on the stream (the first form), the caller's
// workspace (the second form), or none (the second form with no workspace: one pass).
enum class Scratch { kAllocated, kGiven, kNone };

template <typename T>
void BackwardOnce(cudaStream_t stream, const BroadcastPlan& plan, const std::vector<T>& g,
                  const std::vector<T>& a, const std::vector<T>& b, Scratch scratch,
                  std::vector<T>* ga, std::vector<T>* gb) {
  DeviceBuffer dg, da, db, dga, dgb, dws;
  ASSERT_NO_FATAL_FAILURE(UploadOn(stream, g, &dg));
  ASSERT_NO_FATAL_FAILURE(UploadOn(stream, a, &da));
  ASSERT_NO_FATAL_FAILURE(UploadOn(stream, b, &db));
  // Filled with a value the kernels must overwrite.
  ASSERT_NO_FATAL_FAILURE(UploadOn(stream, std::vector<T>(a.size(), static_cast<T>(77)), &dga));
  ASSERT_NO_FATAL_FAILURE(UploadOn(stream, std::vector<T>(b.size(), static_cast<T>(77)), &dgb));
  const DType dtype = DTypeOf<T>::value;
  if (scratch == Scratch::kAllocated) {
    OPFORGE_ASSERT_OK(ElementMulBackwardGpu(dtype, plan, dg.get(), da.get(), db.get(), dga.get(),
                                            dgb.get(), stream));
  } else {
    int64_t bytes = 0;
    if (scratch == Scratch::kGiven) {
      bytes = ElementMulBackwardGpuWorkspaceBytes(dtype, plan, true, true);
      OPFORGE_ASSERT_CUDA(dws.Allocate(static_cast<size_t>(bytes)));
    }
    OPFORGE_ASSERT_OK(ElementMulBackwardGpu(dtype, plan, dg.get(), da.get(), db.get(), dga.get(),
                                            dgb.get(), stream, dws.get(), bytes));
  }
  ga->assign(a.size(), static_cast<T>(0));
  gb->assign(b.size(), static_cast<T>(0));
  ASSERT_NO_FATAL_FAILURE(DownloadOn(stream, dga, ga));
  ASSERT_NO_FATAL_FAILURE(DownloadOn(stream, dgb, gb));
}

// Shapes that reach every gradient kernel (T targets, R terms each; lane order: the innermost
// dimension reduced, segments of 2048; row order: kept, segments of 512).
std::vector<std::pair<Shape, Shape>> BackwardCases(std::mt19937_64& rng) {
  std::vector<std::pair<Shape, Shape>> cases = {
      {{}, {}},                          // nothing to sum: products
      {{64, 33}, {33}},                  // a: product; b: row order, one segment
      {{1000, 2}, {1000, 1}},            // lane order, R = 2: a thread per target
      {{999, 31}, {999, 1}},             // R = 31
      {{300, 40}, {300, 1}},             // lane order, one segment: a warp per target
      {{100003}, {}},                    // x * scalar: 1 target, 49 segments, two passes
      {{(1 << 22) + 7}, {}},             // 2049 segments: a lane holds several
      {{300, 4100}, {300, 1}},           // 300 targets, 3 segments: two passes
      {{1500, 2100}, {1500, 1}},         // 1500 targets, 2 segments: one pass, 2 warps each
      {{1100, 5000}, {1100, 1}},         // 3 segments: 4 warps each
      {{1030, 11000}, {1030, 1}},        // 6 segments: 8 warps each
      {{5000, 3}, {3}},                  // row order, 3 targets, 10 segments: two passes
      {{2000, 700}, {700}},              // 700 targets, 4 segments: two passes
      {{600, 1100}, {1100}},             // 1100 targets, 2 segments: one pass, a block
      {{6000, 1030}, {1030}},            // 12 segments per target
      {{3, 1, 5000}, {1, 7, 1}},         // b: lane order over two reduced dimensions
      {{64, 1, 33, 1}, {1, 40, 1, 70}},  // both sums, several dimensions
      {{17, 1, 513}, {1, 9, 513}},
      {{70000, 1}, {1, 1}},
      {{3, 1}, {3, 0}},     // empty output: a's sums are empty (+0)
      {{2, 3}, {0, 1, 3}},  // b's too
  };
  for (int i = 0; i < 50; ++i) cases.push_back(RandomGpuShapePair(rng, 100000));
  return cases;
}

TYPED_TEST(ElementMulCudaTest, BackwardMatchesCpuBitForBit) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  OPFORGE_TEST_STREAM(stream);
  std::mt19937_64 rng(202);
  const auto cases = BackwardCases(rng);
  for (size_t c = 0; c < 2 * cases.size(); ++c) {
    const auto& [as, bs] = cases[c / 2];
    const bool specials = c % 2 == 1;
    SCOPED_TRACE(ShapeString(as) + " * " + ShapeString(bs) + (specials ? ", specials" : ""));
    BroadcastPlan plan;
    OPFORGE_ASSERT_OK(ValidateElementMul(as, bs, &plan));
    OPFORGE_ASSERT_OK(ValidateElementMulGrad(plan.out_shape, as, bs, &plan));
    const auto a = Inputs<T>(rng, NumElements(as), specials);
    const auto b = Inputs<T>(rng, NumElements(bs), specials);
    const auto g = Inputs<T>(rng, plan.out_size, specials);
    std::vector<T> cpu_a(a.size()), cpu_b(b.size());
    ElementMulBackward<T>(plan, g.data(), a.data(), b.data(), cpu_a.data(), cpu_b.data(),
                          ThreadParallel(4));
    const Scratch all[] = {Scratch::kAllocated, Scratch::kGiven, Scratch::kNone};
    for (size_t k = 0; k < 3; ++k) {
      // On the SIMT runtime a case past 2^20 outputs runs in one of the three scratch
      // settings, a different one case after case (a CPU runs these kernels ~1000x slower).
      if (cuda::kSimtGeometry && plan.out_size > (int64_t{1} << 20) && k != c % 3) continue;
      const Scratch scratch = all[k];
      SCOPED_TRACE(::testing::Message() << "scratch " << static_cast<int>(scratch));
      std::vector<T> gpu_a, gpu_b;
      ASSERT_NO_FATAL_FAILURE(BackwardOnce(stream, plan, g, a, b, scratch, &gpu_a, &gpu_b));
      ASSERT_TRUE(SameBitsOrBothNan(gpu_a, cpu_a)) << "grad_a";
      ASSERT_TRUE(SameBitsOrBothNan(gpu_b, cpu_b)) << "grad_b";
    }
  }
}

// The scratch the two-pass sums want: some for few targets with long sums, none otherwise.
TEST(ElementMulCudaWorkspaceTest, WorkspaceBytes) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  BroadcastPlan plan;
  OPFORGE_ASSERT_OK(ValidateElementMul({100003}, {}, &plan));
  EXPECT_EQ(ElementMulBackwardGpuWorkspaceBytes(DType::kFloat, plan, false, true),
            49 * static_cast<int64_t>(sizeof(float)));
  EXPECT_EQ(ElementMulBackwardGpuWorkspaceBytes(DType::kHalf, plan, false, true),
            49 * static_cast<int64_t>(sizeof(float)));  // half sums in float
  EXPECT_EQ(ElementMulBackwardGpuWorkspaceBytes(DType::kDouble, plan, true, true),
            49 * static_cast<int64_t>(sizeof(double)));
  EXPECT_EQ(ElementMulBackwardGpuWorkspaceBytes(DType::kFloat, plan, true, false), 0);
  OPFORGE_ASSERT_OK(ValidateElementMul({600, 1100}, {1100}, &plan));
  EXPECT_EQ(ElementMulBackwardGpuWorkspaceBytes(DType::kFloat, plan, true, true), 0);
}

// grad_a aliasing grad (the binding writes grad_a over grad when a has grad's shape).
TYPED_TEST(ElementMulCudaTest, BackwardInPlace) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  OPFORGE_TEST_STREAM(stream);
  std::mt19937_64 rng(205);
  const std::pair<Shape, Shape> cases[] = {{{513, 257}, {257}}, {{(1 << 16) + 1}, {}}, {{9}, {9}}};
  for (const auto& [as, bs] : cases) {
    SCOPED_TRACE(ShapeString(as) + " * " + ShapeString(bs));
    BroadcastPlan plan;
    OPFORGE_ASSERT_OK(ValidateElementMul(as, bs, &plan));
    const auto a = Inputs<T>(rng, NumElements(as), true);
    const auto b = Inputs<T>(rng, NumElements(bs), true);
    const auto g = Inputs<T>(rng, plan.out_size, true);
    std::vector<T> cpu_a(a.size()), cpu_b(b.size());
    ElementMulBackward<T>(plan, g.data(), a.data(), b.data(), cpu_a.data(), cpu_b.data(),
                          SerialParallel());
    DeviceBuffer dg, da, db, dgb;
    ASSERT_NO_FATAL_FAILURE(UploadOn(stream, g, &dg));
    ASSERT_NO_FATAL_FAILURE(UploadOn(stream, a, &da));
    ASSERT_NO_FATAL_FAILURE(UploadOn(stream, b, &db));
    OPFORGE_ASSERT_CUDA(dgb.Allocate(b.size() * sizeof(T)));
    // As the binding: grad_b first into its own buffer, then grad_a over grad.
    OPFORGE_ASSERT_OK(ElementMulBackwardGpu(DTypeOf<T>::value, plan, dg.get(), da.get(), db.get(),
                                            nullptr, dgb.get(), stream));
    OPFORGE_ASSERT_OK(ElementMulBackwardGpu(DTypeOf<T>::value, plan, dg.get(), da.get(), db.get(),
                                            dg.get(), nullptr, stream));
    std::vector<T> gpu_a(a.size()), gpu_b(b.size());
    ASSERT_NO_FATAL_FAILURE(DownloadOn(stream, dg, &gpu_a));
    ASSERT_NO_FATAL_FAILURE(DownloadOn(stream, dgb, &gpu_b));
    EXPECT_TRUE(SameBitsOrBothNan(gpu_a, cpu_a));
    EXPECT_TRUE(SameBitsOrBothNan(gpu_b, cpu_b));
  }
}

// Nothing to sum: the product itself, so 1 * -0 is -0 (as on the CPU and in TensorFlow).
TYPED_TEST(ElementMulCudaTest, NothingSummedKeepsNegativeZero) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  if constexpr (!kIsInt<T>) {
    OPFORGE_TEST_STREAM(stream);
    for (const auto& [as, bs] :
         std::vector<std::pair<Shape, Shape>>{{{}, {}}, {{1}, {}}, {{1, 1}, {1}}}) {
      BroadcastPlan plan;
      OPFORGE_ASSERT_OK(ValidateElementMul(as, bs, &plan));
      const std::vector<T> g = {static_cast<T>(1.0f)}, a = {static_cast<T>(2.0f)},
                           b = {static_cast<T>(-0.0f)};
      std::vector<T> ga, gb;
      ASSERT_NO_FATAL_FAILURE(BackwardOnce(stream, plan, g, a, b, Scratch::kAllocated, &ga, &gb));
      EXPECT_TRUE(test::SameBits(ga, b));  // -0
      EXPECT_TRUE(test::SameBits(gb, a));  // 2
    }
  }
}

// One null gradient output: only the other is computed.
TYPED_TEST(ElementMulCudaTest, BackwardWithOneOutput) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  OPFORGE_TEST_STREAM(stream);
  std::mt19937_64 rng(203);
  const Shape as = {4, 1, 3}, bs = {5, 1};
  BroadcastPlan plan;
  OPFORGE_ASSERT_OK(ValidateElementMulGrad({4, 5, 3}, as, bs, &plan));
  const auto a = Inputs<T>(rng, NumElements(as), false);
  const auto b = Inputs<T>(rng, NumElements(bs), false);
  const auto g = Inputs<T>(rng, plan.out_size, false);
  std::vector<T> cpu_a(a.size()), cpu_b(b.size());
  ElementMulBackward<T>(plan, g.data(), a.data(), b.data(), cpu_a.data(), cpu_b.data(),
                        SerialParallel());
  DeviceBuffer dg, da, db, dga, dgb;
  ASSERT_NO_FATAL_FAILURE(UploadOn(stream, g, &dg));
  ASSERT_NO_FATAL_FAILURE(UploadOn(stream, a, &da));
  ASSERT_NO_FATAL_FAILURE(UploadOn(stream, b, &db));
  ASSERT_NO_FATAL_FAILURE(UploadOn(stream, std::vector<T>(a.size(), static_cast<T>(77)), &dga));
  ASSERT_NO_FATAL_FAILURE(UploadOn(stream, std::vector<T>(b.size(), static_cast<T>(77)), &dgb));
  OPFORGE_ASSERT_OK(ElementMulBackwardGpu(DTypeOf<T>::value, plan, dg.get(), da.get(), db.get(),
                                          dga.get(), nullptr, stream));
  std::vector<T> only_a(a.size()), untouched_b(b.size());
  ASSERT_NO_FATAL_FAILURE(DownloadOn(stream, dga, &only_a));
  ASSERT_NO_FATAL_FAILURE(DownloadOn(stream, dgb, &untouched_b));
  EXPECT_TRUE(SameBitsOrBothNan(only_a, cpu_a));
  EXPECT_TRUE(SameBitsOrBothNan(untouched_b, std::vector<T>(b.size(), static_cast<T>(77))));
  OPFORGE_ASSERT_OK(ElementMulBackwardGpu(DTypeOf<T>::value, plan, dg.get(), da.get(), db.get(),
                                          nullptr, dgb.get(), stream));
  std::vector<T> only_b(b.size());
  ASSERT_NO_FATAL_FAILURE(DownloadOn(stream, dgb, &only_b));
  EXPECT_TRUE(SameBitsOrBothNan(only_b, cpu_b));
}

TEST(ElementMulCudaIntTest, OverflowWraps) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  OPFORGE_TEST_STREAM(stream);
  const std::vector<int32_t> a = {INT32_MAX, INT32_MIN, INT32_MAX};
  const std::vector<int32_t> b = {2, -1, INT32_MAX};
  BroadcastPlan plan;
  OPFORGE_ASSERT_OK(ValidateElementMul({3}, {3}, &plan));
  DeviceBuffer da, db, dout;
  ASSERT_NO_FATAL_FAILURE(UploadOn(stream, a, &da));
  ASSERT_NO_FATAL_FAILURE(UploadOn(stream, b, &db));
  OPFORGE_ASSERT_CUDA(dout.Allocate(3 * sizeof(int32_t)));
  OPFORGE_ASSERT_OK(
      ElementMulForwardGpu(DType::kInt32, plan, da.get(), db.get(), dout.get(), stream));
  std::vector<int32_t> out(3);
  ASSERT_NO_FATAL_FAILURE(DownloadOn(stream, dout, &out));
  EXPECT_EQ(out, (std::vector<int32_t>{-2, INT32_MIN, 1}));
}

// The GPU kernels take at most kElementMulGpuMaxDims collapsed dimensions and say so.
TEST(ElementMulCudaErrorTest, TooManyCollapsedDimensions) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  OPFORGE_TEST_STREAM(stream);
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
  ASSERT_NO_FATAL_FAILURE(UploadOn(stream, a, &da));
  ASSERT_NO_FATAL_FAILURE(UploadOn(stream, b, &db));
  ASSERT_NO_FATAL_FAILURE(UploadOn(stream, std::vector<float>(plan.out_size, 1.0f), &dg));
  OPFORGE_ASSERT_CUDA(dout.Allocate(plan.out_size * sizeof(float)));
  const Status f =
      ElementMulForwardGpu(DType::kFloat, plan, da.get(), db.get(), dout.get(), stream);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.message().find(std::to_string(kElementMulGpuMaxDims)), std::string::npos)
      << f.message();
  const Status g = ElementMulBackwardGpu(DType::kFloat, plan, dg.get(), da.get(), db.get(),
                                         dout.get(), nullptr, stream);
  EXPECT_FALSE(g.ok());
  ASSERT_NO_FATAL_FAILURE(SyncStream(stream));
}

// More work than one grid covers (65536 blocks), so the kernels' grid-stride loops take several
// steps, in half (values from every bit pattern): the vectorised broadcast product (16.8M
// vectors of 8), the one-pass lane kernel (600000 targets, 8 to a block), the one-thread-per-
// target kernels (17M targets, 256 to a block). On the SIMT runtime the grids stop at
// cuda::kMaxGridBlocks (64) blocks, and the shapes shrink by 1000 (17 rows for 16385).
TEST(ElementMulCudaLargeTest, GridStrideLoops) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = Eigen::half;
  OPFORGE_TEST_STREAM(stream);
  const ThreadParallel parallel(8);
  const int64_t rows = cuda::kMaxGridBlocks / 4 + 1;
  const int64_t k = cuda::kSimtGeometry ? 1 : 1000;
  ASSERT_GT(17000 * k, cuda::kMaxGridBlocks * 256);
  ASSERT_GT(600 * k, cuda::kMaxGridBlocks * 8);
  {
    SCOPED_TRACE("forward [" + std::to_string(rows) + ", 8200] * [8200]");
    BroadcastPlan plan;
    OPFORGE_ASSERT_OK(ValidateElementMul({rows, 8200}, {8200}, &plan));
    const auto a = test::PatternVector<T>(plan.out_size, 40503);
    const auto b = test::PatternVector<T>(8200, 30011);
    std::vector<T> cpu(plan.out_size), gpu(plan.out_size);
    ElementMulForward<T>(plan, a.data(), b.data(), cpu.data(), parallel);
    ASSERT_NO_FATAL_FAILURE(ForwardOnce(stream, plan, a, b, 0, &gpu));
    EXPECT_TRUE(SameBitsOrBothNan(gpu, cpu));
  }
  const std::pair<Shape, Shape> cases[] = {{{600 * k, 40}, {600 * k, 1}},
                                           {{2, 17000 * k}, {17000 * k}},
                                           {{17000 * k, 2}, {17000 * k, 1}}};
  for (const auto& [as, bs] : cases) {
    SCOPED_TRACE(ShapeString(as) + " * " + ShapeString(bs));
    BroadcastPlan plan;
    OPFORGE_ASSERT_OK(ValidateElementMul(as, bs, &plan));
    std::mt19937_64 rng(206);
    const auto a = Inputs<T>(rng, NumElements(as), false);
    const auto b = Inputs<T>(rng, NumElements(bs), false);
    const auto g = Inputs<T>(rng, plan.out_size, false);
    std::vector<T> cpu_a(a.size()), cpu_b(b.size()), gpu_a, gpu_b;
    ElementMulBackward<T>(plan, g.data(), a.data(), b.data(), cpu_a.data(), cpu_b.data(), parallel);
    ASSERT_NO_FATAL_FAILURE(BackwardOnce(stream, plan, g, a, b, Scratch::kNone, &gpu_a, &gpu_b));
    EXPECT_TRUE(SameBitsOrBothNan(gpu_a, cpu_a)) << "grad_a";
    EXPECT_TRUE(SameBitsOrBothNan(gpu_b, cpu_b)) << "grad_b";
  }
}

// More than 2^31 elements (the 64-bit index path), in half to keep it to two 4 GiB buffers:
// x * scalar forward, and its gradient (grad_a a product, grad_b one sum of 2^31 + 3 terms in
// two passes). Skipped with a message where the device has too little free memory. On the SIMT
// runtime the 64-bit path starts past cuda::kInt32IndexLimit (2^22 - 1).
TEST(ElementMulCudaLargeTest, MoreThan2To31Elements) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = Eigen::half;
  const int64_t n = cuda::kInt32IndexLimit + 4;  // 2^31 + 3 on a GPU
  const size_t bytes = static_cast<size_t>(n) * sizeof(T);
  DeviceBuffer dx, dout, dscalar, dgs;
  std::string why;
  if (!test::AllocateLarge(bytes, {&dx, &dout}, &why)) GTEST_SKIP() << why;
  OPFORGE_TEST_STREAM(stream);
  // Values exact in half whose products are exact in float: the sum's order still shows.
  std::vector<T> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    x[static_cast<size_t>(i)] = static_cast<T>(static_cast<float>((i * 7919) % 251 - 125) / 64.0f);
  }
  x[5] = static_cast<T>(-0.0f);
  x[static_cast<size_t>(n - 1)] = std::numeric_limits<T>::denorm_min();
  const std::vector<T> scalar = {static_cast<T>(-1.5f)};
  ASSERT_NO_FATAL_FAILURE(CopyToDeviceOn(stream, x, dx.get()));
  ASSERT_NO_FATAL_FAILURE(UploadOn(stream, scalar, &dscalar));
  BroadcastPlan plan;
  OPFORGE_ASSERT_OK(ValidateElementMul({n}, {}, &plan));
  const ThreadParallel parallel(16);

  OPFORGE_ASSERT_OK(
      ElementMulForwardGpu(DType::kHalf, plan, dx.get(), dscalar.get(), dout.get(), stream));
  std::vector<T> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
  ElementMulForward<T>(plan, x.data(), scalar.data(), want.data(), parallel);
  ASSERT_NO_FATAL_FAILURE(CopyFromDeviceOn(stream, dout.get(), &got));
  ASSERT_EQ(std::memcmp(got.data(), want.data(), bytes), 0) << "forward";

  // The gradient with grad = x: grad_a = x * scalar into dout, grad_b = sum x * x.
  OPFORGE_ASSERT_CUDA(dgs.Allocate(sizeof(T)));
  OPFORGE_ASSERT_OK(ElementMulBackwardGpu(DType::kHalf, plan, dx.get(), dx.get(), dscalar.get(),
                                          dout.get(), dgs.get(), stream));
  std::vector<T> want_b(1), got_b(1);
  ElementMulBackward<T>(plan, x.data(), x.data(), scalar.data(), want.data(), want_b.data(),
                        parallel);
  ASSERT_NO_FATAL_FAILURE(CopyFromDeviceOn(stream, dout.get(), &got));
  ASSERT_NO_FATAL_FAILURE(CopyFromDeviceOn(stream, dgs.get(), &got_b));
  EXPECT_EQ(std::memcmp(got.data(), want.data(), bytes), 0) << "grad_a";
  EXPECT_TRUE(test::SameBits(got_b, want_b)) << "grad_b";
}

}  // namespace
}  // namespace opforge

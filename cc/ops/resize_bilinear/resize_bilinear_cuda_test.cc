// The ResizeBilinear CUDA kernels against the CPU kernels (SerialParallel). Both are compiled
// without FMA contraction and compute the same float operations in the same order, so the GPU
// must give the CPU's bits: the forward for every input type, the gradient (a gather on the GPU,
// a row gather on the CPU, both replaying the sequential scatter's order) for every output type.
// Without a CUDA device every test says "skipped: no CUDA device".
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <cstdint>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "common/cuda_test_util.h"
#include "common/dtype.h"
#include "common/parallel.h"
#include "common/status.h"
#include "common/test_util.h"
#include "ops/resize_bilinear/resize_bilinear.h"

namespace opforge {
namespace {

using test::DeviceBuffer;
using test::Download;
using test::SameBitsOrBothNan;
using test::Sync;
using test::TypeNames;
using test::Upload;

struct GpuCase {
  int64_t batch, in_h, in_w, channels, out_h, out_w;
  bool align_corners, half_pixel;
};

ResizeBilinearParams ParamsOf(const GpuCase& c) {
  return {c.batch, c.in_h, c.in_w, c.channels, c.out_h, c.out_w, c.align_corners, c.half_pixel};
}

std::string Describe(const GpuCase& c) {
  return "[" + std::to_string(c.batch) + "," + std::to_string(c.in_h) + "," +
         std::to_string(c.in_w) + "," + std::to_string(c.channels) + "] -> " +
         std::to_string(c.out_h) + "x" + std::to_string(c.out_w) +
         (c.align_corners ? " align_corners" : "") + (c.half_pixel ? " half_pixel" : "");
}

std::vector<GpuCase> Cases() {
  std::vector<GpuCase> cases;
  const std::vector<std::vector<int64_t>> sizes = {
      {1, 1, 1, 1},   {1, 1, 6, 5},       {6, 5, 1, 1},     {4, 4, 4, 4},   {3, 5, 7, 11},
      {13, 11, 4, 9}, {52, 52, 104, 104}, {41, 37, 20, 18}, {2, 3, 301, 7}, {3, 2, 5, 257}};
  for (const auto& s : sizes) {
    for (int mode = 0; mode < 3; ++mode) {
      for (int64_t channels : {1, 3, 8}) {
        cases.push_back({2, s[0], s[1], channels, s[2], s[3], mode == 1, mode == 2});
      }
    }
  }
  return cases;
}

template <typename T>
class ResizeBilinearCudaForward : public ::testing::Test {};
using ForwardTypes = ::testing::Types<float, double, Eigen::half, Eigen::bfloat16, uint8_t, int8_t,
                                      int16_t, uint16_t, int32_t, int64_t>;
TYPED_TEST_SUITE(ResizeBilinearCudaForward, ForwardTypes);

TYPED_TEST(ResizeBilinearCudaForward, SameBitsAsCpu) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  uint64_t seed = 1;
  for (const GpuCase& c : Cases()) {
    const ResizeBilinearParams p = ParamsOf(c);
    const auto images = test::FullRangeVector<T>(c.batch * c.in_h * c.in_w * c.channels, seed++);
    std::vector<float> cpu(static_cast<size_t>(c.batch * c.out_h * c.out_w * c.channels));
    ResizeBilinearForward<T>(p, images.data(), cpu.data(), SerialParallel());
    DeviceBuffer din, dout;
    ASSERT_NO_FATAL_FAILURE(Upload(images, &din));
    OPFORGE_ASSERT_CUDA(dout.Allocate(cpu.size() * sizeof(float)));
    const Status s = ResizeBilinearForwardGpu(DTypeOf<T>::value, p, din.get(),
                                              static_cast<float*>(dout.get()), nullptr);
    ASSERT_TRUE(s.ok()) << s.message();
    ASSERT_NO_FATAL_FAILURE(Sync());
    std::vector<float> gpu(cpu.size());
    ASSERT_NO_FATAL_FAILURE(Download(dout, &gpu));
    EXPECT_TRUE(SameBitsOrBothNan(gpu, cpu)) << Describe(c);
  }
}

template <typename T>
class ResizeBilinearCudaBackward : public ::testing::Test {};
TYPED_TEST_SUITE(ResizeBilinearCudaBackward, test::FloatTypes, TypeNames);

TYPED_TEST(ResizeBilinearCudaBackward, SameBitsAsCpu) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  uint64_t seed = 100;
  for (const GpuCase& c : Cases()) {
    const ResizeBilinearParams p = ParamsOf(c);
    const auto grads =
        test::FullRangeVector<float>(c.batch * c.out_h * c.out_w * c.channels, seed++);
    std::vector<T> cpu(static_cast<size_t>(c.batch * c.in_h * c.in_w * c.channels));
    ResizeBilinearBackward<T>(p, grads.data(), cpu.data(), SerialParallel());
    DeviceBuffer dg, dout;
    ASSERT_NO_FATAL_FAILURE(Upload(grads, &dg));
    OPFORGE_ASSERT_CUDA(dout.Allocate(cpu.size() * sizeof(T)));
    const Status s = ResizeBilinearBackwardGpu(
        DTypeOf<T>::value, p, static_cast<const float*>(dg.get()), dout.get(), nullptr);
    ASSERT_TRUE(s.ok()) << s.message();
    ASSERT_NO_FATAL_FAILURE(Sync());
    std::vector<T> gpu(cpu.size());
    ASSERT_NO_FATAL_FAILURE(Download(dout, &gpu));
    EXPECT_TRUE(SameBitsOrBothNan(gpu, cpu)) << Describe(c);
  }
}

TEST(ResizeBilinearCuda, EmptyIsANoOpAndBadDTypeIsAnError) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  ResizeBilinearParams p = ParamsOf({0, 3, 3, 2, 5, 5, false, false});
  EXPECT_TRUE(ResizeBilinearForwardGpu(DType::kFloat, p, nullptr, nullptr, nullptr).ok());
  EXPECT_TRUE(ResizeBilinearBackwardGpu(DType::kFloat, p, nullptr, nullptr, nullptr).ok());
  p.batch = 1;
  EXPECT_FALSE(ResizeBilinearBackwardGpu(DType::kInt32, p, nullptr, nullptr, nullptr).ok());
}

}  // namespace
}  // namespace opforge

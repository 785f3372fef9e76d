// The ResizeBilinear CUDA kernels against the CPU kernels (SerialParallel). Both are compiled
// without FMA contraction and compute the same float operations in the same order, so the GPU
// must give the CPU's bits: the forward for every input type, the gradient (a gather on the GPU,
// a row gather on the CPU, both replaying the sequential scatter's order) for every output type,
// with inf, NaN and -0 among the incoming gradients. Everything runs on a non-blocking stream
// (as TensorFlow's) that alone is synchronised. Large cases: results past the first round of the
// grid-stride loops (2^24 elements), and over 2^31 elements (the int64 index path), skipped
// when the device lacks the memory. Without a CUDA device every test says "skipped: no CUDA
// device".
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "common/cuda_geometry.h"
#include "common/cuda_test_util.h"
#include "common/dtype.h"
#include "common/parallel.h"
#include "common/status.h"
#include "common/test_util.h"
#include "ops/resize_bilinear/resize_bilinear.h"

namespace opforge {
namespace {

using test::DeviceBuffer;
using test::DownloadOn;
using test::SameBitsOrBothNan;
using test::TestStream;
using test::TypeNames;
using test::UploadOn;

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

// The GPU forward of `images` on a non-blocking stream (its output filled with 0xFF bytes
// first: an element left unwritten shows as NaN).
template <typename T>
void GpuForward(const ResizeBilinearParams& p, const std::vector<T>& images,
                std::vector<float>* out) {
  TestStream stream;
  OPFORGE_ASSERT_CUDA(stream.Create());
  DeviceBuffer din, dout;
  ASSERT_NO_FATAL_FAILURE(UploadOn(stream.get(), images, &din));
  out->assign(static_cast<size_t>(p.batch * p.out_height * p.out_width * p.channels), 0.0f);
  OPFORGE_ASSERT_CUDA(dout.Allocate(out->size() * sizeof(float)));
  OPFORGE_ASSERT_CUDA(cudaMemsetAsync(dout.get(), 0xFF, out->size() * sizeof(float), stream.get()));
  OPFORGE_ASSERT_OK(ResizeBilinearForwardGpu(DTypeOf<T>::value, p, din.get(),
                                             static_cast<float*>(dout.get()), stream.get()));
  ASSERT_NO_FATAL_FAILURE(DownloadOn(stream.get(), dout, out));
}

// The GPU gradient of `grads`, likewise.
template <typename T>
void GpuBackward(const ResizeBilinearParams& p, const std::vector<float>& grads,
                 std::vector<T>* out) {
  TestStream stream;
  OPFORGE_ASSERT_CUDA(stream.Create());
  DeviceBuffer dg, dout;
  ASSERT_NO_FATAL_FAILURE(UploadOn(stream.get(), grads, &dg));
  out->assign(static_cast<size_t>(p.batch * p.in_height * p.in_width * p.channels), T(0.0f));
  OPFORGE_ASSERT_CUDA(dout.Allocate(out->size() * sizeof(T)));
  OPFORGE_ASSERT_CUDA(cudaMemsetAsync(dout.get(), 0xFF, out->size() * sizeof(T), stream.get()));
  OPFORGE_ASSERT_OK(ResizeBilinearBackwardGpu(
      DTypeOf<T>::value, p, static_cast<const float*>(dg.get()), dout.get(), stream.get()));
  ASSERT_NO_FATAL_FAILURE(DownloadOn(stream.get(), dout, out));
}

// Incoming gradients with inf, NaN, -0 and subnormals among them (1 in 50).
std::vector<float> GradsWithSpecials(int64_t n, uint64_t seed) {
  std::vector<float> g = test::FullRangeVector<float>(n, seed);
  const std::vector<float> specials = test::SpecialValues<float>();
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < g.size(); ++i) {
    if (rng() % 50 == 0) g[i] = specials[rng() % specials.size()];
  }
  return g;
}

TYPED_TEST(ResizeBilinearCudaForward, SameBitsAsCpu) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  uint64_t seed = 1;
  for (const GpuCase& c : Cases()) {
    const ResizeBilinearParams p = ParamsOf(c);
    const auto images = test::FullRangeVector<T>(c.batch * c.in_h * c.in_w * c.channels, seed++);
    std::vector<float> cpu(static_cast<size_t>(c.batch * c.out_h * c.out_w * c.channels));
    ResizeBilinearForward<T>(p, images.data(), cpu.data(), SerialParallel());
    std::vector<float> gpu;
    ASSERT_NO_FATAL_FAILURE(GpuForward(p, images, &gpu));
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
    for (bool specials : {false, true}) {
      const ResizeBilinearParams p = ParamsOf(c);
      const int64_t n = c.batch * c.out_h * c.out_w * c.channels;
      const auto grads =
          specials ? GradsWithSpecials(n, seed++) : test::FullRangeVector<float>(n, seed++);
      std::vector<T> cpu(static_cast<size_t>(c.batch * c.in_h * c.in_w * c.channels));
      ResizeBilinearBackward<T>(p, grads.data(), cpu.data(), SerialParallel());
      std::vector<T> gpu;
      ASSERT_NO_FATAL_FAILURE(GpuBackward(p, grads, &gpu));
      EXPECT_TRUE(SameBitsOrBothNan(gpu, cpu))
          << Describe(c) << (specials ? " with inf, NaN, -0 in grads" : "");
    }
  }
}

// Results past the first round of the grid-stride loops (Blocks() stops at 2^16 blocks of 256
// threads: 2^24 elements): a forward pass to 17.6M values, a gradient to 17.6M values. On the
// SIMT runtime the grids stop at cuda::kMaxGridBlocks (64) blocks: 66 x 66 x 4 values, past 16384.
TEST(ResizeBilinearCudaLarge, GridStrideLoops) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  const ThreadParallel parallel(static_cast<int>(std::thread::hardware_concurrency()));
  const int64_t big = cuda::kSimtGeometry ? 66 : 2100;
  ASSERT_GT(big * big * 4, cuda::kMaxGridBlocks * 256);
  for (bool half_pixel : {false, true}) {
    const ResizeBilinearParams up = ParamsOf({1, 61, 67, 4, big, big, false, half_pixel});
    const auto images = test::FullRangeVector<float>(61 * 67 * 4, 3);
    std::vector<float> cpu(static_cast<size_t>(big * big * 4)), gpu;
    ResizeBilinearForward<float>(up, images.data(), cpu.data(), parallel);
    ASSERT_NO_FATAL_FAILURE(GpuForward(up, images, &gpu));
    EXPECT_TRUE(SameBitsOrBothNan(gpu, cpu)) << "forward, half_pixel " << half_pixel;

    const ResizeBilinearParams down = ParamsOf({1, big, big, 4, 61, 67, false, half_pixel});
    const auto grads = GradsWithSpecials(61 * 67 * 4, 4);
    std::vector<float> cpu_grad(static_cast<size_t>(big * big * 4)), gpu_grad;
    ResizeBilinearBackward<float>(down, grads.data(), cpu_grad.data(), parallel);
    ASSERT_NO_FATAL_FAILURE(GpuBackward(down, grads, &gpu_grad));
    EXPECT_TRUE(SameBitsOrBothNan(gpu_grad, cpu_grad)) << "gradient, half_pixel " << half_pixel;
  }
}

// Over 2^31 elements (the int64 index path): uint8 images resized to 46341 x 46341 (2^31 + 9633
// float values, 8.6 GB), and the half gradient of an image that size; on the SIMT runtime, past
// cuda::kInt32IndexLimit (2^22 - 1): 2049 x 2049. Skipped, saying so, when the device cannot hold
// them.
TEST(ResizeBilinearCudaLarge, OverTwoTo31Elements) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  const int64_t side = cuda::kSimtGeometry ? 2049 : 46341;
  ASSERT_GT(side * side, cuda::kInt32IndexLimit);
  const ThreadParallel parallel(static_cast<int>(std::thread::hardware_concurrency()));
  const size_t need = static_cast<size_t>(side * side) * 5;  // 10 GB on a GPU
  size_t free_bytes = 0, total_bytes = 0;
  OPFORGE_ASSERT_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (free_bytes < need) {
    GTEST_SKIP() << "skipped: needs " << (need >> 20) << " MB of free device memory, "
                 << (free_bytes >> 20) << " MB free";
  }
  {
    const ResizeBilinearParams p = ParamsOf({1, 97, 89, 1, side, side, false, true});
    const auto images = test::FullRangeVector<uint8_t>(97 * 89, 5);
    std::vector<float> cpu(static_cast<size_t>(side * side)), gpu;
    ResizeBilinearForward<uint8_t>(p, images.data(), cpu.data(), parallel);
    ASSERT_NO_FATAL_FAILURE(GpuForward(p, images, &gpu));
    EXPECT_TRUE(SameBitsOrBothNan(gpu, cpu)) << "forward";
  }
  {
    const ResizeBilinearParams p = ParamsOf({1, side, side, 1, 97, 89, true, false});
    const auto grads = GradsWithSpecials(97 * 89, 6);
    std::vector<Eigen::half> cpu(static_cast<size_t>(side * side)), gpu;
    ResizeBilinearBackward<Eigen::half>(p, grads.data(), cpu.data(), parallel);
    ASSERT_NO_FATAL_FAILURE(GpuBackward(p, grads, &gpu));
    EXPECT_TRUE(SameBitsOrBothNan(gpu, cpu)) << "gradient";
  }
}

TEST(ResizeBilinearCuda, EmptyIsANoOpAndBadDTypeIsAnError) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  ResizeBilinearParams p = ParamsOf({0, 3, 3, 2, 5, 5, false, false});
  EXPECT_TRUE(ResizeBilinearForwardGpu(DType::kFloat, p, nullptr, nullptr, nullptr).ok());
  EXPECT_TRUE(ResizeBilinearBackwardGpu(DType::kFloat, p, nullptr, nullptr, nullptr).ok());
  ASSERT_NO_FATAL_FAILURE(test::Sync());
  p.batch = 1;
  EXPECT_FALSE(ResizeBilinearBackwardGpu(DType::kInt32, p, nullptr, nullptr, nullptr).ok());
}

}  // namespace
}  // namespace opforge

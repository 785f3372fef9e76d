// The cases the element-wise ops' CUDA tests (leaky_relu, swish, clipped_identity) share, written
// once: an op with a forward pass y = f(x) and a backward pass dx = f'(g, x), its GPU kernels
// against its CPU kernels over the smallest sizes, more elements than one grid covers and more
// than 2^31.
// Test code only; header-only, on top of common/cuda_test_util.h.
//
// An op under test is a struct that says how to run it and how close the two results must be:
//
//   struct SwishUnderTest {
//     static constexpr bool kMask = false;  // LeakyRelu's forward pass also writes a mask
//     template <typename T>                  // mask: null, or (kMask) the second output
//     void Forward(const T* x, T* y, T* mask, int64_t n, const Parallel& parallel) const;
//     template <typename T>
//     void Backward(const T* g, const T* x, T* dx, int64_t n, const Parallel& parallel) const;
//     Status ForwardGpu(DType dtype, const void* x, void* y, void* mask, int64_t n,
//                       cudaStream_t stream) const;
//     Status BackwardGpu(DType dtype, const void* g, const void* x, void* dx, int64_t n,
//                        cudaStream_t stream) const;
//     // Whether the GPU's result agrees with the CPU's; g: null for the forward pass.
//     template <typename T>
//     ::testing::AssertionResult Agree(const std::vector<T>& gpu, const std::vector<T>& cpu,
//                                      const std::vector<T>& x, const std::vector<T>* g) const;
//     // The upstream gradients of the large half cases (n of them; cheap for billions).
//     std::vector<Eigen::half> LargeGradients(int64_t n) const;
//   };
//
// The features of the large half cases run through every bit pattern (PatternVector), so they
// hold infinities, NaNs, signed zeros and subnormals.
#ifndef OPFORGE_COMMON_ELEMENTWISE_CUDA_TEST_H_
#define OPFORGE_COMMON_ELEMENTWISE_CUDA_TEST_H_

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/cuda_geometry.h"
#include "common/cuda_test_util.h"
#include "common/dtype.h"
#include "common/parallel.h"
#include "common/test_util.h"

namespace opforge {
namespace test {

// The `g` of an op's Agree for a forward pass.
template <typename T>
constexpr const std::vector<T>* NoGradients() {
  return nullptr;
}

// Sizes around the vector width (tails of every length, 1 to 19 elements: x the last n of
// `inputs`, g = gradients(n)) and none (null pointers), out of place, in T.
template <typename T, typename Op, typename Gradients>
void CheckSmallSizesAndEmpty(const Op& op, const std::vector<T>& inputs, Gradients gradients) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  OPFORGE_TEST_STREAM(stream);
  const DType dtype = DTypeOf<T>::value;
  OPFORGE_ASSERT_OK(op.ForwardGpu(dtype, nullptr, nullptr, nullptr, 0, stream));
  OPFORGE_ASSERT_OK(op.BackwardGpu(dtype, nullptr, nullptr, nullptr, 0, stream));
  for (size_t n = 1; n <= 19; ++n) {
    SCOPED_TRACE(::testing::Message() << n << " elements");
    const int64_t size = static_cast<int64_t>(n);
    const std::vector<T> x(inputs.end() - size, inputs.end());
    const std::vector<T> g = gradients(n);
    std::vector<T> cpu_y(n), cpu_dx(n), y(n), dxv(n);
    op.Forward(x.data(), cpu_y.data(), static_cast<T*>(nullptr), size, SerialParallel());
    op.Backward(g.data(), x.data(), cpu_dx.data(), size, SerialParallel());
    DeviceBuffer dx, dg, dy, ddx;
    ASSERT_NO_FATAL_FAILURE(UploadOn(stream, x, &dx));
    ASSERT_NO_FATAL_FAILURE(UploadOn(stream, g, &dg));
    OPFORGE_ASSERT_CUDA(dy.Allocate(n * sizeof(T)));
    OPFORGE_ASSERT_CUDA(ddx.Allocate(n * sizeof(T)));
    OPFORGE_ASSERT_OK(op.ForwardGpu(dtype, dx.get(), dy.get(), nullptr, size, stream));
    OPFORGE_ASSERT_OK(op.BackwardGpu(dtype, dg.get(), dx.get(), ddx.get(), size, stream));
    ASSERT_NO_FATAL_FAILURE(DownloadOn(stream, dy, &y));
    ASSERT_NO_FATAL_FAILURE(DownloadOn(stream, ddx, &dxv));
    EXPECT_TRUE(op.Agree(y, cpu_y, x, NoGradients<T>())) << "forward";
    EXPECT_TRUE(op.Agree(dxv, cpu_dx, x, &g)) << "backward";
  }
}

// More elements than one grid covers (65536 blocks of 256 threads), so every thread takes several
// steps of its grid-stride loop: half in 8-element vectors (2^27 and a tail), and float through the
// scalar path (a buffer one element off alignment; x uniform in [-4, 4), and x as the gradient
// too). Each pass out of place; the backward pass in place over g as well, as the binding
// forwards the gradient's buffer.
template <typename Op>
void CheckGridStrideLoops(const Op& op) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  OPFORGE_TEST_STREAM(stream);
  {
    SCOPED_TRACE("half, aligned");
    using T = Eigen::half;
    const int64_t n = (cuda::kMaxGridBlocks * 256 * 8) + 4099 * 8 + 5;
    const size_t count = static_cast<size_t>(n);
    const std::vector<T> x = PatternVector<T>(n, 40503);
    const std::vector<T> g = op.LargeGradients(n);
    const ThreadParallel parallel(8);
    std::vector<T> cpu_y(count), cpu_mask(Op::kMask ? count : 0), cpu_dx(count);
    op.Forward(x.data(), cpu_y.data(), Op::kMask ? cpu_mask.data() : nullptr, n, parallel);
    op.Backward(g.data(), x.data(), cpu_dx.data(), n, parallel);
    DeviceBuffer dx, dg, dy, dmask;
    ASSERT_NO_FATAL_FAILURE(UploadOn(stream, x, &dx));
    ASSERT_NO_FATAL_FAILURE(UploadOn(stream, g, &dg));
    OPFORGE_ASSERT_CUDA(dy.Allocate(count * sizeof(T)));
    if (Op::kMask) OPFORGE_ASSERT_CUDA(dmask.Allocate(count * sizeof(T)));
    std::vector<T> got(count);
    OPFORGE_ASSERT_OK(op.ForwardGpu(DType::kHalf, dx.get(), dy.get(), dmask.get(), n, stream));
    ASSERT_NO_FATAL_FAILURE(DownloadOn(stream, dy, &got));
    EXPECT_TRUE(op.Agree(got, cpu_y, x, NoGradients<T>())) << "forward";
    if (Op::kMask) {
      ASSERT_NO_FATAL_FAILURE(DownloadOn(stream, dmask, &got));
      EXPECT_TRUE(op.Agree(got, cpu_mask, x, NoGradients<T>())) << "mask";
    }
    OPFORGE_ASSERT_OK(op.BackwardGpu(DType::kHalf, dg.get(), dx.get(), dy.get(), n, stream));
    ASSERT_NO_FATAL_FAILURE(DownloadOn(stream, dy, &got));
    EXPECT_TRUE(op.Agree(got, cpu_dx, x, &g)) << "backward";
    OPFORGE_ASSERT_OK(op.BackwardGpu(DType::kHalf, dg.get(), dx.get(), dg.get(), n, stream));
    ASSERT_NO_FATAL_FAILURE(DownloadOn(stream, dg, &got));
    EXPECT_TRUE(op.Agree(got, cpu_dx, x, &g)) << "backward in place";
  }
  {
    SCOPED_TRACE("float, misaligned");
    using T = float;
    const int64_t n = (cuda::kMaxGridBlocks * 256) + 4099;
    std::mt19937_64 rng(8);
    const std::vector<T> x = UniformVector<T>(rng, n, -4.0, 4.0);
    std::vector<T> cpu_y(x.size()), cpu_dx(x.size()), got(x.size());
    op.Forward(x.data(), cpu_y.data(), static_cast<T*>(nullptr), n, SerialParallel());
    op.Backward(x.data(), x.data(), cpu_dx.data(), n, SerialParallel());
    Placed<T> dx, dy;
    ASSERT_NO_FATAL_FAILURE(PlaceOn(stream, x, 1, &dx));
    ASSERT_NO_FATAL_FAILURE(PlaceOn(stream, x, 1, &dy));
    OPFORGE_ASSERT_OK(op.ForwardGpu(DType::kFloat, dx.ptr, dy.ptr, nullptr, n, stream));
    ASSERT_NO_FATAL_FAILURE(CopyFromDeviceOn(stream, dy.ptr, &got));
    EXPECT_TRUE(op.Agree(got, cpu_y, x, NoGradients<T>())) << "forward";
    OPFORGE_ASSERT_OK(op.BackwardGpu(DType::kFloat, dx.ptr, dx.ptr, dy.ptr, n, stream));
    ASSERT_NO_FATAL_FAILURE(CopyFromDeviceOn(stream, dy.ptr, &got));
    EXPECT_TRUE(op.Agree(got, cpu_dx, x, &x)) << "backward";
  }
}

// More than 2^31 elements (the 64-bit index path), in half: two 4 GiB buffers, the backward pass
// in place over g, then the forward pass in place over x (without a mask). Skipped with a
// message where the device has not the memory.
template <typename Op>
void CheckMoreThan2To31Elements(const Op& op) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = Eigen::half;
  const int64_t n = cuda::kInt32IndexLimit + 4;  // 2^31 + 3 on a GPU
  const size_t bytes = static_cast<size_t>(n) * sizeof(T);
  DeviceBuffer dx, dg;
  std::string why;
  if (!AllocateLarge(bytes, {&dx, &dg}, &why)) GTEST_SKIP() << why;
  OPFORGE_TEST_STREAM(stream);
  const std::vector<T> x = PatternVector<T>(n, 40503);
  const std::vector<T> g = op.LargeGradients(n);
  ASSERT_NO_FATAL_FAILURE(CopyToDeviceOn(stream, x, dx.get()));
  ASSERT_NO_FATAL_FAILURE(CopyToDeviceOn(stream, g, dg.get()));
  const ThreadParallel parallel(16);
  std::vector<T> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
  OPFORGE_ASSERT_OK(op.BackwardGpu(DType::kHalf, dg.get(), dx.get(), dg.get(), n, stream));
  op.Backward(g.data(), x.data(), want.data(), n, parallel);
  ASSERT_NO_FATAL_FAILURE(CopyFromDeviceOn(stream, dg.get(), &got));
  EXPECT_TRUE(op.Agree(got, want, x, &g)) << "backward";
  OPFORGE_ASSERT_OK(op.ForwardGpu(DType::kHalf, dx.get(), dx.get(), nullptr, n, stream));
  op.Forward(x.data(), want.data(), static_cast<T*>(nullptr), n, parallel);
  ASSERT_NO_FATAL_FAILURE(CopyFromDeviceOn(stream, dx.get(), &got));
  EXPECT_TRUE(op.Agree(got, want, x, NoGradients<T>())) << "forward";
}

}  // namespace test
}  // namespace opforge

#endif  // OPFORGE_COMMON_ELEMENTWISE_CUDA_TEST_H_

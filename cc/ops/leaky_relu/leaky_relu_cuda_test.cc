// The LeakyRelu CUDA kernels against the CPU kernels (SerialParallel): same bits for every
// element type. Compiled by the host compiler against the CUDA kernels library; without a CUDA
// device every test says "skipped: no CUDA device".
//
// One allowance: a NaN result may have other bits on the GPU (CUDA arithmetic returns the
// canonical NaN, x86 keeps the NaN operand's payload), so NaN matches any NaN. Every other value,
// signed zeros and infinities included, must match bit for bit.
//
// The kernels run on a non-blocking stream, as TensorFlow's, and the tests wait for that stream
// only. Inputs: every bit pattern of half and bfloat16, special values in both the gradient and
// the features of the backward pass; buffers aligned (16-byte vectors and a tail) and not (the
// scalar path); in place; empty; more elements than one grid; more than 2^31 elements.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/cuda_test_util.h"
#include "common/dtype.h"
#include "common/elementwise_cuda_test.h"
#include "common/parallel.h"
#include "common/status.h"
#include "common/test_util.h"
#include "ops/leaky_relu/leaky_relu.h"

namespace opforge {
namespace {

using test::BitPatternInputs;
using test::CopyFromDeviceOn;
using test::DeviceBuffer;
using test::DownloadOn;
using test::FloatTypes;
using test::Placed;
using test::PlaceOn;
using test::SameBitsOrBothNan;
using test::TypeNames;
using test::UploadOn;

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

// LeakyRelu as the shared cases run it (common/elementwise_cuda_test.h): the same bits,
// NaN matching any NaN; the forward pass with its mask.
struct LeakyReluUnderTest {
  static constexpr bool kMask = true;
  float alpha;

  template <typename T>
  void Forward(const T* x, T* y, T* mask, int64_t n, const Parallel& parallel) const {
    LeakyReluForward<T>(Params(alpha, static_cast<size_t>(n)), x, y, mask, parallel);
  }
  template <typename T>
  void Backward(const T* g, const T* x, T* dx, int64_t n, const Parallel& parallel) const {
    LeakyReluBackward<T>(Params(alpha, static_cast<size_t>(n)), g, x, dx, parallel);
  }
  Status ForwardGpu(DType dtype, const void* x, void* y, void* mask, int64_t n,
                    cudaStream_t stream) const {
    return LeakyReluForwardGpu(dtype, Params(alpha, static_cast<size_t>(n)), x, y, mask, stream);
  }
  Status BackwardGpu(DType dtype, const void* g, const void* x, void* dx, int64_t n,
                     cudaStream_t stream) const {
    return LeakyReluBackwardGpu(dtype, Params(alpha, static_cast<size_t>(n)), g, x, dx, stream);
  }
  template <typename T>
  ::testing::AssertionResult Agree(const std::vector<T>& gpu, const std::vector<T>& cpu,
                                   const std::vector<T>& x, const std::vector<T>*) const {
    return SameBitsOrBothNan(gpu, cpu, x);
  }
  std::vector<Eigen::half> LargeGradients(int64_t n) const {
    return test::PatternVector<Eigen::half>(n, 30011);
  }
};

template <typename T>
class LeakyReluCudaTest : public ::testing::Test {};
TYPED_TEST_SUITE(LeakyReluCudaTest, FloatTypes, TypeNames);

TYPED_TEST(LeakyReluCudaTest, ForwardMatchesCpu) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  OPFORGE_TEST_STREAM(stream);
  const std::vector<T> x = TestInputs<T>(1);
  for (const int offset : {0, 1}) {
    Placed<T> dx, dy, dmask;
    ASSERT_NO_FATAL_FAILURE(PlaceOn(stream, x, offset, &dx));
    ASSERT_NO_FATAL_FAILURE(PlaceOn(stream, x, offset, &dy));
    ASSERT_NO_FATAL_FAILURE(PlaceOn(stream, x, offset, &dmask));
    for (float alpha : kAlphas) {
      SCOPED_TRACE(::testing::Message() << "alpha " << alpha << ", offset " << offset);
      const LeakyReluParams params = Params(alpha, x.size());
      std::vector<T> cpu_y(x.size()), cpu_mask(x.size());
      LeakyReluForward<T>(params, x.data(), cpu_y.data(), cpu_mask.data(), SerialParallel());

      // Without the mask.
      OPFORGE_ASSERT_OK(
          LeakyReluForwardGpu(DTypeOf<T>::value, params, dx.ptr, dy.ptr, nullptr, stream));
      std::vector<T> y(x.size());
      ASSERT_NO_FATAL_FAILURE(CopyFromDeviceOn(stream, dy.ptr, &y));
      EXPECT_TRUE(SameBitsOrBothNan(y, cpu_y, x));

      // With the mask.
      OPFORGE_ASSERT_CUDA(cudaMemsetAsync(dy.ptr, 0x7F, x.size() * sizeof(T), stream));
      OPFORGE_ASSERT_OK(
          LeakyReluForwardGpu(DTypeOf<T>::value, params, dx.ptr, dy.ptr, dmask.ptr, stream));
      std::vector<T> mask(x.size());
      ASSERT_NO_FATAL_FAILURE(CopyFromDeviceOn(stream, dy.ptr, &y));
      ASSERT_NO_FATAL_FAILURE(CopyFromDeviceOn(stream, dmask.ptr, &mask));
      EXPECT_TRUE(SameBitsOrBothNan(y, cpu_y, x));
      EXPECT_TRUE(SameBitsOrBothNan(mask, cpu_mask, x));
    }
  }
}

// Special values in both inputs: g runs through the same patterns as x, shuffled.
TYPED_TEST(LeakyReluCudaTest, BackwardMatchesCpu) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  OPFORGE_TEST_STREAM(stream);
  const std::vector<T> x = TestInputs<T>(2);
  std::vector<T> g = TestInputs<T>(3);
  std::shuffle(g.begin(), g.end(), std::mt19937_64(4));
  for (const int offset : {0, 1}) {
    Placed<T> dg, dx, ddx;
    ASSERT_NO_FATAL_FAILURE(PlaceOn(stream, g, offset, &dg));
    ASSERT_NO_FATAL_FAILURE(PlaceOn(stream, x, offset, &dx));
    ASSERT_NO_FATAL_FAILURE(PlaceOn(stream, x, offset, &ddx));
    for (float alpha : kAlphas) {
      SCOPED_TRACE(::testing::Message() << "alpha " << alpha << ", offset " << offset);
      const LeakyReluParams params = Params(alpha, x.size());
      std::vector<T> cpu(x.size());
      LeakyReluBackward<T>(params, g.data(), x.data(), cpu.data(), SerialParallel());
      OPFORGE_ASSERT_OK(
          LeakyReluBackwardGpu(DTypeOf<T>::value, params, dg.ptr, dx.ptr, ddx.ptr, stream));
      std::vector<T> gpu(x.size());
      ASSERT_NO_FATAL_FAILURE(CopyFromDeviceOn(stream, ddx.ptr, &gpu));
      EXPECT_TRUE(SameBitsOrBothNan(gpu, cpu, x));
    }
  }
}

// y aliasing x, and dx aliasing g, as the binding does when it forwards a buffer.
TYPED_TEST(LeakyReluCudaTest, InPlaceMatchesCpu) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  OPFORGE_TEST_STREAM(stream);
  const std::vector<T> x = TestInputs<T>(5);
  std::vector<T> g = TestInputs<T>(6);
  std::shuffle(g.begin(), g.end(), std::mt19937_64(7));
  const LeakyReluParams params = Params(0.2f, x.size());
  std::vector<T> cpu_y(x.size()), cpu_mask(x.size()), cpu_dx(x.size());
  LeakyReluForward<T>(params, x.data(), cpu_y.data(), cpu_mask.data(), SerialParallel());
  LeakyReluBackward<T>(params, g.data(), x.data(), cpu_dx.data(), SerialParallel());

  DeviceBuffer dbuf, dmask, dx, dg;
  ASSERT_NO_FATAL_FAILURE(UploadOn(stream, x, &dbuf));
  OPFORGE_ASSERT_CUDA(dmask.Allocate(x.size() * sizeof(T)));
  OPFORGE_ASSERT_OK(
      LeakyReluForwardGpu(DTypeOf<T>::value, params, dbuf.get(), dbuf.get(), dmask.get(), stream));
  std::vector<T> y(x.size()), mask(x.size());
  ASSERT_NO_FATAL_FAILURE(DownloadOn(stream, dbuf, &y));
  ASSERT_NO_FATAL_FAILURE(DownloadOn(stream, dmask, &mask));
  EXPECT_TRUE(SameBitsOrBothNan(y, cpu_y, x));
  EXPECT_TRUE(SameBitsOrBothNan(mask, cpu_mask, x));

  ASSERT_NO_FATAL_FAILURE(UploadOn(stream, g, &dg));
  ASSERT_NO_FATAL_FAILURE(UploadOn(stream, x, &dx));
  OPFORGE_ASSERT_OK(
      LeakyReluBackwardGpu(DTypeOf<T>::value, params, dg.get(), dx.get(), dg.get(), stream));
  std::vector<T> dxv(x.size());
  ASSERT_NO_FATAL_FAILURE(DownloadOn(stream, dg, &dxv));
  EXPECT_TRUE(SameBitsOrBothNan(dxv, cpu_dx, x));
}

// Sizes around the vector width (tails of every length) and none.
TYPED_TEST(LeakyReluCudaTest, SmallSizesAndEmpty) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  const std::vector<TypeParam> all = TestInputs<TypeParam>(8);
  test::CheckSmallSizesAndEmpty(LeakyReluUnderTest{-0.3f}, all, [&](size_t n) {
    return std::vector<TypeParam>(all.begin(), all.begin() + static_cast<int64_t>(n));
  });
}

TEST(LeakyReluCudaLargeTest, GridStrideLoopCoversEveryElement) {
  test::CheckGridStrideLoops(LeakyReluUnderTest{0.2f});
}

TEST(LeakyReluCudaLargeTest, MoreThan2To31Elements) {
  test::CheckMoreThan2To31Elements(LeakyReluUnderTest{-0.3f});
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

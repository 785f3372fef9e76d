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
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "common/dtype.h"
#include "common/parallel.h"
#include "common/status.h"
#include "ops/leaky_relu/leaky_relu.h"

namespace opforge {
namespace {

constexpr float kAlphas[] = {0.0f, 0.2f, 1.5f, -0.3f};

bool HasCudaDevice() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the error
    return false;
  }
  return count > 0;
}

#define OPFORGE_SKIP_WITHOUT_CUDA()                  \
  do {                                               \
    if (!HasCudaDevice()) {                          \
      GTEST_SKIP() << "skipped: no CUDA device";     \
    }                                                \
  } while (0)

#define OPFORGE_ASSERT_CUDA(expr)                                               \
  do {                                                                          \
    const cudaError_t opforge_err = (expr);                                     \
    ASSERT_EQ(opforge_err, cudaSuccess) << #expr << ": "                        \
                                        << cudaGetErrorString(opforge_err);     \
  } while (0)

#define OPFORGE_ASSERT_OK(expr)                      \
  do {                                               \
    const ::opforge::Status opforge_s = (expr);      \
    ASSERT_TRUE(opforge_s.ok()) << opforge_s.message(); \
  } while (0)

// A device allocation freed on scope exit.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  cudaError_t Allocate(size_t bytes) { return bytes == 0 ? cudaSuccess : cudaMalloc(&ptr_, bytes); }
  void* get() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
};

template <typename T>
void Upload(const std::vector<T>& host, DeviceBuffer* dev) {
  OPFORGE_ASSERT_CUDA(dev->Allocate(host.size() * sizeof(T)));
  if (!host.empty()) {
    OPFORGE_ASSERT_CUDA(
        cudaMemcpy(dev->get(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
}

template <typename T>
void Download(const DeviceBuffer& dev, std::vector<T>* host) {
  if (!host->empty()) {
    OPFORGE_ASSERT_CUDA(
        cudaMemcpy(host->data(), dev.get(), host->size() * sizeof(T), cudaMemcpyDeviceToHost));
  }
}

void Sync() {
  OPFORGE_ASSERT_CUDA(cudaGetLastError());
  OPFORGE_ASSERT_CUDA(cudaDeviceSynchronize());
}

template <typename T>
constexpr DType DTypeOf() {
  if constexpr (std::is_same_v<T, Eigen::half>) return DType::kHalf;
  if constexpr (std::is_same_v<T, Eigen::bfloat16>) return DType::kBFloat16;
  if constexpr (std::is_same_v<T, float>) return DType::kFloat;
  if constexpr (std::is_same_v<T, double>) return DType::kDouble;
  return DType::kInt32;
}

template <typename T>
using BitsOf = std::conditional_t<sizeof(T) == 2, uint16_t,
                                  std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>;

template <typename T>
BitsOf<T> Bits(T v) {
  return Eigen::numext::bit_cast<BitsOf<T>>(v);
}

template <typename T>
T FromBits(BitsOf<T> b) {
  return Eigen::numext::bit_cast<T>(b);
}

template <typename T>
double Wide(T v) {
  if constexpr (std::is_same_v<T, double>) {
    return v;
  } else {
    return static_cast<double>(static_cast<float>(v));
  }
}

template <typename T>
std::string Describe(T v) {
  std::ostringstream s;
  s << Wide(v) << " (0x" << std::hex << static_cast<uint64_t>(Bits(v)) << ")";
  return s.str();
}

template <typename T>
::testing::AssertionResult SameBitsOrBothNan(const std::vector<T>& gpu, const std::vector<T>& cpu,
                                             const std::vector<T>& input) {
  if (gpu.size() != cpu.size()) {
    return ::testing::AssertionFailure() << "size " << gpu.size() << " vs " << cpu.size();
  }
  auto failure = ::testing::AssertionFailure();
  int64_t count = 0;
  for (size_t i = 0; i < gpu.size(); ++i) {
    if (Bits(gpu[i]) == Bits(cpu[i])) continue;
    if (std::isnan(Wide(gpu[i])) && std::isnan(Wide(cpu[i]))) continue;
    if (count++ < 8) {
      failure << "\n  [" << i << "] input " << Describe(input[i]) << ": gpu " << Describe(gpu[i])
              << ", cpu " << Describe(cpu[i]);
    }
  }
  if (count == 0) return ::testing::AssertionSuccess();
  return failure << "\n  " << count << " of " << gpu.size() << " elements differ";
}

// Every bit pattern for half and bfloat16; for float and double special values, random bit
// patterns and ordinary values, enough of them to need many blocks.
template <typename T>
std::vector<T> TestInputs(uint64_t seed) {
  std::vector<T> v;
  if constexpr (sizeof(T) == 2) {
    for (uint32_t b = 0; b <= 0xFFFF; ++b) v.push_back(FromBits<T>(static_cast<uint16_t>(b)));
  } else {
    using L = std::numeric_limits<T>;
    v = {T(0), -T(0), T(1), T(-1), L::infinity(), -L::infinity(), L::quiet_NaN(),
         -L::quiet_NaN(), L::denorm_min(), -L::denorm_min(), L::min(), L::max(), L::lowest()};
    std::mt19937_64 rng(seed);
    for (int i = 0; i < (1 << 18); ++i) v.push_back(FromBits<T>(static_cast<BitsOf<T>>(rng())));
    std::uniform_real_distribution<double> value(-8.0, 8.0);
    for (int i = 0; i < (1 << 19) + 13; ++i) v.push_back(static_cast<T>(value(rng)));
  }
  return v;
}

LeakyReluParams Params(float alpha, size_t size) {
  LeakyReluParams p;
  p.alpha = alpha;
  p.size = static_cast<int64_t>(size);
  return p;
}

template <typename T>
class LeakyReluCudaTest : public ::testing::Test {};

using FloatTypes = ::testing::Types<float, double, Eigen::half, Eigen::bfloat16>;

class TypeNames {
 public:
  template <typename T>
  static std::string GetName(int) {
    if constexpr (std::is_same_v<T, float>) return "float";
    if constexpr (std::is_same_v<T, double>) return "double";
    if constexpr (std::is_same_v<T, Eigen::half>) return "half";
    if constexpr (std::is_same_v<T, Eigen::bfloat16>) return "bfloat16";
    return "unknown";
  }
};
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
    OPFORGE_ASSERT_OK(LeakyReluForwardGpu(DTypeOf<T>(), params, dx.get(), dy.get(), nullptr,
                                          /*stream=*/nullptr));
    ASSERT_NO_FATAL_FAILURE(Sync());
    std::vector<T> y(x.size());
    ASSERT_NO_FATAL_FAILURE(Download(dy, &y));
    EXPECT_TRUE(SameBitsOrBothNan(y, cpu_y, x));

    // With the mask.
    OPFORGE_ASSERT_CUDA(cudaMemset(dy.get(), 0x7F, x.size() * sizeof(T)));
    OPFORGE_ASSERT_OK(LeakyReluForwardGpu(DTypeOf<T>(), params, dx.get(), dy.get(), dmask.get(),
                                          nullptr));
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
        LeakyReluBackwardGpu(DTypeOf<T>(), params, dg.get(), dx.get(), ddx.get(), nullptr));
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
      LeakyReluForwardGpu(DTypeOf<T>(), params, dbuf.get(), dbuf.get(), nullptr, nullptr));
  ASSERT_NO_FATAL_FAILURE(Sync());
  std::vector<T> y(x.size());
  ASSERT_NO_FATAL_FAILURE(Download(dbuf, &y));
  EXPECT_TRUE(SameBitsOrBothNan(y, cpu_y, x));

  DeviceBuffer dg;
  ASSERT_NO_FATAL_FAILURE(Upload(g, &dg));
  ASSERT_NO_FATAL_FAILURE(Upload(x, &dx));
  OPFORGE_ASSERT_OK(
      LeakyReluBackwardGpu(DTypeOf<T>(), params, dg.get(), dx.get(), dg.get(), nullptr));
  ASSERT_NO_FATAL_FAILURE(Sync());
  std::vector<T> dxv(x.size());
  ASSERT_NO_FATAL_FAILURE(Download(dg, &dxv));
  EXPECT_TRUE(SameBitsOrBothNan(dxv, cpu_dx, x));
}

TYPED_TEST(LeakyReluCudaTest, SizeZero) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  OPFORGE_ASSERT_OK(
      LeakyReluForwardGpu(DTypeOf<T>(), Params(0.2f, 0), nullptr, nullptr, nullptr, nullptr));
  OPFORGE_ASSERT_OK(
      LeakyReluBackwardGpu(DTypeOf<T>(), Params(0.2f, 0), nullptr, nullptr, nullptr, nullptr));
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

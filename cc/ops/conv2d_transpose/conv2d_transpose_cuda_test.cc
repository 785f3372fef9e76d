// The Conv2DTranspose CUDA kernels against the CPU kernels (SerialParallel), forward and both
// gradients, every element type, NHWC and NCHW, strides, dilations and paddings. The GPU sums in
// another order than the CPU's GEMM, so results agree to a tolerance scaled by the sum of the
// terms' magnitudes. Without a CUDA device every test says "skipped: no CUDA device".
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/cuda_test_util.h"
#include "common/dtype.h"
#include "common/parallel.h"
#include "common/status.h"
#include "common/test_util.h"
#include "ops/conv2d_transpose/conv2d_transpose.h"

namespace opforge {
namespace {

using test::DeviceBuffer;
using test::Download;
using test::FloatTypes;
using test::Sync;
using test::TypeNames;
using test::Upload;
using test::Wide;

struct Case {
  std::vector<int64_t> input, filter, output;
  std::vector<int64_t> strides, dilations;
  std::string padding;
  std::vector<int64_t> explicit_paddings;
  std::string data_format;
};

std::vector<Case> Cases() {
  return {
      {{2, 13, 13, 32},
       {4, 4, 16, 32},
       {2, 26, 26, 16},
       {1, 2, 2, 1},
       {1, 1, 1, 1},
       "SAME",
       {},
       "NHWC"},
      {{1, 5, 7, 3}, {3, 3, 4, 3}, {1, 11, 16, 4}, {1, 2, 2, 1}, {1, 1, 1, 1}, "VALID", {}, "NHWC"},
      {{2, 6, 5, 4}, {5, 5, 3, 4}, {2, 6, 5, 3}, {1, 1, 1, 1}, {1, 2, 2, 1}, "SAME", {}, "NHWC"},
      {{1, 4, 4, 3},
       {3, 3, 2, 3},
       {1, 8, 9, 2},
       {1, 2, 2, 1},
       {1, 1, 1, 1},
       "EXPLICIT",
       {0, 0, 1, 0, 0, 1, 0, 0},
       "NHWC"},
      {{2, 3, 5, 4}, {3, 3, 2, 3}, {2, 2, 9, 8}, {1, 1, 2, 2}, {1, 1, 1, 1}, "SAME", {}, "NCHW"},
      {{1, 2, 4, 3}, {2, 3, 3, 2}, {1, 3, 9, 10}, {1, 1, 2, 3}, {1, 1, 2, 1}, "VALID", {}, "NCHW"},
  };
}

template <typename T>
double Tolerance() {
  if constexpr (std::is_same_v<T, double>) return 1e-12;
  if constexpr (std::is_same_v<T, float>) return 1e-5;
  if constexpr (std::is_same_v<T, Eigen::half>) return 2e-3;
  return 1.6e-2;
}

// |gpu - cpu| <= tol * (1 + |cpu|) * terms, with `terms` the number of products per element
// (a bound on how far two summation orders of values in [-1, 1] can drift apart).
template <typename T>
::testing::AssertionResult Close(const std::vector<T>& gpu, const std::vector<T>& cpu,
                                 double terms) {
  for (size_t i = 0; i < gpu.size(); ++i) {
    const double g = Wide(gpu[i]), c = Wide(cpu[i]);
    if (!(std::abs(g - c) <= Tolerance<T>() * (1 + std::abs(c)) * std::sqrt(terms))) {
      return ::testing::AssertionFailure() << "[" << i << "] gpu " << g << ", cpu " << c;
    }
  }
  return ::testing::AssertionSuccess();
}

template <typename T>
class Conv2DTransposeCudaTest : public ::testing::Test {};
TYPED_TEST_SUITE(Conv2DTransposeCudaTest, FloatTypes, TypeNames);

TYPED_TEST(Conv2DTransposeCudaTest, ForwardAndGradientsMatchCpu) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  std::mt19937_64 rng(11);
  for (const Case& c : Cases()) {
    SCOPED_TRACE(::testing::Message() << c.data_format << " " << c.padding);
    Conv2DTransposeAttrs a;
    a.strides = c.strides;
    a.dilations = c.dilations;
    a.padding = c.padding;
    a.explicit_paddings = c.explicit_paddings;
    a.data_format = c.data_format;
    Conv2DTransposeParams p;
    OPFORGE_ASSERT_OK(ValidateConv2DTranspose(a, c.input, c.filter, c.output, &p));
    const auto x = test::UniformVector<T>(rng, p.InputSize(), -1.0, 1.0);
    const auto f = test::UniformVector<T>(rng, p.FilterSize(), -1.0, 1.0);
    const auto g = test::UniformVector<T>(rng, p.OutputSize(), -1.0, 1.0);
    std::vector<T> y(p.OutputSize()), dx(p.InputSize()), df(p.FilterSize());
    Conv2DTransposeForward<T>(p, x.data(), f.data(), y.data(), SerialParallel());
    Conv2DTransposeInputGrad<T>(p, g.data(), f.data(), dx.data(), SerialParallel());
    Conv2DTransposeFilterGrad<T>(p, x.data(), g.data(), df.data(), SerialParallel());

    DeviceBuffer dev_x, dev_f, dev_g, dev_y, dev_dx, dev_df;
    ASSERT_NO_FATAL_FAILURE(Upload(x, &dev_x));
    ASSERT_NO_FATAL_FAILURE(Upload(f, &dev_f));
    ASSERT_NO_FATAL_FAILURE(Upload(g, &dev_g));
    OPFORGE_ASSERT_CUDA(dev_y.Allocate(y.size() * sizeof(T)));
    OPFORGE_ASSERT_CUDA(dev_dx.Allocate(dx.size() * sizeof(T)));
    OPFORGE_ASSERT_CUDA(dev_df.Allocate(df.size() * sizeof(T)));
    OPFORGE_ASSERT_OK(Conv2DTransposeForwardGpu(DTypeOf<T>::value, p, dev_x.get(), dev_f.get(),
                                                dev_y.get(), nullptr));
    OPFORGE_ASSERT_OK(Conv2DTransposeInputGradGpu(DTypeOf<T>::value, p, dev_g.get(), dev_f.get(),
                                                  dev_dx.get(), nullptr));
    OPFORGE_ASSERT_OK(Conv2DTransposeFilterGradGpu(DTypeOf<T>::value, p, dev_x.get(), dev_g.get(),
                                                   dev_df.get(), nullptr));
    ASSERT_NO_FATAL_FAILURE(Sync());
    std::vector<T> gy(y.size()), gdx(dx.size()), gdf(df.size());
    ASSERT_NO_FATAL_FAILURE(Download(dev_y, &gy));
    ASSERT_NO_FATAL_FAILURE(Download(dev_dx, &gdx));
    ASSERT_NO_FATAL_FAILURE(Download(dev_df, &gdf));
    const double taps = static_cast<double>(p.filter_h * p.filter_w);
    EXPECT_TRUE(Close(gy, y, taps * p.in_c));
    EXPECT_TRUE(Close(gdx, dx, taps * p.out_c));
    EXPECT_TRUE(Close(gdf, df, static_cast<double>(p.batch * p.in_h * p.in_w)));
  }
}

TEST(Conv2DTransposeCudaEmptyTest, EmptyTensorsLaunchNothing) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  Conv2DTransposeAttrs a;
  a.strides = {1, 2, 2, 1};
  Conv2DTransposeParams p;
  OPFORGE_ASSERT_OK(ValidateConv2DTranspose(a, {0, 3, 3, 2}, {2, 2, 3, 2}, {0, 6, 6, 3}, &p));
  OPFORGE_ASSERT_OK(
      Conv2DTransposeForwardGpu(DType::kFloat, p, nullptr, nullptr, nullptr, nullptr));
  OPFORGE_ASSERT_OK(
      Conv2DTransposeInputGradGpu(DType::kFloat, p, nullptr, nullptr, nullptr, nullptr));
  ASSERT_NO_FATAL_FAILURE(Sync());
}

TEST(Conv2DTransposeCudaErrorTest, IntegerTypesHaveNoKernel) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  Conv2DTransposeAttrs a;
  Conv2DTransposeParams p;
  OPFORGE_ASSERT_OK(ValidateConv2DTranspose(a, {1, 2, 2, 1}, {1, 1, 1, 1}, {1, 2, 2, 1}, &p));
  const Status s = Conv2DTransposeForwardGpu(DType::kInt32, p, nullptr, nullptr, nullptr, nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("int32"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace opforge

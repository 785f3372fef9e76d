// The BiasLeakyRelu CUDA kernel against the CPU kernel: the same bits (NaN matching any NaN) in
// every element type, special values included. Without a CUDA device: "skipped: no CUDA device".
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <random>
#include <vector>

#include "common/cuda_test_util.h"
#include "common/dtype.h"
#include "common/parallel.h"
#include "common/status.h"
#include "common/test_util.h"
#include "ops/bias_leaky_relu/bias_leaky_relu.h"

namespace opforge {
namespace {

using test::DeviceBuffer;
using test::Download;
using test::FloatTypes;
using test::SameBitsOrBothNan;
using test::Sync;
using test::TypeNames;
using test::Upload;

template <typename T>
class BiasLeakyReluCudaTest : public ::testing::Test {};
TYPED_TEST_SUITE(BiasLeakyReluCudaTest, FloatTypes, TypeNames);

TYPED_TEST(BiasLeakyReluCudaTest, SameBitsAsCpu) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  const int64_t rows = 4097, ch = 37;
  std::vector<T> x = test::SpecialValues<T>();
  std::mt19937 rng(2);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  while (static_cast<int64_t>(x.size()) < rows * ch) x.push_back(static_cast<T>(normal(rng)));
  x.resize(static_cast<size_t>(rows * ch));
  std::vector<T> b(static_cast<size_t>(ch));
  for (auto& v : b) v = static_cast<T>(normal(rng));
  BiasLeakyReluParams p;
  p.alpha = 0.1f;
  OPFORGE_ASSERT_OK(ValidateBiasLeakyRelu({rows, ch}, {ch}, &p));
  std::vector<T> want(x.size()), got(x.size());
  BiasLeakyRelu<T>(p, x.data(), b.data(), want.data(), SerialParallel());
  DeviceBuffer dx, db, dy;
  ASSERT_NO_FATAL_FAILURE(Upload(x, &dx));
  ASSERT_NO_FATAL_FAILURE(Upload(b, &db));
  OPFORGE_ASSERT_CUDA(dy.Allocate(x.size() * sizeof(T)));
  OPFORGE_ASSERT_OK(BiasLeakyReluGpu(DTypeOf<T>::value, p, dx.get(), db.get(), dy.get(), nullptr));
  ASSERT_NO_FATAL_FAILURE(Sync());
  ASSERT_NO_FATAL_FAILURE(Download(dy, &got));
  EXPECT_TRUE(SameBitsOrBothNan(got, want, x));
}

}  // namespace
}  // namespace opforge

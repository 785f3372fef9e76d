// Tests of the BiasLeakyRelu core against a reference written here (x + b, then the slope, in
// the compute type): every dtype, special values, alpha 0, in place, the same bits for every
// thread count, validation messages.
#include "ops/bias_leaky_relu/bias_leaky_relu.h"

#include <gtest/gtest.h>

#include <Eigen/Core>
#include <random>
#include <vector>

#include "common/parallel.h"
#include "common/status.h"
#include "common/test_util.h"

namespace opforge {
namespace {

using test::Contains;
using test::FloatTypes;
using test::SameBitsOrBothNan;
using test::TypeNames;

template <typename T>
class BiasLeakyReluTest : public ::testing::Test {};
TYPED_TEST_SUITE(BiasLeakyReluTest, FloatTypes, TypeNames);

TYPED_TEST(BiasLeakyReluTest, MatchesReference) {
  using T = TypeParam;
  using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const int64_t rows = 1000, ch = 13;
  std::vector<T> x = test::SpecialValues<T>();
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  while (static_cast<int64_t>(x.size()) < rows * ch) x.push_back(static_cast<T>(normal(rng)));
  x.resize(static_cast<size_t>(rows * ch));
  std::vector<T> b(static_cast<size_t>(ch));
  for (auto& v : b) v = static_cast<T>(normal(rng));
  for (float alpha : {0.1f, 0.0f}) {
    BiasLeakyReluParams p;
    p.alpha = alpha;
    OPFORGE_ASSERT_OK(ValidateBiasLeakyRelu({rows, ch}, {ch}, &p));
    std::vector<T> want(x.size()), got(x.size());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < ch; ++c) {
        const C z = static_cast<C>(x[r * ch + c]) + static_cast<C>(b[c]);
        want[r * ch + c] = static_cast<T>(z > C(0) ? z : z * static_cast<C>(alpha));
      }
    BiasLeakyRelu<T>(p, x.data(), b.data(), got.data(), ThreadParallel(3));
    EXPECT_TRUE(SameBitsOrBothNan(got, want)) << alpha;
    std::vector<T> inplace = x;
    BiasLeakyRelu<T>(p, inplace.data(), b.data(), inplace.data(), SerialParallel());
    EXPECT_TRUE(SameBitsOrBothNan(inplace, want)) << "in place, " << alpha;
  }
}

TEST(BiasLeakyReluTest, Validation) {
  BiasLeakyReluParams p;
  EXPECT_TRUE(
      Contains(ValidateBiasLeakyRelu({2, 3}, {2}, &p).message(),
               "BiasLeakyRelu: bias must be [3] (the last dimension of features), got [2]"));
  EXPECT_TRUE(
      Contains(ValidateBiasLeakyRelu({}, {1}, &p).message(), "features must be at least 1-D"));
  p.alpha = -0.5f;
  EXPECT_TRUE(
      Contains(ValidateBiasLeakyRelu({2, 3}, {3}, &p).message(), "alpha must be finite and >= 0"));
}

}  // namespace
}  // namespace opforge

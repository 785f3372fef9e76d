// Tests of the Swish core: validation messages, the CPU kernels against a double-precision
// reference (within a few ulps: the sigmoid is Eigen's, as TensorFlow's, accurate to 4.5 ulps
// in float), the structure that makes them TensorFlow's bits (packets, then a scalar tail, for
// any split of the range), special values, in-place calls and thread counts.
#include "ops/swish/swish.h"

#include <gtest/gtest.h>

#include <Eigen/Core>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "common/parallel.h"
#include "common/status.h"
#include "common/test_util.h"

namespace opforge {
namespace {

using test::BitPatternInputs;
using test::Contains;
using test::FloatTypes;
using test::SameBits;
using test::SpecialValues;
using test::TypeNames;
using test::Wide;

SwishParams Params(size_t size) {
  SwishParams p;
  p.size = static_cast<int64_t>(size);
  return p;
}

template <typename T>
std::vector<T> TestInputs(uint64_t seed) {
  return BitPatternInputs<T>(seed, SpecialValues<T>(), /*random_patterns=*/20000,
                             /*ordinary=*/20000 + 5);
}

template <typename T>
std::vector<T> Gradients(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  return test::UniformVector<T>(rng, static_cast<int64_t>(n), -8.0, 8.0);
}

long double Sigmoid(long double x) { return 1.0L / (1.0L + std::exp(-x)); }

// --- validation -------------------------------------------------------------------------------

TEST(ValidateSwishTest, SizesAndShapes) {
  EXPECT_TRUE(ValidateSwish(Params(0)).ok());
  SwishParams p;
  p.size = -1;
  const Status s = ValidateSwish(p);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.message(), "Swish"));
  EXPECT_TRUE(Contains(s.message(), "features"));
  EXPECT_TRUE(ValidateSwishGrad(Params(6), {2, 3}, {2, 3}).ok());
  const Status g = ValidateSwishGrad(Params(6), {2, 3}, {3, 2});
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.code(), Status::Code::kInvalidArgument);
  EXPECT_TRUE(Contains(g.message(), "SwishGrad"));
  EXPECT_TRUE(Contains(g.message(), "gradients"));
  EXPECT_TRUE(Contains(g.message(), "[2, 3]"));
  EXPECT_TRUE(Contains(g.message(), "[3, 2]"));
}

// --- kernels ----------------------------------------------------------------------------------

template <typename T>
class SwishKernelTest : public ::testing::Test {};
TYPED_TEST_SUITE(SwishKernelTest, FloatTypes, TypeNames);

// Within 8 eps of the exact value (relative, with an absolute floor of |x| times the smallest
// normal, as the sigmoid of very negative x is subnormal, plus the smallest subnormal, for
// subnormal results), NaN for NaN and for -inf (-inf * 0, as TensorFlow), +inf for +inf.
TYPED_TEST(SwishKernelTest, ForwardIsAccurate) {
  using T = TypeParam;
  const std::vector<T> x = TestInputs<T>(1);
  std::vector<T> y(x.size());
  SwishForward<T>(Params(x.size()), x.data(), y.data(), SerialParallel());
  const double eps = Wide(std::numeric_limits<T>::epsilon());
  const double tiny = Wide(std::numeric_limits<T>::min());
  // A subnormal result is a multiple of the smallest subnormal: up to half of it is rounding.
  const double denorm = Wide(std::numeric_limits<T>::denorm_min());
  int bad = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double xi = Wide(x[i]), yi = Wide(y[i]);
    if (std::isnan(xi) || xi == -INFINITY) {
      EXPECT_TRUE(std::isnan(yi)) << xi;
      continue;
    }
    if (xi == INFINITY) {
      EXPECT_EQ(yi, INFINITY);
      continue;
    }
    const long double want = xi * Sigmoid(xi);
    // The product may overflow only where x itself is near the largest value (s rounds to 1).
    if (std::isinf(yi)) {
      EXPECT_GE(std::fabs(xi), Wide(std::numeric_limits<T>::max()) * (1 - 2 * eps)) << xi;
      continue;
    }
    const double err = static_cast<double>(std::fabs(yi - want));
    if (err > 8 * eps * (std::fabs(static_cast<double>(want)) + std::fabs(xi) * tiny) + denorm &&
        ++bad < 5) {
      ADD_FAILURE() << "x " << xi << ": " << yi << ", want " << static_cast<double>(want);
    }
  }
  EXPECT_EQ(bad, 0);
}

// Within 16 eps of g * swish'(x), relative to |g| (1 + |x|) (the terms before they cancel near
// swish's minimum); NaN at +-inf, as TensorFlow's gradient (inf * 0).
TYPED_TEST(SwishKernelTest, BackwardIsAccurate) {
  using T = TypeParam;
  const std::vector<T> x = TestInputs<T>(2);
  const std::vector<T> g = Gradients<T>(x.size(), 3);
  std::vector<T> dx(x.size());
  SwishBackward<T>(Params(x.size()), g.data(), x.data(), dx.data(), SerialParallel());
  const double eps = Wide(std::numeric_limits<T>::epsilon());
  int bad = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double xi = Wide(x[i]), gi = Wide(g[i]), di = Wide(dx[i]);
    if (std::isnan(xi) || std::isinf(xi)) {
      EXPECT_TRUE(std::isnan(di)) << xi;
      continue;
    }
    const long double s = Sigmoid(xi);
    const long double want = gi * s * (1 + xi * (1 - s));
    const double err = static_cast<double>(std::fabs(di - want));
    if (!(err <= 16 * eps * std::fabs(gi) * (1 + std::fabs(xi))) && ++bad < 5) {
      ADD_FAILURE() << "x " << xi << ", g " << gi << ": " << di << ", want "
                    << static_cast<double>(want);
    }
  }
  EXPECT_EQ(bad, 0);
}

// TensorFlow's structure: the first size - size % P elements take the packet form, the rest the
// scalar form. So a prefix of whole packets has the same bits alone as inside a longer call, and
// every split of the range over threads gives the same bits.
TYPED_TEST(SwishKernelTest, PacketsThenTailForAnySplit) {
  using T = TypeParam;
  std::mt19937_64 rng(7);
  const std::vector<T> x = test::UniformVector<T>(rng, 100003, -20.0, 20.0);
  const std::vector<T> g = Gradients<T>(x.size(), 8);
  std::vector<T> y1(x.size()), d1(x.size());
  SwishForward<T>(Params(x.size()), x.data(), y1.data(), SerialParallel());
  SwishBackward<T>(Params(x.size()), g.data(), x.data(), d1.data(), SerialParallel());
  for (int threads : {2, 3, 7}) {
    std::vector<T> y(x.size()), d(x.size());
    SwishForward<T>(Params(x.size()), x.data(), y.data(), ThreadParallel(threads));
    SwishBackward<T>(Params(x.size()), g.data(), x.data(), d.data(), ThreadParallel(threads));
    EXPECT_TRUE(SameBits(y, y1, x)) << threads << " threads";
    EXPECT_TRUE(SameBits(d, d1, x)) << threads << " threads";
  }
  // A prefix of 64 whole packets (any packet size here divides 64) equals the long call's.
  std::vector<T> prefix(64 * 16);
  SwishForward<T>(Params(prefix.size()), x.data(), prefix.data(), SerialParallel());
  EXPECT_TRUE(SameBits(prefix, std::vector<T>(y1.begin(), y1.begin() + prefix.size())));
}

TYPED_TEST(SwishKernelTest, InPlaceEqualsOutOfPlace) {
  using T = TypeParam;
  const std::vector<T> x = TestInputs<T>(4);
  const std::vector<T> g = Gradients<T>(x.size(), 5);
  std::vector<T> y(x.size()), in_place = x;
  SwishForward<T>(Params(x.size()), x.data(), y.data(), ThreadParallel(2));
  SwishForward<T>(Params(x.size()), in_place.data(), in_place.data(), ThreadParallel(2));
  EXPECT_TRUE(SameBits(in_place, y, x));
  std::vector<T> dx(x.size()), dg = g, dxx = x;
  SwishBackward<T>(Params(x.size()), g.data(), x.data(), dx.data(), ThreadParallel(2));
  SwishBackward<T>(Params(x.size()), dg.data(), x.data(), dg.data(), ThreadParallel(2));
  SwishBackward<T>(Params(x.size()), g.data(), dxx.data(), dxx.data(), ThreadParallel(2));
  EXPECT_TRUE(SameBits(dg, dx, x));
  EXPECT_TRUE(SameBits(dxx, dx, x));
}

TYPED_TEST(SwishKernelTest, EmptyAndTinyCalls) {
  using T = TypeParam;
  SwishForward<T>(Params(0), nullptr, nullptr, ThreadParallel(2));
  SwishBackward<T>(Params(0), nullptr, nullptr, nullptr, ThreadParallel(2));
  const std::vector<T> x = {static_cast<T>(0.0f), static_cast<T>(-0.0f), static_cast<T>(1.0f)};
  std::vector<T> y(x.size());
  SwishForward<T>(Params(x.size()), x.data(), y.data(), SerialParallel());
  EXPECT_EQ(test::Bits(y[0]), test::Bits(static_cast<T>(0.0f)));
  EXPECT_EQ(test::Bits(y[1]), test::Bits(static_cast<T>(-0.0f)));  // -0 * 0.5
  EXPECT_NEAR(Wide(y[2]), 0.7310585786300049, 4 * Wide(std::numeric_limits<T>::epsilon()));
}

}  // namespace
}  // namespace opforge

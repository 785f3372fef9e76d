// Tests of the LeakyRelu core: validation messages, and the CPU kernels against a naive
// reference compared bit for bit (so NaN matches NaN of the same bits, and -0 differs from +0).
//
// The reference computes in double: the product of an element and alpha (both already of the
// element type) is exact in double for half, bfloat16 and float, so rounding it once to the
// element type gives the correctly rounded product that the kernel must produce. For half and
// bfloat16 every one of the 65536 bit patterns is checked.
#include "ops/leaky_relu/leaky_relu.h"

#include <gtest/gtest.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/parallel.h"
#include "common/status.h"
#include "common/test_util.h"
#include "ops/leaky_relu/leaky_relu_op.h"

namespace opforge {
namespace {

// The skeletons find the op structs' GPU paths (common/op_call.h), which TfKernel calls on a GPU.
static_assert(internal::HasGpu<LeakyReluOp<false>>::value &&
              internal::HasGpu<LeakyReluOp<true>>::value &&
              internal::HasGpu<LeakyReluGradOp>::value);

using test::BitPatternInputs;
using test::Bits;
using test::BitsOf;
using test::Contains;
using test::FloatTypes;
using test::FromBits;
using test::Narrow;
using test::SameBits;
using test::SpecialValues;
using test::TypeNames;
using test::Wide;

constexpr float kAlphas[] = {0.0f, 0.2f, 1.5f, -0.3f};

// --- the reference ----------------------------------------------------------------------------

// TensorFlow's LeakyRelu: alpha is first rounded to the element type, then multiplied.
template <typename T>
T RefForward(T x, float alpha) {
  return Wide(x) > 0.0 ? x : Narrow<T>(Wide(x) * Wide(static_cast<T>(alpha)));
}

template <typename T>
T RefMask(T x, float alpha) {
  return Wide(x) > 0.0 ? static_cast<T>(1.0f) : static_cast<T>(alpha);
}

template <typename T>
T RefBackward(T g, T x, float alpha) {
  return Wide(x) > 0.0 ? g : Narrow<T>(Wide(g) * Wide(static_cast<T>(alpha)));
}

// --- inputs -----------------------------------------------------------------------------------

// For half and bfloat16 every bit pattern; for float and double special values, random bit
// patterns (every exponent, NaNs, subnormals) and ordinary values around 0.
template <typename T>
std::vector<T> TestInputs(uint64_t seed) {
  return BitPatternInputs<T>(seed, SpecialValues<T>(), /*random_patterns=*/20000,
                             /*ordinary=*/20000);
}

template <typename T>
std::vector<T> Shuffled(std::vector<T> v, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::shuffle(v.begin(), v.end(), rng);
  return v;
}

LeakyReluParams Params(float alpha, size_t size) {
  LeakyReluParams p;
  p.alpha = alpha;
  p.size = static_cast<int64_t>(size);
  return p;
}

// --- validation -------------------------------------------------------------------------------

TEST(ValidateLeakyReluTest, FiniteAlphaIsAccepted) {
  for (float alpha :
       {0.0f, -0.0f, 0.2f, 1.5f, -0.3f, std::numeric_limits<float>::max(),
        std::numeric_limits<float>::lowest(), std::numeric_limits<float>::denorm_min()}) {
    const Status s = ValidateLeakyRelu(Params(alpha, 10));
    EXPECT_TRUE(s.ok()) << alpha << ": " << s.message();
  }
  EXPECT_TRUE(ValidateLeakyRelu(Params(0.2f, 0)).ok());
}

TEST(ValidateLeakyReluTest, NonFiniteAlphaIsRejected) {
  for (float alpha :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
        -std::numeric_limits<float>::infinity()}) {
    const Status s = ValidateLeakyRelu(Params(alpha, 10));
    ASSERT_FALSE(s.ok()) << alpha;
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
    EXPECT_TRUE(Contains(s.message(), "LeakyRelu"));
    EXPECT_TRUE(Contains(s.message(), "alpha"));
    EXPECT_TRUE(Contains(s.message(), "finite"));
  }
}

TEST(ValidateLeakyReluTest, NegativeSizeIsRejected) {
  LeakyReluParams p;
  p.size = -1;
  const Status s = ValidateLeakyRelu(p);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_TRUE(Contains(s.message(), "features"));
}

TEST(ValidateLeakyReluGradTest, MatchingShapesAreAccepted) {
  for (const std::vector<int64_t>& shape :
       {std::vector<int64_t>{}, std::vector<int64_t>{0, 4}, std::vector<int64_t>{2, 3}}) {
    const Status s = ValidateLeakyReluGrad(Params(0.2f, 6), shape, shape);
    EXPECT_TRUE(s.ok()) << ShapeString(shape) << ": " << s.message();
  }
}

TEST(ValidateLeakyReluGradTest, ShapeMismatchNamesGradientsAndBothShapes) {
  const std::pair<std::vector<int64_t>, std::vector<int64_t>> cases[] = {
      {{2, 3}, {3, 2}}, {{6}, {2, 3}}, {{}, {1}}, {{2, 3, 0}, {2, 3}}};
  for (const auto& [gradients, features] : cases) {
    const Status s = ValidateLeakyReluGrad(Params(0.2f, 6), gradients, features);
    ASSERT_FALSE(s.ok()) << ShapeString(gradients) << " vs " << ShapeString(features);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
    EXPECT_TRUE(Contains(s.message(), "LeakyReluGrad"));
    EXPECT_TRUE(Contains(s.message(), "gradients"));
    EXPECT_TRUE(Contains(s.message(), ShapeString(gradients)));
    EXPECT_TRUE(Contains(s.message(), ShapeString(features)));
  }
}

TEST(ValidateLeakyReluGradTest, NonFiniteAlphaIsRejected) {
  const Status s =
      ValidateLeakyReluGrad(Params(std::numeric_limits<float>::quiet_NaN(), 6), {2, 3}, {2, 3});
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.message(), "alpha"));
}

// --- kernels, for every element type ----------------------------------------------------------

template <typename T>
class LeakyReluKernelTest : public ::testing::Test {};
TYPED_TEST_SUITE(LeakyReluKernelTest, FloatTypes, TypeNames);

TYPED_TEST(LeakyReluKernelTest, ForwardMatchesReference) {
  using T = TypeParam;
  const std::vector<T> x = TestInputs<T>(1);
  for (float alpha : kAlphas) {
    SCOPED_TRACE(::testing::Message() << "alpha " << alpha);
    std::vector<T> want(x.size());
    for (size_t i = 0; i < x.size(); ++i) want[i] = RefForward(x[i], alpha);
    std::vector<T> y(x.size(), static_cast<T>(123.0f));
    LeakyReluForward<T>(Params(alpha, x.size()), x.data(), y.data(), nullptr, SerialParallel());
    EXPECT_TRUE(SameBits(y, want, x));
  }
}

TYPED_TEST(LeakyReluKernelTest, ForwardWithMaskMatchesReference) {
  using T = TypeParam;
  const std::vector<T> x = TestInputs<T>(2);
  for (float alpha : kAlphas) {
    SCOPED_TRACE(::testing::Message() << "alpha " << alpha);
    std::vector<T> want_y(x.size()), want_mask(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      want_y[i] = RefForward(x[i], alpha);
      want_mask[i] = RefMask(x[i], alpha);
    }
    std::vector<T> y(x.size(), static_cast<T>(123.0f)), mask(x.size(), static_cast<T>(123.0f));
    LeakyReluForward<T>(Params(alpha, x.size()), x.data(), y.data(), mask.data(), SerialParallel());
    EXPECT_TRUE(SameBits(y, want_y, x));
    EXPECT_TRUE(SameBits(mask, want_mask, x));
  }
}

TYPED_TEST(LeakyReluKernelTest, BackwardMatchesReference) {
  using T = TypeParam;
  const std::vector<T> x = TestInputs<T>(3);
  const std::vector<T> g = Shuffled(TestInputs<T>(4), 5);
  ASSERT_EQ(g.size(), x.size());
  for (float alpha : kAlphas) {
    SCOPED_TRACE(::testing::Message() << "alpha " << alpha);
    std::vector<T> want(x.size());
    for (size_t i = 0; i < x.size(); ++i) want[i] = RefBackward(g[i], x[i], alpha);
    std::vector<T> dx(x.size(), static_cast<T>(123.0f));
    LeakyReluBackward<T>(Params(alpha, x.size()), g.data(), x.data(), dx.data(), SerialParallel());
    EXPECT_TRUE(SameBits(dx, want, x));
  }
}

// Known values with alpha = 0.25, exact in every type, written out rather than computed.
TYPED_TEST(LeakyReluKernelTest, KnownValues) {
  using T = TypeParam;
  auto t = [](float v) { return static_cast<T>(v); };
  const std::vector<T> x = {t(-4), t(-1), t(0.5f), t(3), t(-0.5f), t(64)};
  const std::vector<T> want_y = {t(-1), t(-0.25f), t(0.5f), t(3), t(-0.125f), t(64)};
  const std::vector<T> want_mask = {t(0.25f), t(0.25f), t(1), t(1), t(0.25f), t(1)};
  const std::vector<T> g = {t(2), t(-8), t(5), t(-7), t(1), t(0.5f)};
  const std::vector<T> want_dx = {t(0.5f), t(-2), t(5), t(-7), t(0.25f), t(0.5f)};
  std::vector<T> y(x.size()), mask(x.size()), dx(x.size());
  LeakyReluForward<T>(Params(0.25f, x.size()), x.data(), y.data(), mask.data(), SerialParallel());
  LeakyReluBackward<T>(Params(0.25f, x.size()), g.data(), x.data(), dx.data(), SerialParallel());
  EXPECT_TRUE(SameBits(y, want_y, x));
  EXPECT_TRUE(SameBits(mask, want_mask, x));
  EXPECT_TRUE(SameBits(dx, want_dx, x));
}

// NaN stays NaN, +inf stays +inf, -inf becomes -inf * alpha: -inf, +inf, or NaN when alpha is 0
// (-inf * 0 is NaN, exactly as TensorFlow's x > 0 ? x : x * alpha gives).
TYPED_TEST(LeakyReluKernelTest, NanAndInfinityPassThrough) {
  using T = TypeParam;
  using L = std::numeric_limits<T>;
  const std::vector<T> x = {L::quiet_NaN(), -L::quiet_NaN(), L::infinity(), -L::infinity()};
  for (float alpha : kAlphas) {
    SCOPED_TRACE(::testing::Message() << "alpha " << alpha);
    std::vector<T> y(x.size()), mask(x.size());
    LeakyReluForward<T>(Params(alpha, x.size()), x.data(), y.data(), mask.data(), SerialParallel());
    EXPECT_TRUE(std::isnan(Wide(y[0])));
    EXPECT_TRUE(std::isnan(Wide(y[1])));
    EXPECT_EQ(Bits(y[2]), Bits(L::infinity()));
    if (alpha == 0.0f) {
      EXPECT_TRUE(std::isnan(Wide(y[3])));
    } else if (alpha > 0.0f) {
      EXPECT_EQ(Bits(y[3]), Bits(-L::infinity()));
    } else {
      EXPECT_EQ(Bits(y[3]), Bits(L::infinity()));
    }
    // The mask is 1 only where x > 0.
    EXPECT_EQ(Bits(mask[0]), Bits(static_cast<T>(alpha)));
    EXPECT_EQ(Bits(mask[2]), Bits(static_cast<T>(1.0f)));
    EXPECT_EQ(Bits(mask[3]), Bits(static_cast<T>(alpha)));

    // Backward: a NaN or infinite gradient passes where x > 0 and is scaled elsewhere.
    const std::vector<T> g = {L::infinity(), L::quiet_NaN(), -L::infinity(), L::infinity()};
    std::vector<T> dx(x.size());
    LeakyReluBackward<T>(Params(alpha, x.size()), g.data(), x.data(), dx.data(), SerialParallel());
    EXPECT_EQ(Bits(dx[2]), Bits(-L::infinity()));  // x = +inf > 0: g passes
    EXPECT_TRUE(std::isnan(Wide(dx[1])));
    if (alpha == 0.0f) {
      EXPECT_TRUE(std::isnan(Wide(dx[0])));  // inf * 0
      EXPECT_TRUE(std::isnan(Wide(dx[3])));
    } else {
      const T want = alpha > 0.0f ? L::infinity() : -L::infinity();
      EXPECT_EQ(Bits(dx[0]), Bits(want));
      EXPECT_EQ(Bits(dx[3]), Bits(want));
    }
  }
}

// x == 0 (either sign) is not positive: the gradient there is alpha * g.
TYPED_TEST(LeakyReluKernelTest, GradientAtZeroIsAlphaTimesG) {
  using T = TypeParam;
  auto t = [](float v) { return static_cast<T>(v); };
  const std::vector<T> x = {t(0), t(-0.0f), t(0), t(-0.0f)};
  const std::vector<T> g = {t(1), t(-2), t(3.5f), t(0.75f)};
  {
    // alpha = 0.25 is exact in every type, so the products are known.
    std::vector<T> dx(x.size());
    LeakyReluBackward<T>(Params(0.25f, x.size()), g.data(), x.data(), dx.data(), SerialParallel());
    EXPECT_TRUE(SameBits(dx, std::vector<T>{t(0.25f), t(-0.5f), t(0.875f), t(0.1875f)}, x));
  }
  for (float alpha : kAlphas) {
    SCOPED_TRACE(::testing::Message() << "alpha " << alpha);
    std::vector<T> dx(x.size()), want(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      want[i] = Narrow<T>(Wide(g[i]) * Wide(static_cast<T>(alpha)));
    }
    LeakyReluBackward<T>(Params(alpha, x.size()), g.data(), x.data(), dx.data(), SerialParallel());
    EXPECT_TRUE(SameBits(dx, want, x));
  }
}

// The forward pass at x == +-0 gives x * alpha: a zero whose sign is the product's.
TYPED_TEST(LeakyReluKernelTest, ForwardAtZeroKeepsTheProductsSign) {
  using T = TypeParam;
  const std::vector<T> x = {static_cast<T>(0.0f), static_cast<T>(-0.0f)};
  for (float alpha : kAlphas) {
    std::vector<T> y(2);
    LeakyReluForward<T>(Params(alpha, 2), x.data(), y.data(), nullptr, SerialParallel());
    const bool negative_alpha = std::signbit(alpha);
    EXPECT_EQ(std::signbit(Wide(y[0])), negative_alpha) << alpha;
    EXPECT_EQ(std::signbit(Wide(y[1])), !negative_alpha) << alpha;
    EXPECT_EQ(Wide(y[0]), 0.0);
    EXPECT_EQ(Wide(y[1]), 0.0);
  }
}

TYPED_TEST(LeakyReluKernelTest, InPlace) {
  using T = TypeParam;
  const std::vector<T> x = TestInputs<T>(6);
  const std::vector<T> g = Shuffled(TestInputs<T>(7), 8);
  for (float alpha : kAlphas) {
    SCOPED_TRACE(::testing::Message() << "alpha " << alpha);
    std::vector<T> want_y(x.size()), want_mask(x.size()), want_dx(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      want_y[i] = RefForward(x[i], alpha);
      want_mask[i] = RefMask(x[i], alpha);
      want_dx[i] = RefBackward(g[i], x[i], alpha);
    }
    const ThreadParallel parallel(3);
    std::vector<T> buf = x;  // y aliases x
    LeakyReluForward<T>(Params(alpha, x.size()), buf.data(), buf.data(), nullptr, parallel);
    EXPECT_TRUE(SameBits(buf, want_y, x));
    buf = x;
    std::vector<T> mask(x.size());
    LeakyReluForward<T>(Params(alpha, x.size()), buf.data(), buf.data(), mask.data(), parallel);
    EXPECT_TRUE(SameBits(buf, want_y, x));
    EXPECT_TRUE(SameBits(mask, want_mask, x));
    buf = g;  // dx aliases g
    LeakyReluBackward<T>(Params(alpha, x.size()), buf.data(), x.data(), buf.data(), parallel);
    EXPECT_TRUE(SameBits(buf, want_dx, x));
  }
}

TYPED_TEST(LeakyReluKernelTest, SizeZero) {
  using T = TypeParam;
  const SerialParallel serial;
  const ThreadParallel threads(4);
  for (const Parallel* p :
       {static_cast<const Parallel*>(&serial), static_cast<const Parallel*>(&threads)}) {
    // No buffers at all...
    LeakyReluForward<T>(Params(0.2f, 0), nullptr, nullptr, nullptr, *p);
    LeakyReluBackward<T>(Params(0.2f, 0), nullptr, nullptr, nullptr, *p);
    // ...and real buffers, which must be left alone.
    const T x[1] = {static_cast<T>(-1.0f)};
    T y[1] = {static_cast<T>(7.0f)}, mask[1] = {static_cast<T>(7.0f)};
    LeakyReluForward<T>(Params(0.2f, 0), x, y, mask, *p);
    LeakyReluBackward<T>(Params(0.2f, 0), x, x, y, *p);
    EXPECT_EQ(Bits(y[0]), Bits(static_cast<T>(7.0f)));
    EXPECT_EQ(Bits(mask[0]), Bits(static_cast<T>(7.0f)));
  }
}

// Every partition of the range gives the same bits (and the reference's).
TYPED_TEST(LeakyReluKernelTest, ThreadCountsGiveIdenticalBits) {
  using T = TypeParam;
  const size_t n = (size_t{1} << 20) + 13;
  std::mt19937_64 rng(9);
  std::uniform_real_distribution<float> value(-4.0f, 4.0f);
  std::vector<T> x(n), g(n);
  for (auto& v : x) v = static_cast<T>(value(rng));
  for (auto& v : g) v = static_cast<T>(value(rng));
  const float alpha = 0.2f;
  std::vector<T> want_y(n), want_mask(n), want_dx(n);
  for (size_t i = 0; i < n; ++i) {
    want_y[i] = RefForward(x[i], alpha);
    want_mask[i] = RefMask(x[i], alpha);
    want_dx[i] = RefBackward(g[i], x[i], alpha);
  }
  std::vector<T> serial_y(n), serial_mask(n), serial_dx(n);
  LeakyReluForward<T>(Params(alpha, n), x.data(), serial_y.data(), serial_mask.data(),
                      SerialParallel());
  LeakyReluBackward<T>(Params(alpha, n), g.data(), x.data(), serial_dx.data(), SerialParallel());
  EXPECT_TRUE(SameBits(serial_y, want_y, x));
  EXPECT_TRUE(SameBits(serial_mask, want_mask, x));
  EXPECT_TRUE(SameBits(serial_dx, want_dx, x));
  for (int threads : {1, 2, 3, 7}) {
    SCOPED_TRACE(::testing::Message() << threads << " threads");
    const ThreadParallel parallel(threads);
    std::vector<T> y(n), y_only(n), mask(n), dx(n);
    LeakyReluForward<T>(Params(alpha, n), x.data(), y_only.data(), nullptr, parallel);
    LeakyReluForward<T>(Params(alpha, n), x.data(), y.data(), mask.data(), parallel);
    LeakyReluBackward<T>(Params(alpha, n), g.data(), x.data(), dx.data(), parallel);
    EXPECT_EQ(std::memcmp(y_only.data(), serial_y.data(), n * sizeof(T)), 0);
    EXPECT_EQ(std::memcmp(y.data(), serial_y.data(), n * sizeof(T)), 0);
    EXPECT_EQ(std::memcmp(mask.data(), serial_mask.data(), n * sizeof(T)), 0);
    EXPECT_EQ(std::memcmp(dx.data(), serial_dx.data(), n * sizeof(T)), 0);
  }
}

}  // namespace
}  // namespace opforge

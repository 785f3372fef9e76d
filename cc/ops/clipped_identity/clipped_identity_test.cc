// Tests of the ClippedIdentity core: validation messages, and the CPU kernels against a naive
// reference compared bit for bit (NaN passes through, -0 stays -0 against a bound of +0). The
// reference computes in double: the bounds and leak are first rounded to the element type, and
// the product g * leak of two element-type values is exact in double, so rounding it once gives
// the correctly rounded product the kernel must produce. For half and bfloat16 every bit
// pattern is checked.
#include "ops/clipped_identity/clipped_identity.h"

#include <gtest/gtest.h>

#include <Eigen/Core>
#include <algorithm>
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
using test::Narrow;
using test::SameBits;
using test::SpecialValues;
using test::TypeNames;
using test::Wide;

struct Attrs {
  float clip_min, clip_max, leak;
};
constexpr Attrs kAttrs[] = {{-1.0f, 1.0f, 0.01f}, {0.0f, 6.0f, 0.1f},  {-0.3f, 0.3f, -0.5f},
                            {2.5f, 2.5f, 0.0f},   {-0.0f, 0.0f, 1.5f}, {-1e30f, 1e30f, 0.2f}};

ClippedIdentityParams Params(const Attrs& a, size_t size) {
  ClippedIdentityParams p;
  p.clip_min = a.clip_min;
  p.clip_max = a.clip_max;
  p.leak = a.leak;
  p.size = static_cast<int64_t>(size);
  return p;
}

template <typename T>
T RefForward(T x, const Attrs& a) {
  const T lo = static_cast<T>(a.clip_min), hi = static_cast<T>(a.clip_max);
  if (Wide(x) < Wide(lo)) return lo;
  if (Wide(x) > Wide(hi)) return hi;
  return x;
}

template <typename T>
T RefBackward(T g, T x, const Attrs& a) {
  const double lo = Wide(static_cast<T>(a.clip_min)), hi = Wide(static_cast<T>(a.clip_max));
  if (Wide(x) < lo || Wide(x) > hi) return Narrow<T>(Wide(g) * Wide(static_cast<T>(a.leak)));
  return g;
}

template <typename T>
std::vector<T> TestInputs(uint64_t seed) {
  return BitPatternInputs<T>(seed, SpecialValues<T>(), /*random_patterns=*/20000,
                             /*ordinary=*/20000);
}

// --- validation -------------------------------------------------------------------------------

TEST(ValidateClippedIdentityTest, GoodAttrsAreAccepted) {
  for (const Attrs& a : kAttrs) {
    const Status s = ValidateClippedIdentity(Params(a, 10));
    EXPECT_TRUE(s.ok()) << s.message();
  }
}

TEST(ValidateClippedIdentityTest, BadAttrsNameTheArgument) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const struct {
    Attrs attrs;
    const char* argument;
    const char* expected;
  } cases[] = {{{nan, 1.0f, 0.01f}, "clip_min", "finite"},
               {{-inf, 1.0f, 0.01f}, "clip_min", "finite"},
               {{-1.0f, inf, 0.01f}, "clip_max", "finite"},
               {{-1.0f, nan, 0.01f}, "clip_max", "finite"},
               {{1.0f, -1.0f, 0.01f}, "clip_max", "at least clip_min"},
               {{-1.0f, 1.0f, nan}, "leak", "finite"},
               {{-1.0f, 1.0f, -inf}, "leak", "finite"}};
  for (const auto& c : cases) {
    const Status s = ValidateClippedIdentity(Params(c.attrs, 10));
    ASSERT_FALSE(s.ok()) << c.argument;
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
    EXPECT_TRUE(Contains(s.message(), "ClippedIdentity"));
    EXPECT_TRUE(Contains(s.message(), c.argument));
    EXPECT_TRUE(Contains(s.message(), c.expected)) << s.message();
  }
  ClippedIdentityParams p;
  p.size = -1;
  EXPECT_FALSE(ValidateClippedIdentity(p).ok());
}

TEST(ValidateClippedIdentityTest, GradShapesMustMatch) {
  const ClippedIdentityParams p = Params(kAttrs[0], 6);
  EXPECT_TRUE(ValidateClippedIdentityGrad(p, {2, 3}, {2, 3}).ok());
  const Status s = ValidateClippedIdentityGrad(p, {2, 3}, {3, 2});
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.message(), "gradients"));
  EXPECT_TRUE(Contains(s.message(), "[2, 3]"));
  EXPECT_TRUE(Contains(s.message(), "[3, 2]"));
}

// --- kernels ----------------------------------------------------------------------------------

template <typename T>
class ClippedIdentityKernelTest : public ::testing::Test {};
TYPED_TEST_SUITE(ClippedIdentityKernelTest, FloatTypes, TypeNames);

TYPED_TEST(ClippedIdentityKernelTest, ForwardMatchesReference) {
  using T = TypeParam;
  const std::vector<T> x = TestInputs<T>(1);
  for (const Attrs& a : kAttrs) {
    SCOPED_TRACE(::testing::Message() << "clip " << a.clip_min << ".." << a.clip_max);
    std::vector<T> want(x.size()), y(x.size());
    std::transform(x.begin(), x.end(), want.begin(), [&](T v) { return RefForward(v, a); });
    for (int threads : {1, 3}) {
      ClippedIdentityForward<T>(Params(a, x.size()), x.data(), y.data(), ThreadParallel(threads));
      EXPECT_TRUE(SameBits(y, want, x));
    }
    std::vector<T> in_place = x;
    ClippedIdentityForward<T>(Params(a, x.size()), in_place.data(), in_place.data(),
                              ThreadParallel(2));
    EXPECT_TRUE(SameBits(in_place, want, x));
  }
}

TYPED_TEST(ClippedIdentityKernelTest, BackwardMatchesReference) {
  using T = TypeParam;
  const std::vector<T> x = TestInputs<T>(2);
  std::vector<T> g = TestInputs<T>(3);
  std::shuffle(g.begin(), g.end(), std::mt19937_64(4));
  for (const Attrs& a : kAttrs) {
    SCOPED_TRACE(::testing::Message() << "leak " << a.leak);
    std::vector<T> want(x.size()), dx(x.size());
    for (size_t i = 0; i < x.size(); ++i) want[i] = RefBackward(g[i], x[i], a);
    for (int threads : {1, 3}) {
      ClippedIdentityBackward<T>(Params(a, x.size()), g.data(), x.data(), dx.data(),
                                 ThreadParallel(threads));
      EXPECT_TRUE(SameBits(dx, want, x));
    }
    std::vector<T> dg = g, dxx = x;
    ClippedIdentityBackward<T>(Params(a, x.size()), dg.data(), x.data(), dg.data(),
                               SerialParallel());
    ClippedIdentityBackward<T>(Params(a, x.size()), g.data(), dxx.data(), dxx.data(),
                               SerialParallel());
    EXPECT_TRUE(SameBits(dg, want, x));
    EXPECT_TRUE(SameBits(dxx, want, x));
  }
}

TYPED_TEST(ClippedIdentityKernelTest, BoundsAreInsideAndNanPassesThrough) {
  using T = TypeParam;
  const Attrs a = {-1.0f, 1.0f, 0.25f};
  const std::vector<T> x = {static_cast<T>(-1.0f), static_cast<T>(1.0f), static_cast<T>(2.0f),
                            std::numeric_limits<T>::quiet_NaN(),
                            -std::numeric_limits<T>::infinity()};
  const std::vector<T> g(x.size(), static_cast<T>(4.0f));
  std::vector<T> y(x.size()), dx(x.size());
  ClippedIdentityForward<T>(Params(a, x.size()), x.data(), y.data(), SerialParallel());
  ClippedIdentityBackward<T>(Params(a, x.size()), g.data(), x.data(), dx.data(), SerialParallel());
  EXPECT_EQ(Wide(y[0]), -1.0);
  EXPECT_EQ(Wide(y[1]), 1.0);
  EXPECT_EQ(Wide(y[2]), 1.0);
  EXPECT_TRUE(std::isnan(Wide(y[3])));
  EXPECT_EQ(Wide(y[4]), -1.0);
  EXPECT_EQ(Wide(dx[0]), 4.0);  // the bounds are inside
  EXPECT_EQ(Wide(dx[1]), 4.0);
  EXPECT_EQ(Wide(dx[2]), 1.0);  // leak * g
  EXPECT_EQ(Wide(dx[3]), 4.0);  // NaN counts as inside
  EXPECT_EQ(Wide(dx[4]), 1.0);
}

TYPED_TEST(ClippedIdentityKernelTest, EmptyIsANoOp) {
  using T = TypeParam;
  ClippedIdentityForward<T>(Params(kAttrs[0], 0), nullptr, nullptr, ThreadParallel(2));
  ClippedIdentityBackward<T>(Params(kAttrs[0], 0), nullptr, nullptr, nullptr, ThreadParallel(2));
}

}  // namespace
}  // namespace opforge

// Tests of the ElementMul core: validation messages, the forward kernel against a naive
// broadcast loop (bit-exact, integers wrapping), the gradient against a naive loop that sums in
// double (exact for integers and for operands that were not broadcast), and identical bits for
// every thread count. Then the summation order of element_mul_reduce.h, which the CUDA kernels
// share: the CPU kernel follows it bit for bit, the pieces the GPU assembles (its 32-bit
// divisions, index maps and shortcuts) give the same bits on the host.
//
// The naive loops work on the full, uncollapsed shapes: each output multi-index is mapped to
// each operand by the NumPy rule, independently of the plan's collapsed strides.
#include "ops/element_mul/element_mul.h"

#include <gtest/gtest.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "common/arith.h"
#include "common/broadcast_plan.h"
#include "common/parallel.h"
#include "common/status.h"
#include "common/test_util.h"
#include "ops/element_mul/element_mul_reduce.h"

namespace opforge {
namespace {

using test::AllTypes;
using test::Bits;
using test::Contains;
using test::Describe;
using test::ForEachOutput;
using test::IntTypes;
using test::kIsInt;
using test::NamesWord;
using test::Narrow;
using test::NumElements;
using test::RandomShapePair;
using test::RandomVector;
using test::RefBroadcastShape;
using test::SameBitsOrBothNan;
using test::Shape;
using test::ShapePair;
using test::TypeNames;
using test::Wide;

// --- element types ----------------------------------------------------------------------------

// Two's-complement wrap-around, computed modulo 2^64 in unsigned arithmetic.
template <typename T>
T WrapMul(T a, T b) {
  return static_cast<T>(static_cast<uint64_t>(static_cast<int64_t>(a)) *
                        static_cast<uint64_t>(static_cast<int64_t>(b)));
}

// The product the forward kernel must give: correctly rounded, or wrapped for integers.
template <typename T>
T RefMul(T a, T b) {
  if constexpr (kIsInt<T>) {
    return WrapMul(a, b);
  } else {
    return Narrow<T>(Wide(a) * Wide(b));
  }
}

// The special values that RandomVector mixes into floating inputs.
template <typename T>
std::vector<T> Specials() {
  using L = std::numeric_limits<T>;
  return {L::infinity(),        -L::infinity(),        L::quiet_NaN(),
          static_cast<T>(0.0f), static_cast<T>(-0.0f), L::max(),
          L::lowest(),          L::denorm_min(),       L::min()};
}

BroadcastPlan PlanOrDie(const Shape& a, const Shape& b) {
  BroadcastPlan plan;
  const Status s = ValidateElementMul(a, b, &plan);
  EXPECT_TRUE(s.ok()) << s.message();
  return plan;
}

// --- validation -------------------------------------------------------------------------------

TEST(ValidateElementMulTest, CompatibleShapesGiveTheBroadcastShape) {
  BroadcastPlan plan;
  ASSERT_TRUE(ValidateElementMul({4, 1, 3}, {5, 1}, &plan).ok());
  EXPECT_EQ(plan.out_shape, Shape({4, 5, 3}));
  EXPECT_EQ(plan.out_size, 60);
  ASSERT_TRUE(ValidateElementMul({}, {0, 2}, &plan).ok());
  EXPECT_EQ(plan.out_shape, Shape({0, 2}));
  EXPECT_EQ(plan.out_size, 0);
}

TEST(ValidateElementMulTest, IncompatibleShapesNameAAndB) {
  const std::pair<Shape, Shape> cases[] = {{{2, 3}, {4}}, {{5, 2}, {3, 1, 3}}, {{0}, {3}}};
  for (const auto& [a, b] : cases) {
    BroadcastPlan plan;
    const Status s = ValidateElementMul(a, b, &plan);
    ASSERT_FALSE(s.ok()) << ShapeString(a) << " * " << ShapeString(b);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
    EXPECT_TRUE(Contains(s.message(), "ElementMul"));
    EXPECT_TRUE(NamesWord(s.message(), "a"));
    EXPECT_TRUE(NamesWord(s.message(), "b"));
    EXPECT_TRUE(Contains(s.message(), ShapeString(a)));
    EXPECT_TRUE(Contains(s.message(), ShapeString(b)));
  }
}

TEST(ValidateElementMulTest, NegativeDimensionIsRejected) {
  BroadcastPlan plan;
  const Status s = ValidateElementMul({2, 3}, {-1, 3}, &plan);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(NamesWord(s.message(), "b"));
}

TEST(ValidateElementMulTest, ElementCountOverflowIsRejected) {
  BroadcastPlan plan;
  const Status s = ValidateElementMul({int64_t{1} << 32, 1}, {int64_t{1} << 32}, &plan);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_TRUE(NamesWord(s.message(), "a"));
  EXPECT_TRUE(NamesWord(s.message(), "b"));
}

TEST(ValidateElementMulGradTest, MatchingGradIsAccepted) {
  BroadcastPlan plan;
  const Status s = ValidateElementMulGrad({2, 3}, {2, 1}, {3}, &plan);
  EXPECT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(plan.out_shape, Shape({2, 3}));
  EXPECT_TRUE(ValidateElementMulGrad({1}, {}, {1}, &plan).ok());
  EXPECT_FALSE(ValidateElementMulGrad({}, {}, {1}, &plan).ok());  // the broadcast shape is [1]
}

TEST(ValidateElementMulGradTest, GradOfTheWrongShapeNamesGrad) {
  struct Case {
    Shape grad, a, b;
  };
  const Case cases[] = {{{3, 2}, {2, 1}, {3}},
                        {{3}, {2, 1}, {3}},
                        {{1, 2, 3}, {2, 1}, {3}},
                        {{}, {2}, {2}},
                        {{0, 3}, {2, 3}, {2, 3}}};
  for (const auto& c : cases) {
    BroadcastPlan plan;
    const Status s = ValidateElementMulGrad(c.grad, c.a, c.b, &plan);
    ASSERT_FALSE(s.ok()) << ShapeString(c.grad);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
    EXPECT_TRUE(Contains(s.message(), "ElementMulGrad"));
    EXPECT_TRUE(NamesWord(s.message(), "grad"));
    EXPECT_TRUE(Contains(s.message(), ShapeString(c.grad)));
    EXPECT_TRUE(Contains(s.message(), ShapeString(*RefBroadcastShape(c.a, c.b))));
  }
}

TEST(ValidateElementMulGradTest, IncompatibleOperandsNameAAndB) {
  BroadcastPlan plan;
  const Status s = ValidateElementMulGrad({2, 3}, {2, 3}, {4}, &plan);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.message(), "ElementMulGrad"));
  EXPECT_TRUE(NamesWord(s.message(), "a"));
  EXPECT_TRUE(NamesWord(s.message(), "b"));
  EXPECT_TRUE(Contains(s.message(), "[2, 3]"));
  EXPECT_TRUE(Contains(s.message(), "[4]"));
}

// --- kernels, for every element type ----------------------------------------------------------

template <typename T>
class ElementMulKernelTest : public ::testing::Test {};
TYPED_TEST_SUITE(ElementMulKernelTest, AllTypes, TypeNames);

template <typename T>
std::vector<T> RefForward(const Shape& as, const Shape& bs, const std::vector<T>& a,
                          const std::vector<T>& b) {
  std::vector<T> out(NumElements(*RefBroadcastShape(as, bs)));
  ForEachOutput(as, bs, [&](int64_t o, int64_t ia, int64_t ib) { out[o] = RefMul(a[ia], b[ib]); });
  return out;
}

TYPED_TEST(ElementMulKernelTest, ForwardMatchesNaiveBroadcast) {
  using T = TypeParam;
  std::mt19937_64 rng(101);
  const SerialParallel serial;
  const ThreadParallel threads(3);
  for (int iter = 0; iter < 150; ++iter) {
    const ShapePair p = RandomShapePair(rng, 5, 3000, /*zero_percent=*/8);
    SCOPED_TRACE(ShapeString(p.a) + " * " + ShapeString(p.b));
    const BroadcastPlan plan = PlanOrDie(p.a, p.b);
    const auto a = RandomVector<T>(rng, NumElements(p.a), Specials<T>());
    const auto b = RandomVector<T>(rng, NumElements(p.b), Specials<T>());
    const auto want = RefForward(p.a, p.b, a, b);
    for (const Parallel* parallel :
         {static_cast<const Parallel*>(&serial), static_cast<const Parallel*>(&threads)}) {
      std::vector<T> out(plan.out_size, static_cast<T>(77));
      ElementMulForward<T>(plan, a.data(), b.data(), out.data(), *parallel);
      ASSERT_TRUE(SameBitsOrBothNan(out, want));
    }
  }
}

TYPED_TEST(ElementMulKernelTest, ForwardOfFixedShapes) {
  using T = TypeParam;
  std::mt19937_64 rng(102);
  const std::pair<Shape, Shape> cases[] = {
      {{}, {}},         {{7}, {}},           {{}, {7}},           {{6, 5}, {6, 5}},
      {{6, 5}, {5}},    {{6, 1}, {5}},       {{1, 5}, {6, 1}},    {{4, 1, 3}, {1, 5, 1}},
      {{2, 3, 4}, {4}}, {{2, 3, 4}, {3, 1}}, {{1, 1, 9}, {9, 1}}, {{0, 3}, {3}},
      {{129}, {129}},   {{3, 129}, {1}},     {{129, 1}, {1, 3}},
  };
  for (const auto& [as, bs] : cases) {
    SCOPED_TRACE(ShapeString(as) + " * " + ShapeString(bs));
    const BroadcastPlan plan = PlanOrDie(as, bs);
    const auto a = RandomVector<T>(rng, NumElements(as));
    const auto b = RandomVector<T>(rng, NumElements(bs));
    std::vector<T> out(plan.out_size, static_cast<T>(77));
    ElementMulForward<T>(plan, a.data(), b.data(), out.data(), SerialParallel());
    EXPECT_TRUE(SameBitsOrBothNan(out, RefForward(as, bs, a, b)));
  }
}

// The reference gradient of one operand: sums in double (wrapping uint64 for integers), with
// the sum of absolute values and the number of terms for the tolerance.
template <typename T>
struct RefGrad {
  std::vector<double> sum, abs_sum;
  std::vector<uint64_t> wrapped;
  std::vector<int64_t> terms;
  std::vector<T> single;  // the one product, for an operand that was not broadcast
};

template <typename T>
RefGrad<T> RefGradient(const Shape& target, const Shape& other, const std::vector<T>& g,
                       const std::vector<T>& o) {
  const size_t n = static_cast<size_t>(NumElements(target));
  RefGrad<T> r;
  r.sum.assign(n, 0.0);
  r.abs_sum.assign(n, 0.0);
  r.wrapped.assign(n, 0);
  r.terms.assign(n, 0);
  r.single.assign(n, static_cast<T>(0));
  ForEachOutput(target, other, [&](int64_t i, int64_t it, int64_t io) {
    if constexpr (kIsInt<T>) {
      r.wrapped[it] += static_cast<uint64_t>(static_cast<int64_t>(g[i])) *
                       static_cast<uint64_t>(static_cast<int64_t>(o[io]));
    } else {
      const double p = Wide(g[i]) * Wide(o[io]);
      r.sum[it] += p;
      r.abs_sum[it] += std::fabs(p);
    }
    r.single[it] = RefMul(g[i], o[io]);
    ++r.terms[it];
  });
  return r;
}

template <typename T>
::testing::AssertionResult GradMatches(const std::vector<T>& got, const RefGrad<T>& want,
                                       bool broadcast) {
  using L = std::numeric_limits<T>;
  auto failure = ::testing::AssertionFailure();
  int64_t count = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    bool ok;
    std::string expected;
    if constexpr (kIsInt<T>) {
      const T w = static_cast<T>(want.wrapped[i]);
      ok = got[i] == w;
      expected = Describe(w);
    } else if (!broadcast) {
      // One product per element: exactly the correctly rounded product.
      ok = Bits(got[i]) == Bits(want.single[i]);
      expected = Describe(want.single[i]);
    } else {
      // Sums of want.terms products, accumulated in float (double for double) in some order,
      // then rounded once to T.
      const double acc_eps = std::is_same_v<T, double> ? std::numeric_limits<double>::epsilon()
                                                       : std::numeric_limits<float>::epsilon();
      const double tol = Wide(L::epsilon()) * std::fabs(want.sum[i]) +
                         2.0 * static_cast<double>(want.terms[i] + 1) * acc_eps * want.abs_sum[i] +
                         Wide(L::denorm_min());
      ok = std::fabs(Wide(got[i]) - want.sum[i]) <= tol;
      std::ostringstream s;
      s << want.sum[i] << " +- " << tol;
      expected = s.str();
    }
    if (!ok && count++ < 8) {
      failure << "\n  [" << i << "] got " << Describe(got[i]) << ", want " << expected << " ("
              << want.terms[i] << " terms)";
    }
  }
  if (count == 0) return ::testing::AssertionSuccess();
  return failure << "\n  " << count << " of " << got.size() << " elements differ";
}

TYPED_TEST(ElementMulKernelTest, BackwardMatchesNaiveReduction) {
  using T = TypeParam;
  std::mt19937_64 rng(103);
  const SerialParallel serial;
  const ThreadParallel threads(3);
  for (int iter = 0; iter < 150; ++iter) {
    const ShapePair p = RandomShapePair(rng, 5, 3000, /*zero_percent=*/8);
    SCOPED_TRACE(ShapeString(p.a) + " * " + ShapeString(p.b));
    BroadcastPlan plan;
    const Shape out_shape = *RefBroadcastShape(p.a, p.b);
    ASSERT_TRUE(ValidateElementMulGrad(out_shape, p.a, p.b, &plan).ok());
    const auto a = RandomVector<T>(rng, NumElements(p.a));
    const auto b = RandomVector<T>(rng, NumElements(p.b));
    const auto g = RandomVector<T>(rng, plan.out_size);
    const auto want_a = RefGradient(p.a, p.b, g, b);
    const auto want_b = RefGradient(p.b, p.a, g, a);
    const bool a_broadcast = NumElements(p.a) != plan.out_size;
    const bool b_broadcast = NumElements(p.b) != plan.out_size;
    for (const Parallel* parallel :
         {static_cast<const Parallel*>(&serial), static_cast<const Parallel*>(&threads)}) {
      std::vector<T> grad_a(a.size(), static_cast<T>(77)), grad_b(b.size(), static_cast<T>(77));
      ElementMulBackward<T>(plan, g.data(), a.data(), b.data(), grad_a.data(), grad_b.data(),
                            *parallel);
      ASSERT_TRUE(GradMatches(grad_a, want_a, a_broadcast)) << "grad_a";
      ASSERT_TRUE(GradMatches(grad_b, want_b, b_broadcast)) << "grad_b";
    }
  }
}

// A gradient output that is null is not computed; the other one still is.
TYPED_TEST(ElementMulKernelTest, BackwardWithOneOutput) {
  using T = TypeParam;
  std::mt19937_64 rng(104);
  const Shape as = {4, 1, 3}, bs = {5, 1};
  const BroadcastPlan plan = PlanOrDie(as, bs);
  const auto a = RandomVector<T>(rng, NumElements(as));
  const auto b = RandomVector<T>(rng, NumElements(bs));
  const auto g = RandomVector<T>(rng, plan.out_size);
  std::vector<T> both_a(a.size()), both_b(b.size()), only_a(a.size()), only_b(b.size());
  ElementMulBackward<T>(plan, g.data(), a.data(), b.data(), both_a.data(), both_b.data(),
                        SerialParallel());
  ElementMulBackward<T>(plan, g.data(), a.data(), b.data(), only_a.data(), nullptr,
                        SerialParallel());
  ElementMulBackward<T>(plan, g.data(), a.data(), b.data(), nullptr, only_b.data(),
                        SerialParallel());
  EXPECT_TRUE(SameBitsOrBothNan(only_a, both_a));
  EXPECT_TRUE(SameBitsOrBothNan(only_b, both_b));
  EXPECT_TRUE(GradMatches(only_a, RefGradient(as, bs, g, b), true));
  EXPECT_TRUE(GradMatches(only_b, RefGradient(bs, as, g, a), true));
}

// An operand broadcast along a zero-size dimension has elements but an empty gradient sum: 0.
TYPED_TEST(ElementMulKernelTest, BackwardOfEmptyOutputGivesZeros) {
  using T = TypeParam;
  const std::pair<Shape, Shape> cases[] = {
      {{3, 1}, {3, 0}}, {{2, 3}, {0, 1, 3}}, {{}, {0}}, {{1, 5}, {0, 1}}};
  for (const auto& [as, bs] : cases) {
    SCOPED_TRACE(ShapeString(as) + " * " + ShapeString(bs));
    const BroadcastPlan plan = PlanOrDie(as, bs);
    ASSERT_EQ(plan.out_size, 0);
    const std::vector<T> a(NumElements(as), static_cast<T>(3)),
        b(NumElements(bs), static_cast<T>(3));
    std::vector<T> grad_a(a.size(), static_cast<T>(77)), grad_b(b.size(), static_cast<T>(77));
    ElementMulBackward<T>(plan, nullptr, a.data(), b.data(), grad_a.data(), grad_b.data(),
                          ThreadParallel(2));
    EXPECT_TRUE(SameBitsOrBothNan(grad_a, std::vector<T>(a.size(), static_cast<T>(0))));
    EXPECT_TRUE(SameBitsOrBothNan(grad_b, std::vector<T>(b.size(), static_cast<T>(0))));
    std::vector<T> out(1, static_cast<T>(77));
    ElementMulForward<T>(plan, a.data(), b.data(), out.data(), SerialParallel());
    EXPECT_TRUE(SameBitsOrBothNan(out, std::vector<T>{static_cast<T>(77)}));
  }
}

// Every partition of the work gives the same bits, forward and backward, including the
// broadcast reductions whose float sums depend on their order.
TYPED_TEST(ElementMulKernelTest, ThreadCountsGiveIdenticalBits) {
  using T = TypeParam;
  std::mt19937_64 rng(105);
  std::vector<std::pair<Shape, Shape>> cases = {
      {{64, 1, 128}, {1, 33, 128}},  // both reduce, inner dim kept
      {{257, 130}, {130}},           // b reduced over the rows
      {{257, 130}, {257, 1}},        // b reduced over the inner dim
      {{3, 1, 5, 1, 7}, {1, 11, 1, 13, 1}},
      {{100003}, {}},  // a scalar operand
  };
  for (int i = 0; i < 6; ++i) {
    const ShapePair p = RandomShapePair(rng, 6, 100000, /*zero_percent=*/0);
    cases.push_back({p.a, p.b});
  }
  for (const auto& [as, bs] : cases) {
    SCOPED_TRACE(ShapeString(as) + " * " + ShapeString(bs));
    const BroadcastPlan plan = PlanOrDie(as, bs);
    const auto a = RandomVector<T>(rng, NumElements(as));
    const auto b = RandomVector<T>(rng, NumElements(bs));
    const auto g = RandomVector<T>(rng, plan.out_size);
    std::vector<T> out0(plan.out_size), ga0(a.size()), gb0(b.size());
    ElementMulForward<T>(plan, a.data(), b.data(), out0.data(), SerialParallel());
    ElementMulBackward<T>(plan, g.data(), a.data(), b.data(), ga0.data(), gb0.data(),
                          SerialParallel());
    for (int threads : {1, 2, 3, 7, 16}) {
      SCOPED_TRACE(::testing::Message() << threads << " threads");
      const ThreadParallel parallel(threads);
      std::vector<T> out(plan.out_size), ga(a.size()), gb(b.size());
      ElementMulForward<T>(plan, a.data(), b.data(), out.data(), parallel);
      ElementMulBackward<T>(plan, g.data(), a.data(), b.data(), ga.data(), gb.data(), parallel);
      EXPECT_EQ(std::memcmp(out.data(), out0.data(), out.size() * sizeof(T)), 0);
      EXPECT_EQ(std::memcmp(ga.data(), ga0.data(), ga.size() * sizeof(T)), 0);
      EXPECT_EQ(std::memcmp(gb.data(), gb0.data(), gb.size() * sizeof(T)), 0);
    }
  }
}

// --- integers wrap on overflow (no undefined behaviour: UBSan runs these) ----------------------

template <typename T>
class ElementMulIntTest : public ::testing::Test {};
TYPED_TEST_SUITE(ElementMulIntTest, IntTypes, TypeNames);

TYPED_TEST(ElementMulIntTest, ForwardWraps) {
  using T = TypeParam;
  using L = std::numeric_limits<T>;
  const std::vector<T> a = {L::max(), L::min(), L::max(), L::min(), L::max()};
  const std::vector<T> b = {2, -1, L::max(), L::min(), -1};
  // max * 2 = 2^bits - 2 = -2; min * -1 = min; max^2 = 1 (mod 2^bits); min^2 = 0.
  const std::vector<T> want = {-2, L::min(), 1, 0, -L::max()};
  const BroadcastPlan plan = PlanOrDie({5}, {5});
  std::vector<T> out(5);
  ElementMulForward<T>(plan, a.data(), b.data(), out.data(), SerialParallel());
  EXPECT_EQ(out, want);
  // The same with b broadcast.
  const std::vector<T> two = {2};
  const BroadcastPlan row = PlanOrDie({5}, {1});
  ElementMulForward<T>(row, a.data(), two.data(), out.data(), SerialParallel());
  EXPECT_EQ(out, (std::vector<T>{-2, 0, -2, 0, -2}));
}

TYPED_TEST(ElementMulIntTest, BackwardWraps) {
  using T = TypeParam;
  using L = std::numeric_limits<T>;
  // a is broadcast: grad_a = max * 1 + max * 2 = 3 * max wraps to max - 2. b is not:
  // grad_b = g * a, and max * 2 wraps to -2.
  const std::vector<T> a = {L::max()}, b = {L::max(), L::max()}, g = {1, 2};
  const BroadcastPlan plan = PlanOrDie({1}, {2});
  T grad_a = 0;
  std::vector<T> grad_b(2);
  ElementMulBackward<T>(plan, g.data(), a.data(), b.data(), &grad_a, grad_b.data(),
                        SerialParallel());
  EXPECT_EQ(grad_a, WrapMul<T>(L::max(), 3));  // max * 3 = max - 2 (mod 2^bits)
  EXPECT_EQ(grad_a, L::max() - 2);
  EXPECT_EQ(grad_b, (std::vector<T>{L::max(), -2}));
}

// --- the other integer widths (the forward op only): every pair of edge values ----------------

// The product modulo 2^bits, through uint64_t (conversions to unsigned types are modular).
template <typename T>
T ModularMul(T a, T b) {
  return static_cast<T>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}

template <typename T>
class ElementMulOtherIntTest : public ::testing::Test {};
using OtherIntTypes = ::testing::Types<int8_t, uint8_t, int16_t, uint16_t, uint32_t, uint64_t>;
TYPED_TEST_SUITE(ElementMulOtherIntTest, OtherIntTypes, TypeNames);

TYPED_TEST(ElementMulOtherIntTest, ForwardWrapsOnEveryPairOfEdgeValues) {
  using T = TypeParam;
  using L = std::numeric_limits<T>;
  // Products of narrow types are computed after promotion to int, where 65535 * 65535 would
  // overflow (undefined behaviour, which UBSan reports): Mul works in unsigned int instead.
  const std::vector<T> edges = {L::min(),
                                static_cast<T>(L::min() + 1),
                                static_cast<T>(L::max() / 2 + 1),
                                static_cast<T>(L::max() - 1),
                                L::max(),
                                0,
                                1,
                                2,
                                3,
                                static_cast<T>(-1)};
  const int64_t n = static_cast<int64_t>(edges.size());
  const BroadcastPlan plan = PlanOrDie({n, 1}, {1, n});  // every pair
  std::vector<T> out(static_cast<size_t>(n * n)), want(out.size());
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j) want[i * n + j] = ModularMul(edges[i], edges[j]);
  }
  ElementMulForward<T>(plan, edges.data(), edges.data(), out.data(), ThreadParallel(2));
  EXPECT_EQ(out, want);
  EXPECT_EQ(ModularMul<T>(L::max(), L::max()), static_cast<T>(1));  // (2^k - 1)^2 = 1 mod 2^k
}

TYPED_TEST(ElementMulOtherIntTest, ForwardMatchesNaiveBroadcast) {
  using T = TypeParam;
  std::mt19937_64 rng(106);
  for (int iter = 0; iter < 40; ++iter) {
    const ShapePair p = RandomShapePair(rng, 5, 3000, /*zero_percent=*/8);
    SCOPED_TRACE(ShapeString(p.a) + " * " + ShapeString(p.b));
    const BroadcastPlan plan = PlanOrDie(p.a, p.b);
    const auto a = RandomVector<T>(rng, NumElements(p.a));
    const auto b = RandomVector<T>(rng, NumElements(p.b));
    std::vector<T> want(static_cast<size_t>(plan.out_size));
    ForEachOutput(p.a, p.b,
                  [&](int64_t o, int64_t ia, int64_t ib) { want[o] = ModularMul(a[ia], b[ib]); });
    std::vector<T> out(want.size(), static_cast<T>(77));
    ElementMulForward<T>(plan, a.data(), b.data(), out.data(), ThreadParallel(3));
    ASSERT_EQ(out, want);
  }
}

// --- complex64 and complex128 -------------------------------------------------------------------

template <typename T>
class ElementMulComplexTest : public ::testing::Test {};
using ComplexTypes = ::testing::Types<std::complex<float>, std::complex<double>>;
TYPED_TEST_SUITE(ElementMulComplexTest, ComplexTypes, TypeNames);

// Parts uniform in [-2, 2); with `specials`, 10% of the parts are 0, -0, +-inf or NaN.
template <typename C>
std::vector<C> RandomComplex(std::mt19937_64& rng, int64_t n, bool specials) {
  using R = typename C::value_type;
  using L = std::numeric_limits<R>;
  const R special[] = {R(0), -R(0), L::infinity(), -L::infinity(), L::quiet_NaN()};
  std::uniform_real_distribution<double> uniform(-2.0, 2.0);
  std::uniform_int_distribution<int> percent(0, 99), pick(0, 4);
  auto part = [&]() {
    return specials && percent(rng) < 10 ? special[pick(rng)] : static_cast<R>(uniform(rng));
  };
  std::vector<C> v(static_cast<size_t>(n));
  for (auto& x : v) {
    const R re = part();
    x = C(re, part());
  }
  return v;
}

// The plain formula, written out: (ac - bd) + (ad + bc)i, each part rounded as it goes.
template <typename C>
C PlainMul(C x, C y) {
  using R = typename C::value_type;
  const R rr = x.real() * y.real(), ii = x.imag() * y.imag();
  const R ri = x.real() * y.imag(), ir = x.imag() * y.real();
  return C(rr - ii, ri + ir);
}

template <typename C>
bool SamePartBits(C a, C b) {
  auto same = [](auto x, auto y) { return (std::isnan(x) && std::isnan(y)) || Bits(x) == Bits(y); };
  return same(a.real(), b.real()) && same(a.imag(), b.imag());
}

TYPED_TEST(ElementMulComplexTest, ForwardIsThePlainFormulaEvenWhereNotFinite) {
  using C = TypeParam;
  std::mt19937_64 rng(107);
  for (int iter = 0; iter < 60; ++iter) {
    const ShapePair p = RandomShapePair(rng, 5, 3000, /*zero_percent=*/8);
    SCOPED_TRACE(ShapeString(p.a) + " * " + ShapeString(p.b));
    const BroadcastPlan plan = PlanOrDie(p.a, p.b);
    const auto a = RandomComplex<C>(rng, NumElements(p.a), true);
    const auto b = RandomComplex<C>(rng, NumElements(p.b), true);
    std::vector<C> out(static_cast<size_t>(plan.out_size));
    ElementMulForward<C>(plan, a.data(), b.data(), out.data(), ThreadParallel(3));
    int64_t bad = 0;
    ForEachOutput(p.a, p.b, [&](int64_t o, int64_t ia, int64_t ib) {
      if (!SamePartBits(out[o], PlainMul(a[ia], b[ib])) && bad++ < 4) {
        ADD_FAILURE() << "[" << o << "] " << a[ia] << " * " << b[ib] << " gave " << out[o];
      }
    });
    ASSERT_EQ(bad, 0);
  }
  // inf * i: the plain formula gives NaN parts where C99 Annex G would recover (-inf, inf).
  const C inf(std::numeric_limits<typename C::value_type>::infinity(),
              std::numeric_limits<typename C::value_type>::infinity());
  const C i(0, 1);
  C out;
  ElementMulForward<C>(PlanOrDie({}, {}), &inf, &i, &out, SerialParallel());
  EXPECT_TRUE(std::isnan(out.real()) && std::isnan(out.imag())) << out;
}

// TensorFlow's _MulGrad: grad_a = sum grad * conj(b), grad_b = sum conj(a) * grad.
TYPED_TEST(ElementMulComplexTest, BackwardConjugatesTheOtherOperand) {
  using C = TypeParam;
  using R = typename C::value_type;
  std::mt19937_64 rng(108);
  const double eps = std::numeric_limits<R>::epsilon();
  for (int iter = 0; iter < 60; ++iter) {
    const ShapePair p = RandomShapePair(rng, 5, 3000, /*zero_percent=*/8);
    SCOPED_TRACE(ShapeString(p.a) + " * " + ShapeString(p.b));
    BroadcastPlan plan;
    ASSERT_TRUE(ValidateElementMulGrad(*RefBroadcastShape(p.a, p.b), p.a, p.b, &plan).ok());
    const auto a = RandomComplex<C>(rng, NumElements(p.a), false);
    const auto b = RandomComplex<C>(rng, NumElements(p.b), false);
    const auto g = RandomComplex<C>(rng, plan.out_size, false);
    // References in double: the sums, the sums of magnitudes (for the tolerance), term counts.
    using Z = std::complex<double>;
    std::vector<Z> want_a(a.size()), want_b(b.size());
    std::vector<double> mag_a(a.size()), mag_b(b.size());
    std::vector<C> single_a(a.size()), single_b(b.size());
    std::vector<int64_t> terms_a(a.size()), terms_b(b.size());
    ForEachOutput(p.a, p.b, [&](int64_t o, int64_t ia, int64_t ib) {
      const Z ga = Z(g[o]) * std::conj(Z(b[ib])), gb = std::conj(Z(a[ia])) * Z(g[o]);
      want_a[ia] += ga;
      want_b[ib] += gb;
      mag_a[ia] += std::abs(ga) * 2;
      mag_b[ib] += std::abs(gb) * 2;
      single_a[ia] = PlainMul(g[o], std::conj(b[ib]));
      single_b[ib] = PlainMul(std::conj(a[ia]), g[o]);
      ++terms_a[ia];
      ++terms_b[ib];
    });
    std::vector<C> grad_a(a.size()), grad_b(b.size());
    ElementMulBackward<C>(plan, g.data(), a.data(), b.data(), grad_a.data(), grad_b.data(),
                          ThreadParallel(3));
    auto check = [&](const std::vector<C>& got, const std::vector<Z>& want,
                     const std::vector<double>& mag, const std::vector<C>& single,
                     const std::vector<int64_t>& terms, bool broadcast, const char* name) {
      for (size_t k = 0; k < got.size(); ++k) {
        if (!broadcast) {
          // One product each: exactly TensorFlow's mul(grad, conj(b)) (or conj(a) * grad).
          ASSERT_TRUE(SamePartBits(got[k], single[k])) << name << "[" << k << "]";
        } else {
          const double tol = 4.0 * static_cast<double>(terms[k] + 2) * eps * (mag[k] + 1e-300);
          ASSERT_NEAR(static_cast<double>(got[k].real()), want[k].real(), tol) << name << k;
          ASSERT_NEAR(static_cast<double>(got[k].imag()), want[k].imag(), tol) << name << k;
        }
      }
    };
    check(grad_a, want_a, mag_a, single_a, terms_a, NumElements(p.a) != plan.out_size, "grad_a");
    check(grad_b, want_b, mag_b, single_b, terms_b, NumElements(p.b) != plan.out_size, "grad_b");
  }
}

TYPED_TEST(ElementMulComplexTest, ThreadCountsGiveIdenticalBits) {
  using C = TypeParam;
  std::mt19937_64 rng(109);
  const std::pair<Shape, Shape> cases[] = {{{257, 130}, {130}}, {{64, 1, 128}, {1, 33, 128}}};
  for (const auto& [as, bs] : cases) {
    const BroadcastPlan plan = PlanOrDie(as, bs);
    const auto a = RandomComplex<C>(rng, NumElements(as), false);
    const auto b = RandomComplex<C>(rng, NumElements(bs), false);
    const auto g = RandomComplex<C>(rng, plan.out_size, false);
    std::vector<C> ga0(a.size()), gb0(b.size());
    ElementMulBackward<C>(plan, g.data(), a.data(), b.data(), ga0.data(), gb0.data(),
                          SerialParallel());
    for (int threads : {2, 3, 7}) {
      std::vector<C> ga(a.size()), gb(b.size());
      ElementMulBackward<C>(plan, g.data(), a.data(), b.data(), ga.data(), gb.data(),
                            ThreadParallel(threads));
      EXPECT_EQ(std::memcmp(ga.data(), ga0.data(), ga.size() * sizeof(C)), 0);
      EXPECT_EQ(std::memcmp(gb.data(), gb0.data(), gb.size() * sizeof(C)), 0);
    }
  }
}

// --- the gradient of an operand with nothing to sum ---------------------------------------------

// Every dimension an operand was broadcast along has size 1 (both operands scalars, say): its
// gradient is the product itself, as TensorFlow's, so g = 1 times b = -0 is -0, not 0 + -0 = +0.
TYPED_TEST(ElementMulKernelTest, NothingSummedKeepsTheSignOfZero) {
  using T = TypeParam;
  if constexpr (!kIsInt<T>) {
    const std::pair<Shape, Shape> cases[] = {
        {{}, {}}, {{1}, {}}, {{}, {1, 1}}, {{1, 1}, {1}}, {{1, 3}, {1, 3}}, {{2, 1, 3}, {2, 1, 3}}};
    for (const auto& [as, bs] : cases) {
      SCOPED_TRACE(ShapeString(as) + " * " + ShapeString(bs));
      const BroadcastPlan plan = PlanOrDie(as, bs);
      // grad_a = g * b with b = -0; grad_b = a * g with g = -0 where a = 1 (and +0 where a = -1
      // makes the sign positive again: -1 * -0).
      const std::vector<T> b(NumElements(bs), static_cast<T>(-0.0f));
      std::vector<T> a(NumElements(as), static_cast<T>(1.0f));
      a[0] = static_cast<T>(-1.0f);
      std::vector<T> g(plan.out_size, static_cast<T>(1.0f));
      std::vector<T> ga(a.size(), static_cast<T>(77)), gb(b.size(), static_cast<T>(77));
      ElementMulBackward<T>(plan, g.data(), a.data(), b.data(), ga.data(), gb.data(),
                            SerialParallel());
      for (size_t i = 0; i < ga.size(); ++i) {
        EXPECT_EQ(Bits(ga[i]), Bits(static_cast<T>(-0.0f))) << "grad_a[" << i << "]";
      }
      g.assign(plan.out_size, static_cast<T>(-0.0f));
      ElementMulBackward<T>(plan, g.data(), a.data(), b.data(), nullptr, gb.data(),
                            ThreadParallel(2));
      for (size_t i = 0; i < gb.size(); ++i) {
        // Operands of equal shapes: gb[i] = a[i] * -0.
        const T want = static_cast<T>(i == 0 ? 0.0f : -0.0f);
        EXPECT_EQ(Bits(gb[i]), Bits(want)) << "grad_b[" << i << "]";
      }
    }
  }
}

// A sum of several -0 products is +0 (sums start from +0), as TensorFlow's reduce_sum.
TYPED_TEST(ElementMulKernelTest, SumsOfNegativeZerosArePositiveZero) {
  using T = TypeParam;
  if constexpr (!kIsInt<T>) {
    for (const auto& [as, bs] : std::vector<std::pair<Shape, Shape>>{
             {{3, 1}, {1}}, {{5000}, {}}, {{700, 3}, {3}}, {{3, 40}, {3, 1}}}) {
      SCOPED_TRACE(ShapeString(as) + " * " + ShapeString(bs));
      const BroadcastPlan plan = PlanOrDie(as, bs);
      const std::vector<T> a(NumElements(as), static_cast<T>(1.0f));
      const std::vector<T> b(NumElements(bs), static_cast<T>(1.0f));
      const std::vector<T> g(plan.out_size, static_cast<T>(-0.0f));
      std::vector<T> gb(b.size(), static_cast<T>(77));
      ElementMulBackward<T>(plan, g.data(), a.data(), b.data(), nullptr, gb.data(),
                            SerialParallel());
      for (size_t i = 0; i < gb.size(); ++i) EXPECT_EQ(Bits(gb[i]), Bits(static_cast<T>(0.0f)));
    }
  }
}

// --- the summation order (element_mul_reduce.h) -------------------------------------------------

TEST(ElementMulOrderTest, Int32DividerIsExact) {
  std::vector<int32_t> divisors;
  for (int32_t d = 1; d <= 3000; ++d) divisors.push_back(d);
  for (int k = 2; k <= 30; ++k) {
    for (int64_t d : {(int64_t{1} << k) - 1, int64_t{1} << k, (int64_t{1} << k) + 1}) {
      divisors.push_back(static_cast<int32_t>(d));
    }
  }
  divisors.push_back(INT32_MAX);
  divisors.push_back(INT32_MAX - 1);
  divisors.push_back(46341);  // about sqrt(2^31)
  std::mt19937_64 rng(301);
  std::uniform_int_distribution<int32_t> any(1, INT32_MAX);
  for (int i = 0; i < 3000; ++i) divisors.push_back(any(rng));
  int64_t checked = 0;
  for (const int32_t d : divisors) {
    const mul_grad::Divider<int32_t> div(d);
    ASSERT_EQ(div.Value(), d);
    std::vector<int32_t> ns = {0, 1, 2, INT32_MAX, INT32_MAX - 1, d - 1, d};
    if (d < INT32_MAX) ns.push_back(d + 1);
    for (int64_t m : {int64_t{2}, int64_t{3}, int64_t{1000}, int64_t{INT32_MAX} / d}) {
      for (int64_t off : {int64_t{-1}, int64_t{0}, int64_t{1}}) {
        const int64_t n = m * d + off;
        if (n >= 0 && n <= INT32_MAX) ns.push_back(static_cast<int32_t>(n));
      }
    }
    for (int i = 0; i < 40; ++i) ns.push_back(any(rng) - 1);
    for (const int32_t n : ns) {
      ASSERT_EQ(div.Div(n), n / d) << n << " / " << d;
      ++checked;
    }
  }
  EXPECT_GT(checked, 100000);
}

// Index maps (32-bit and 64-bit) and the cursor that walks them with additions only, against a
// plain row-major decomposition.
TEST(ElementMulOrderTest, IndexMapsAndCursorsMatchARowMajorWalk) {
  std::mt19937_64 rng(302);
  for (int iter = 0; iter < 300; ++iter) {
    const int rank = 1 + static_cast<int>(rng() % mul_grad::kMaxDims);
    std::vector<int64_t> dims(rank), s1(rank), s2(rank);
    int64_t n = 1;
    for (int d = 0; d < rank; ++d) {
      dims[d] = 1 + static_cast<int64_t>(rng() % (rank > 4 ? 4 : 9));
      s1[d] = static_cast<int64_t>(rng() % 50);
      s2[d] = static_cast<int64_t>(rng() % 50);
      n *= dims[d];
    }
    mul_grad::IndexMap<int32_t> m32;
    mul_grad::IndexMap<int64_t> m64;
    for (int d = 0; d < rank; ++d) {
      m32.Push(dims[d], s1[d], s2[d]);
      m64.Push(dims[d], s1[d], s2[d]);
    }
    mul_grad::IndexCursor<int64_t> cursor;
    const int64_t start = static_cast<int64_t>(rng() % static_cast<uint64_t>(n));
    cursor.Start(m64, start);
    for (int64_t i = 0; i < n; ++i) {
      int64_t rem = i, want1 = 0, want2 = 0;
      for (int d = rank - 1; d >= 0; --d) {
        want1 += rem % dims[d] * s1[d];
        want2 += rem % dims[d] * s2[d];
        rem /= dims[d];
      }
      int32_t a32, b32;
      int64_t a64, b64;
      m32.Map(static_cast<int32_t>(i), &a32, &b32);
      m64.Map(i, &a64, &b64);
      ASSERT_EQ(a32, want1);
      ASSERT_EQ(b32, want2);
      ASSERT_EQ(a64, want1);
      ASSERT_EQ(b64, want2);
      if (i >= start) {
        ASSERT_EQ(cursor.o1, want1) << "cursor at " << i << " from " << start;
        ASSERT_EQ(cursor.o2, want2);
        if (i + 1 < n) cursor.Next(m64);
      }
    }
  }
}

// The CPU's element converter for the shared templates (the GPU's is cuda::Num).
template <typename T>
struct CpuNum {
  using C = Acc<T>;
  static C To(T v) { return static_cast<C>(v); }
};

template <typename T>
class ElementMulOrderTest : public ::testing::Test {};
using OrderTypes =
    ::testing::Types<float, double, Eigen::half, Eigen::bfloat16, int64_t, std::complex<float>>;
TYPED_TEST_SUITE(ElementMulOrderTest, OrderTypes, TypeNames);

// Ordinary values (in which every change of order shows), or with `specials` also infinities,
// NaN, -0 and subnormals mixed in (which turn most long sums into NaN or infinity).
template <typename T>
std::vector<T> OrderInputs(std::mt19937_64& rng, int64_t n, bool specials) {
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<T> v(static_cast<size_t>(n));
  if constexpr (IsComplex<T>::value) {
    using R = typename T::value_type;
    for (auto& x : v) x = T(static_cast<R>(normal(rng)), static_cast<R>(normal(rng)));
  } else if constexpr (kIsInt<T>) {
    v = RandomVector<T>(rng, n);
  } else if (specials) {
    v = RandomVector<T>(rng, n, Specials<T>());
  } else {
    for (auto& x : v) x = static_cast<T>(static_cast<float>(normal(rng)));
  }
  return v;
}

template <typename T>
std::string Show(const T& v) {
  if constexpr (IsComplex<T>::value) {
    return "(" + Describe(v.real()) + ", " + Describe(v.imag()) + ")";
  } else {
    return Describe(v);
  }
}

template <typename T>
bool SameBits(const T& x, const T& y) {
  if constexpr (IsComplex<T>::value) {
    return SameBits(x.real(), y.real()) && SameBits(x.imag(), y.imag());
  } else if constexpr (kIsInt<T>) {
    return x == y;
  } else {
    return Bits(x) == Bits(y) || (test::IsNan(x) && test::IsNan(y));
  }
}

// Shapes that reach every path: one or many segments, in lane order (innermost dimension
// reduced) and row order (kept), few targets (the CPU sums segments in parallel) and many, one
// reduced dimension and several, sums of at most 32 terms.
std::vector<std::pair<Shape, Shape>> OrderCases(std::mt19937_64& rng) {
  std::vector<std::pair<Shape, Shape>> cases = {
      {{100003}, {}},             // lane order, 1 target, 49 segments
      {{300, 4100}, {300, 1}},    // lane order, 300 targets, 3 segments
      {{5000, 3}, {3}},           // row order, 3 targets, 10 segments
      {{1100, 300}, {300}},       // row order, 300 targets, 3 segments
      {{3, 1, 5000}, {1, 7, 1}},  // b: lane order over two reduced dimensions
      {{64, 1, 33, 1}, {1, 40, 1, 70}},
      {{2, 40}, {2, 1}},            // 40 terms, one segment
      {{1000, 2}, {1000, 1}},       // 2 terms
      {{999, 31}, {999, 1}},        // 31 terms
      {{5, 32}, {1, 1}},            // 160 terms, a scalar-like operand
      {{70000, 1}, {1, 1}},         // collapses to one dimension: 35 segments
      {{17, 1, 513}, {1, 9, 513}},  // row order, 513 terms (two segments) for a
      {{2, 3, 4}, {1}},
  };
  for (int i = 0; i < 40; ++i) {
    const ShapePair p = RandomShapePair(rng, 6, 20000, /*zero_percent=*/0);
    cases.push_back({p.a, p.b});
  }
  return cases;
}

// The CPU kernel's bits are those of SumInOrder, the order written step by step; so are the
// shortcuts the GPU kernels take (at most 32 terms, one segment) and the 32-bit index maps.
TYPED_TEST(ElementMulOrderTest, CpuKernelAndGpuPiecesFollowTheOrder) {
  using T = TypeParam;
  using N = CpuNum<T>;
  using A = typename N::C;
  std::mt19937_64 rng(303);
  int64_t checked = 0, shortcuts = 0;
  const auto cases = OrderCases(rng);
  for (size_t c = 0; c < 2 * cases.size(); ++c) {
    const auto& [as, bs] = cases[c / 2];
    const bool specials = c % 2 == 1;
    SCOPED_TRACE(ShapeString(as) + " * " + ShapeString(bs) + (specials ? " with specials" : ""));
    const BroadcastPlan plan = PlanOrDie(as, bs);
    if (plan.dims.size() > static_cast<size_t>(mul_grad::kMaxDims)) continue;
    const auto a = OrderInputs<T>(rng, NumElements(as), specials);
    const auto b = OrderInputs<T>(rng, NumElements(bs), specials);
    const auto g = OrderInputs<T>(rng, plan.out_size, specials);
    std::vector<T> ga(a.size()), gb(b.size());
    ElementMulBackward<T>(plan, g.data(), a.data(), b.data(), ga.data(), gb.data(),
                          ThreadParallel(3));
    for (const bool for_a : {true, false}) {
      const auto& ts = for_a ? plan.a_strides : plan.b_strides;
      const auto& os = for_a ? plan.b_strides : plan.a_strides;
      const T* other = for_a ? b.data() : a.data();
      const std::vector<T>& got = for_a ? ga : gb;
      const auto geo = mul_grad::MakeGeometry<int64_t>(plan.dims, ts, os);
      const auto geo32 = mul_grad::MakeGeometry<int32_t>(plan.dims, ts, os);
      if (geo.terms <= 1) continue;  // a product, not a sum
      for (int64_t t = 0; t < geo.targets; ++t) {
        const A want = mul_grad::SumInOrder<N>(geo, g.data(), other, t);
        ASSERT_TRUE(SameBits(got[t], static_cast<T>(want)))
            << (for_a ? "grad_a[" : "grad_b[") << t << "]: cpu " << Show(got[t]) << ", order "
            << Show(static_cast<T>(want));
        ASSERT_TRUE(SameBits(static_cast<T>(mul_grad::SumInOrder<N>(geo32, g.data(), other,
                                                                    static_cast<int32_t>(t))),
                             static_cast<T>(want)));
        ++checked;
        int64_t gbase, obase;
        geo.kept.Map(t, &gbase, &obase);
        if (geo.lane_order && geo.terms <= mul_grad::kLanes && geo.reduced.rank == 1) {
          ASSERT_TRUE(SameBits(
              static_cast<T>(mul_grad::SmallLaneSum<N>(geo, g.data(), other, gbase, obase)),
              static_cast<T>(want)));
          ++shortcuts;
        }
        if (geo.segments == 1) {
          A one;
          if (geo.lane_order) {
            A lanes[mul_grad::kLanes];
            for (int j = 0; j < mul_grad::kLanes; ++j) {
              lanes[j] = mul_grad::LaneSum<N>(geo, g.data(), other, gbase, obase, int64_t{0}, j);
            }
            one = mul_grad::Tree32(lanes);
          } else {
            one = mul_grad::RowSum<N>(geo, g.data(), other, gbase, obase, int64_t{0});
          }
          ASSERT_TRUE(SameBits(static_cast<T>(one), static_cast<T>(want)));
          ++shortcuts;
        }
      }
    }
  }
  EXPECT_GT(checked, 1000);
  EXPECT_GT(shortcuts, 100);
}

// More accurate than one running sum: 2^20 equal terms in float are exact here (1 + 1 + ... in
// float stops growing at 2^24, but the error of a running sum of 0.1s is already visible).
TEST(ElementMulOrderTest, LongSumsAreAccurate) {
  const int64_t n = 1 << 20;
  const BroadcastPlan plan = PlanOrDie({n}, {});
  const std::vector<float> a(n, 0.1f), g(n, 1.0f);
  const float b = 1.0f;
  float gb = 0;
  ElementMulBackward<float>(plan, g.data(), a.data(), &b, nullptr, &gb, ThreadParallel(2));
  const double exact = static_cast<double>(0.1f) * n;
  EXPECT_NEAR(gb, exact, exact * 1e-6);
  float running = 0;
  for (int64_t i = 0; i < n; ++i) running += 0.1f;
  EXPECT_GT(std::fabs(running - exact), exact * 1e-4);  // what the order avoids
}

}  // namespace
}  // namespace opforge

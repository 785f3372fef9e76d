// Tests of the broadcast plan (MakeBroadcastPlan) and the two CPU broadcast kernels
// (BroadcastApply). The kernels are checked against naive loops that work on
// the full, uncollapsed shapes: each output multi-index is mapped to each operand by the NumPy
// rule (index 0 along a dimension of size 1), with no use of the plan's collapsed strides.
#include "common/broadcast.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/broadcast_plan.h"
#include "common/parallel.h"
#include "common/status.h"
#include "common/test_util.h"

namespace opforge {
namespace {

using test::Contains;
using test::ForEachOutput;
using test::NumElements;
using test::RandomShapePair;
using test::RefBroadcastShape;
using test::Shape;
using test::ShapePair;

std::vector<std::unique_ptr<Parallel>> AllParallels() {
  std::vector<std::unique_ptr<Parallel>> v;
  v.push_back(std::make_unique<SerialParallel>());
  for (int n : {1, 2, 3, 7}) v.push_back(std::make_unique<ThreadParallel>(n));
  return v;
}

// --- MakeBroadcastPlan -------------------------------------------------------------------------

BroadcastPlan PlanOrDie(const Shape& a, const Shape& b) {
  BroadcastPlan plan;
  const Status s = MakeBroadcastPlan("Op", "a", "b", a, b, &plan);
  EXPECT_TRUE(s.ok()) << s.message();
  return plan;
}

TEST(MakeBroadcastPlanTest, OutputShapes) {
  struct Case {
    Shape a, b, out;
  };
  const Case cases[] = {
      {{}, {}, {}},
      {{}, {3}, {3}},
      {{2, 3}, {}, {2, 3}},
      {{2, 3}, {3}, {2, 3}},
      {{3}, {2, 3}, {2, 3}},
      {{2, 1}, {1, 3}, {2, 3}},
      {{5, 1, 4}, {3, 1}, {5, 3, 4}},
      {{1, 1, 1}, {7}, {1, 1, 7}},
      {{4, 1, 1}, {1, 1}, {4, 1, 1}},
      {{0}, {1}, {0}},
      {{0}, {}, {0}},
      {{1, 0}, {5, 1}, {5, 0}},
      {{2, 0, 3}, {0, 1}, {2, 0, 3}},
      {{6, 7}, {6, 7}, {6, 7}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(ShapeString(c.a) + " * " + ShapeString(c.b));
    const BroadcastPlan plan = PlanOrDie(c.a, c.b);
    EXPECT_EQ(plan.out_shape, c.out);
    EXPECT_EQ(plan.out_size, NumElements(c.out));
    EXPECT_EQ(plan.same_shape, c.a == c.b);
  }
}

TEST(MakeBroadcastPlanTest, ScalarsCollapseToOneElement) {
  for (const auto& [a, b] :
       std::vector<std::pair<Shape, Shape>>{{{}, {}}, {{1}, {}}, {{}, {1, 1}}, {{1, 1}, {1}}}) {
    SCOPED_TRACE(ShapeString(a) + " * " + ShapeString(b));
    const BroadcastPlan plan = PlanOrDie(a, b);
    EXPECT_EQ(plan.out_size, 1);
    EXPECT_EQ(plan.dims, Shape({1}));
    EXPECT_EQ(plan.a_strides, Shape({0}));
    EXPECT_EQ(plan.b_strides, Shape({0}));
    EXPECT_EQ(plan.out_strides, Shape({1}));
  }
}

TEST(MakeBroadcastPlanTest, Collapsing) {
  struct Case {
    Shape a, b, dims, a_strides, b_strides, out_strides;
  };
  const Case cases[] = {
      // Identical shapes: one contiguous loop.
      {{2, 3, 4}, {2, 3, 4}, {24}, {1}, {1}, {1}},
      // Size-1 dimensions are dropped before merging.
      {{2, 1, 3}, {2, 1, 3}, {6}, {1}, {1}, {1}},
      {{1, 1, 5}, {5}, {5}, {1}, {1}, {1}},
      // Row vector: outer dims merged, inner dim shared.
      {{2, 3, 4}, {4}, {6, 4}, {4, 1}, {0, 1}, {4, 1}},
      // Column vector: b broadcast along the inner dim.
      {{2, 3, 4}, {2, 3, 1}, {6, 4}, {4, 1}, {1, 0}, {4, 1}},
      // Scalar against a tensor.
      {{}, {3, 4}, {12}, {0}, {1}, {1}},
      {{3, 4}, {1, 1}, {12}, {1}, {0}, {1}},
      // Alternating patterns are not merged.
      {{2, 1, 4}, {3, 1}, {2, 3, 4}, {4, 0, 1}, {0, 1, 0}, {12, 4, 1}},
      // Outer product.
      {{5, 1}, {1, 6}, {5, 6}, {1, 0}, {0, 1}, {6, 1}},
      // A size-1 dimension between two dims of one pattern lets them merge.
      {{2, 1, 3}, {1, 1, 1}, {6}, {1}, {0}, {1}},
      {{2, 1, 3}, {1, 7, 1}, {2, 7, 3}, {3, 0, 1}, {0, 1, 0}, {21, 3, 1}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(ShapeString(c.a) + " * " + ShapeString(c.b));
    const BroadcastPlan plan = PlanOrDie(c.a, c.b);
    EXPECT_EQ(plan.dims, c.dims);
    EXPECT_EQ(plan.a_strides, c.a_strides);
    EXPECT_EQ(plan.b_strides, c.b_strides);
    EXPECT_EQ(plan.out_strides, c.out_strides);
  }
}

TEST(MakeBroadcastPlanTest, ZeroSizeDimensions) {
  {
    const BroadcastPlan plan = PlanOrDie({0, 3}, {3});
    EXPECT_EQ(plan.out_shape, Shape({0, 3}));
    EXPECT_EQ(plan.out_size, 0);
    EXPECT_EQ(NumElements(plan.dims), 0);
  }
  {
    // b is broadcast along the zero-size dimension: it has 3 elements, the output none.
    const BroadcastPlan plan = PlanOrDie({0, 3}, {1, 3});
    EXPECT_EQ(plan.out_size, 0);
    EXPECT_EQ(NumElements(plan.dims), 0);
  }
}

// An empty output whose other dimensions multiply past int64 is still a valid, empty broadcast
// (NumPy and TensorFlow accept such shapes); building its plan must not overflow (UBSan checks).
TEST(MakeBroadcastPlanTest, ZeroSizeOutputWithHugeOtherDimensions) {
  const int64_t big = int64_t{1} << 40;
  const std::pair<Shape, Shape> cases[] = {
      {{0, big, big}, {1, big, 1}},           {{0, big, big}, {1, 1, big}},
      {{big, 0, big}, {1, 1, big}},           {{1, big, 1}, {0, 1, big}},
      {{0, 1, big, 1, big}, {1, 3, 1, 5, 1}}, {{0, big, 1, big}, {1, 1, 3, 1}},
  };
  for (const auto& [a, b] : cases) {
    SCOPED_TRACE(ShapeString(a) + " * " + ShapeString(b));
    BroadcastPlan plan;
    const Status s = MakeBroadcastPlan("Op", "a", "b", a, b, &plan);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(plan.out_size, 0);
    EXPECT_EQ(plan.out_shape, *RefBroadcastShape(a, b));
  }
}

TEST(MakeBroadcastPlanTest, IncompatibleShapesNameBothArguments) {
  const std::pair<Shape, Shape> cases[] = {
      {{2, 3}, {4}}, {{3}, {2, 4}}, {{2, 1, 5}, {3, 1, 4}}, {{0}, {2}}, {{2}, {0}}};
  for (const auto& [a, b] : cases) {
    SCOPED_TRACE(ShapeString(a) + " * " + ShapeString(b));
    BroadcastPlan plan;
    const Status s = MakeBroadcastPlan("MyOp", "lhs", "rhs", a, b, &plan);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
    EXPECT_TRUE(Contains(s.message(), "MyOp"));
    EXPECT_TRUE(Contains(s.message(), "lhs"));
    EXPECT_TRUE(Contains(s.message(), "rhs"));
    EXPECT_TRUE(Contains(s.message(), ShapeString(a)));
    EXPECT_TRUE(Contains(s.message(), ShapeString(b)));
  }
}

TEST(MakeBroadcastPlanTest, NegativeDimensionNamesTheArgument) {
  BroadcastPlan plan;
  Status s = MakeBroadcastPlan("MyOp", "lhs", "rhs", {2, -1}, {2, 1}, &plan);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_TRUE(Contains(s.message(), "lhs"));
  EXPECT_TRUE(Contains(s.message(), "[2, -1]"));
  s = MakeBroadcastPlan("MyOp", "lhs", "rhs", {3}, {-3}, &plan);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.message(), "rhs"));
  EXPECT_TRUE(Contains(s.message(), "[-3]"));
}

TEST(MakeBroadcastPlanTest, ElementCountOverflowIsAnError) {
  const int64_t kMax = std::numeric_limits<int64_t>::max();
  // 3037000499^2 < 2^63 - 1 < 3037000500^2.
  {
    const BroadcastPlan plan = PlanOrDie({3037000499, 1}, {3037000499});
    EXPECT_EQ(plan.out_size, int64_t{3037000499} * 3037000499);
  }
  {
    const BroadcastPlan plan = PlanOrDie({kMax}, {1});
    EXPECT_EQ(plan.out_size, kMax);
  }
  const std::pair<Shape, Shape> cases[] = {
      {{3037000500, 1}, {3037000500}}, {{int64_t{1} << 32, 1}, {int64_t{1} << 32}},
      {{int64_t{1} << 62}, {2, 1}},    {{kMax, 1}, {1, 2}},
      {{kMax, kMax}, {kMax, kMax}},
  };
  for (const auto& [a, b] : cases) {
    SCOPED_TRACE(ShapeString(a) + " * " + ShapeString(b));
    BroadcastPlan plan;
    const Status s = MakeBroadcastPlan("MyOp", "lhs", "rhs", a, b, &plan);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
    EXPECT_TRUE(Contains(s.message(), "lhs"));
    EXPECT_TRUE(Contains(s.message(), "rhs"));
    EXPECT_TRUE(Contains(s.message(), "2^63"));
  }
}

// An operand that is not a possible tensor (more than 2^63 - 1 elements) is an error even when
// the output is empty and so passes the output's own count.
TEST(MakeBroadcastPlanTest, OperandElementCountOverflowIsAnError) {
  const int64_t big = int64_t{1} << 40;
  struct Case {
    Shape a, b;
    const char* name;
  };
  const Case cases[] = {
      {{0, big, big}, {1, big, big}, "rhs"},
      {{1, big, big}, {0, 1, 1}, "lhs"},
      {{0, 1, 1}, {1, big, big}, "rhs"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(ShapeString(c.a) + " * " + ShapeString(c.b));
    BroadcastPlan plan;
    const Status s = MakeBroadcastPlan("MyOp", "lhs", "rhs", c.a, c.b, &plan);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
    EXPECT_TRUE(Contains(s.message(), c.name));
    EXPECT_TRUE(Contains(s.message(), "2^63"));
  }
}

// Properties every plan must have, over many random shape pairs.
TEST(MakeBroadcastPlanTest, RandomPlansAreConsistent) {
  std::mt19937_64 rng(20240601);
  for (int iter = 0; iter < 2000; ++iter) {
    const ShapePair p = RandomShapePair(rng, 6, 1 << 16, /*zero_percent=*/10);
    SCOPED_TRACE(ShapeString(p.a) + " * " + ShapeString(p.b));
    const BroadcastPlan plan = PlanOrDie(p.a, p.b);
    const auto out = RefBroadcastShape(p.a, p.b);
    ASSERT_TRUE(out.has_value());
    EXPECT_EQ(plan.out_shape, *out);
    EXPECT_EQ(plan.out_size, NumElements(*out));
    const size_t n = plan.dims.size();
    ASSERT_GE(n, 1u);
    ASSERT_EQ(plan.a_strides.size(), n);
    ASSERT_EQ(plan.b_strides.size(), n);
    ASSERT_EQ(plan.out_strides.size(), n);
    EXPECT_EQ(NumElements(plan.dims), plan.out_size);
    // The output is contiguous over dims, and the innermost loop has unit or zero strides.
    int64_t stride = 1;
    for (size_t i = n; i-- > 0;) {
      if (plan.out_size > 0) {
        EXPECT_EQ(plan.out_strides[i], stride);
      }
      stride *= plan.dims[i];
    }
    EXPECT_TRUE(plan.a_strides[n - 1] == 0 || plan.a_strides[n - 1] == 1);
    EXPECT_TRUE(plan.b_strides[n - 1] == 0 || plan.b_strides[n - 1] == 1);
    if (plan.out_size > 1) {
      for (int64_t d : plan.dims) EXPECT_NE(d, 1) << "size-1 dimension not dropped";
      for (size_t i = 0; i + 1 < n; ++i) {
        const bool same_pattern = (plan.a_strides[i] == 0) == (plan.a_strides[i + 1] == 0) &&
                                  (plan.b_strides[i] == 0) == (plan.b_strides[i + 1] == 0);
        EXPECT_FALSE(same_pattern) << "neighbours " << i << " and " << i + 1 << " not merged";
      }
    }
  }
}

// --- BroadcastApply ---------------------------------------------------------------------------

// A non-commutative f whose result identifies both arguments (|y| < 1000003).
int64_t Pair(int64_t x, int64_t y) { return x * 1000003 + y; }

TEST(BroadcastApplyTest, MatchesNaiveLoopOnRandomShapes) {
  std::mt19937_64 rng(7);
  const auto parallels = AllParallels();
  for (int iter = 0; iter < 400; ++iter) {
    const ShapePair p = RandomShapePair(rng, 5, 4096, /*zero_percent=*/10);
    SCOPED_TRACE(ShapeString(p.a) + " * " + ShapeString(p.b));
    const BroadcastPlan plan = PlanOrDie(p.a, p.b);
    std::vector<int64_t> x(NumElements(p.a)), y(NumElements(p.b));
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<int64_t>(i) + 1;
    for (size_t i = 0; i < y.size(); ++i) y[i] = -7 * (static_cast<int64_t>(i) + 1);
    std::vector<int64_t> want(plan.out_size);
    ForEachOutput(p.a, p.b, plan.out_shape,
                  [&](int64_t o, int64_t ia, int64_t ib) { want[o] = Pair(x[ia], y[ib]); });
    for (const auto& parallel : parallels) {
      std::vector<int64_t> got(plan.out_size, -1);
      BroadcastApply(
          plan.dims, plan.a_strides, plan.b_strides, x.data(), y.data(), got.data(),
          [](int64_t u, int64_t v) { return Pair(u, v); }, *parallel);
      ASSERT_EQ(got, want);
    }
  }
}

TEST(BroadcastApplyTest, DoubleOperandsMatchNaiveLoop) {
  std::mt19937_64 rng(8);
  std::uniform_real_distribution<double> value(-10.0, 10.0);
  const auto parallels = AllParallels();
  for (int iter = 0; iter < 200; ++iter) {
    const ShapePair p = RandomShapePair(rng, 4, 4096, /*zero_percent=*/0);
    SCOPED_TRACE(ShapeString(p.a) + " * " + ShapeString(p.b));
    const BroadcastPlan plan = PlanOrDie(p.a, p.b);
    std::vector<double> x(NumElements(p.a)), y(NumElements(p.b));
    for (auto& v : x) v = value(rng);
    for (auto& v : y) v = value(rng);
    auto f = [](double u, double v) { return u - 2.0 * v; };
    std::vector<double> want(plan.out_size);
    ForEachOutput(p.a, p.b, plan.out_shape,
                  [&](int64_t o, int64_t ia, int64_t ib) { want[o] = f(x[ia], y[ib]); });
    for (const auto& parallel : parallels) {
      std::vector<double> got(plan.out_size, -1.0);
      BroadcastApply(plan.dims, plan.a_strides, plan.b_strides, x.data(), y.data(), got.data(), f,
                     *parallel);
      ASSERT_EQ(got, want);
    }
  }
}

// The kernel accepts any strides, not only the unit/zero ones a plan produces: a transposed read.
TEST(BroadcastApplyTest, GeneralStrides) {
  const int64_t rows = 5, cols = 7;
  std::vector<int64_t> x(rows * cols), y(cols);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<int64_t>(i) + 1;
  for (size_t i = 0; i < y.size(); ++i) y[i] = -static_cast<int64_t>(i) - 1;
  // out[r][c] = Pair(x[c][r], y[c]) with x stored as [cols][rows].
  std::vector<int64_t> want(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) want[r * cols + c] = Pair(x[c * rows + r], y[c]);
  }
  for (const auto& parallel : AllParallels()) {
    std::vector<int64_t> got(rows * cols, 0);
    BroadcastApply(
        {rows, cols}, {1, rows}, {0, 1}, x.data(), y.data(), got.data(),
        [](int64_t u, int64_t v) { return Pair(u, v); }, *parallel);
    EXPECT_EQ(got, want);
  }
}

TEST(BroadcastApplyTest, EmptyOutputWritesNothing) {
  const BroadcastPlan plan = PlanOrDie({0, 3}, {1, 3});
  const std::vector<int64_t> y = {1, 2, 3};
  int64_t sentinel = 42;
  BroadcastApply(
      plan.dims, plan.a_strides, plan.b_strides, static_cast<const int64_t*>(nullptr), y.data(),
      &sentinel, [](int64_t u, int64_t v) { return u * v; }, ThreadParallel(3));
  EXPECT_EQ(sentinel, 42);
}

}  // namespace
}  // namespace opforge

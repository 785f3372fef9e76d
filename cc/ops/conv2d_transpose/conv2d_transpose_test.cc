// Tests of the Conv2DTranspose core: validation (messages name the argument and, for an output
// size that does not fit, the range that would), and the CPU kernels against a naive scatter /
// gather reference written from the definition in double, for every element type, both data
// formats, strides, dilations, paddings, odd sizes and empty tensors. Results must be identical
// for 1 and 3 threads.
#include "ops/conv2d_transpose/conv2d_transpose.h"

#include <gtest/gtest.h>

#include <Eigen/Core>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/onednn_test_util.h"
#include "common/parallel.h"
#include "common/status.h"
#include "common/test_util.h"

namespace opforge {
namespace {

using test::Contains;
using test::FloatTypes;
using test::SameBits;
using test::TypeNames;
using test::Wide;

// --- the reference: the definition, in double, NHWC ---------------------------------------------

int64_t Idx(const Conv2DTransposeParams& p, bool output, int64_t b, int64_t y, int64_t x,
            int64_t c) {
  const int64_t h = output ? p.out_h : p.in_h, w = output ? p.out_w : p.in_w;
  const int64_t ch = output ? p.out_c : p.in_c;
  return p.nchw ? ((b * ch + c) * h + y) * w + x : ((b * h + y) * w + x) * ch + c;
}

// Calls visit(input_index, output_index, filter_index) for every (input pixel, tap, channels)
// term of the scatter whose output position lies inside the output.
template <typename Visit>
void ForEachTerm(const Conv2DTransposeParams& p, Visit visit) {
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t ih = 0; ih < p.in_h; ++ih)
      for (int64_t iw = 0; iw < p.in_w; ++iw)
        for (int64_t fh = 0; fh < p.filter_h; ++fh)
          for (int64_t fw = 0; fw < p.filter_w; ++fw) {
            const int64_t h = ih * p.stride_h - p.pad_top + fh * p.dilation_h;
            const int64_t w = iw * p.stride_w - p.pad_left + fw * p.dilation_w;
            if (h < 0 || h >= p.out_h || w < 0 || w >= p.out_w) continue;
            for (int64_t co = 0; co < p.out_c; ++co)
              for (int64_t ci = 0; ci < p.in_c; ++ci)
                visit(Idx(p, false, b, ih, iw, ci), Idx(p, true, b, h, w, co),
                      ((fh * p.filter_w + fw) * p.out_c + co) * p.in_c + ci);
          }
}

template <typename T>
std::vector<double> Widen(const std::vector<T>& v) {
  std::vector<double> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = Wide(v[i]);
  return out;
}

// |got - want| <= tol * (1 + sum of |terms|) element by element.
template <typename T>
::testing::AssertionResult Near(const std::vector<T>& got, const std::vector<double>& want,
                                const std::vector<double>& scale, double tol) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "size differs";
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::abs(Wide(got[i]) - want[i]) > tol * (1 + scale[i])) {
      return ::testing::AssertionFailure() << "[" << i << "] got " << Wide(got[i]) << ", want "
                                           << want[i] << " (scale " << scale[i] << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

template <typename T>
double Tolerance() {
  if constexpr (std::is_same_v<T, double>) return 1e-12;
  if constexpr (std::is_same_v<T, float>) return 1e-5;
  if constexpr (std::is_same_v<T, Eigen::half>) return 2e-3;
  return 1.6e-2;  // bfloat16: one rounding of the result (8 bits)
}

struct Case {
  std::vector<int64_t> input;   // data_format order
  std::vector<int64_t> filter;  // [FH, FW, CO, CI]
  std::vector<int64_t> output;  // output_shape values
  int64_t stride_h, stride_w, dilation_h, dilation_w;
  std::string padding;
  std::vector<int64_t> pads;  // explicit: [top, bottom, left, right]
  bool nchw;
};

Conv2DTransposeAttrs AttrsOf(const Case& c) {
  Conv2DTransposeAttrs a;
  a.data_format = c.nchw ? "NCHW" : "NHWC";
  a.strides = c.nchw ? std::vector<int64_t>{1, 1, c.stride_h, c.stride_w}
                     : std::vector<int64_t>{1, c.stride_h, c.stride_w, 1};
  a.dilations = c.nchw ? std::vector<int64_t>{1, 1, c.dilation_h, c.dilation_w}
                       : std::vector<int64_t>{1, c.dilation_h, c.dilation_w, 1};
  a.padding = c.padding;
  if (c.padding == "EXPLICIT") {
    a.explicit_paddings =
        c.nchw ? std::vector<int64_t>{0, 0, 0, 0, c.pads[0], c.pads[1], c.pads[2], c.pads[3]}
               : std::vector<int64_t>{0, 0, c.pads[0], c.pads[1], c.pads[2], c.pads[3], 0, 0};
  }
  return a;
}

std::vector<Case> Cases() {
  return {
      // SAME, stride 2, 4x4 (the YOLO upsampler, small)
      {{2, 5, 6, 3}, {4, 4, 5, 3}, {2, 10, 12, 5}, 2, 2, 1, 1, "SAME", {}, false},
      // SAME with odd total padding and an odd output size
      {{1, 4, 5, 2}, {3, 2, 3, 2}, {1, 7, 10, 3}, 2, 2, 1, 1, "SAME", {}, false},
      // VALID with a remainder, stride 3
      {{2, 3, 4, 3}, {2, 3, 2, 3}, {2, 8, 13, 2}, 3, 3, 1, 1, "VALID", {}, false},
      // dilation 2, SAME, stride 1, 5x5
      {{1, 6, 5, 4}, {5, 5, 3, 4}, {1, 6, 5, 3}, 1, 1, 2, 2, "SAME", {}, false},
      // dilation 2 with stride 2, VALID, 1x3 kernel
      {{2, 3, 3, 2}, {1, 3, 2, 2}, {2, 5, 9, 2}, 2, 2, 2, 2, "VALID", {}, false},
      // EXPLICIT asymmetric pads
      {{1, 4, 4, 3}, {3, 3, 2, 3}, {1, 8, 9, 2}, 2, 2, 1, 1, "EXPLICIT", {1, 0, 0, 1}, false},
      // 1x1 kernel, stride 1
      {{3, 2, 3, 5}, {1, 1, 4, 5}, {3, 2, 3, 4}, 1, 1, 1, 1, "VALID", {}, false},
      // output_shape of length 2
      {{1, 3, 3, 2}, {2, 2, 3, 2}, {6, 6}, 2, 2, 1, 1, "SAME", {}, false},
      // NCHW
      {{2, 3, 5, 4}, {3, 3, 2, 3}, {2, 2, 9, 8}, 2, 2, 1, 1, "SAME", {}, true},
      {{1, 2, 4, 3}, {2, 3, 3, 2}, {1, 3, 9, 10}, 2, 3, 2, 1, "VALID", {}, true},
      // many channels and pixels: several GEMM tiles per image (kTileRows = 256)
      {{2, 17, 19, 70}, {3, 3, 66, 70}, {2, 34, 38, 66}, 2, 2, 1, 1, "SAME", {}, false},
      // 3x3 stride 1 with 16+ channels: the filter gradient by Winograd (common/conv2d_core.h),
      // SAME with odd sizes, VALID, EXPLICIT asymmetric, and 9 images (more than the 8 groups
      // of its reduction)
      {{2, 17, 15, 20}, {3, 3, 18, 20}, {2, 17, 15, 18}, 1, 1, 1, 1, "SAME", {}, false},
      {{2, 14, 13, 16}, {3, 3, 16, 16}, {2, 16, 15, 16}, 1, 1, 1, 1, "VALID", {}, false},
      {{3, 11, 11, 17},
       {3, 3, 19, 17},
       {3, 12, 12, 19},
       1,
       1,
       1,
       1,
       "EXPLICIT",
       {1, 0, 0, 1},
       false},
      {{9, 16, 16, 16}, {3, 3, 16, 16}, {9, 16, 16, 16}, 1, 1, 1, 1, "SAME", {}, false},
      // 4x4 stride 2 with 16+ channels: the forward by phases and Winograd F(2x2, 2x2): SAME with
      // an odd output height, EXPLICIT asymmetric, VALID
      {{2, 9, 8, 16}, {4, 4, 17, 16}, {2, 17, 16, 17}, 2, 2, 1, 1, "SAME", {}, false},
      {{2, 8, 9, 18}, {4, 4, 16, 18}, {2, 16, 18, 16}, 2, 2, 1, 1, "EXPLICIT", {1, 2, 2, 1}, false},
      {{1, 8, 8, 16}, {4, 4, 16, 16}, {1, 18, 18, 16}, 2, 2, 1, 1, "VALID", {}, false},
      // a 3x3 filter over a 1x1 image, stride 2: most taps meet no output, so their gradient is
      // 0 (oneDNN's bfloat16 filter gradient left them unwritten: found through cuda_sim)
      {{1, 1, 1, 2}, {3, 3, 2, 2}, {1, 2, 1, 2}, 2, 2, 1, 1, "SAME", {}, false},
      // empty: batch 0, input height 0 (VALID), zero channels
      {{0, 3, 3, 2}, {2, 2, 3, 2}, {0, 6, 6, 3}, 2, 2, 1, 1, "SAME", {}, false},
      {{1, 0, 2, 2}, {5, 1, 3, 2}, {1, 2, 3, 3}, 2, 2, 1, 1, "VALID", {}, false},
      {{1, 2, 2, 0}, {2, 2, 3, 0}, {1, 4, 4, 3}, 2, 2, 1, 1, "SAME", {}, false},
  };
}

template <typename T>
class Conv2DTransposeKernelTest : public ::testing::Test {};
TYPED_TEST_SUITE(Conv2DTransposeKernelTest, FloatTypes, TypeNames);

TYPED_TEST(Conv2DTransposeKernelTest, ForwardAndGradientsMatchTheDefinition) {
  using T = TypeParam;
  test::RestoreOnednn restore;
  for (const bool onednn : {false, true}) {
    if (!test::UseOnednnPath<T>(onednn)) continue;
    SCOPED_TRACE(onednn ? "oneDNN" : "opforge's kernels");
    std::mt19937_64 rng(42);
    int index = 0;
    for (const Case& c : Cases()) {
      SCOPED_TRACE(::testing::Message() << "case " << index++);
      Conv2DTransposeParams p;
      OPFORGE_ASSERT_OK(ValidateConv2DTranspose(AttrsOf(c), c.input, c.filter, c.output, &p));
      const auto x = test::UniformVector<T>(rng, p.InputSize(), -2.0, 2.0);
      const auto f = test::UniformVector<T>(rng, p.FilterSize(), -2.0, 2.0);
      const auto g = test::UniformVector<T>(rng, p.OutputSize(), -2.0, 2.0);
      const auto xd = Widen(x), fd = Widen(f), gd = Widen(g);
      std::vector<double> y_ref(p.OutputSize()), y_scale(p.OutputSize());
      std::vector<double> dx_ref(p.InputSize()), dx_scale(p.InputSize());
      std::vector<double> df_ref(p.FilterSize()), df_scale(p.FilterSize());
      ForEachTerm(p, [&](int64_t i, int64_t o, int64_t k) {
        y_ref[o] += xd[i] * fd[k];
        y_scale[o] += std::abs(xd[i] * fd[k]);
        dx_ref[i] += gd[o] * fd[k];
        dx_scale[i] += std::abs(gd[o] * fd[k]);
        df_ref[k] += gd[o] * xd[i];
        df_scale[k] += std::abs(gd[o] * xd[i]);
      });
      for (int threads : {1, 3}) {
        SCOPED_TRACE(::testing::Message() << threads << " threads");
        const ThreadParallel parallel(threads);
        std::vector<T> y(p.OutputSize(), T(7)), dx(p.InputSize(), T(7)), df(p.FilterSize(), T(7));
        Conv2DTransposeForward<T>(p, x.data(), f.data(), y.data(), parallel);
        Conv2DTransposeInputGrad<T>(p, g.data(), f.data(), dx.data(), parallel);
        Conv2DTransposeFilterGrad<T>(p, x.data(), g.data(), df.data(), parallel);
        EXPECT_TRUE(Near(y, y_ref, y_scale, Tolerance<T>()));
        EXPECT_TRUE(Near(dx, dx_ref, dx_scale, Tolerance<T>()));
        EXPECT_TRUE(Near(df, df_ref, df_scale, Tolerance<T>()));
      }
    }
  }
}

TYPED_TEST(Conv2DTransposeKernelTest, SameBitsForAnyThreadCount) {
  using T = TypeParam;
  std::mt19937_64 rng(7);
  for (const Case& c : Cases()) {
    Conv2DTransposeParams p;
    OPFORGE_ASSERT_OK(ValidateConv2DTranspose(AttrsOf(c), c.input, c.filter, c.output, &p));
    const auto x = test::UniformVector<T>(rng, p.InputSize(), -2.0, 2.0);
    const auto f = test::UniformVector<T>(rng, p.FilterSize(), -2.0, 2.0);
    const auto g = test::UniformVector<T>(rng, p.OutputSize(), -2.0, 2.0);
    std::vector<T> y1(p.OutputSize()), y2(p.OutputSize()), dx1(p.InputSize()), dx2(p.InputSize()),
        df1(p.FilterSize()), df2(p.FilterSize());
    Conv2DTransposeForward<T>(p, x.data(), f.data(), y1.data(), SerialParallel());
    Conv2DTransposeForward<T>(p, x.data(), f.data(), y2.data(), ThreadParallel(4));
    Conv2DTransposeInputGrad<T>(p, g.data(), f.data(), dx1.data(), SerialParallel());
    Conv2DTransposeInputGrad<T>(p, g.data(), f.data(), dx2.data(), ThreadParallel(4));
    Conv2DTransposeFilterGrad<T>(p, x.data(), g.data(), df1.data(), SerialParallel());
    Conv2DTransposeFilterGrad<T>(p, x.data(), g.data(), df2.data(), ThreadParallel(4));
    EXPECT_TRUE(SameBits(y1, y2));
    EXPECT_TRUE(SameBits(dx1, dx2));
    EXPECT_TRUE(SameBits(df1, df2));
  }
}

// int32: sums modulo 2^32 of values over int32's whole range, in both layouts, for every case
// (dilations, paddings, empty tensors), identical for any thread count. The reference sums in
// uint64_t (modular), whose low 32 bits are the int32 answer.
TEST(Conv2DTransposeKernelTest, Int32WrapsModulo2To32) {
  std::mt19937_64 rng(43);
  int index = 0;
  for (const Case& c : Cases()) {
    SCOPED_TRACE(::testing::Message() << "case " << index++);
    Conv2DTransposeParams p;
    OPFORGE_ASSERT_OK(ValidateConv2DTranspose(AttrsOf(c), c.input, c.filter, c.output, &p));
    std::vector<int32_t> x(p.InputSize()), f(p.FilterSize());
    for (auto& v : x) v = static_cast<int32_t>(rng());
    for (auto& v : f) v = static_cast<int32_t>(rng());
    if (index == 1) {  // the extremes, so that single products overflow too
      for (size_t i = 0; i < x.size(); ++i) {
        x[i] = i % 2 ? std::numeric_limits<int32_t>::min() : std::numeric_limits<int32_t>::max();
      }
    }
    std::vector<uint64_t> ref(p.OutputSize(), 0);
    ForEachTerm(p, [&](int64_t i, int64_t o, int64_t k) {
      ref[o] += static_cast<uint64_t>(static_cast<int64_t>(x[i])) *
                static_cast<uint64_t>(static_cast<int64_t>(f[k]));
    });
    std::vector<int32_t> want(ref.size());
    for (size_t i = 0; i < ref.size(); ++i) want[i] = static_cast<int32_t>(ref[i]);
    for (int threads : {1, 3}) {
      SCOPED_TRACE(::testing::Message() << threads << " threads");
      std::vector<int32_t> y(p.OutputSize(), 7);
      Conv2DTransposeForward<int32_t>(p, x.data(), f.data(), y.data(), ThreadParallel(threads));
      ASSERT_EQ(y, want);
    }
  }
}

// Inf and NaN on the Winograd paths (the 4x4 stride-2 forward and input gradient by phases, the
// 3x3 stride-1 filter gradient): those calls take the direct sums, whose answer is exact: inf or
// NaN only where a term is.
TEST(Conv2DTransposeKernelTest, InfAndNanTakeTheDirectSums) {
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<Case> cases = {
      {{2, 9, 8, 16}, {4, 4, 17, 16}, {2, 17, 16, 17}, 2, 2, 1, 1, "SAME", {}, false},
      {{2, 17, 15, 20}, {3, 3, 18, 20}, {2, 17, 15, 18}, 1, 1, 1, 1, "SAME", {}, false},
      // a 1x1 input against a 3x3 filter: the 8 outer taps reach only padding, their filter
      // gradient is exactly 0 whatever the input holds
      {{1, 1, 1, 1}, {3, 3, 1, 1}, {1, 1, 1, 1}, 1, 1, 1, 1, "SAME", {}, false},
  };
  std::mt19937_64 rng(11);
  for (size_t c = 0; c < cases.size(); ++c) {
    Conv2DTransposeParams p;
    OPFORGE_ASSERT_OK(ValidateConv2DTranspose(AttrsOf(cases[c]), cases[c].input, cases[c].filter,
                                              cases[c].output, &p));
    for (int where = 0; where < 3; ++where) {
      SCOPED_TRACE(::testing::Message() << "case " << c << " special in " << where);
      auto x = test::UniformVector<float>(rng, p.InputSize(), -2.0, 2.0);
      auto f = test::UniformVector<float>(rng, p.FilterSize(), -2.0, 2.0);
      auto g = test::UniformVector<float>(rng, p.OutputSize(), -2.0, 2.0);
      // where 0: inf and NaN in the input; 1: -inf in the filter; 2: inf in the output gradient.
      if (where == 0) {
        x[static_cast<size_t>(p.InputSize() / 3)] = static_cast<float>(inf);
        if (p.InputSize() > 1) x[static_cast<size_t>(p.InputSize() - 1)] = std::nanf("");
      } else if (where == 1) {
        f[static_cast<size_t>(p.FilterSize() / 2)] = static_cast<float>(-inf);
      } else {
        g[static_cast<size_t>((p.OutputSize() / 2 + 5) % p.OutputSize())] = static_cast<float>(inf);
      }
      const auto xd = Widen(x), fd = Widen(f), gd = Widen(g);
      std::vector<double> y_ref(p.OutputSize()), dx_ref(p.InputSize()), df_ref(p.FilterSize());
      ForEachTerm(p, [&](int64_t i, int64_t o, int64_t k) {
        y_ref[o] += xd[i] * fd[k];
        dx_ref[i] += gd[o] * fd[k];
        df_ref[k] += gd[o] * xd[i];
      });
      std::vector<float> y(p.OutputSize()), dx(p.InputSize()), df(p.FilterSize());
      Conv2DTransposeForward<float>(p, x.data(), f.data(), y.data(), ThreadParallel(2));
      Conv2DTransposeInputGrad<float>(p, g.data(), f.data(), dx.data(), ThreadParallel(2));
      Conv2DTransposeFilterGrad<float>(p, x.data(), g.data(), df.data(), ThreadParallel(2));
      auto check = [](const std::vector<float>& got, const std::vector<double>& want) {
        for (size_t i = 0; i < want.size(); ++i) {
          const double gv = got[i], wv = want[i];
          const bool ok = std::isnan(wv) ? std::isnan(gv)
                          : std::isinf(wv)
                              ? gv == wv
                              : std::isfinite(gv) && std::abs(gv - wv) <= 1e-3 * (1 + std::abs(wv));
          if (!ok)
            return ::testing::AssertionFailure() << "[" << i << "] got " << gv << ", want " << wv;
        }
        return ::testing::AssertionSuccess();
      };
      EXPECT_TRUE(check(y, y_ref)) << "forward";
      EXPECT_TRUE(check(dx, dx_ref)) << "input gradient";
      EXPECT_TRUE(check(df, df_ref)) << "filter gradient";
    }
  }
}

// Small integers make every sum exact: the result must equal the reference exactly, which
// checks the index mapping with no tolerance at all.
TEST(Conv2DTransposeKernelTest, IntegerValuedDataIsExact) {
  std::mt19937_64 rng(3);
  std::uniform_int_distribution<int> d(-3, 3);
  for (const Case& c : Cases()) {
    Conv2DTransposeParams p;
    OPFORGE_ASSERT_OK(ValidateConv2DTranspose(AttrsOf(c), c.input, c.filter, c.output, &p));
    std::vector<float> x(p.InputSize()), f(p.FilterSize()), y(p.OutputSize());
    for (auto& v : x) v = static_cast<float>(d(rng));
    for (auto& v : f) v = static_cast<float>(d(rng));
    std::vector<double> ref(p.OutputSize());
    ForEachTerm(p, [&](int64_t i, int64_t o, int64_t k) { ref[o] += double(x[i]) * f[k]; });
    Conv2DTransposeForward<float>(p, x.data(), f.data(), y.data(), ThreadParallel(2));
    for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(double(y[i]), ref[i]) << i;
  }
}

// A col buffer too large for one pass is processed in bands of input rows; the result must not
// depend on where the bands fall.
TEST(Conv2DTransposeKernelTest, BandsOfInputRowsGiveTheWholeImageResult) {
  // Overlapping bands; then bands with output rows between them and after the last that no
  // input reaches (stride 3, 2-high filter, VALID with a remainder): those must be zeros.
  for (const Case& c :
       {Case{{1, 40, 40, 8}, {5, 5, 512, 8}, {1, 80, 80, 512}, 2, 2, 1, 1, "SAME", {}, false},
        Case{
            {1, 40, 40, 8}, {2, 1, 2000, 8}, {1, 121, 40, 2000}, 3, 1, 1, 1, "VALID", {}, false}}) {
    Conv2DTransposeParams p;
    OPFORGE_ASSERT_OK(ValidateConv2DTranspose(AttrsOf(c), c.input, c.filter, c.output, &p));
    std::mt19937_64 rng(5);
    std::uniform_int_distribution<int> d(-3, 3);
    std::vector<float> x(p.InputSize()), f(p.FilterSize()), y(p.OutputSize());
    for (auto& v : x) v = static_cast<float>(d(rng));
    for (auto& v : f) v = static_cast<float>(d(rng));
    std::vector<double> ref(p.OutputSize());
    ForEachTerm(p, [&](int64_t i, int64_t o, int64_t k) { ref[o] += double(x[i]) * f[k]; });
    std::fill(y.begin(), y.end(), 7.0f);  // stale values must not survive
    Conv2DTransposeForward<float>(p, x.data(), f.data(), y.data(), ThreadParallel(2));
    for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(double(y[i]), ref[i]) << i;
  }
}

// --- validation -------------------------------------------------------------------------------

Status Check(const Case& c) {
  Conv2DTransposeParams p;
  return ValidateConv2DTranspose(AttrsOf(c), c.input, c.filter, c.output, &p);
}

Case Good() { return {{2, 4, 4, 3}, {3, 3, 5, 3}, {2, 8, 8, 5}, 2, 2, 1, 1, "SAME", {}, false}; }

TEST(Conv2DTransposeValidateTest, OutputSizeThatDoesNotFitNamesTheRange) {
  Case c = Good();
  c.output = {2, 9, 8, 5};
  Status s = Check(c);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.message(), "output_shape height 9"));
  EXPECT_TRUE(Contains(s.message(), "from 7 to 8 fit"));
  c = Good();
  c.padding = "VALID";
  c.output = {2, 8, 10, 5};  // VALID: (H - 3) / 2 + 1 == 4 for H in [9, 10]
  s = Check(c);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.message(), "output_shape height 8"));
  EXPECT_TRUE(Contains(s.message(), "from 9 to 10 fit"));
  c.output = {2, 9, 10, 5};
  OPFORGE_ASSERT_OK(Check(c));
  c.output = {2, 10, 11, 5};
  s = Check(c);
  EXPECT_TRUE(Contains(s.message(), "output_shape width 11")) << s.message();
}

// Every size of the named range fits and its neighbours do not, for every padding.
TEST(Conv2DTransposeValidateTest, FittingRangeIsExact) {
  for (const std::string padding : {"SAME", "VALID", "EXPLICIT"}) {
    for (int64_t stride : {1, 2, 3}) {
      for (int64_t filter : {1, 2, 4}) {
        for (int64_t in : {0, 1, 3}) {
          Case c{{1, in, 1, 1}, {filter, 1, 1, 1}, {1, 0, 1, 1}, stride, 1, 2, 1,
                 padding,       {1, 2, 0, 0},      false};
          c.output[1] = 1000;  // fits nothing: read the range from the message
          const Status s = Check(c);
          ASSERT_FALSE(s.ok());
          const std::string& m = s.message();
          const size_t from = m.find("from ");
          if (from == std::string::npos) {
            EXPECT_TRUE(Contains(m, "no output height fits"));
            for (int64_t h = 0; h < 40; ++h) {
              c.output[1] = h;
              EXPECT_FALSE(Check(c).ok()) << m << " but " << h << " fits";
            }
            continue;
          }
          const int64_t lo = std::stoll(m.substr(from + 5));
          const int64_t hi = std::stoll(m.substr(m.find(" to ", from) + 4));
          for (int64_t h = 0; h < hi + 5; ++h) {
            c.output[1] = h;
            EXPECT_EQ(Check(c).ok(), h >= lo && h <= hi) << m << " h=" << h;
          }
        }
      }
    }
  }
}

TEST(Conv2DTransposeValidateTest, BadArgumentsNameTheArgument) {
  struct Bad {
    Case c;
    const char* fragment;
  };
  std::vector<Bad> bad;
  Case c = Good();
  c.input = {2, 4, 4};
  bad.push_back({c, "input must be a 4-D tensor"});
  c = Good();
  c.filter = {3, 3, 5};
  bad.push_back({c, "filter must be a 4-D tensor"});
  c = Good();
  c.filter = {3, 3, 5, 4};
  bad.push_back({c, "in_channels"});
  c = Good();
  c.output = {2, 8, 8};
  bad.push_back({c, "output_shape must be 4 values"});
  c = Good();
  c.output = {3, 8, 8, 5};
  bad.push_back({c, "output_shape must be the input's batch size 2"});
  c = Good();
  c.output = {2, 8, 8, 6};
  bad.push_back({c, "out_channels"});
  c = Good();
  c.output = {2, -8, 8, 5};
  bad.push_back({c, "output_shape must be sizes between 0"});
  c = Good();
  c.filter = {0, 3, 5, 3};
  bad.push_back({c, "filter must be a non-empty window"});
  c = Good();
  c.input = {2, -1, 4, 3};
  bad.push_back({c, "input must be sizes"});
  for (const auto& b : bad) {
    const Status s = Check(b.c);
    ASSERT_FALSE(s.ok()) << b.fragment;
    EXPECT_TRUE(Contains(s.message(), b.fragment));
  }
}

TEST(Conv2DTransposeValidateTest, BadAttributes) {
  struct Bad {
    Conv2DTransposeAttrs a;
    const char* fragment;
  };
  std::vector<Bad> bad;
  Conv2DTransposeAttrs a;
  a.strides = {1, 2, 2};
  bad.push_back({a, "strides must be a list of 4 values"});
  a = {};
  a.strides = {2, 2, 2, 1};
  bad.push_back({a, "strides must be 1 in the batch and channel dimensions"});
  a = {};
  a.strides = {1, 0, 2, 1};
  bad.push_back({a, "strides must be between 1 and 2^30"});
  a = {};
  a.dilations = {1, 1, 1, 2};
  bad.push_back({a, "dilations must be 1 in the batch and channel"});
  a = {};
  a.dilations = {1, -1, 1, 1};
  bad.push_back({a, "dilations must be between 1"});
  a = {};
  a.padding = "FULL";
  bad.push_back({a, "padding must be"});
  a = {};
  a.padding = "EXPLICIT";
  a.explicit_paddings = {0, 0, 1, 1};
  bad.push_back({a, "explicit_paddings must be 8 values"});
  a.explicit_paddings = {0, 0, 1, -1, 0, 0, 0, 0};
  bad.push_back({a, "explicit_paddings must be between 0"});
  a.explicit_paddings = {1, 0, 1, 1, 0, 0, 0, 0};
  bad.push_back({a, "explicit_paddings must be 0 in the batch and channel"});
  a = {};
  a.explicit_paddings = {0, 0, 1, 1, 1, 1, 0, 0};
  bad.push_back({a, "explicit_paddings must be empty unless padding is EXPLICIT"});
  a = {};
  a.data_format = "NWHC";
  bad.push_back({a, "data_format must be"});
  for (const auto& b : bad) {
    const Status s = ValidateConv2DTransposeAttrs(b.a);
    ASSERT_FALSE(s.ok()) << b.fragment;
    EXPECT_TRUE(Contains(s.message(), b.fragment));
  }
}

TEST(Conv2DTransposeValidateTest, InputGradInfersTheInputSize) {
  const Case c = Good();
  Conv2DTransposeParams p;
  OPFORGE_ASSERT_OK(ValidateConv2DTransposeInputGrad(AttrsOf(c), c.output, c.filter, &p));
  EXPECT_EQ(p.InputShape(), c.input);
  const Status s = ValidateConv2DTransposeInputGrad(AttrsOf(c), {2, 8, 8, 4}, c.filter, &p);
  EXPECT_TRUE(Contains(s.message(), "grad must be the filter's out_channels 5")) << s.message();
}

// The filter gradient's grad is the forward output's gradient: 4-D. A [OH, OW] grad once passed as
// a 2-value output_shape and the kernel read it as [N, OH, OW, C], past its end (found by
// conv2d_transpose_fuzz).
TEST(Conv2DTransposeValidateTest, FilterGradTakesOnlyA4DGrad) {
  const Case c = Good();
  Conv2DTransposeParams p;
  OPFORGE_ASSERT_OK(ValidateConv2DTransposeFilterGrad(AttrsOf(c), c.input, c.filter, c.output, &p));
  const std::vector<int64_t> hw = {c.output[1], c.output[2]};
  OPFORGE_ASSERT_OK(ValidateConv2DTranspose(AttrsOf(c), c.input, c.filter, hw, &p));
  const Status s = ValidateConv2DTransposeFilterGrad(AttrsOf(c), c.input, c.filter, hw, &p);
  EXPECT_TRUE(Contains(s.message(), "Conv2DTranspose: grad must be a 4-D tensor")) << s.message();
}

// --- the two builds of the matrix products ------------------------------------------------------

}  // namespace
}  // namespace opforge

#include "common/gemm.h"
#include "common/parallel.h"

namespace opforge {
namespace {

template <typename C>
void CheckGemm(const gemm::Gemm<C>& gemm, double tol) {
  std::mt19937_64 rng(9);
  const int64_t m = 37, k = 301, n = 70;  // odd sizes: every remainder path of the kernels
  const auto a = test::UniformVector<C>(rng, m * k, -2.0, 2.0),
             b = test::UniformVector<C>(rng, k * n, -2.0, 2.0),
             c0 = test::UniformVector<C>(rng, m * n, -2.0, 2.0);
  std::vector<double> ab(m * n, 0.0), abt(m * n, 0.0), atb(m * n, 0.0), scale(m * n, 0.0);
  // a as [m, k]; b as [k, n] for a_b, as [n, k] for a_bt; a as [k, m] for at_b_add.
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t l = 0; l < k; ++l) {
        ab[i * n + j] += double(a[i * k + l]) * b[l * n + j];
        abt[i * n + j] += double(a[i * k + l]) * b[j * k + l];
        scale[i * n + j] += std::abs(double(a[i * k + l]) * b[l * n + j]);
      }
  const int64_t k2 = 53;  // at_b_add: a [k2, m], b [k2, n]
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      atb[i * n + j] = c0[i * n + j];
      for (int64_t l = 0; l < k2; ++l) atb[i * n + j] += double(a[l * m + i]) * b[l * n + j];
    }
  std::vector<C> c(m * n);
  gemm.a_b(a.data(), b.data(), c.data(), m, k, n);
  EXPECT_TRUE(Near(c, ab, scale, tol));
  gemm.a_bt(a.data(), b.data(), c.data(), m, k, n, n);
  EXPECT_TRUE(Near(c, abt, scale, tol));
  c = c0;
  gemm.at_b_add(a.data(), b.data(), c.data(), m, k2, n);
  EXPECT_TRUE(Near(c, atb, scale, tol));

  // A packed right operand: Eigen's blocking, then small blocks forced (several blocks along k,
  // n and m, each with a remainder), b as [k, n] and as [n, k]; c with a wider row stride whose
  // extra columns stay untouched.
  const SerialParallel serial;
  for (const bool transposed : {false, true}) {
    const auto& want = transposed ? abt : ab;
    std::vector<C> wide(m * (n + 3), C(7));
    gemm::PackedB<C> packed(gemm, b.data(), transposed ? k : n, transposed, k, n, 16, serial);
    packed.Multiply(a.data(), k, wide.data(), m, n + 3);
    for (int64_t i = 0; i < m; ++i) {
      std::copy(wide.begin() + i * (n + 3), wide.begin() + i * (n + 3) + n, c.begin() + i * n);
      EXPECT_EQ(wide[i * (n + 3) + n], C(7));
    }
    EXPECT_TRUE(Near(c, want, scale, tol)) << "transposed " << transposed;
    gemm::PackedLayout l = gemm.packed_layout(k, n, 16);
    l.k_block = 64;
    l.n_block = 50;
    l.m_block = 16;
    l.k_blocks = (k + 63) / 64;
    l.n_blocks = (n + 49) / 50;
    l.block_stride = 64 * 50;
    std::vector<C> buffer(l.k_blocks * l.n_blocks * l.block_stride + 16);
    C* p = buffer.data();
    while (reinterpret_cast<uintptr_t>(p) % 64 != 0) ++p;
    for (int64_t i = 0; i < l.k_blocks * l.n_blocks; ++i) {
      gemm.pack_b_block(b.data(), transposed ? k : n, transposed, l, i, p);
    }
    std::fill(c.begin(), c.end(), C(7));
    gemm.a_packed_b(a.data(), k, p, l, c.data(), m, n, 0, 2);
    gemm.a_packed_b(a.data(), k, p, l, c.data(), m, n, 2, l.n_blocks);
    EXPECT_TRUE(Near(c, want, scale, tol)) << "small blocks, transposed " << transposed;
  }
}

TEST(Conv2DTransposeGemmTest, DefaultAndFmaBuildsAreCorrect) {
  using gemm::DefaultGemm;
  using gemm::FmaGemm;
  CheckGemm<float>(*DefaultGemm<float>(), 1e-5);
  CheckGemm<double>(*DefaultGemm<double>(), 1e-13);
  if (FmaGemm<float>() == nullptr) {
    GTEST_SKIP() << "no AVX2+FMA build or CPU: only the default build checked";
  }
  CheckGemm<float>(*FmaGemm<float>(), 1e-5);
  CheckGemm<double>(*FmaGemm<double>(), 1e-13);
  if (gemm::Avx512Gemm<float>() == nullptr) {
    EXPECT_EQ(&gemm::BestGemm<float>(), FmaGemm<float>());
  }
}

TEST(Conv2DTransposeGemmTest, Avx512BuildIsCorrectAndPreferred) {
  using gemm::Avx512Gemm;
  if (Avx512Gemm<float>() == nullptr) {
    GTEST_SKIP() << "no AVX-512 build or CPU";
  }
  CheckGemm<float>(*Avx512Gemm<float>(), 1e-5);
  CheckGemm<double>(*Avx512Gemm<double>(), 1e-13);
  EXPECT_EQ(&gemm::BestGemm<float>(), Avx512Gemm<float>());
  EXPECT_EQ(&gemm::BestGemm<double>(), Avx512Gemm<double>());
}

}  // namespace
}  // namespace opforge

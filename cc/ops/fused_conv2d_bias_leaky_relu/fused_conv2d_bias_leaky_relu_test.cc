// Tests of the FusedConv2DBiasLeakyRelu core against a naive direct convolution written here
// from the header's formula (double accumulation): SAME, VALID and EXPLICIT padding, strides,
// dilations, 1x1 pointwise, tiles that span rows and images, empty shapes; float exact on
// integer-valued data, within rounding on random data; half and bfloat16; the same bits for
// every thread count; validation messages.
#include "ops/fused_conv2d_bias_leaky_relu/fused_conv2d_bias_leaky_relu.h"

#include <gtest/gtest.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/onednn_test_util.h"
#include "common/parallel.h"
#include "common/status.h"
#include "common/test_util.h"
#include "ops/fused_conv2d_bias_leaky_relu/fused_conv2d_bias_leaky_relu_op.h"

namespace opforge {
namespace {

using test::Contains;

// CPU only: the op struct has no GPU path for a skeleton to call.
static_assert(!internal::HasGpu<fused_conv2d_bias_leaky_relu_op::FusedConv2DOp>::value);

struct Shape {
  Shape(std::vector<int64_t> in, std::vector<int64_t> f, std::vector<int64_t> s = {1, 1, 1, 1},
        std::vector<int64_t> d = {1, 1, 1, 1}, std::string pad = "SAME",
        std::vector<int64_t> expl = {}, float a = 0.1f)
      : input(std::move(in)),
        filter(std::move(f)),
        strides(std::move(s)),
        dilations(std::move(d)),
        padding(std::move(pad)),
        explicit_paddings(std::move(expl)),
        alpha(a) {}
  std::vector<int64_t> input, filter;
  std::vector<int64_t> strides, dilations;
  std::string padding;
  std::vector<int64_t> explicit_paddings;
  float alpha;
};

FusedConv2DParams Params(const Shape& s) {
  FusedConv2DParams p;
  p.strides = s.strides;
  p.dilations = s.dilations;
  p.padding = s.padding;
  p.explicit_paddings = s.explicit_paddings;
  p.alpha = s.alpha;
  const Status st = ValidateFusedConv2D(s.input, s.filter, {s.filter[3]}, &p);
  EXPECT_TRUE(st.ok()) << st.message();
  return p;
}

std::vector<double> Naive(const FusedConv2DParams& p, const std::vector<double>& in,
                          const std::vector<double>& f, const std::vector<double>& b) {
  const conv::Conv2DGeometry& g = p.g;
  std::vector<double> out(static_cast<size_t>(g.OutputSize()));
  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t oh = 0; oh < g.out_h; ++oh)
      for (int64_t ow = 0; ow < g.out_w; ++ow)
        for (int64_t co = 0; co < g.out_c; ++co) {
          double z = 0;
          for (int64_t kh = 0; kh < g.filter_h; ++kh)
            for (int64_t kw = 0; kw < g.filter_w; ++kw) {
              const int64_t h = oh * g.stride_h - g.pad_top + kh * g.dilation_h;
              const int64_t w = ow * g.stride_w - g.pad_left + kw * g.dilation_w;
              if (h < 0 || h >= g.in_h || w < 0 || w >= g.in_w) continue;
              for (int64_t ci = 0; ci < g.in_c; ++ci) {
                z += in[static_cast<size_t>(((n * g.in_h + h) * g.in_w + w) * g.in_c + ci)] *
                     f[static_cast<size_t>(((kh * g.filter_w + kw) * g.in_c + ci) * g.out_c + co)];
              }
            }
          z += b[static_cast<size_t>(co)];
          out[static_cast<size_t>(((n * g.out_h + oh) * g.out_w + ow) * g.out_c + co)] =
              z > 0 ? z : z * static_cast<double>(p.alpha);
        }
  return out;
}

std::vector<double> Random(size_t n, unsigned seed, bool integer) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_int_distribution<int> ints(-3, 3);
  std::vector<double> v(n);
  for (auto& x : v) x = integer ? ints(rng) : normal(rng);
  return v;
}

template <typename T>
std::vector<T> As(const std::vector<double>& v) {
  std::vector<T> out;
  for (double x : v) out.push_back(static_cast<T>(x));
  return out;
}

const std::vector<Shape>& Shapes() {
  static const std::vector<Shape> shapes = [] {
    std::vector<Shape> s;
    s.push_back({{2, 7, 6, 5}, {3, 3, 5, 4}});
    s.push_back({{2, 9, 8, 6}, {3, 3, 6, 7}, {1, 2, 2, 1}});
    s.push_back({{2, 5, 5, 8}, {1, 1, 8, 6}, {1, 1, 1, 1}, {1, 1, 1, 1}, "VALID"});
    s.push_back({{1, 11, 9, 3}, {5, 3, 3, 4}, {1, 1, 1, 1}, {1, 2, 2, 1}, "VALID", {}, 0.3f});
    s.push_back({{2, 6, 7, 2},
                 {2, 3, 2, 3},
                 {1, 2, 1, 1},
                 {1, 1, 1, 1},
                 "EXPLICIT",
                 {0, 0, 1, 2, 0, 1, 0, 0},
                 0.0f});
    s.push_back({{1, 40, 40, 4}, {3, 3, 4, 5}});  // tiles span rows
    s.push_back({{3, 17, 19, 3}, {1, 1, 3, 9}, {1, 1, 1, 1}, {1, 1, 1, 1}, "SAME"});  // pointwise
    s.push_back({{2, 8, 8, 3}, {4, 4, 3, 2}, {1, 3, 3, 1}});  // even filter, SAME
    // Winograd: bands of tile rows that span images (5 small images), odd sizes; VALID
    s.push_back({{5, 9, 7, 16}, {3, 3, 16, 17}});
    s.push_back({{1, 19, 17, 16}, {3, 3, 16, 16}, {1, 1, 1, 1}, {1, 1, 1, 1}, "VALID"});
    return s;
  }();
  return shapes;
}

TEST(FusedConv2DTest, FloatExactOnIntegerValuedData) {
  test::RestoreOnednn restore;
  for (const bool onednn : {false, true}) {
    if (!test::UseOnednnPath<float>(onednn)) continue;
    SCOPED_TRACE(onednn ? "oneDNN" : "opforge's kernels");
    unsigned seed = 1;
    for (const Shape& s : Shapes()) {
      const FusedConv2DParams p = Params(s);
      const auto in = Random(static_cast<size_t>(p.g.InputSize()), seed++, true);
      const auto f = Random(
          static_cast<size_t>(s.filter[0] * s.filter[1] * s.filter[2] * s.filter[3]), seed++, true);
      auto b = Random(static_cast<size_t>(s.filter[3]), seed++, true);
      // alpha * z stays exact for integers z when alpha is a power of two or zero: use 0.25.
      FusedConv2DParams q = p;
      if (q.alpha != 0.0f) q.alpha = 0.25f;
      const auto want = Naive(q, in, f, b);
      std::vector<float> out(want.size());
      FusedConv2DBiasLeakyRelu<float>(q, As<float>(in).data(), As<float>(f).data(),
                                      As<float>(b).data(), out.data(), SerialParallel());
      for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(out[i], static_cast<float>(want[i])) << i;
    }
  }
}

template <typename T>
void CheckRandom(double rtol) {
  test::RestoreOnednn restore;
  for (const bool onednn : {false, true}) {
    if (!test::UseOnednnPath<T>(onednn)) continue;
    SCOPED_TRACE(onednn ? "oneDNN" : "opforge's kernels");
    unsigned seed = 100;
    for (const Shape& s : Shapes()) {
      const FusedConv2DParams p = Params(s);
      auto in = Random(static_cast<size_t>(p.g.InputSize()), seed++, false);
      auto f = Random(static_cast<size_t>(s.filter[0] * s.filter[1] * s.filter[2] * s.filter[3]),
                      seed++, false);
      auto b = Random(static_cast<size_t>(s.filter[3]), seed++, false);
      // The reference sees the values as T holds them.
      for (auto* v : {&in, &f, &b})
        for (auto& x : *v) x = static_cast<double>(static_cast<T>(x));
      const auto want = Naive(p, in, f, b);
      std::vector<T> out(want.size());
      FusedConv2DBiasLeakyRelu<T>(p, As<T>(in).data(), As<T>(f).data(), As<T>(b).data(), out.data(),
                                  ThreadParallel(2));
      const double scale = std::sqrt(static_cast<double>(p.g.Depth())) * 3.0;
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_NEAR(static_cast<double>(out[i]), want[i], rtol * (std::abs(want[i]) + scale)) << i;
      }
    }
  }
}

TEST(FusedConv2DTest, FloatDoubleHalfBfloat16OnRandomData) {
  CheckRandom<double>(1e-13);
  CheckRandom<float>(1e-6);
  CheckRandom<Eigen::half>(2e-3);
  CheckRandom<Eigen::bfloat16>(2e-2);
}

template <typename T>
void CheckOnednnFilterMemo(const Shape& s) {
  // oneDNN keeps the last reordered filter of a geometry (common/onednn.cc, FilterMemo). Three
  // filters that differ in their last element, then their first, called in turns as a training
  // step's changing weights are (every call past the second a miss), then each again and again
  // as inference calls them: each call gives that filter's first result, bit for bit, and that
  // result is the definition's within T's rounding.
  test::RestoreOnednn restore;
  if (!test::UseOnednnPath<T>(true)) return;
  const FusedConv2DParams p = Params(s);
  const size_t fsize = static_cast<size_t>(s.filter[0] * s.filter[1] * s.filter[2] * s.filter[3]);
  auto in = Random(static_cast<size_t>(p.g.InputSize()), 61, false);
  std::vector<std::vector<double>> filters(3, Random(fsize, 62, false));
  filters[1].back() += 1.0;
  filters[2].front() -= 1.0;
  auto b = Random(static_cast<size_t>(s.filter[3]), 63, false);
  for (auto* v : {&in, &b, &filters[0], &filters[1], &filters[2]})
    for (auto& x : *v) x = static_cast<double>(static_cast<T>(x));
  const ThreadParallel parallel(2);
  std::vector<std::vector<T>> first(3);
  auto run = [&](int k) {
    std::vector<T> out(static_cast<size_t>(p.g.OutputSize()));
    FusedConv2DBiasLeakyRelu<T>(p, As<T>(in).data(), As<T>(filters[k]).data(), As<T>(b).data(),
                                out.data(), parallel);
    return out;
  };
  for (int k = 0; k < 3; ++k) {
    first[k] = run(k);
    const auto want = Naive(p, in, filters[k], b);
    const double rtol = std::is_same_v<T, float> ? 1e-6 : 2e-2;
    const double scale = std::sqrt(static_cast<double>(p.g.Depth())) * 3.0;
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(static_cast<double>(first[k][i]), want[i], rtol * (std::abs(want[i]) + scale))
          << "filter " << k << " at " << i;
    }
  }
  EXPECT_FALSE(test::SameBits(first[0], first[1]));
  EXPECT_FALSE(test::SameBits(first[0], first[2]));
  for (int call = 0; call < 40; ++call) {
    const int k = call % 3;
    ASSERT_TRUE(test::SameBits(run(k), first[k])) << "in turns, call " << call;
  }
  for (int k : {2, 0, 1}) {
    for (int call = 0; call < 4; ++call) {
      ASSERT_TRUE(test::SameBits(run(k), first[k])) << "filter " << k << " again, call " << call;
    }
  }
}

TEST(FusedConv2DTest, OnednnKeptFilterNoticesEveryChange) {
  // A 1x1 (oneDNN's matmul) and a 3x3 stride-2 convolution, in float and bfloat16.
  const Shape pointwise({2, 9, 10, 64}, {1, 1, 64, 48});
  const Shape strided({2, 17, 16, 32}, {3, 3, 32, 40}, {1, 2, 2, 1});
  for (const Shape& s : {pointwise, strided}) {
    CheckOnednnFilterMemo<float>(s);
    CheckOnednnFilterMemo<Eigen::bfloat16>(s);
  }
}

void CheckThreads(const Shape& s);

TEST(FusedConv2DTest, SameBitsForEveryThreadCount) {
  for (const Shape& s :
       {Shape({3, 33, 31, 16}, {3, 3, 16, 24}), Shape({1, 12, 11, 8}, {3, 3, 8, 300})}) {
    CheckThreads(s);
  }
}

void CheckThreads(const Shape& s) {
  const FusedConv2DParams p = Params(s);
  const auto in = As<float>(Random(static_cast<size_t>(p.g.InputSize()), 7, false));
  const auto f = As<float>(
      Random(static_cast<size_t>(s.filter[0] * s.filter[1] * s.filter[2] * s.filter[3]), 8, false));
  const auto b = As<float>(Random(static_cast<size_t>(s.filter[3]), 9, false));
  std::vector<float> one(static_cast<size_t>(p.g.OutputSize())), many(one.size());
  FusedConv2DBiasLeakyRelu<float>(p, in.data(), f.data(), b.data(), one.data(), SerialParallel());
  for (int threads : {2, 3, 5}) {
    FusedConv2DBiasLeakyRelu<float>(p, in.data(), f.data(), b.data(), many.data(),
                                    ThreadParallel(threads));
    EXPECT_TRUE(test::SameBits(many, one)) << threads << " threads, out_c " << s.filter[3];
  }
}

TEST(FusedConv2DTest, WinogradPathIsTaken) {
  // The shapes above that qualify run Winograd; check its accuracy at a YOLO-like size too
  // (random data, against the double reference).
  const Shape s{{2, 26, 26, 64}, {3, 3, 64, 48}};
  const FusedConv2DParams p = Params(s);
  auto in = Random(static_cast<size_t>(p.g.InputSize()), 31, false);
  auto f = Random(3 * 3 * 64 * 48, 32, false);
  for (auto& v : f) v *= 0.1;
  auto b = Random(48, 33, false);
  for (auto* v : {&in, &f, &b})
    for (auto& x : *v) x = static_cast<double>(static_cast<float>(x));
  const auto want = Naive(p, in, f, b);
  std::vector<float> out(want.size());
  FusedConv2DBiasLeakyRelu<float>(p, As<float>(in).data(), As<float>(f).data(), As<float>(b).data(),
                                  out.data(), ThreadParallel(2));
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(out[i] - want[i]));
  EXPECT_LT(worst, 2e-5);  // |values| up to ~10: a few float ulps
}

TEST(FusedConv2DTest, FilterCacheGivesTheSameBitsAndNoticesEveryChange) {
  // 13x13 at batch 1 runs Winograd only with a cache. The filter (3x3x128x256 floats, 1.2 MB:
  // two comparison chunks) changed in its last element, then its first, then back, and a
  // different shape: each result equals a fresh cache's, bit for bit.
  const Shape s{{1, 13, 13, 128}, {3, 3, 128, 256}};
  const FusedConv2DParams p = Params(s);
  const auto in = As<float>(Random(static_cast<size_t>(p.g.InputSize()), 41, false));
  auto f = As<float>(Random(3 * 3 * 128 * 256, 42, false));
  const auto b = As<float>(Random(256, 43, false));
  const ThreadParallel parallel(2);
  conv::FilterCache cache;
  std::vector<float> cached(static_cast<size_t>(p.g.OutputSize())), fresh(cached.size());
  auto check = [&](const char* what) {
    FusedConv2DBiasLeakyRelu<float>(p, in.data(), f.data(), b.data(), cached.data(), parallel,
                                    &cache);
    conv::FilterCache other;
    FusedConv2DBiasLeakyRelu<float>(p, in.data(), f.data(), b.data(), fresh.data(), parallel,
                                    &other);
    EXPECT_TRUE(test::SameBits(cached, fresh)) << what;
  };
  const std::vector<float> f0 = f;
  check("first call");
  check("same filter again (from the cache)");
  const std::vector<float> first = cached;
  f.back() += 1.0f;
  check("last element changed");
  EXPECT_FALSE(test::SameBits(cached, first));
  f.front() -= 1.0f;
  check("first element changed");
  f = f0;
  check("back to the first filter");
  EXPECT_TRUE(test::SameBits(cached, first));
  // Against the double reference.
  std::vector<double> in_d(in.begin(), in.end()), f_d(f.begin(), f.end()), b_d(b.begin(), b.end());
  const auto want = Naive(p, in_d, f_d, b_d);
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(cached[i] - want[i]));
  EXPECT_LT(worst, 1e-3);  // |values| up to ~100
  // The same cache for another shape.
  const FusedConv2DParams q = Params({{2, 9, 9, 128}, {3, 3, 128, 64}});
  const auto f2 = As<float>(Random(3 * 3 * 128 * 64, 44, false));
  const auto in2 = As<float>(Random(static_cast<size_t>(q.g.InputSize()), 45, false));
  std::vector<float> a(static_cast<size_t>(q.g.OutputSize())), c(a.size());
  FusedConv2DBiasLeakyRelu<float>(q, in2.data(), f2.data(), b.data(), a.data(), parallel, &cache);
  FusedConv2DBiasLeakyRelu<float>(q, in2.data(), f2.data(), b.data(), c.data(), parallel, nullptr);
  std::vector<double> in2_d(in2.begin(), in2.end()), f2_d(f2.begin(), f2.end());
  const auto want2 = Naive(q, in2_d, f2_d, b_d);
  worst = 0;
  for (size_t i = 0; i < want2.size(); ++i) worst = std::max(worst, std::abs(a[i] - want2[i]));
  EXPECT_LT(worst, 1e-3);
}

// got against a double reference holding inf and NaN: NaN where it is NaN, the same infinity
// where it is infinite, close elsewhere.
::testing::AssertionResult MatchesWithSpecials(const std::vector<float>& got,
                                               const std::vector<double>& want, double tol) {
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = got[i], w = want[i];
    const bool ok = std::isnan(w) ? std::isnan(g)
                    : std::isinf(w)
                        ? g == w
                        : std::isfinite(g) && std::abs(g - w) <= tol * (1 + std::abs(w));
    if (!ok) return ::testing::AssertionFailure() << "[" << i << "] got " << g << ", want " << w;
  }
  return ::testing::AssertionSuccess();
}

TEST(FusedConv2DTest, InfAndNanTakeTheDirectSum) {
  // Winograd's transforms would spread an inf to its tile's other outputs as NaN; the kernel
  // leaves such calls to the direct sum, which gives the exact answer: inf or NaN only where a
  // term is, finite values elsewhere. With and without the filter cache, in the input and in
  // the filter.
  const Shape s{{2, 14, 14, 16}, {3, 3, 16, 20}};  // Winograd without a cache too
  const FusedConv2DParams p = Params(s);
  const double inf = std::numeric_limits<double>::infinity();
  for (int where = 0; where < 3; ++where) {
    auto in = Random(static_cast<size_t>(p.g.InputSize()), 51, false);
    auto f = Random(3 * 3 * 16 * 20, 52, false);
    const auto b = Random(20, 53, false);
    if (where == 0) {
      in[static_cast<size_t>(((0 * 14 + 5) * 14 + 4) * 16 + 3)] = inf;
      in[static_cast<size_t>(((1 * 14 + 0) * 14 + 9) * 16 + 7)] = std::nan("");
    } else if (where == 1) {
      in[static_cast<size_t>(((1 * 14 + 13) * 14 + 0) * 16 + 15)] = -inf;  // a corner
    } else {
      f[static_cast<size_t>(((1 * 3 + 2) * 16 + 4) * 20 + 6)] = inf;
    }
    const auto want = Naive(p, in, f, b);
    for (const bool with_cache : {false, true}) {
      conv::FilterCache cache;
      std::vector<float> out(want.size());
      FusedConv2DBiasLeakyRelu<float>(p, As<float>(in).data(), As<float>(f).data(),
                                      As<float>(b).data(), out.data(), ThreadParallel(2),
                                      with_cache ? &cache : nullptr);
      EXPECT_TRUE(MatchesWithSpecials(out, want, 1e-4))
          << "case " << where << " cache " << with_cache;
    }
  }
}

TEST(FusedConv2DTest, EmptyShapes) {
  // Empty batch: nothing written. No input channels: the output is leaky(bias).
  FusedConv2DParams p = Params({{0, 5, 5, 2}, {3, 3, 2, 2}});
  FusedConv2DBiasLeakyRelu<float>(p, nullptr, nullptr, nullptr, nullptr, SerialParallel());
  p = Params({{1, 2, 2, 0}, {3, 3, 0, 2}});
  const std::vector<float> bias{1.5f, -2.0f};
  std::vector<float> out(8, 7.0f);
  FusedConv2DBiasLeakyRelu<float>(p, nullptr, nullptr, bias.data(), out.data(), SerialParallel());
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(out[2 * i], 1.5f);
    EXPECT_EQ(out[2 * i + 1], -2.0f * 0.1f);
  }
}

TEST(FusedConv2DTest, Validation) {
  FusedConv2DParams p;
  auto msg = [&](std::vector<int64_t> in, std::vector<int64_t> f, std::vector<int64_t> b) {
    return ValidateFusedConv2D(in, f, b, &p).message();
  };
  EXPECT_TRUE(
      Contains(msg({1, 5, 5}, {3, 3, 5, 2}, {2}), "FusedConv2DBiasLeakyRelu: input must be 4-D"));
  EXPECT_TRUE(Contains(msg({1, 5, 5, 4}, {3, 3, 5, 2}, {2}),
                       "filter must be [filter_height, filter_width, 4"));
  EXPECT_TRUE(
      Contains(msg({1, 5, 5, 5}, {3, 3, 5, 2}, {3}), "bias must be [2] (out_channels), got [3]"));
  p.padding = "VALID";
  EXPECT_TRUE(Contains(msg({1, 2, 2, 1}, {3, 3, 1, 1}, {1}),
                       "input must be at least the dilated filter size 3x3"));
  p = FusedConv2DParams();
  p.strides = {1, 0, 1, 1};
  EXPECT_TRUE(Contains(msg({1, 5, 5, 1}, {3, 3, 1, 1}, {1}), "strides must be 4 values"));
  p = FusedConv2DParams();
  p.alpha = -1.0f;
  EXPECT_TRUE(
      Contains(msg({1, 5, 5, 1}, {3, 3, 1, 1}, {1}), "alpha must be finite and >= 0, got -1"));
  p = FusedConv2DParams();
  p.padding = "EXPLICIT";
  p.explicit_paddings = {0, 0, 1, 1};
  EXPECT_TRUE(Contains(msg({1, 5, 5, 1}, {3, 3, 1, 1}, {1}), "explicit_paddings must be 8 values"));
}

}  // namespace
}  // namespace opforge

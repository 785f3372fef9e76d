// Tests of the ResizeBilinear core: validation messages, the forward kernel against a direct
// per-pixel loop written from TensorFlow's definition (four reads, three lerps; bit-exact), the
// gradient against TensorFlow's sequential scatter (bit-exact, so the kernel's gather replays
// the scatter's order), conservation of the gradient's sum, and identical bits for every thread
// count.
#include "ops/resize_bilinear/resize_bilinear.h"

#include <gtest/gtest.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "common/parallel.h"
#include "common/status.h"
#include "common/test_util.h"

namespace opforge {
namespace {

using test::Contains;
using test::NamesWord;
using test::SameBits;
using test::SameBitsOrBothNan;
using test::TypeNames;

enum class Mode { kLegacy, kAlignCorners, kHalfPixel };

const char* ModeName(Mode m) {
  switch (m) {
    case Mode::kLegacy:
      return "legacy";
    case Mode::kAlignCorners:
      return "align_corners";
    case Mode::kHalfPixel:
      return "half_pixel";
  }
  return "?";
}

struct Case {
  int64_t batch, in_h, in_w, channels, out_h, out_w;
  Mode mode;
};

ResizeBilinearParams ParamsOf(const Case& c) {
  return {c.batch,
          c.in_h,
          c.in_w,
          c.channels,
          c.out_h,
          c.out_w,
          c.mode == Mode::kAlignCorners,
          c.mode == Mode::kHalfPixel};
}

std::string Describe(const Case& c) {
  std::ostringstream s;
  s << "[" << c.batch << "," << c.in_h << "," << c.in_w << "," << c.channels << "] -> " << c.out_h
    << "x" << c.out_w << " " << ModeName(c.mode);
  return s.str();
}

// --- the reference: TensorFlow's definition, written out independently ---------------------

struct RefTap {
  int64_t lower, upper;
  float lerp;
};

RefTap RefTapOf(int64_t i, int64_t in, int64_t out, Mode mode) {
  float scale;
  if (mode == Mode::kAlignCorners && in > 1 && out > 1) {
    scale = static_cast<float>(in - 1) / static_cast<float>(out - 1);
  } else {
    scale = static_cast<float>(in) / static_cast<float>(out);
  }
  float src = static_cast<float>(i) * scale;
  if (mode == Mode::kHalfPixel) src = (static_cast<float>(i) + 0.5f) * scale - 0.5f;
  RefTap t;
  t.lower = static_cast<int64_t>(std::floor(src));
  if (t.lower < 0) t.lower = 0;
  t.upper = static_cast<int64_t>(std::ceil(src));
  if (t.upper > in - 1) t.upper = in - 1;
  t.lerp = src - std::floor(src);
  return t;
}

template <typename T>
std::vector<float> RefForward(const Case& c, const std::vector<T>& in) {
  std::vector<float> out(static_cast<size_t>(c.batch * c.out_h * c.out_w * c.channels));
  auto at = [&](int64_t b, int64_t y, int64_t x, int64_t ch) {
    return static_cast<float>(
        in[static_cast<size_t>(((b * c.in_h + y) * c.in_w + x) * c.channels + ch)]);
  };
  const bool same = c.in_h == c.out_h && c.in_w == c.out_w;
  size_t i = 0;
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t y = 0; y < c.out_h; ++y) {
      const RefTap ty = RefTapOf(y, c.in_h, c.out_h, c.mode);
      for (int64_t x = 0; x < c.out_w; ++x) {
        const RefTap tx = RefTapOf(x, c.in_w, c.out_w, c.mode);
        for (int64_t ch = 0; ch < c.channels; ++ch, ++i) {
          if (same) {
            out[i] = at(b, y, x, ch);
            continue;
          }
          const float tl = at(b, ty.lower, tx.lower, ch);
          const float tr = at(b, ty.lower, tx.upper, ch);
          const float bl = at(b, ty.upper, tx.lower, ch);
          const float br = at(b, ty.upper, tx.upper, ch);
          const float top = tl + (tr - tl) * tx.lerp;
          const float bottom = bl + (br - bl) * tx.lerp;
          out[i] = top + (bottom - top) * ty.lerp;
        }
      }
    }
  }
  return out;
}

// TensorFlow's sequential scatter; A is the accumulator type, the result converted to T once.
template <typename T>
std::vector<T> RefBackward(const Case& c, const std::vector<float>& grads) {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  std::vector<A> acc(static_cast<size_t>(c.batch * c.in_h * c.in_w * c.channels), A(0));
  auto cell = [&](int64_t b, int64_t y, int64_t x, int64_t ch) -> A& {
    return acc[static_cast<size_t>(((b * c.in_h + y) * c.in_w + x) * c.channels + ch)];
  };
  size_t i = 0;
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t y = 0; y < c.out_h; ++y) {
      const RefTap ty = RefTapOf(y, c.in_h, c.out_h, c.mode);
      const float inv_y = 1.0f - ty.lerp;
      for (int64_t x = 0; x < c.out_w; ++x) {
        const RefTap tx = RefTapOf(x, c.in_w, c.out_w, c.mode);
        const float inv_x = 1.0f - tx.lerp;
        for (int64_t ch = 0; ch < c.channels; ++ch, ++i) {
          const float g = grads[i];
          cell(b, ty.lower, tx.lower, ch) += static_cast<A>(g * inv_y * inv_x);
          cell(b, ty.lower, tx.upper, ch) += static_cast<A>(g * inv_y * tx.lerp);
          cell(b, ty.upper, tx.lower, ch) += static_cast<A>(g * ty.lerp * inv_x);
          cell(b, ty.upper, tx.upper, ch) += static_cast<A>(g * ty.lerp * tx.lerp);
        }
      }
    }
  }
  std::vector<T> out(acc.size());
  for (size_t j = 0; j < acc.size(); ++j) out[j] = static_cast<T>(acc[j]);
  return out;
}

// --- inputs -----------------------------------------------------------------------------------

// Integer images over their full range: int32 and int64 values lose precision in float.
template <typename T>
std::vector<T> RandomImages(const Case& c, uint64_t seed) {
  return test::FullRangeVector<T>(c.batch * c.in_h * c.in_w * c.channels, seed);
}

std::vector<float> RandomGrads(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = std::uniform_real_distribution<float>(-2.0f, 2.0f)(rng);
  return v;
}

// Sizes 1 included, same size, up- and down-sampling by integer and odd ratios, non-square.
std::vector<Case> Cases() {
  std::vector<Case> cases;
  const std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t>> sizes = {
      {1, 1, 1, 1},   {1, 1, 5, 3},   {4, 4, 1, 1},  {4, 4, 4, 4},  {3, 5, 7, 11}, {7, 11, 3, 5},
      {8, 8, 16, 16}, {16, 16, 8, 8}, {5, 9, 13, 2}, {13, 2, 5, 9}, {6, 6, 4, 9},  {2, 3, 17, 19}};
  int i = 0;
  for (const auto& [ih, iw, oh, ow] : sizes) {
    for (Mode mode : {Mode::kLegacy, Mode::kAlignCorners, Mode::kHalfPixel}) {
      for (int64_t channels : {1, 3, 4, 5, 16}) {
        if ((i++ % 2) == 0 && channels == 16) continue;  // fewer large cases
        cases.push_back({2, ih, iw, channels, oh, ow, mode});
      }
    }
  }
  return cases;
}

// --- validation -------------------------------------------------------------------------------

TEST(ResizeBilinearValidate, AcceptsAndFillsParams) {
  ResizeBilinearParams p;
  OPFORGE_ASSERT_OK(ValidateResizeBilinear({2, 3, 4, 5}, {2}, {6, 7}, false, true, &p));
  EXPECT_EQ(p.batch, 2);
  EXPECT_EQ(p.in_height, 3);
  EXPECT_EQ(p.in_width, 4);
  EXPECT_EQ(p.channels, 5);
  EXPECT_EQ(p.out_height, 6);
  EXPECT_EQ(p.out_width, 7);
  EXPECT_TRUE(p.half_pixel_centers);
  // Batch 0 is a valid, empty input.
  OPFORGE_ASSERT_OK(ValidateResizeBilinear({0, 3, 4, 5}, {2}, {6, 7}, false, false, &p));
}

TEST(ResizeBilinearValidate, NamesTheArgument) {
  ResizeBilinearParams p;
  struct Bad {
    std::vector<int64_t> images, size, values;
    bool ac, hpc;
    const char* argument;
    const char* given;
  };
  const std::vector<Bad> bad = {
      {{2, 3, 4, 5}, {2}, {6, 7}, true, true, "align_corners", "true"},
      {{3, 4, 5}, {2}, {6, 7}, false, false, "images", "[3, 4, 5]"},
      {{1, 2, 3, 4, 5}, {2}, {6, 7}, false, false, "images", "[1, 2, 3, 4, 5]"},
      {{2, 0, 4, 5}, {2}, {6, 7}, false, false, "images", "[2, 0, 4, 5]"},
      {{2, 3, 0, 5}, {2}, {6, 7}, false, false, "images", "[2, 3, 0, 5]"},
      {{2, 3, 4, 0}, {2}, {6, 7}, false, false, "images", "[2, 3, 4, 0]"},
      {{2, 1LL << 31, 4, 5}, {2}, {6, 7}, false, false, "images", "2147483648"},
      {{2, 3, 4, 5}, {3}, {6, 7, 8}, false, false, "size", "[3]"},
      {{2, 3, 4, 5}, {1, 2}, {6, 7}, false, false, "size", "[1, 2]"},
      {{2, 3, 4, 5}, {2}, {0, 7}, false, false, "size", "[0, 7]"},
      {{2, 3, 4, 5}, {2}, {6, -7}, false, false, "size", "[6, -7]"},
      {{1LL << 40, 3, 4, 1LL << 20}, {2}, {1 << 20, 1 << 20}, false, false, "size", "1048576"},
  };
  for (const Bad& b : bad) {
    const Status s = ValidateResizeBilinear(b.images, b.size, b.values, b.ac, b.hpc, &p);
    ASSERT_FALSE(s.ok()) << b.argument << " " << b.given;
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
    EXPECT_TRUE(NamesWord(s.message(), "ResizeBilinear"));
    EXPECT_TRUE(NamesWord(s.message(), b.argument));
    EXPECT_TRUE(Contains(s.message(), b.given));
  }
}

TEST(ResizeBilinearValidate, GradNamesTheArgument) {
  ResizeBilinearParams p;
  OPFORGE_ASSERT_OK(ValidateResizeBilinearGrad({2, 6, 7, 5}, {2, 3, 4, 5}, true, false, &p));
  EXPECT_EQ(p.in_height, 3);
  EXPECT_EQ(p.out_width, 7);
  struct Bad {
    std::vector<int64_t> grads, image;
    bool ac, hpc;
    const char* argument;
  };
  const std::vector<Bad> bad = {
      {{2, 6, 7, 5}, {2, 3, 4, 5}, true, true, "align_corners"},
      {{6, 7, 5}, {2, 3, 4, 5}, false, false, "grads"},
      {{2, 0, 7, 5}, {2, 3, 4, 5}, false, false, "grads"},
      {{2, 6, 7, 5}, {3, 4, 5}, false, false, "original_image"},
      {{2, 6, 7, 5}, {2, 3, 0, 5}, false, false, "original_image"},
      {{2, 6, 7, 5}, {1, 3, 4, 5}, false, false, "original_image"},
      {{2, 6, 7, 5}, {2, 3, 4, 6}, false, false, "original_image"},
  };
  for (const Bad& b : bad) {
    const Status s = ValidateResizeBilinearGrad(b.grads, b.image, b.ac, b.hpc, &p);
    ASSERT_FALSE(s.ok()) << b.argument;
    EXPECT_TRUE(NamesWord(s.message(), "ResizeBilinearGrad"));
    EXPECT_TRUE(NamesWord(s.message(), b.argument)) << s.message();
  }
}

// --- coordinates ------------------------------------------------------------------------------

TEST(ResizeBilinearTap, HalfPixelUpsamplingStartsBelowZero) {
  // 4 -> 8: scale 0.5, source of 0 is (0 + 0.5) * 0.5 - 0.5 = -0.25: both taps on pixel 0, and
  // the lerp keeps the unclamped floor's fraction.
  const ResizeTap t = ComputeResizeTap(0, ResizeScale(4, 8, false), 4, true);
  EXPECT_EQ(t.lower, 0);
  EXPECT_EQ(t.upper, 0);
  EXPECT_EQ(t.lerp, 0.75f);
  const ResizeTap last = ComputeResizeTap(7, ResizeScale(4, 8, false), 4, true);
  EXPECT_EQ(last.lower, 3);
  EXPECT_EQ(last.upper, 3);  // ceil(3.25) clamped to 3
  EXPECT_EQ(last.lerp, 0.25f);
}

TEST(ResizeBilinearTap, Scales) {
  EXPECT_EQ(ResizeScale(4, 8, false), 0.5f);
  EXPECT_EQ(ResizeScale(4, 7, true), 0.5f);         // (4-1)/(7-1)
  EXPECT_EQ(ResizeScale(1, 7, true), 1.0f / 7.0f);  // in == 1: the legacy scale
  EXPECT_EQ(ResizeScale(5, 1, true), 5.0f);         // out == 1: the legacy scale
}

// --- forward ----------------------------------------------------------------------------------

template <typename T>
class ResizeBilinearForwardTest : public ::testing::Test {};
using ForwardTypes = ::testing::Types<float, double, Eigen::half, Eigen::bfloat16, uint8_t, int8_t,
                                      int16_t, uint16_t, int32_t, int64_t>;
class ForwardTypeNames {
 public:
  template <typename T>
  static std::string GetName(int i) {
    if constexpr (std::is_same_v<T, uint8_t>) return "uint8";
    if constexpr (std::is_same_v<T, int8_t>) return "int8";
    if constexpr (std::is_same_v<T, int16_t>) return "int16";
    if constexpr (std::is_same_v<T, uint16_t>) return "uint16";
    return TypeNames::GetName<T>(i);
  }
};
TYPED_TEST_SUITE(ResizeBilinearForwardTest, ForwardTypes, ForwardTypeNames);

TYPED_TEST(ResizeBilinearForwardTest, MatchesDefinitionBitForBit) {
  using T = TypeParam;
  const ThreadParallel parallel(3);
  uint64_t seed = 1;
  for (const Case& c : Cases()) {
    const auto images = RandomImages<T>(c, seed++);
    std::vector<float> out(static_cast<size_t>(c.batch * c.out_h * c.out_w * c.channels), -1.0f);
    ResizeBilinearForward<T>(ParamsOf(c), images.data(), out.data(), parallel);
    EXPECT_TRUE(SameBits(out, RefForward(c, images))) << Describe(c);
  }
}

TEST(ResizeBilinearForward, InfinityAndNanPropagateLikeTheDefinition) {
  // An infinite pixel next to the border gives NaN where lower == upper (inf - inf), exactly as
  // TensorFlow's formula does; a NaN spreads to every output that reads it.
  const Case c{1, 3, 4, 2, 7, 9, Mode::kHalfPixel};
  auto images = RandomImages<float>(c, 5);
  images[0] = std::numeric_limits<float>::infinity();
  images[5] = -std::numeric_limits<float>::infinity();
  images[13] = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> out(7 * 9 * 2);
  ResizeBilinearForward<float>(ParamsOf(c), images.data(), out.data(), SerialParallel());
  const auto want = RefForward(c, images);
  EXPECT_TRUE(SameBitsOrBothNan(out, want));
  EXPECT_TRUE(std::isnan(want[0]));  // the border case really happens
}

TEST(ResizeBilinearForward, IdenticalForEveryThreadCount) {
  const Case c{3, 37, 29, 7, 71, 53, Mode::kHalfPixel};
  const auto images = RandomImages<float>(c, 9);
  std::vector<float> serial(static_cast<size_t>(3 * 71 * 53 * 7));
  ResizeBilinearForward<float>(ParamsOf(c), images.data(), serial.data(), SerialParallel());
  for (int threads : {2, 3, 8, 64}) {
    std::vector<float> out(serial.size());
    ResizeBilinearForward<float>(ParamsOf(c), images.data(), out.data(), ThreadParallel(threads));
    EXPECT_TRUE(SameBits(out, serial)) << threads << " threads";
  }
}

// --- gradient ---------------------------------------------------------------------------------

template <typename T>
class ResizeBilinearBackwardTest : public ::testing::Test {};
TYPED_TEST_SUITE(ResizeBilinearBackwardTest, test::FloatTypes, TypeNames);

TYPED_TEST(ResizeBilinearBackwardTest, MatchesSequentialScatterBitForBit) {
  using T = TypeParam;
  const ThreadParallel parallel(3);
  uint64_t seed = 100;
  for (const Case& c : Cases()) {
    const auto grads = RandomGrads(c.batch * c.out_h * c.out_w * c.channels, seed++);
    std::vector<T> out(static_cast<size_t>(c.batch * c.in_h * c.in_w * c.channels), T(-1.0f));
    ResizeBilinearBackward<T>(ParamsOf(c), grads.data(), out.data(), parallel);
    EXPECT_TRUE(SameBits(out, RefBackward<T>(c, grads))) << Describe(c);
  }
}

TEST(ResizeBilinearBackward, WideRowsInSmallBlocks) {
  // Rows this wide are accumulated two at a time, so gradient rows reach across block edges
  // within one task; half goes through the float buffer, float accumulates in place.
  for (Mode mode : {Mode::kLegacy, Mode::kHalfPixel}) {
    const Case c{2, 9, 2048, 17, 20, 1000, mode};
    const auto grads = RandomGrads(c.batch * c.out_h * c.out_w * c.channels, 31);
    std::vector<float> out(static_cast<size_t>(c.batch * c.in_h * c.in_w * c.channels));
    ResizeBilinearBackward<float>(ParamsOf(c), grads.data(), out.data(), ThreadParallel(3));
    EXPECT_TRUE(SameBits(out, RefBackward<float>(c, grads))) << Describe(c);
    std::vector<Eigen::half> out_half(out.size());
    ResizeBilinearBackward<Eigen::half>(ParamsOf(c), grads.data(), out_half.data(),
                                        ThreadParallel(2));
    EXPECT_TRUE(SameBits(out_half, RefBackward<Eigen::half>(c, grads))) << Describe(c);
  }
}

TEST(ResizeBilinearBackward, ConservesTheSum) {
  // Every gradient element is split over four weights that sum to one.
  for (Mode mode : {Mode::kLegacy, Mode::kAlignCorners, Mode::kHalfPixel}) {
    for (const auto& [ih, iw, oh, ow] : std::vector<std::tuple<int, int, int, int>>{
             {5, 7, 13, 11}, {13, 11, 5, 7}, {1, 1, 4, 4}, {4, 4, 1, 1}}) {
      const Case c{2, ih, iw, 3, oh, ow, mode};
      const auto grads = RandomGrads(c.batch * oh * ow * 3, 7);
      std::vector<double> out(static_cast<size_t>(c.batch * ih * iw * 3));
      ResizeBilinearBackward<double>(ParamsOf(c), grads.data(), out.data(), SerialParallel());
      double want = 0, got = 0;
      for (float g : grads) want += g;
      for (double v : out) got += v;
      EXPECT_NEAR(got, want, 1e-5) << Describe(c);
    }
  }
}

TEST(ResizeBilinearBackward, IdenticalForEveryThreadCount) {
  const Case c{3, 29, 37, 5, 61, 43, Mode::kLegacy};
  const auto grads = RandomGrads(3 * 61 * 43 * 5, 11);
  std::vector<float> serial(static_cast<size_t>(3 * 29 * 37 * 5));
  ResizeBilinearBackward<float>(ParamsOf(c), grads.data(), serial.data(), SerialParallel());
  for (int threads : {2, 3, 8, 64}) {
    std::vector<float> out(serial.size());
    ResizeBilinearBackward<float>(ParamsOf(c), grads.data(), out.data(), ThreadParallel(threads));
    EXPECT_TRUE(SameBits(out, serial)) << threads << " threads";
  }
}

TEST(ResizeBilinearBackward, IsTheAdjointOfTheForward) {
  // <resize(x), g> == <x, resize_grad(g)> for the same attrs (in double, up to rounding).
  for (Mode mode : {Mode::kLegacy, Mode::kAlignCorners, Mode::kHalfPixel}) {
    const Case c{2, 6, 9, 2, 11, 4, mode};
    const auto x = RandomImages<float>(c, 21);
    const auto g = RandomGrads(2 * 11 * 4 * 2, 22);
    std::vector<float> y(g.size());
    ResizeBilinearForward<float>(ParamsOf(c), x.data(), y.data(), SerialParallel());
    std::vector<double> dx(x.size());
    ResizeBilinearBackward<double>(ParamsOf(c), g.data(), dx.data(), SerialParallel());
    double lhs = 0, rhs = 0;
    for (size_t i = 0; i < y.size(); ++i) lhs += static_cast<double>(y[i]) * g[i];
    for (size_t i = 0; i < x.size(); ++i) rhs += static_cast<double>(x[i]) * dx[i];
    EXPECT_NEAR(lhs, rhs, 1e-4 * (1 + std::abs(lhs))) << ModeName(mode);
  }
}

}  // namespace
}  // namespace opforge

// Tests of the YoloDecode core: validation messages; the forward kernel against a naive
// double-precision reference written here from the header's formulas (every box format,
// normalized or not, scale_x_y 1 and 1.05, 4-D and 5-D features, non-square grids and inputs,
// all four element types, max_log_scale off and on); the exact exp(tw) * anchor_w by default up
// to T's largest box; the clamp of tw and th when max_log_scale is given; saturation at T's
// largest finite value (values and zero gradients); the anchors' check; finite outputs for huge
// finite features; a
// NaN confined to its box; the argmax's ties (on the rounded class scores); the gradient against
// central finite differences in double, for boxes, scores and class_scores separately, and the
// narrower types against the double gradient; identical bits for every thread count and every
// output address; every NaN output the one quiet NaN.
#include "ops/yolo_decode/yolo_decode.h"

#include <gtest/gtest.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "common/parallel.h"
#include "common/status.h"
#include "common/test_util.h"
#include "ops/yolo_decode/yolo_decode_test_data.h"

namespace opforge {
namespace {

using test::Contains;
using test::NamesWord;
using test::Narrow;
using test::SameBits;
using test::TypeNames;
using test::Wide;

// --- cases ------------------------------------------------------------------------------------

using test::yolo_decode::Case;
using test::yolo_decode::Describe;
using test::yolo_decode::NumBoxes;
using test::yolo_decode::NumFeatures;
using test::yolo_decode::ParamsOf;

// Every format x normalized x scale_x_y, each on a shape of its own: A = 1..3, C = 1..7,
// non-square grids and inputs, 4-D and 5-D alternately.
std::vector<Case> Cases() {
  struct Dims {
    int64_t batch, height, width, anchors, classes, input_h, input_w;
  };
  const std::vector<Dims> dims = {
      {2, 3, 5, 3, 2, 96, 160},  {1, 4, 4, 1, 1, 128, 128}, {3, 2, 7, 2, 7, 64, 224},
      {1, 1, 1, 3, 4, 32, 48},   {2, 5, 3, 2, 3, 160, 96},  {1, 6, 4, 1, 5, 100, 60},
      {2, 2, 3, 3, 6, 416, 320}, {1, 7, 2, 2, 1, 56, 40},   {1, 3, 3, 3, 7, 96, 96},
      {2, 4, 6, 1, 2, 64, 128},  {1, 5, 5, 2, 4, 33, 47},   {3, 1, 4, 3, 3, 32, 128}};
  std::vector<Case> cases;
  size_t i = 0;
  for (const char* format : {"xyxy", "yxyx", "center_xywh"}) {
    for (bool normalized : {false, true}) {
      for (float scale : {1.0f, 1.05f}) {
        const Dims& d = dims[i % dims.size()];
        cases.push_back({d.batch, d.height, d.width, d.anchors, d.classes, d.input_h, d.input_w,
                         format, normalized, scale, (i % 2) == 1});
        // Every fourth with a clamp that bites on features in [-4, 4].
        if (i % 4 == 3) cases.back().max_log_scale = 1.5f;
        ++i;
      }
    }
  }
  return cases;
}

// --- the reference: the header's formulas in double, plain loops -----------------------------

double Sig(double x) { return 1.0 / (1.0 + std::exp(-x)); }

struct Ref {
  std::vector<double> boxes, box_mag;  // box_mag: |centre| + |size| of each coordinate's axis
  std::vector<double> scores, class_scores;
  std::vector<int32_t> indices;
};

Ref RefForward(const Case& c, const std::vector<double>& f, const std::vector<double>& anchors) {
  const int64_t per_anchor = 5 + c.classes;
  const double scale = c.scale_x_y;
  const double stride_x = static_cast<double>(c.input_w) / static_cast<double>(c.width);
  const double stride_y = static_cast<double>(c.input_h) / static_cast<double>(c.height);
  Ref r;
  r.boxes.resize(static_cast<size_t>(NumBoxes(c) * 4));
  r.box_mag.resize(r.boxes.size());
  r.scores.resize(static_cast<size_t>(NumBoxes(c)));
  r.indices.resize(r.scores.size());
  r.class_scores.resize(static_cast<size_t>(NumBoxes(c) * c.classes));
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t cy = 0; cy < c.height; ++cy) {
      for (int64_t cx = 0; cx < c.width; ++cx) {
        for (int64_t a = 0; a < c.anchors; ++a) {
          const int64_t n = (cy * c.width + cx) * c.anchors + a;
          const int64_t box = b * c.height * c.width * c.anchors + n;
          const double* t = &f[static_cast<size_t>(box * per_anchor)];
          double bx =
              (scale * Sig(t[0]) - (scale - 1.0) / 2.0 + static_cast<double>(cx)) * stride_x;
          double by =
              (scale * Sig(t[1]) - (scale - 1.0) / 2.0 + static_cast<double>(cy)) * stride_y;
          const double bound = c.max_log_scale;  // +inf: no clamp
          double bw = std::exp(std::min(t[2], bound)) * anchors[2 * a];
          double bh = std::exp(std::min(t[3], bound)) * anchors[2 * a + 1];
          if (c.normalized) {
            bx /= static_cast<double>(c.input_w);
            bw /= static_cast<double>(c.input_w);
            by /= static_cast<double>(c.input_h);
            bh /= static_cast<double>(c.input_h);
          }
          const double mx = std::abs(bx) + std::abs(bw), my = std::abs(by) + std::abs(bh);
          double out[4], mag[4] = {mx, my, mx, my};
          if (c.format == "xyxy") {
            out[0] = bx - bw / 2;
            out[1] = by - bh / 2;
            out[2] = bx + bw / 2;
            out[3] = by + bh / 2;
          } else if (c.format == "yxyx") {
            out[0] = by - bh / 2;
            out[1] = bx - bw / 2;
            out[2] = by + bh / 2;
            out[3] = bx + bw / 2;
            mag[0] = mag[2] = my;
            mag[1] = mag[3] = mx;
          } else {
            out[0] = bx;
            out[1] = by;
            out[2] = bw;
            out[3] = bh;
          }
          for (int k = 0; k < 4; ++k) {
            r.boxes[static_cast<size_t>(box * 4 + k)] = out[k];
            r.box_mag[static_cast<size_t>(box * 4 + k)] = mag[k];
          }
          const double obj = Sig(t[4]);
          double best = 0;
          int32_t best_index = 0;
          for (int64_t k = 0; k < c.classes; ++k) {
            const double v = obj * Sig(t[5 + k]);
            r.class_scores[static_cast<size_t>(box * c.classes + k)] = v;
            if (k == 0 || v > best) {
              best = v;
              best_index = static_cast<int32_t>(k);
            }
          }
          r.scores[static_cast<size_t>(box)] = best;
          r.indices[static_cast<size_t>(box)] = best_index;
        }
      }
    }
  }
  return r;
}

// --- tolerances and comparisons ---------------------------------------------------------------

// Relative to a value's magnitude: the rounding of the output to T (half, bfloat16) or a few
// dozen ulps of the compute type (float, double).
template <typename T>
double Rtol() {
  if constexpr (std::is_same_v<T, double>) {
    return 1e-13;
  } else if constexpr (std::is_same_v<T, float>) {
    return 4e-6;
  } else if constexpr (std::is_same_v<T, Eigen::half>) {
    return 1e-3;  // 2^-11 relative rounding, twice
  } else {
    return 8e-3;  // 2^-8 relative rounding, twice
  }
}

template <typename T>
double Atol() {
  return 4 * Wide(std::numeric_limits<T>::denorm_min());
}

template <typename T>
std::vector<double> Widen(const std::vector<T>& v) {
  std::vector<double> w(v.size());
  for (size_t i = 0; i < v.size(); ++i) w[i] = Wide(v[i]);
  return w;
}

template <typename T>
std::vector<T> NarrowAll(const std::vector<double>& v) {
  std::vector<T> n(v.size());
  for (size_t i = 0; i < v.size(); ++i) n[i] = Narrow<T>(v[i]);
  return n;
}

// |got - want| <= rtol * mag + atol element-wise (mag defaults to |want|); names the first few
// elements that differ.
template <typename T>
::testing::AssertionResult Near(const std::vector<T>& got, const std::vector<double>& want,
                                double rtol, double atol, const std::vector<double>& mag = {}) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " vs " << want.size();
  }
  auto failure = ::testing::AssertionFailure();
  int64_t count = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = Wide(got[i]);
    const double m = mag.empty() ? std::abs(want[i]) : mag[i];
    const double tol = rtol * m + atol;
    if (std::abs(g - want[i]) <= tol) continue;
    if (std::isnan(g) && std::isnan(want[i])) continue;
    if (count++ < 8) {
      failure << "\n  [" << i << "] got " << g << ", want " << want[i] << " (tolerance " << tol
              << ")";
    }
  }
  if (count == 0) return ::testing::AssertionSuccess();
  return failure << "\n  " << count << " of " << got.size() << " elements differ";
}

// --- running the kernels ----------------------------------------------------------------------

template <typename T>
struct Outputs {
  std::vector<T> boxes, scores, class_scores;
  std::vector<int32_t> indices;
};

template <typename T>
Outputs<T> RunForward(const YoloDecodeParams& p, const std::vector<T>& f,
                      const std::vector<T>& anchors, const Parallel& parallel = SerialParallel()) {
  const int64_t n = p.batch * p.boxes_per_image();
  Outputs<T> o;
  o.boxes.resize(static_cast<size_t>(n * 4));
  o.scores.resize(static_cast<size_t>(n));
  o.indices.resize(static_cast<size_t>(n));
  o.class_scores.resize(static_cast<size_t>(n * p.num_classes));
  YoloDecodeForward<T>(p, f.data(), anchors.data(), o.boxes.data(), o.scores.data(),
                       o.indices.data(), o.class_scores.data(), parallel);
  return o;
}

// Anchors in input pixels, (10..120) x (10..120).
template <typename T>
std::vector<T> RandomAnchors(std::mt19937_64& rng, int64_t a) {
  return test::UniformVector<T>(rng, 2 * a, 10.0, 120.0);
}

// The kernel's argmax against its own rounded class scores: the first maximum, and the score is
// that class's score.
template <typename T>
::testing::AssertionResult ArgmaxConsistent(const Outputs<T>& o, int64_t classes) {
  for (size_t box = 0; box < o.scores.size(); ++box) {
    const int32_t idx = o.indices[box];
    if (idx < 0 || idx >= classes) {
      return ::testing::AssertionFailure() << "box " << box << ": index " << idx;
    }
    const double best = Wide(o.class_scores[box * classes + static_cast<size_t>(idx)]);
    if (test::Bits(o.scores[box]) != test::Bits(o.class_scores[box * classes + idx])) {
      return ::testing::AssertionFailure() << "box " << box << ": score " << Wide(o.scores[box])
                                           << " is not class " << idx << "'s " << best;
    }
    for (int64_t c = 0; c < classes; ++c) {
      const double v = Wide(o.class_scores[box * classes + static_cast<size_t>(c)]);
      if ((c < idx && v >= best) || (c > idx && v > best)) {
        return ::testing::AssertionFailure() << "box " << box << ": index " << idx << " (" << best
                                             << ") but class " << c << " has " << v;
      }
    }
  }
  return ::testing::AssertionSuccess();
}

// --- validation -------------------------------------------------------------------------------

YoloDecodeParams Attrs(int64_t classes) {
  YoloDecodeParams p;
  p.num_classes = classes;
  p.input_size = {416, 416};
  return p;
}

TEST(YoloDecodeValidate, AcceptsAndFillsParams) {
  YoloDecodeParams p = Attrs(80);
  OPFORGE_ASSERT_OK(ValidateYoloDecode({2, 13, 26, 3 * 85}, {3, 2}, &p));
  EXPECT_EQ(p.batch, 2);
  EXPECT_EQ(p.height, 13);
  EXPECT_EQ(p.width, 26);
  EXPECT_EQ(p.anchors, 3);
  EXPECT_EQ(p.boxes_per_image(), 13 * 26 * 3);
  EXPECT_EQ(p.format, YoloBoxFormat::kXyxy);
  p = Attrs(2);
  p.box_format = "center_xywh";
  OPFORGE_ASSERT_OK(ValidateYoloDecode({1, 4, 5, 1, 7}, {1, 2}, &p));
  EXPECT_EQ(p.format, YoloBoxFormat::kCenterXywh);
  EXPECT_EQ(p.anchors, 1);
  p = Attrs(2);
  p.box_format = "yxyx";
  p.scale_x_y = 1.0f;
  OPFORGE_ASSERT_OK(ValidateYoloDecode({0, 4, 5, 14}, {2, 2}, &p));  // an empty batch
  EXPECT_EQ(p.format, YoloBoxFormat::kYxyx);
  EXPECT_EQ(p.batch, 0);
  OPFORGE_ASSERT_OK(
      ValidateYoloDecodeGrad({0, 40, 4}, {0, 40}, {0, 40, 2}, {0, 4, 5, 14}, {2, 2}, &p));
}

TEST(YoloDecodeValidate, NamesTheArgument) {
  struct Bad {
    std::vector<int64_t> features, anchors;
    int64_t classes;
    std::vector<int64_t> input_size;
    std::string format;
    float scale;
    const char* argument;
    const char* given;
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<int64_t> ok_size = {416, 416};
  const std::vector<Bad> bad = {
      // features
      {{2, 13, 13}, {3, 2}, 2, ok_size, "xyxy", 1, "features", "[2, 13, 13]"},
      {{2, 13, 13, 3, 7, 1}, {3, 2}, 2, ok_size, "xyxy", 1, "features", "[2, 13, 13, 3, 7, 1]"},
      {{2, 13, 13, 22}, {3, 2}, 2, ok_size, "xyxy", 1, "features", "not a multiple of 5 + "},
      {{2, 13, 13, 0}, {3, 2}, 2, ok_size, "xyxy", 1, "features", "[2, 13, 13, 0]"},
      {{2, 13, 13, 14}, {3, 2}, 2, ok_size, "xyxy", 1, "features", "3 anchors"},
      {{2, 13, 13, 28}, {3, 2}, 2, ok_size, "xyxy", 1, "features", "[2, 13, 13, 28]"},
      {{2, 13, 13, 2, 7}, {3, 2}, 2, ok_size, "xyxy", 1, "features", "[2, 13, 13, 2, 7]"},
      {{2, 13, 13, 3, 8}, {3, 2}, 2, ok_size, "xyxy", 1, "features", "[2, 13, 13, 3, 8]"},
      {{2, 0, 13, 21}, {3, 2}, 2, ok_size, "xyxy", 1, "features", "[2, 0, 13, 21]"},
      {{2, 13, 0, 3, 7}, {3, 2}, 2, ok_size, "xyxy", 1, "features", "[2, 13, 0, 3, 7]"},
      // anchors
      {{2, 13, 13, 21}, {3}, 2, ok_size, "xyxy", 1, "anchors", "[3]"},
      {{2, 13, 13, 21}, {3, 3}, 2, ok_size, "xyxy", 1, "anchors", "[3, 3]"},
      {{2, 13, 13, 21}, {0, 2}, 2, ok_size, "xyxy", 1, "anchors", "[0, 2]"},
      {{2, 13, 13, 21}, {3, 2, 1}, 2, ok_size, "xyxy", 1, "anchors", "[3, 2, 1]"},
      // attrs
      {{2, 13, 13, 21}, {3, 2}, 0, ok_size, "xyxy", 1, "num_classes", "got 0"},
      {{2, 13, 13, 21}, {3, 2}, -3, ok_size, "xyxy", 1, "num_classes", "got -3"},
      {{2, 13, 13, 21}, {3, 2}, (1 << 24) + 1, ok_size, "xyxy", 1, "num_classes", "16777217"},
      {{2, 13, 13, 21}, {3, 2}, 2, {416}, "xyxy", 1, "input_size", "[416]"},
      {{2, 13, 13, 21}, {3, 2}, 2, {416, 416, 3}, "xyxy", 1, "input_size", "[416, 416, 3]"},
      {{2, 13, 13, 21}, {3, 2}, 2, {0, 416}, "xyxy", 1, "input_size", "[0, 416]"},
      {{2, 13, 13, 21}, {3, 2}, 2, {416, -1}, "xyxy", 1, "input_size", "[416, -1]"},
      {{2, 13, 13, 21}, {3, 2}, 2, ok_size, "xywh", 1, "box_format", "\"xywh\""},
      {{2, 13, 13, 21}, {3, 2}, 2, ok_size, "XYXY", 1, "box_format", "\"XYXY\""},
      {{2, 13, 13, 21}, {3, 2}, 2, ok_size, "xyxy", 0.9f, "scale_x_y", "0.9"},
      {{2, 13, 13, 21}, {3, 2}, 2, ok_size, "xyxy", -1.0f, "scale_x_y", "-1"},
      {{2, 13, 13, 21}, {3, 2}, 2, ok_size, "xyxy", nan, "scale_x_y", "nan"},
      {{2, 13, 13, 21}, {3, 2}, 2, ok_size, "xyxy", inf, "scale_x_y", "inf"},
  };
  for (const Bad& b : bad) {
    YoloDecodeParams p;
    p.num_classes = b.classes;
    p.input_size = b.input_size;
    p.box_format = b.format;
    p.scale_x_y = b.scale;
    const Status s = ValidateYoloDecode(b.features, b.anchors, &p);
    ASSERT_FALSE(s.ok()) << b.argument << " " << b.given;
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
    EXPECT_TRUE(NamesWord(s.message(), "YoloDecode"));
    EXPECT_TRUE(NamesWord(s.message(), b.argument));
    EXPECT_TRUE(Contains(s.message(), b.given));
    // The gradient op checks the same, under its own name.
    const Status g = ValidateYoloDecodeGrad({}, {}, {}, b.features, b.anchors, &p);
    ASSERT_FALSE(g.ok());
    EXPECT_TRUE(NamesWord(g.message(), "YoloDecodeGrad")) << g.message();
    EXPECT_TRUE(NamesWord(g.message(), b.argument));
    EXPECT_TRUE(Contains(g.message(), b.given));
  }
  // The attrs alone.
  YoloDecodeParams p = Attrs(2);
  p.box_format = "cxcywh";
  const Status s = ValidateYoloDecodeAttrs(&p);
  EXPECT_TRUE(NamesWord(s.message(), "box_format")) << s.message();
  p = Attrs(2);
  OPFORGE_ASSERT_OK(ValidateYoloDecodeAttrs(&p));
}

TEST(YoloDecodeValidate, AnchorCountMismatchSaysHowMany) {
  YoloDecodeParams p = Attrs(80);
  const Status s = ValidateYoloDecode({1, 13, 13, 255}, {2, 2}, &p);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(NamesWord(s.message(), "features")) << s.message();
  EXPECT_TRUE(NamesWord(s.message(), "anchors")) << s.message();
  EXPECT_TRUE(Contains(s.message(), "[1, 13, 13, 255]")) << s.message();
  EXPECT_TRUE(Contains(s.message(), "170")) << s.message();  // 2 * 85
}

// An empty batch does not make any grid possible: [0, 2^62, 3, 2 * 7] would give boxes of
// 2^62 * 3 * 2 rows per image, a shape TensorFlow aborts on (found by `opforge fuzz`).
TEST(YoloDecodeValidate, RefusesGridsWhoseOutputsCannotExist) {
  YoloDecodeParams p = Attrs(2);
  const Status s = ValidateYoloDecode({0, int64_t{1} << 62, 3, 14}, {2, 2}, &p);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(NamesWord(s.message(), "features")) << s.message();
  EXPECT_TRUE(Contains(s.message(), "2^63")) << s.message();
  p = Attrs(2);
  OPFORGE_ASSERT_OK(ValidateYoloDecode({0, int64_t{1} << 20, 3, 14}, {2, 2}, &p));
}

// max_log_scale: +inf (the default, no clamp) or any finite bound; NaN and -inf are errors.
TEST(YoloDecodeValidate, MaxLogScaleIsFiniteOrPlusInfinity) {
  const float inf = std::numeric_limits<float>::infinity();
  for (float ok : {inf, static_cast<float>(kYoloMaxLogScale), 0.0f, -3.0f, 1e30f}) {
    YoloDecodeParams p = Attrs(2);
    p.max_log_scale = ok;
    OPFORGE_ASSERT_OK(ValidateYoloDecodeAttrs(&p));
  }
  EXPECT_EQ(YoloDecodeParams().max_log_scale, inf);  // the default
  struct Bad {
    float value;
    const char* given;
  };
  for (const Bad& b :
       {Bad{std::numeric_limits<float>::quiet_NaN(), "got nan"}, Bad{-inf, "got -inf"}}) {
    YoloDecodeParams p = Attrs(2);
    p.max_log_scale = b.value;
    const Status s = ValidateYoloDecode({1, 2, 2, 14}, {2, 2}, &p);
    ASSERT_FALSE(s.ok()) << b.given;
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
    EXPECT_TRUE(NamesWord(s.message(), "YoloDecode")) << s.message();
    EXPECT_TRUE(NamesWord(s.message(), "max_log_scale")) << s.message();
    EXPECT_TRUE(Contains(s.message(), "+inf")) << s.message();  // what is expected
    EXPECT_TRUE(Contains(s.message(), b.given)) << s.message();
    const Status g = ValidateYoloDecodeGrad({}, {}, {}, {1, 2, 2, 14}, {2, 2}, &p);
    EXPECT_TRUE(NamesWord(g.message(), "YoloDecodeGrad")) << g.message();
    EXPECT_TRUE(NamesWord(g.message(), "max_log_scale")) << g.message();
  }
}

// Anchors: every value finite and positive; the first bad row is named, with its values.
template <typename T>
class YoloAnchorsTest : public ::testing::Test {};
TYPED_TEST_SUITE(YoloAnchorsTest, test::FloatTypes, TypeNames);

TYPED_TEST(YoloAnchorsTest, NamesTheFirstBadRow) {
  using T = TypeParam;
  const std::vector<T> good = {T(10), T(13), T(16), T(30), T(0.25f), T(61)};
  OPFORGE_ASSERT_OK(CheckYoloAnchors("YoloDecode", "anchors", good.data(), 3));
  OPFORGE_ASSERT_OK(CheckYoloAnchors("YoloDecode", "anchors", DTypeOf<T>::value, good.data(), 3));
  using L = std::numeric_limits<T>;
  struct Bad {
    T value;
    const char* given;
  };
  const std::vector<Bad> bad = {{T(0), "[16, 0]"},
                                {T(-2), "[16, -2]"},
                                {L::quiet_NaN(), "[16, nan]"},
                                {L::infinity(), "[16, inf]"},
                                {-L::infinity(), "[16, -inf]"}};
  for (const Bad& b : bad) {
    std::vector<T> anchors = good;
    anchors[3] = b.value;
    anchors[5] = L::quiet_NaN();  // a later bad row: the first one is reported
    for (const Status& s :
         {CheckYoloAnchors("YoloDecode", "anchors", anchors.data(), 3),
          CheckYoloAnchors("YoloDecode", "anchors", DTypeOf<T>::value, anchors.data(), 3)}) {
      ASSERT_FALSE(s.ok()) << b.given;
      EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
      EXPECT_TRUE(NamesWord(s.message(), "YoloDecode")) << s.message();
      EXPECT_TRUE(Contains(s.message(), "anchors[1] must be")) << s.message();
      EXPECT_TRUE(Contains(s.message(), "finite, positive")) << s.message();
      EXPECT_TRUE(Contains(s.message(), b.given)) << s.message();
    }
    // The width too.
    anchors = good;
    anchors[0] = b.value;
    const Status s = CheckYoloAnchors("YoloPostprocess", "anchors[2]", anchors.data(), 3);
    EXPECT_TRUE(Contains(s.message(), "YoloPostprocess: anchors[2][0] must be")) << s.message();
  }
}

TEST(YoloDecodeValidate, GradNamesTheArgument) {
  const std::vector<int64_t> f = {2, 3, 4, 2 * 7}, a = {2, 2};
  YoloDecodeParams p = Attrs(2);
  OPFORGE_ASSERT_OK(ValidateYoloDecodeGrad({2, 24, 4}, {2, 24}, {2, 24, 2}, f, a, &p));
  struct Bad {
    std::vector<int64_t> boxes, scores, class_scores;
    const char* argument;
    const char* given;
  };
  const std::vector<Bad> bad = {
      {{2, 24}, {2, 24}, {2, 24, 2}, "grad_boxes", "[2, 24]"},
      {{2, 24, 5}, {2, 24}, {2, 24, 2}, "grad_boxes", "[2, 24, 5]"},
      {{1, 24, 4}, {2, 24}, {2, 24, 2}, "grad_boxes", "[1, 24, 4]"},
      {{2, 24, 4}, {2, 23}, {2, 24, 2}, "grad_scores", "[2, 23]"},
      {{2, 24, 4}, {2, 24, 1}, {2, 24, 2}, "grad_scores", "[2, 24, 1]"},
      {{2, 24, 4}, {2, 24}, {2, 24, 3}, "grad_class_scores", "[2, 24, 3]"},
      {{2, 24, 4}, {2, 24}, {2, 24}, "grad_class_scores", "[2, 24]"},
  };
  for (const Bad& b : bad) {
    const Status s = ValidateYoloDecodeGrad(b.boxes, b.scores, b.class_scores, f, a, &p);
    ASSERT_FALSE(s.ok()) << b.argument;
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
    EXPECT_TRUE(NamesWord(s.message(), "YoloDecodeGrad")) << s.message();
    EXPECT_TRUE(NamesWord(s.message(), b.argument)) << s.message();
    EXPECT_TRUE(Contains(s.message(), b.given));
    EXPECT_TRUE(Contains(s.message(), "expected") || Contains(s.message(), "must be"));
  }
}

// --- the forward kernel -----------------------------------------------------------------------

template <typename T>
class YoloDecodeKernelTest : public ::testing::Test {};
TYPED_TEST_SUITE(YoloDecodeKernelTest, test::FloatTypes, TypeNames);

TYPED_TEST(YoloDecodeKernelTest, ForwardMatchesReference) {
  using T = TypeParam;
  std::mt19937_64 rng(11);
  for (const Case& c : Cases()) {
    YoloDecodeParams p;
    OPFORGE_ASSERT_OK(ParamsOf(c, &p));
    const auto f = test::UniformVector<T>(rng, NumFeatures(c), -4.0, 4.0);
    const auto anchors = RandomAnchors<T>(rng, c.anchors);
    const Outputs<T> o = RunForward(p, f, anchors);
    const Ref r = RefForward(c, Widen(f), Widen(anchors));
    EXPECT_TRUE(Near(o.boxes, r.boxes, Rtol<T>(), Atol<T>(), r.box_mag)) << Describe(c);
    EXPECT_TRUE(Near(o.class_scores, r.class_scores, Rtol<T>(), Atol<T>())) << Describe(c);
    EXPECT_TRUE(Near(o.scores, r.scores, Rtol<T>(), Atol<T>())) << Describe(c);
    EXPECT_TRUE(ArgmaxConsistent(o, c.classes)) << Describe(c);
    // The kernel's class is the reference's, or one whose score ties with it within rounding.
    for (size_t box = 0; box < o.indices.size(); ++box) {
      const size_t got = box * c.classes + static_cast<size_t>(o.indices[box]);
      EXPECT_NEAR(r.class_scores[got], r.scores[box], Rtol<T>() * r.scores[box] + Atol<T>())
          << Describe(c) << " box " << box << ": class " << o.indices[box] << " vs "
          << r.indices[box];
    }
  }
}

// The same memory read as 4-D and as 5-D gives the same bits.
TYPED_TEST(YoloDecodeKernelTest, FourAndFiveDimensionalFeaturesAgree) {
  using T = TypeParam;
  std::mt19937_64 rng(12);
  Case c = {2, 3, 4, 3, 5, 96, 128, "xyxy", false, 1.05f, false};
  YoloDecodeParams p4, p5;
  OPFORGE_ASSERT_OK(ParamsOf(c, &p4));
  c.five_d = true;
  OPFORGE_ASSERT_OK(ParamsOf(c, &p5));
  const auto f = test::UniformVector<T>(rng, NumFeatures(c), -4.0, 4.0);
  const auto anchors = RandomAnchors<T>(rng, c.anchors);
  const Outputs<T> a = RunForward(p4, f, anchors), b = RunForward(p5, f, anchors);
  EXPECT_TRUE(SameBits(a.boxes, b.boxes));
  EXPECT_TRUE(SameBits(a.class_scores, b.class_scores));
  EXPECT_EQ(a.indices, b.indices);
}

// Null outputs are skipped; the others are unchanged.
TYPED_TEST(YoloDecodeKernelTest, NullOutputsAreSkipped) {
  using T = TypeParam;
  std::mt19937_64 rng(13);
  const Case c = {2, 3, 2, 2, 4, 64, 96, "yxyx", true, 1.0f, false};
  YoloDecodeParams p;
  OPFORGE_ASSERT_OK(ParamsOf(c, &p));
  const auto f = test::UniformVector<T>(rng, NumFeatures(c), -4.0, 4.0);
  const auto anchors = RandomAnchors<T>(rng, c.anchors);
  const Outputs<T> all = RunForward(p, f, anchors);
  const SerialParallel serial;
  std::vector<T> boxes(all.boxes.size()), scores(all.scores.size()),
      class_scores(all.class_scores.size());
  std::vector<int32_t> indices(all.indices.size());
  YoloDecodeForward<T>(p, f.data(), anchors.data(), boxes.data(), nullptr, nullptr, nullptr,
                       serial);
  EXPECT_TRUE(SameBits(boxes, all.boxes));
  YoloDecodeForward<T>(p, f.data(), anchors.data(), nullptr, scores.data(), indices.data(), nullptr,
                       serial);
  EXPECT_TRUE(SameBits(scores, all.scores));
  EXPECT_EQ(indices, all.indices);
  YoloDecodeForward<T>(p, f.data(), anchors.data(), nullptr, nullptr, nullptr, class_scores.data(),
                       serial);
  EXPECT_TRUE(SameBits(class_scores, all.class_scores));
  // An empty batch touches nothing.
  YoloDecodeParams empty;
  OPFORGE_ASSERT_OK(ParamsOf({0, 3, 2, 2, 4, 64, 96, "yxyx", true, 1.0f, false}, &empty));
  YoloDecodeForward<T>(empty, nullptr, anchors.data(), nullptr, nullptr, nullptr, nullptr, serial);
  YoloDecodeBackward<T>(empty, nullptr, nullptr, nullptr, nullptr, anchors.data(), nullptr, serial);
}

// By default (max_log_scale +inf) bw = exp(tw) * anchor_w as written, at every tw whose box T
// holds: up to tw = 706 in double (715 normalized), 85 in float, up to T's largest value in half
// (anchors of 1000 px too) and bfloat16, and where the compute type's exp(tw) or exp(tw) *
// anchor_w alone overflows though the box does not (an anchor below 1, a normalized box); no
// clamp, and d bw / d tw = bw.
TYPED_TEST(YoloDecodeKernelTest, ExactFormulaByDefault) {
  using T = TypeParam;
  const double largest = Wide(std::numeric_limits<T>::max());
  for (const bool normalized : {false, true}) {
    for (const double aw : {30.0, 1000.0, 0.5}) {
      const Case c = {1, 1, 1, 1, 1, 416, 416, "center_xywh", normalized, 1.0f, false};
      YoloDecodeParams p;
      OPFORGE_ASSERT_OK(ParamsOf(c, &p));
      const double div = normalized ? 416.0 : 1.0;
      const std::vector<T> anchors = {Narrow<T>(aw), Narrow<T>(20)};
      // tw from -10 to just below where bw reaches T's largest value (exp's and the product's
      // rounding stay below it there).
      const double top = std::log(largest) + std::log(div / aw) - 0.01;  // largest / aw: inf
      for (int i = 0; i <= 60; ++i) {
        const T tw = Narrow<T>(-10.0 + (top + 10.0) * i / 60.0);
        if (Wide(tw) > top) continue;  // rounded up past the top
        const std::vector<T> f = {T(0), T(0), tw, T(1), T(0), T(0)};
        const Outputs<T> o = RunForward(p, f, anchors);
        const double want = std::exp(Wide(tw)) * Wide(anchors[0]) / div;
        const auto where = [&] {
          std::ostringstream s;
          s << "aw " << aw << " normalized " << normalized << " tw " << Wide(tw);
          return s.str();
        };
        ASSERT_TRUE(std::isfinite(Wide(o.boxes[2]))) << where();
        EXPECT_NEAR(Wide(o.boxes[2]), want, Rtol<T>() * want + Atol<T>()) << where();
        EXPECT_NEAR(Wide(o.boxes[3]), std::exp(1.0) * 20 / div, Rtol<T>() * 20 * std::exp(1.0));
        const std::vector<T> g = {T(0), T(0), T(1), T(0)};
        std::vector<T> df(f.size());
        YoloDecodeBackward<T>(p, g.data(), nullptr, nullptr, f.data(), anchors.data(), df.data(),
                              SerialParallel());
        EXPECT_NEAR(Wide(df[2]), want, 2 * Rtol<T>() * want + Atol<T>()) << where();
        EXPECT_EQ(Wide(df[3]), 0.0);
      }
    }
  }
}

// max_log_scale given (kYoloMaxLogScale, torchvision's): tw, th above it scale the anchor by
// exp(bound) = 62.5, no more, and their gradient is 0; below it the formula is unchanged.
TYPED_TEST(YoloDecodeKernelTest, LogScaleIsClampedWhenGiven) {
  using T = TypeParam;
  Case c = {1, 1, 1, 1, 1, 416, 416, "center_xywh", false, 1.0f, false};
  c.max_log_scale = static_cast<float>(kYoloMaxLogScale);
  YoloDecodeParams p;
  OPFORGE_ASSERT_OK(ParamsOf(c, &p));
  const double aw = 30, ah = 20;
  const std::vector<T> anchors = {Narrow<T>(aw), Narrow<T>(ah)};
  const double big = std::min(1e30, Wide(std::numeric_limits<T>::max()));
  // The attr is a float: the bound is float(log(62.5)), also for double.
  const double bound = static_cast<float>(kYoloMaxLogScale);
  const double clamped_w = std::exp(bound) * aw;  // 1875
  const double clamped_h = std::exp(bound) * ah;  // 1250
  std::vector<T> clamped;
  for (double t : {4.0, 10.0, big, std::numeric_limits<double>::infinity()}) {
    const std::vector<T> f = {T(0), T(0), Narrow<T>(t), Narrow<T>(t), T(0), T(0)};
    const Outputs<T> o = RunForward(p, f, anchors);
    const double w = Wide(o.boxes[2]), h = Wide(o.boxes[3]);
    ASSERT_TRUE(std::isfinite(w) && std::isfinite(h)) << "t = " << t;
    if (t == 4.0) {
      EXPECT_NEAR(w, std::exp(4.0) * aw, Rtol<T>() * std::exp(4.0) * aw);
      EXPECT_NEAR(h, std::exp(4.0) * ah, Rtol<T>() * std::exp(4.0) * ah);
      EXPECT_LT(w, clamped_w);
    } else {
      EXPECT_NEAR(w, clamped_w, Rtol<T>() * clamped_w) << "t = " << t;
      EXPECT_NEAR(h, clamped_h, Rtol<T>() * clamped_h) << "t = " << t;
      if (clamped.empty()) {
        clamped = o.boxes;
      } else {
        EXPECT_TRUE(SameBits(o.boxes, clamped)) << "t = " << t;
      }
    }
    // The gradient is 0 above the bound.
    const std::vector<T> g = {T(1), T(1), T(1), T(1)};
    std::vector<T> df(f.size());
    YoloDecodeBackward<T>(p, g.data(), nullptr, nullptr, f.data(), anchors.data(), df.data(),
                          SerialParallel());
    if (t == 4.0) {
      EXPECT_NEAR(Wide(df[2]), std::exp(4.0) * aw, Rtol<T>() * std::exp(4.0) * aw);
    } else {
      EXPECT_EQ(Wide(df[2]), 0.0) << "t = " << t;
      EXPECT_EQ(Wide(df[3]), 0.0) << "t = " << t;
    }
  }
  // Without the bound the same t = 10 gives exp(10) * aw.
  p.max_log_scale = std::numeric_limits<float>::infinity();
  const std::vector<T> f = {T(0), T(0), Narrow<T>(10), Narrow<T>(1), T(0), T(0)};
  const double w = Wide(RunForward(p, f, anchors).boxes[2]);
  EXPECT_NEAR(w, std::min(std::exp(10.0) * aw, Wide(std::numeric_limits<T>::max())),
              Rtol<T>() * std::exp(10.0) * aw);
}

// A coordinate past T's largest finite value M (or inf from exp's overflow) is written as +-M
// exactly, and its gradient is 0; the coordinates that did not saturate keep their values and
// gradients. Every format, normalized or not; tw just past the overflow, 1e4, T's max and +inf.
TYPED_TEST(YoloDecodeKernelTest, SaturatesAtTheLargestFiniteValue) {
  using T = TypeParam;
  const double largest = Wide(std::numeric_limits<T>::max());
  const double aw = 30, ah = 20;
  const std::vector<T> anchors = {Narrow<T>(aw), Narrow<T>(ah)};
  for (const char* format : {"xyxy", "yxyx", "center_xywh"}) {
    for (bool normalized : {false, true}) {
      const Case c = {1, 1, 1, 1, 1, 416, 320, format, normalized, 1.0f, false};
      YoloDecodeParams p;
      OPFORGE_ASSERT_OK(ParamsOf(c, &p));
      const bool center = c.format == "center_xywh";
      // The x coordinates (those bw moves) of the format: x1, x2, or w.
      const std::vector<int> xs = center               ? std::vector<int>{2}
                                  : c.format == "xyxy" ? std::vector<int>{0, 2}
                                                       : std::vector<int>{1, 3};
      const double div = normalized ? 320.0 : 1.0;
      const double past = std::log(2 * largest * div / aw) + 1;  // bw / 2 / div > M
      for (double t : {past, 1e4, largest, std::numeric_limits<double>::infinity()}) {
        const std::vector<T> f = {
            Narrow<T>(0.3), Narrow<T>(-0.2), Narrow<T>(t), Narrow<T>(0.5), T(0), T(0)};
        const Outputs<T> o = RunForward(p, f, anchors);
        const Ref r = RefForward(c, Widen(f), Widen(anchors));
        for (int k = 0; k < 4; ++k) {
          const double got = Wide(o.boxes[static_cast<size_t>(k)]);
          if (std::find(xs.begin(), xs.end(), k) != xs.end()) {
            // x1 = -M, x2 = +M, w = +M.
            const double want = (!center && k < 2) ? -largest : largest;
            EXPECT_EQ(got, want) << c.format << " normalized " << normalized << " t " << t;
          } else {
            EXPECT_NEAR(got, r.boxes[static_cast<size_t>(k)],
                        Rtol<T>() * r.box_mag[static_cast<size_t>(k)] + Atol<T>())
                << c.format << " coordinate " << k << " t " << t;
          }
        }
        // Every coordinate gets gradient 1: tw (and tx, where both x coordinates saturated)
        // get none; ty, th keep theirs.
        const std::vector<T> g = {T(1), T(1), T(1), T(1)};
        std::vector<T> df(f.size());
        YoloDecodeBackward<T>(p, g.data(), nullptr, nullptr, f.data(), anchors.data(), df.data(),
                              SerialParallel());
        EXPECT_EQ(Wide(df[2]), 0.0) << c.format << " t " << t;
        if (center) {
          EXPECT_NE(Wide(df[0]), 0.0) << c.format << " t " << t;
          EXPECT_NE(Wide(df[3]), 0.0) << c.format << " t " << t;  // d h / d th
        } else {
          EXPECT_EQ(Wide(df[0]), 0.0) << c.format << " t " << t;
        }
        EXPECT_NE(Wide(df[1]), 0.0) << c.format << " t " << t;
        for (int k = 0; k < 4; ++k) EXPECT_TRUE(std::isfinite(Wide(df[static_cast<size_t>(k)])));
        // YoloDecodeSelected (YoloPostprocess's decode) saturates the same way, bit for bit.
        const int64_t one = 0;
        std::vector<T> boxes(4), class_scores(1);
        YoloDecodeSelected<T>(p, f.data(), anchors.data(), 0, &one, 1, boxes.data(),
                              class_scores.data());
        EXPECT_TRUE(SameBits(boxes, o.boxes));
      }
    }
  }
}

// Where only the narrow output type overflows: a half box of a 1000-pixel anchor at tw = 5
// (148413 in float) and a bfloat16 box between bfloat16's and float's largest values are
// written as the type's largest value, not rounded to inf.
TEST(YoloDecodeSaturation, NarrowTypesSaturateWhereFloatDoesNot) {
  {
    const Case c = {1, 1, 1, 1, 1, 416, 416, "center_xywh", false, 1.0f, false};
    YoloDecodeParams p;
    OPFORGE_ASSERT_OK(ParamsOf(c, &p));
    using H = Eigen::half;
    const std::vector<H> anchors = {H(1000.0f), H(10.0f)};
    const std::vector<H> f = {H(0.0f), H(0.0f), H(5.0f), H(4.0f), H(0.0f), H(0.0f)};
    const Outputs<H> o = RunForward(p, f, anchors);
    EXPECT_EQ(Wide(o.boxes[2]), 65504.0);  // exp(5) * 1000 = 148413
    EXPECT_NEAR(Wide(o.boxes[3]), std::exp(4.0) * 10, 1e-3 * std::exp(4.0) * 10);
    const std::vector<H> g = {H(1.0f), H(1.0f), H(1.0f), H(1.0f)};
    std::vector<H> df(f.size());
    YoloDecodeBackward<H>(p, g.data(), nullptr, nullptr, f.data(), anchors.data(), df.data(),
                          SerialParallel());
    EXPECT_EQ(Wide(df[2]), 0.0);
    EXPECT_NEAR(Wide(df[3]), std::exp(4.0) * 10, 2e-3 * std::exp(4.0) * 10);
  }
  {
    const Case c = {1, 1, 1, 1, 1, 416, 416, "center_xywh", false, 1.0f, false};
    YoloDecodeParams p;
    OPFORGE_ASSERT_OK(ParamsOf(c, &p));
    using B = Eigen::bfloat16;
    const B tw(87.5f), aw(3.390625f);  // both exact in bfloat16
    const float in_float = std::exp(static_cast<float>(tw)) * static_cast<float>(aw);
    const float bf16_max = static_cast<float>(std::numeric_limits<B>::max());
    ASSERT_GT(in_float, bf16_max);  // finite in float, above bfloat16's largest value, ...
    ASSERT_TRUE(std::isinf(static_cast<float>(B(in_float))));  // ... which rounds to inf
    const std::vector<B> anchors = {aw, B(10.0f)};
    const std::vector<B> f = {B(0.0f), B(0.0f), tw, B(1.0f), B(0.0f), B(0.0f)};
    const Outputs<B> o = RunForward(p, f, anchors);
    EXPECT_EQ(static_cast<float>(o.boxes[2]), bf16_max);
  }
}

// A box can saturate on one side only: a half xyxy box centred at x = 30000 px of width 80000
// has x2 = 70000 (written 65504, no gradient) and x1 = -10000 (exact, with its gradient):
// d x1 / d tw = -bw / 2 and d x1 / d tx = stride * sigmoid'(tx) reach t, x2's do not.
TEST(YoloDecodeSaturation, OneSideOfABox) {
  using H = Eigen::half;
  const Case c = {1, 1, 1, 1, 1, 100, 60000, "xyxy", false, 1.0f, false};
  YoloDecodeParams p;
  OPFORGE_ASSERT_OK(ParamsOf(c, &p));
  const std::vector<H> anchors = {H(1000.0f), H(10.0f)};
  const H tw(static_cast<float>(std::log(80.0)));
  const std::vector<H> f = {H(0.0f), H(0.0f), tw, H(0.0f), H(0.0f), H(0.0f)};
  const Outputs<H> o = RunForward(p, f, anchors);
  const double bw = std::exp(Wide(tw)) * 1000;
  EXPECT_EQ(Wide(o.boxes[2]), 65504.0);
  EXPECT_NEAR(Wide(o.boxes[0]), 30000 - bw / 2, 1e-3 * 30000);
  std::vector<H> df(f.size());
  const std::vector<H> g0 = {H(1.0f), H(0.0f), H(0.0f), H(0.0f)};  // d x1
  YoloDecodeBackward<H>(p, g0.data(), nullptr, nullptr, f.data(), anchors.data(), df.data(),
                        SerialParallel());
  EXPECT_NEAR(Wide(df[0]), 60000 * 0.25, 1e-3 * 15000);  // stride * sigmoid'(0)
  EXPECT_NEAR(Wide(df[2]), -bw / 2, 1e-3 * bw);
  const std::vector<H> g2 = {H(0.0f), H(0.0f), H(1.0f), H(0.0f)};  // d x2: saturated
  YoloDecodeBackward<H>(p, g2.data(), nullptr, nullptr, f.data(), anchors.data(), df.data(),
                        SerialParallel());
  for (int k = 0; k < 4; ++k) EXPECT_EQ(Wide(df[static_cast<size_t>(k)]), 0.0) << k;
}

// Huge finite features never give inf or NaN in boxes or scores.
TYPED_TEST(YoloDecodeKernelTest, HugeFeaturesGiveFiniteOutputs) {
  using T = TypeParam;
  using L = std::numeric_limits<T>;
  std::vector<T> huge = {L::max(),         L::lowest(),     T(0),
                         Narrow<T>(-88.0), Narrow<T>(89.0), Narrow<T>(12.0)};
  if (std::isfinite(Wide(Narrow<T>(1e30)))) {
    huge.push_back(Narrow<T>(1e30));
    huge.push_back(Narrow<T>(-1e30));
  }
  std::mt19937_64 rng(14);
  for (const char* format : {"xyxy", "yxyx", "center_xywh"}) {
    for (bool normalized : {false, true}) {
      const Case c = {2, 5, 4, 3, 6, 416, 320, format, normalized, 1.05f, false};
      YoloDecodeParams p;
      OPFORGE_ASSERT_OK(ParamsOf(c, &p));
      std::vector<T> f(static_cast<size_t>(NumFeatures(c)));
      std::uniform_int_distribution<size_t> pick(0, huge.size() - 1);
      for (auto& x : f) x = huge[pick(rng)];
      const auto anchors = RandomAnchors<T>(rng, c.anchors);
      const Outputs<T> o = RunForward(p, f, anchors);
      for (const auto* v : {&o.boxes, &o.scores, &o.class_scores}) {
        for (size_t i = 0; i < v->size(); ++i) {
          ASSERT_TRUE(std::isfinite(Wide((*v)[i]))) << Describe(c) << " element " << i;
        }
      }
      ASSERT_TRUE(ArgmaxConsistent(o, c.classes));
    }
  }
}

// The same where the centres themselves pass float's range (a scale_x_y of 1e30 times a 2^40
// px input, what the fuzzer found): in float a centre of inf minus a size of inf was NaN; the box
// is then computed in double, and saturates. The sizes are the formula's, the gradient finite.
TYPED_TEST(YoloDecodeKernelTest, FiniteWhereTheCentresPassFloatsRange) {
  using T = TypeParam;
  using L = std::numeric_limits<T>;
  const std::vector<T> values = {L::max(),        L::lowest(),       T(0), Narrow<T>(-3.0),
                                 Narrow<T>(89.0), Narrow<T>(1000.0), T(1)};
  std::mt19937_64 rng(18);
  for (const char* format : {"xyxy", "yxyx", "center_xywh"}) {
    for (bool normalized : {false, true}) {
      const Case c = {1,      3,          2,     2,    1, int64_t{1} << 40, int64_t{1} << 40,
                      format, normalized, 1e30f, false};
      YoloDecodeParams p;
      OPFORGE_ASSERT_OK(ParamsOf(c, &p));
      std::vector<T> f(static_cast<size_t>(NumFeatures(c)));
      std::uniform_int_distribution<size_t> pick(0, values.size() - 1);
      for (auto& x : f) x = values[pick(rng)];
      const auto anchors = RandomAnchors<T>(rng, c.anchors);
      const Outputs<T> o = RunForward(p, f, anchors);
      for (size_t i = 0; i < o.boxes.size(); ++i) {
        ASSERT_TRUE(std::isfinite(Wide(o.boxes[i]))) << Describe(c) << " element " << i;
      }
      const std::vector<T> g(o.boxes.size(), T(1));
      std::vector<T> df(f.size());
      YoloDecodeBackward<T>(p, g.data(), nullptr, nullptr, f.data(), anchors.data(), df.data(),
                            SerialParallel());
      for (size_t box = 0; box < o.boxes.size() / 4; ++box) {
        for (int k = 0; k < 4; ++k) {
          EXPECT_FALSE(std::isnan(Wide(df[box * 6 + static_cast<size_t>(k)])))
              << Describe(c) << " box " << box << " d t" << k;
        }
      }
    }
  }
}

// A NaN in one box's features makes only that box's outputs NaN (those that read it).
TYPED_TEST(YoloDecodeKernelTest, NanStaysInItsBox) {
  using T = TypeParam;
  std::mt19937_64 rng(15);
  const Case c = {2, 3, 3, 2, 4, 96, 96, "xyxy", false, 1.0f, false};
  YoloDecodeParams p;
  OPFORGE_ASSERT_OK(ParamsOf(c, &p));
  const auto f = test::UniformVector<T>(rng, NumFeatures(c), -4.0, 4.0);
  const auto anchors = RandomAnchors<T>(rng, c.anchors);
  const Outputs<T> clean = RunForward(p, f, anchors);
  const int64_t box = 7, per_anchor = 5 + c.classes, nc = c.classes;
  for (int64_t k = 0; k < per_anchor; ++k) {
    std::vector<T> g = f;
    g[static_cast<size_t>(box * per_anchor + k)] = std::numeric_limits<T>::quiet_NaN();
    const Outputs<T> o = RunForward(p, g, anchors);
    for (int64_t other = 0; other < NumBoxes(c); ++other) {
      for (int64_t j = 0; j < 4; ++j) {
        const size_t i = static_cast<size_t>(other * 4 + j);
        // tx feeds x1, x2; ty y1, y2; tw x1, x2; th y1, y2.
        const bool reads = other == box && k < 4 && (j % 2) == (k % 2);
        EXPECT_EQ(std::isnan(Wide(o.boxes[i])), reads) << "k " << k << " box " << other;
        if (!reads) {
          EXPECT_EQ(test::Bits(o.boxes[i]), test::Bits(clean.boxes[i]));
        }
      }
      for (int64_t j = 0; j < nc; ++j) {
        const size_t i = static_cast<size_t>(other * nc + j);
        const bool reads = other == box && (k == 4 || k == 5 + j);
        EXPECT_EQ(std::isnan(Wide(o.class_scores[i])), reads) << "k " << k << " box " << other;
        if (!reads) {
          EXPECT_EQ(test::Bits(o.class_scores[i]), test::Bits(clean.class_scores[i]));
        }
      }
      const size_t i = static_cast<size_t>(other);
      const bool nan_score = other == box && k >= 4;
      EXPECT_EQ(std::isnan(Wide(o.scores[i])), nan_score) << "k " << k << " box " << other;
      if (!nan_score) {
        EXPECT_EQ(test::Bits(o.scores[i]), test::Bits(clean.scores[i]));
        EXPECT_EQ(o.indices[i], clean.indices[i]);
      } else {
        // NaN wins the argmax, as in NumPy: its class (the first for a NaN objectness).
        EXPECT_EQ(o.indices[i], k == 4 ? 0 : k - 5) << "k " << k;
      }
    }
  }
}

// Ties go to the lowest class index; the argmax is on the class scores rounded to T.
TYPED_TEST(YoloDecodeKernelTest, ArgmaxTiesGoToTheLowestIndex) {
  using T = TypeParam;
  const Case c = {1, 1, 1, 1, 5, 32, 32, "xyxy", false, 1.0f, false};
  YoloDecodeParams p;
  OPFORGE_ASSERT_OK(ParamsOf(c, &p));
  const std::vector<T> anchors = {T(10), T(10)};
  auto index_of = [&](std::vector<double> logits, double obj) {
    std::vector<T> f = {T(0), T(0), T(0), T(0), Narrow<T>(obj)};
    for (double l : logits) f.push_back(Narrow<T>(l));
    return RunForward(p, f, anchors).indices[0];
  };
  EXPECT_EQ(index_of({0.5, 2.0, 1.0, 2.0, -1.0}, 0.0), 1);
  EXPECT_EQ(index_of({1.0, 1.0, 1.0, 1.0, 1.0}, 0.0), 0);
  EXPECT_EQ(index_of({-3.0, -1.0, -2.0, -1.0, -1.0}, 1.0), 1);
  EXPECT_EQ(index_of({-3.0, -3.0, -2.0, -1.0, 0.5}, 1.0), 4);
  // sigmoid(9) and sigmoid(10) differ in float but both round to 1 in half and bfloat16: there
  // the first of them wins, and the gradient of the score goes to it.
  const bool narrow = sizeof(T) == 2;
  EXPECT_EQ(index_of({-1.0, 9.0, 10.0, -1.0, 0.0}, 30.0), narrow ? 1 : 2);
  std::vector<T> f = {T(0), T(0), T(0), T(0), Narrow<T>(30.0)};
  for (double l : {-1.0, 9.0, 10.0, -1.0, 0.0}) f.push_back(Narrow<T>(l));
  const std::vector<T> gs = {T(1)};
  std::vector<T> df(f.size());
  YoloDecodeBackward<T>(p, nullptr, gs.data(), nullptr, f.data(), anchors.data(), df.data(),
                        SerialParallel());
  EXPECT_NE(Wide(df[narrow ? 6 : 7]), 0.0);
  EXPECT_EQ(Wide(df[narrow ? 7 : 6]), 0.0);
  for (int k : {0, 1, 2, 3, 5, 8, 9}) EXPECT_EQ(Wide(df[static_cast<size_t>(k)]), 0.0) << k;
}

// Many classes (8 and more: the CPU's vectorised argmax, with its lanes and tail), ties planted
// before and after the maximum, in the same and in other lanes, and NaNs: the index is the first
// maximum of the rounded class scores, or the first NaN; the score's gradient goes to it.
TYPED_TEST(YoloDecodeKernelTest, ArgmaxOverManyClasses) {
  using T = TypeParam;
  std::mt19937_64 rng(16);
  for (int64_t classes : {8, 9, 16, 19, 80}) {
    const Case c = {1, 4, 5, 3, classes, 64, 80, "xyxy", false, 1.0f, false};
    YoloDecodeParams p;
    OPFORGE_ASSERT_OK(ParamsOf(c, &p));
    const int64_t per_anchor = 5 + classes, n = NumBoxes(c);
    auto f = test::UniformVector<T>(rng, NumFeatures(c), -3.0, 3.0);
    std::uniform_int_distribution<int64_t> pick(0, classes - 1);
    std::vector<int64_t> nan_at(static_cast<size_t>(n), -1);
    for (int64_t box = 0; box < n; ++box) {
      T* logits = &f[static_cast<size_t>(box * per_anchor + 5)];
      const int64_t kind = box % 4;
      if (kind == 1 || kind == 2) {  // a tie with the largest logit, before or after it
        const int64_t top =
            std::max_element(logits, logits + classes, [](T a, T b) { return Wide(a) < Wide(b); }) -
            logits;
        const int64_t other = pick(rng);
        logits[other] = logits[top];
      } else if (kind == 3) {  // a NaN (two, sometimes)
        nan_at[static_cast<size_t>(box)] = pick(rng);
        logits[nan_at[static_cast<size_t>(box)]] = std::numeric_limits<T>::quiet_NaN();
        const int64_t second = pick(rng);
        if (second % 2 == 0) {
          logits[second] = std::numeric_limits<T>::quiet_NaN();
          nan_at[static_cast<size_t>(box)] = std::min(nan_at[static_cast<size_t>(box)], second);
        }
      }
    }
    const auto anchors = RandomAnchors<T>(rng, c.anchors);
    const Outputs<T> o = RunForward(p, f, anchors);
    EXPECT_TRUE(ArgmaxConsistent(o, classes)) << classes << " classes";
    const std::vector<T> gs(static_cast<size_t>(n), T(1));
    std::vector<T> df(f.size());
    YoloDecodeBackward<T>(p, nullptr, gs.data(), nullptr, f.data(), anchors.data(), df.data(),
                          SerialParallel());
    for (int64_t box = 0; box < n; ++box) {
      const size_t b = static_cast<size_t>(box);
      if (nan_at[b] >= 0) {
        EXPECT_EQ(o.indices[b], nan_at[b]) << classes << " classes, box " << box;
        EXPECT_TRUE(std::isnan(Wide(o.scores[b])));
        continue;
      }
      for (int64_t k = 0; k < classes; ++k) {
        const double d = Wide(df[static_cast<size_t>(box * per_anchor + 5 + k)]);
        EXPECT_EQ(d != 0.0, k == o.indices[b])
            << classes << " classes, box " << box << ", class " << k;
      }
    }
  }
}

// --- the gradient -----------------------------------------------------------------------------

// Central differences of the double forward kernel, one output at a time: the gradient of
// sum(w * output) for output = boxes, scores and class_scores separately.
TEST(YoloDecodeGradient, MatchesFiniteDifferences) {
  std::mt19937_64 rng(21);
  const std::vector<Case> cases = {
      {2, 3, 2, 2, 3, 96, 64, "xyxy", false, 1.0f, false},
      {1, 2, 3, 3, 4, 64, 96, "yxyx", true, 1.05f, true},
      {1, 3, 3, 1, 5, 48, 72, "center_xywh", false, 1.05f, false},
      {2, 2, 2, 2, 2, 32, 32, "xyxy", true, 1.05f, false},
      {1, 2, 4, 2, 1, 128, 64, "center_xywh", true, 1.0f, true},
      {1, 2, 2, 2, 2, 64, 64, "xyxy", false, 1.0f, false, 1.5f},  // clamped: kinks at 1.5
  };
  const double h = 1e-5;
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const Case& c = cases[ci];
    YoloDecodeParams p;
    OPFORGE_ASSERT_OK(ParamsOf(c, &p));
    auto f = test::UniformVector<double>(rng, NumFeatures(c), -3.0, 3.0);
    // Odd cases: tw, th up to 25, far past the old clamp at log(62.5), where the default now
    // follows exp (boxes of 10^12 pixels: the differences stay relative).
    if (ci % 2 == 1) {
      std::uniform_real_distribution<double> large(4.0, 25.0);
      for (int64_t box = 0; box < NumBoxes(c); ++box) {
        f[static_cast<size_t>(box * (5 + c.classes) + 2)] = large(rng);
        f[static_cast<size_t>(box * (5 + c.classes) + 3)] = large(rng);
      }
    }
    const auto anchors = RandomAnchors<double>(rng, c.anchors);
    const int64_t n = NumBoxes(c);
    const auto wb = test::UniformVector<double>(rng, n * 4, -1.0, 1.0);
    const auto ws = test::UniformVector<double>(rng, n, -1.0, 1.0);
    const auto wc = test::UniformVector<double>(rng, n * c.classes, -1.0, 1.0);
    for (int part = 0; part < 3; ++part) {
      const char* name = part == 0 ? "boxes" : part == 1 ? "scores" : "class_scores";
      std::vector<double> grad(f.size());
      YoloDecodeBackward<double>(p, part == 0 ? wb.data() : nullptr,
                                 part == 1 ? ws.data() : nullptr, part == 2 ? wc.data() : nullptr,
                                 f.data(), anchors.data(), grad.data(), SerialParallel());
      for (size_t i = 0; i < f.size(); ++i) {
        std::vector<double> plus = f, minus = f;
        plus[i] += h;
        minus[i] -= h;
        const Outputs<double> op = RunForward(p, plus, anchors), om = RunForward(p, minus, anchors);
        const std::vector<double>& w = part == 0 ? wb : part == 1 ? ws : wc;
        const std::vector<double>& yp = part == 0   ? op.boxes
                                        : part == 1 ? op.scores
                                                    : op.class_scores;
        const std::vector<double>& ym = part == 0   ? om.boxes
                                        : part == 1 ? om.scores
                                                    : om.class_scores;
        double d = 0;
        for (size_t j = 0; j < w.size(); ++j) d += w[j] * (yp[j] - ym[j]);
        d /= 2 * h;
        // The rounding of the outputs of feature i's box, over 2h: what the difference cannot
        // resolve (tx of a box 10^10 wide moves its corners by less than their ulp).
        const size_t box = i / static_cast<size_t>(5 + c.classes);
        const size_t per_box = w.size() / static_cast<size_t>(n);
        double noise = 0;
        for (size_t j = box * per_box; j < (box + 1) * per_box; ++j) {
          noise += std::abs(w[j]) * std::max(std::abs(yp[j]), std::abs(ym[j]));
        }
        noise *= 4 * std::numeric_limits<double>::epsilon() / (2 * h);
        EXPECT_NEAR(grad[i], d, 1e-6 * (1 + std::abs(d)) + noise)
            << Describe(c) << " d " << name << " / d features[" << i << "]";
      }
    }
  }
}

// The narrower types against the double kernel on the same (widened) values, the score's
// gradient routed to the class each type's own forward chose.
TYPED_TEST(YoloDecodeKernelTest, BackwardMatchesDouble) {
  using T = TypeParam;
  std::mt19937_64 rng(22);
  for (const Case& c : Cases()) {
    YoloDecodeParams p;
    OPFORGE_ASSERT_OK(ParamsOf(c, &p));
    const int64_t n = NumBoxes(c), nc = c.classes, per_anchor = 5 + nc;
    const auto f = test::UniformVector<T>(rng, NumFeatures(c), -3.0, 3.0);
    const auto anchors = RandomAnchors<T>(rng, c.anchors);
    const auto wb = test::UniformVector<T>(rng, n * 4, -1.0, 1.0);
    const auto ws = test::UniformVector<T>(rng, n, -1.0, 1.0);
    const auto wc = test::UniformVector<T>(rng, n * nc, -1.0, 1.0);
    std::vector<T> grad(f.size());
    YoloDecodeBackward<T>(p, wb.data(), ws.data(), wc.data(), f.data(), anchors.data(), grad.data(),
                          SerialParallel());

    const Outputs<T> o = RunForward(p, f, anchors);
    const std::vector<double> fd = Widen(f);
    std::vector<double> routed = Widen(wc);
    for (int64_t box = 0; box < n; ++box) {
      routed[static_cast<size_t>(box * nc + o.indices[static_cast<size_t>(box)])] +=
          Wide(ws[static_cast<size_t>(box)]);
    }
    std::vector<double> want(f.size());
    YoloDecodeBackward<double>(p, Widen(wb).data(), nullptr, routed.data(), fd.data(),
                               Widen(anchors).data(), want.data(), SerialParallel());
    // Every channel is a product of exact inputs except the objectness's, a sum over classes:
    // its tolerance is relative to the sum of the terms' magnitudes.
    std::vector<double> mag(want.size());
    for (int64_t box = 0; box < n; ++box) {
      const double* x = &fd[static_cast<size_t>(box * per_anchor)];
      double m = 0;
      for (int64_t k = 0; k < nc; ++k)
        m += std::abs(routed[static_cast<size_t>(box * nc + k)]) * Sig(x[5 + k]);
      for (int64_t k = 0; k < per_anchor; ++k) {
        const size_t i = static_cast<size_t>(box * per_anchor + k);
        mag[i] = k == 4 ? m * Sig(x[4]) * (1 - Sig(x[4])) : std::abs(want[i]);
      }
    }
    EXPECT_TRUE(Near(grad, want, 2 * Rtol<T>(), Atol<T>(), mag)) << Describe(c);
  }
}

// Null gradients are zeros.
TYPED_TEST(YoloDecodeKernelTest, NullGradientsAreZeros) {
  using T = TypeParam;
  std::mt19937_64 rng(23);
  const Case c = {1, 2, 3, 2, 3, 64, 96, "xyxy", false, 1.05f, false};
  YoloDecodeParams p;
  OPFORGE_ASSERT_OK(ParamsOf(c, &p));
  const int64_t n = NumBoxes(c);
  const auto f = test::UniformVector<T>(rng, NumFeatures(c), -3.0, 3.0);
  const auto anchors = RandomAnchors<T>(rng, c.anchors);
  const std::vector<T> zb(static_cast<size_t>(n * 4), T(0)), zs(static_cast<size_t>(n), T(0)),
      zc(static_cast<size_t>(n * c.classes), T(0));
  std::vector<T> with_zeros(f.size()), with_nulls(f.size());
  YoloDecodeBackward<T>(p, zb.data(), zs.data(), zc.data(), f.data(), anchors.data(),
                        with_zeros.data(), SerialParallel());
  YoloDecodeBackward<T>(p, nullptr, nullptr, nullptr, f.data(), anchors.data(), with_nulls.data(),
                        SerialParallel());
  EXPECT_TRUE(SameBits(with_nulls, with_zeros));
  for (const T& v : with_nulls) EXPECT_EQ(Wide(v), 0.0);
}

// --- threads ----------------------------------------------------------------------------------

TYPED_TEST(YoloDecodeKernelTest, SameBitsForEveryThreadCount) {
  using T = TypeParam;
  std::mt19937_64 rng(31);
  const Case c = {2, 13, 11, 3, 20, 416, 352, "xyxy", true, 1.05f, false};
  YoloDecodeParams p;
  OPFORGE_ASSERT_OK(ParamsOf(c, &p));
  const int64_t n = NumBoxes(c);
  const auto f = test::RandomVector<T>(rng, NumFeatures(c), test::SpecialValues<T>());
  const auto anchors = RandomAnchors<T>(rng, c.anchors);
  const auto wb = test::UniformVector<T>(rng, n * 4, -1.0, 1.0);
  const auto ws = test::UniformVector<T>(rng, n, -1.0, 1.0);
  const auto wc = test::UniformVector<T>(rng, n * c.classes, -1.0, 1.0);
  const Outputs<T> serial = RunForward(p, f, anchors, SerialParallel());
  std::vector<T> grad_serial(f.size());
  YoloDecodeBackward<T>(p, wb.data(), ws.data(), wc.data(), f.data(), anchors.data(),
                        grad_serial.data(), SerialParallel());
  for (int threads : {2, 3, 7}) {
    const ThreadParallel parallel(threads);
    const Outputs<T> o = RunForward(p, f, anchors, parallel);
    EXPECT_TRUE(SameBits(o.boxes, serial.boxes)) << threads;
    EXPECT_TRUE(SameBits(o.scores, serial.scores)) << threads;
    EXPECT_TRUE(SameBits(o.class_scores, serial.class_scores)) << threads;
    EXPECT_EQ(o.indices, serial.indices) << threads;
    std::vector<T> grad(f.size());
    YoloDecodeBackward<T>(p, wb.data(), ws.data(), wc.data(), f.data(), anchors.data(), grad.data(),
                          parallel);
    EXPECT_TRUE(SameBits(grad, grad_serial)) << threads;
  }
}

// --- NaN bits ---------------------------------------------------------------------------------

// NaNs of every kind: quiet and signaling, with and without a payload, of both signs.
template <typename T>
std::vector<T> NanKinds() {
  using L = std::numeric_limits<T>;
  std::vector<T> v;
  for (const T nan :
       {L::quiet_NaN(), L::signaling_NaN(),
        test::FromBits<T>(static_cast<test::BitsOf<T>>(test::Bits(L::quiet_NaN()) | 5))}) {
    v.push_back(nan);
    v.push_back(test::FromBits<T>(
        static_cast<test::BitsOf<T>>(test::Bits(nan) | test::Bits(T(-0.0f)))));  // sign set
  }
  return v;
}

// Every NaN in v is quiet_NaN() bit for bit (the one NaN the kernels write), and there are NaNs.
template <typename T>
::testing::AssertionResult NansAreTheQuietNan(const std::vector<T>& v) {
  const auto want = test::Bits(std::numeric_limits<T>::quiet_NaN());
  int64_t nans = 0, wrong = 0;
  auto failure = ::testing::AssertionFailure();
  for (size_t i = 0; i < v.size(); ++i) {
    if (!std::isnan(Wide(v[i]))) continue;
    ++nans;
    if (test::Bits(v[i]) != want && wrong++ < 4) {
      std::ostringstream line;  // one string: AssertionResult does not keep std::hex
      line << "\n  [" << i << "] is NaN 0x" << std::hex << uint64_t{test::Bits(v[i])} << ", want 0x"
           << uint64_t{want};
      failure << line.str();
    }
  }
  if (nans == 0) return ::testing::AssertionFailure() << "no NaN among " << v.size();
  if (wrong == 0) return ::testing::AssertionSuccess();
  return failure << "\n  " << wrong << " of " << nans << " NaNs differ";
}

// Every NaN output, of every entry point, is quiet_NaN(), whatever NaN (either sign, quiet or
// signaling, any payload) or arithmetic (0 * inf) made it: no bit of it depends on the path an
// element took (the vector body or a scalar tail, by the output's address or the thread
// partition) or on which NaN operand a multiply passed on. Before, sigmoid(+NaN) was -NaN and a
// NaN objectness times a NaN class of the other sign gave either sign by the path.
TYPED_TEST(YoloDecodeKernelTest, NanOutputsAreTheQuietNan) {
  using T = TypeParam;
  std::mt19937_64 rng(47);
  const Case c = {2, 3, 4, 3, 20, 96, 128, "xyxy", false, 1.05f, false};
  YoloDecodeParams p;
  OPFORGE_ASSERT_OK(ParamsOf(c, &p));
  const int64_t n = NumBoxes(c);
  const std::vector<T> nans = NanKinds<T>();
  auto f = test::RandomVector<T>(rng, NumFeatures(c));
  std::uniform_int_distribution<size_t> kind(0, nans.size() - 1);
  std::uniform_int_distribution<int> percent(0, 99);
  for (T& x : f) {
    if (percent(rng) < 15) x = nans[kind(rng)];
  }
  // Box 0: tw = -inf with an infinite anchor width, bw = 0 * inf (x86 makes that NaN -NaN).
  auto anchors = RandomAnchors<T>(rng, c.anchors);
  anchors[0] = std::numeric_limits<T>::infinity();
  f[2] = -std::numeric_limits<T>::infinity();
  auto wb = test::UniformVector<T>(rng, n * 4, -1.0, 1.0);
  auto ws = test::UniformVector<T>(rng, n, -1.0, 1.0);
  auto wc = test::UniformVector<T>(rng, n * c.classes, -1.0, 1.0);
  for (auto* w : {&wb, &ws, &wc}) {
    for (T& x : *w) {
      if (percent(rng) < 5) x = nans[kind(rng)];
    }
  }
  const Outputs<T> o = RunForward(p, f, anchors);
  EXPECT_TRUE(NansAreTheQuietNan(o.boxes));
  EXPECT_TRUE(NansAreTheQuietNan(o.scores));
  EXPECT_TRUE(NansAreTheQuietNan(o.class_scores));
  std::vector<T> grad(f.size());
  YoloDecodeBackward<T>(p, wb.data(), ws.data(), wc.data(), f.data(), anchors.data(), grad.data(),
                        SerialParallel());
  EXPECT_TRUE(NansAreTheQuietNan(grad));
  // YoloDecodeSelected (YoloPostprocess's decode): Forward's bits, NaNs included.
  const int64_t per_image = p.boxes_per_image();
  std::vector<int64_t> every(static_cast<size_t>(per_image));
  for (int64_t i = 0; i < per_image; ++i) every[static_cast<size_t>(i)] = i;
  std::vector<T> boxes(static_cast<size_t>(per_image * 4)),
      class_scores(static_cast<size_t>(per_image * c.classes));
  YoloDecodeSelected<T>(p, f.data(), anchors.data(), 1, every.data(), per_image, boxes.data(),
                        class_scores.data());
  EXPECT_TRUE(SameBits(boxes, std::vector<T>(o.boxes.begin() + per_image * 4, o.boxes.end())));
  EXPECT_TRUE(SameBits(class_scores, std::vector<T>(o.class_scores.begin() + per_image * c.classes,
                                                    o.class_scores.end())));
}

// The outputs at every address modulo 64 bytes, serial and on three threads, have the same bits.
// An Eigen assignment splits its loop by the output's address into a scalar prologue, an aligned
// vector body and a scalar tail, and -O3 builds ordered a multiply's operands differently in them
// (the class gradient was one NaN or the other). Each box has a NaN objectness and NaN class
// logits of the other sign.
TYPED_TEST(YoloDecodeKernelTest, SameBitsAtEveryOutputAddress) {
  using T = TypeParam;
  std::mt19937_64 rng(53);
  const Case c = {1, 3, 4, 3, 20, 96, 128, "center_xywh", true, 1.0f, false};
  YoloDecodeParams p;
  OPFORGE_ASSERT_OK(ParamsOf(c, &p));
  const int64_t n = NumBoxes(c), per_anchor = 5 + c.classes;
  const std::vector<T> nans = NanKinds<T>();  // (positive, negative) pairs
  auto f = test::RandomVector<T>(rng, NumFeatures(c));
  for (int64_t box = 0; box < n; ++box) {
    T* x = f.data() + box * per_anchor;
    const size_t pair = static_cast<size_t>(2 * (box % 3));
    const size_t sign = static_cast<size_t>((box / 3) % 2);
    x[4] = nans[pair + sign];
    for (int64_t k = 5 + box % 2; k < per_anchor; k += 2) x[k] = nans[pair + 1 - sign];
    x[box % 4] = nans[pair + 1 - sign];  // and one of tx, ty, tw, th
  }
  const auto anchors = RandomAnchors<T>(rng, c.anchors);
  const auto wb = test::UniformVector<T>(rng, n * 4, -1.0, 1.0);
  const auto ws = test::UniformVector<T>(rng, n, -1.0, 1.0);
  const auto wc = test::UniformVector<T>(rng, n * c.classes, -1.0, 1.0);
  const int64_t lanes = 64 / static_cast<int64_t>(sizeof(T));
  // Each output at `offset` elements into a buffer of its own, aligned to 64 bytes.
  auto run = [&](int64_t offset, const Parallel& parallel) {
    std::vector<std::vector<T>> out;
    auto at = [&](std::vector<T>& buffer, int64_t size) {
      buffer.assign(static_cast<size_t>(size + 2 * lanes), T(0));
      const auto address = reinterpret_cast<uintptr_t>(buffer.data());
      const int64_t skip =
          static_cast<int64_t>((64 - address % 64) % 64) / static_cast<int64_t>(sizeof(T));
      return buffer.data() + skip + offset;
    };
    std::vector<T> b0, b1, b2, b3;
    std::vector<int32_t> indices(static_cast<size_t>(n));
    T* boxes = at(b0, n * 4);
    T* scores = at(b1, n);
    T* class_scores = at(b2, n * c.classes);
    T* grad = at(b3, NumFeatures(c));
    YoloDecodeForward<T>(p, f.data(), anchors.data(), boxes, scores, indices.data(), class_scores,
                         parallel);
    YoloDecodeBackward<T>(p, wb.data(), ws.data(), wc.data(), f.data(), anchors.data(), grad,
                          parallel);
    out.emplace_back(boxes, boxes + n * 4);
    out.emplace_back(scores, scores + n);
    out.emplace_back(class_scores, class_scores + n * c.classes);
    out.emplace_back(grad, grad + NumFeatures(c));
    return out;
  };
  const SerialParallel serial;
  const ThreadParallel three(3);
  const auto want = run(0, serial);
  for (int64_t offset = 0; offset < lanes; ++offset) {
    const Parallel* const parallels[] = {&serial, &three};
    for (const Parallel* parallel : parallels) {
      const auto got = run(offset, *parallel);
      for (size_t k = 0; k < got.size(); ++k) {
        EXPECT_TRUE(SameBits(got[k], want[k]))
            << "output " << k << " (boxes, scores, class_scores, grad) at offset " << offset
            << (parallel == &three ? ", 3 threads" : ", serial");
      }
    }
  }
}

}  // namespace
}  // namespace opforge

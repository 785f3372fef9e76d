// Tests of the YoloPostprocess core against the unfused path it replaces, composed here from the
// cores it stands for: YoloDecodeForward of every scale (normalised xyxy), the scales
// concatenated, CombinedNms with q = 1. Bit for bit, on random head maps whose objectness
// spreads over the thresholds (so boxes just below and above the prefilter's bound occur), for
// every kind of score threshold (high, low, zero, negative, tiny ones that half rounds into its
// subnormals), soft-NMS, padding per class, no clipping, NaN and infinite features; half,
// bfloat16 and float; one and two threads; the bound itself; validation messages.
#include "ops/yolo_postprocess/yolo_postprocess.h"

#include <gtest/gtest.h>

#include <Eigen/Core>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/parallel.h"
#include "common/status.h"
#include "common/test_util.h"
#include "ops/yolo_postprocess/yolo_postprocess_op.h"

namespace opforge {
namespace {

using test::Contains;
using test::SameBits;
using test::TypeNames;

// CPU only: the op struct has no GPU path for a skeleton to call.
static_assert(!internal::HasGpu<yolo_postprocess_op::YoloPostprocessOp>::value);

struct Scale {
  int64_t h, w, a;
};

struct Outputs {
  std::vector<float> boxes, scores, classes;
  std::vector<int32_t> valid;
};

template <typename T>
struct Problem {
  YoloPostprocessParams p;
  std::vector<std::vector<T>> features, anchors;

  std::vector<const T*> FeaturePtrs() const {
    std::vector<const T*> v;
    for (const auto& f : features) v.push_back(f.data());
    return v;
  }
  std::vector<const T*> AnchorPtrs() const {
    std::vector<const T*> v;
    for (const auto& a : anchors) v.push_back(a.data());
    return v;
  }
};

// Random maps: t* ~ N(0, 1.5), objectness ~ N(obj_mean, 3), classes ~ N(-1, 2.5); a few
// specials (NaN, +-inf) where `specials`.
template <typename T>
Problem<T> MakeProblem(int64_t batch, const std::vector<Scale>& scales, int64_t classes,
                       const CombinedNmsParams& nms, unsigned seed, float obj_mean = -2.0f,
                       bool specials = false) {
  Problem<T> pr;
  pr.p.num_classes = classes;
  pr.p.input_size = {320, 256};
  pr.p.nms = nms;
  std::mt19937 rng(seed);
  std::normal_distribution<float> t(0.0f, 1.5f), obj(obj_mean, 3.0f), cls(-1.0f, 2.5f);
  std::uniform_real_distribution<float> anchor(8.0f, 120.0f), u(0.0f, 1.0f);
  std::vector<std::vector<int64_t>> fshapes, ashapes;
  for (const Scale& s : scales) {
    const int64_t per = 5 + classes;
    std::vector<T> f(static_cast<size_t>(batch * s.h * s.w * s.a * per));
    for (size_t i = 0; i < f.size(); ++i) {
      const int64_t k = static_cast<int64_t>(i) % per;
      float v = k < 4 ? t(rng) : k == 4 ? obj(rng) : cls(rng);
      if (specials && u(rng) < 0.01f) {
        const float kSpecial[] = {std::numeric_limits<float>::quiet_NaN(),
                                  std::numeric_limits<float>::infinity(),
                                  -std::numeric_limits<float>::infinity()};
        v = kSpecial[rng() % 3];
      }
      f[i] = T(v);
    }
    std::vector<T> a(static_cast<size_t>(s.a * 2));
    for (auto& v : a) v = T(anchor(rng));
    pr.features.push_back(std::move(f));
    pr.anchors.push_back(std::move(a));
    fshapes.push_back({batch, s.h, s.w, s.a * per});
    ashapes.push_back({s.a, 2});
  }
  const Status st = ValidateYoloPostprocess(fshapes, ashapes, {{}, {}, {}, {}, {}}, &pr.p);
  EXPECT_TRUE(st.ok()) << st.message();
  pr.p.nms.max_output_size_per_class = nms.max_output_size_per_class;
  pr.p.nms.max_total_size = nms.max_total_size;
  pr.p.nms.iou_threshold = nms.iou_threshold;
  pr.p.nms.score_threshold = nms.score_threshold;
  pr.p.nms.soft_nms_sigma = nms.soft_nms_sigma;
  return pr;
}

template <typename T>
std::vector<float> AsFloats(const std::vector<T>& v) {
  std::vector<float> out;
  for (const T& x : v) out.push_back(static_cast<float>(x));
  return out;
}

// The unfused path: decode every scale, concatenate, CombinedNms.
template <typename T>
Outputs Unfused(const Problem<T>& pr) {
  const YoloPostprocessParams& p = pr.p;
  const int64_t b = p.batch, c = p.num_classes, n = p.boxes_per_image();
  std::vector<T> boxes(static_cast<size_t>(b * n * 4)), scores(static_cast<size_t>(b * n * c));
  int64_t offset = 0;
  const SerialParallel serial;
  for (size_t s = 0; s < p.scales.size(); ++s) {
    const YoloDecodeParams& d = p.scales[s];
    const int64_t ns = d.boxes_per_image();
    std::vector<T> sb(static_cast<size_t>(b * ns * 4)), ss(static_cast<size_t>(b * ns * c));
    YoloDecodeForward<T>(d, pr.features[s].data(), pr.anchors[s].data(), sb.data(), nullptr,
                         nullptr, ss.data(), serial);
    for (int64_t i = 0; i < b; ++i) {
      std::copy(sb.begin() + i * ns * 4, sb.begin() + (i + 1) * ns * 4,
                boxes.begin() + (i * n + offset) * 4);
      std::copy(ss.begin() + i * ns * c, ss.begin() + (i + 1) * ns * c,
                scores.begin() + (i * n + offset) * c);
    }
    offset += ns;
  }
  CombinedNmsParams q = p.nms;
  q.batch = b;
  q.num_boxes = n;
  q.q = 1;
  q.num_classes = c;
  const int64_t d = q.max_detections();
  std::vector<T> ob(static_cast<size_t>(b * d * 4)), os(static_cast<size_t>(b * d));
  Outputs out;
  out.classes.resize(static_cast<size_t>(b * d));
  out.valid.resize(static_cast<size_t>(b));
  CombinedNms<T>(q, boxes.data(), scores.data(), ob.data(), os.data(), out.classes.data(),
                 out.valid.data(), serial);
  out.boxes = AsFloats(ob);
  out.scores = AsFloats(os);
  return out;
}

template <typename T>
Outputs Fused(const Problem<T>& pr, const Parallel& parallel) {
  const YoloPostprocessParams& p = pr.p;
  const int64_t b = p.batch, d = p.nms.max_detections();
  std::vector<T> ob(static_cast<size_t>(b * d * 4)), os(static_cast<size_t>(b * d));
  Outputs out;
  out.classes.resize(static_cast<size_t>(b * d));
  out.valid.resize(static_cast<size_t>(b));
  YoloPostprocess<T>(p, pr.FeaturePtrs(), pr.AnchorPtrs(), ob.data(), os.data(), out.classes.data(),
                     out.valid.data(), parallel);
  out.boxes = AsFloats(ob);
  out.scores = AsFloats(os);
  return out;
}

::testing::AssertionResult Same(const Outputs& got, const Outputs& want) {
  if (got.valid != want.valid) return ::testing::AssertionFailure() << "valid_detections differ";
  auto r = SameBits(got.boxes, want.boxes);
  if (!r) return r << " (boxes)";
  r = SameBits(got.scores, want.scores);
  if (!r) return r << " (scores)";
  r = SameBits(got.classes, want.classes);
  if (!r) return r << " (classes)";
  return ::testing::AssertionSuccess();
}

CombinedNmsParams Nms(float score, int64_t per_class = 20, int64_t total = 50, float iou = 0.5f,
                      float sigma = 0.0f, bool pad = false, bool clip = true) {
  CombinedNmsParams p;
  p.score_threshold = score;
  p.max_output_size_per_class = per_class;
  p.max_total_size = total;
  p.iou_threshold = iou;
  p.soft_nms_sigma = sigma;
  p.pad_per_class = pad;
  p.clip_boxes = clip;
  return p;
}

template <typename T>
class YoloPostprocessTest : public ::testing::Test {};
using Types = ::testing::Types<float, Eigen::half, Eigen::bfloat16>;
TYPED_TEST_SUITE(YoloPostprocessTest, Types, TypeNames);

TYPED_TEST(YoloPostprocessTest, EqualsDecodeThenNmsBitForBit) {
  using T = TypeParam;
  const std::vector<Scale> yolo = {{3, 4, 3}, {6, 8, 3}, {12, 16, 3}};
  const float thresholds[] = {0.5f,  0.9f, 0.3f,  0.05f, 0.01f,  1e-3f, 1e-6f,
                              3e-8f, 0.0f, -0.0f, -1.0f, 0.999f, 1.0f,  1.01f};
  unsigned seed = 1;
  int with_detections = 0;
  for (float score : thresholds) {
    for (float obj_mean : {-4.0f, 0.0f}) {
      const auto pr = MakeProblem<T>(2, yolo, 7, Nms(score), seed++, obj_mean);
      const Outputs want = Unfused(pr);
      with_detections += want.valid[0] > 0;
      EXPECT_TRUE(Same(Fused(pr, SerialParallel()), want))
          << "score_threshold " << score << " obj_mean " << obj_mean;
    }
  }
  EXPECT_GE(with_detections, 10);
}

TYPED_TEST(YoloPostprocessTest, NmsVariants) {
  using T = TypeParam;
  const std::vector<Scale> tiny = {{4, 4, 3}, {8, 8, 3}};
  const CombinedNmsParams variants[] = {
      Nms(0.2f, 5, 12),                             // per-class limit binds
      Nms(0.2f, 30, 7),                             // total binds
      Nms(0.1f, 4, 100, 0.5f, 0.0f, /*pad=*/true),  // padded per class
      Nms(0.1f, 10, 20, 0.5f, 0.0f, false, false),  // no clipping
      Nms(0.1f, 10, 20, 0.0f),                      // iou 0
      Nms(0.1f, 10, 20, 1.0f),                      // iou 1
      Nms(0.15f, 8, 20, 0.5f, 0.5f),                // soft-NMS
      Nms(-0.5f, 8, 30, 0.5f, 0.3f),                // soft-NMS, every box a candidate
  };
  unsigned seed = 100;
  for (const CombinedNmsParams& v : variants) {
    const auto pr = MakeProblem<T>(3, tiny, 5, v, seed++, -1.0f);
    EXPECT_TRUE(Same(Fused(pr, SerialParallel()), Unfused(pr)))
        << "per_class " << v.max_output_size_per_class << " total " << v.max_total_size << " sigma "
        << v.soft_nms_sigma << " pad " << v.pad_per_class;
  }
}

TYPED_TEST(YoloPostprocessTest, SpecialFeatures) {
  using T = TypeParam;
  const std::vector<Scale> scales = {{5, 5, 3}, {10, 10, 2}};
  unsigned seed = 200;
  for (float score : {0.5f, 0.01f, 0.0f, -1.0f}) {
    const auto pr = MakeProblem<T>(2, scales, 6, Nms(score), seed++, 0.0f, /*specials=*/true);
    EXPECT_TRUE(Same(Fused(pr, SerialParallel()), Unfused(pr))) << "score_threshold " << score;
  }
}

TEST(YoloPostprocess, SameBitsForEveryThreadCountAndBatch) {
  const std::vector<Scale> yolo = {{5, 5, 3}, {10, 10, 3}, {20, 20, 3}};
  for (int64_t batch : {1, 2, 5}) {
    const auto pr = MakeProblem<float>(batch, yolo, 20, Nms(0.3f, 30, 60), 300 + batch, -2.0f);
    const Outputs want = Unfused(pr);
    for (int threads : {1, 2, 3}) {
      EXPECT_TRUE(Same(Fused(pr, ThreadParallel(threads)), want))
          << "batch " << batch << " threads " << threads;
    }
  }
}

TEST(YoloPostprocess, NoBoxAboveTheThresholdAndEmptyBatch) {
  const std::vector<Scale> s = {{4, 4, 3}};
  auto pr = MakeProblem<float>(2, s, 3, Nms(0.5f), 400, -30.0f);
  for (auto& f : pr.features) {
    for (size_t i = 4; i < f.size(); i += 8) f[i] = -20.0f;  // every objectness low
  }
  const Outputs got = Fused(pr, SerialParallel());
  EXPECT_EQ(got.valid, (std::vector<int32_t>{0, 0}));
  EXPECT_TRUE(Same(got, Unfused(pr)));
  for (float v : got.boxes) EXPECT_EQ(v, 0.0f);

  auto empty = MakeProblem<float>(0, s, 3, Nms(0.5f), 401);
  const Outputs none = Fused(empty, SerialParallel());
  EXPECT_TRUE(none.valid.empty());
}

TEST(YoloPostprocess, ObjectnessBound) {
  // Below zero (and zero itself) every box can be a candidate.
  EXPECT_TRUE(std::isinf(YoloObjectnessBound(0.0f)) && YoloObjectnessBound(0.0f) < 0);
  EXPECT_TRUE(std::isinf(YoloObjectnessBound(-0.5f)) && YoloObjectnessBound(-0.5f) < 0);
  EXPECT_TRUE(std::isinf(YoloObjectnessBound(-std::numeric_limits<float>::infinity())));
  // Within half's subnormal rounding: every box.
  EXPECT_TRUE(std::isinf(YoloObjectnessBound(5e-8f)));
  // A threshold above 1 + 1/64 can be reached by no score: no box.
  EXPECT_TRUE(std::isinf(YoloObjectnessBound(1.1f)) && YoloObjectnessBound(1.1f) > 0);
  // Otherwise below logit(t), by the margin.
  for (float t : {0.01f, 0.3f, 0.5f, 0.9f, 0.999f}) {
    const double logit = std::log(t / (1.0 - t));
    const double b = YoloObjectnessBound(t);
    EXPECT_LT(b, logit) << t;
    if (t <= 0.9f) {
      EXPECT_GT(b, logit - 0.2) << t;  // the margin widens toward t = 1
    }
  }
  // The bound keeps a box whose objectness gives a score just above the threshold: obj at
  // logit(t) + tiny, every class logit huge (sigmoid 1).
  const auto pr = [] {
    auto p = MakeProblem<float>(1, {{1, 1, 1}}, 2, Nms(0.5f), 500);
    p.features[0] = {0.0f, 0.0f, 0.0f, 0.0f, 1e-6f, 50.0f, 50.0f};
    return p;
  }();
  const Outputs got = Fused(pr, SerialParallel());
  EXPECT_EQ(got.valid[0], 2);  // the box, once per class
  EXPECT_TRUE(Same(got, Unfused(pr)));
}

TEST(YoloPostprocess, Validation) {
  YoloPostprocessParams p;
  p.num_classes = 2;
  p.input_size = {64, 64};
  const std::vector<std::vector<int64_t>> scalars = {{}, {}, {}, {}, {}};
  Status s = ValidateYoloPostprocess({}, {}, scalars, &p);
  EXPECT_TRUE(Contains(s.message(), "YoloPostprocess: features must be at least one head map"));
  s = ValidateYoloPostprocess({{1, 2, 2, 21}}, {{3, 2}, {3, 2}}, scalars, &p);
  EXPECT_TRUE(Contains(s.message(), "anchors must be one [A, 2] tensor per head map (1), got 2"));
  s = ValidateYoloPostprocess({{1, 2, 2, 21}, {1, 4, 4, 20}}, {{3, 2}, {3, 2}}, scalars, &p);
  EXPECT_TRUE(Contains(s.message(), "YoloPostprocess: features[1] must be"));
  EXPECT_TRUE(Contains(s.message(), "[1, 4, 4, 20]"));
  s = ValidateYoloPostprocess({{1, 2, 2, 21}, {2, 4, 4, 21}}, {{3, 2}, {3, 2}}, scalars, &p);
  EXPECT_TRUE(Contains(s.message(), "features[1] must be a map of the batch of features[0], 1"));
  s = ValidateYoloPostprocess({{1, 2, 2, 21}}, {{3, 3}}, scalars, &p);
  EXPECT_TRUE(Contains(s.message(), "YoloPostprocess: anchors[0] must be [num_anchors, 2]"));
  s = ValidateYoloPostprocess({{1, 2, 2, 21}}, {{3, 2}}, {{}, {2}, {}, {}, {}}, &p);
  EXPECT_TRUE(
      Contains(s.message(), "YoloPostprocess: max_detections must be a scalar (0-D), got [2]"));
  OPFORGE_ASSERT_OK(
      ValidateYoloPostprocess({{1, 2, 2, 21}, {1, 4, 4, 3, 7}}, {{3, 2}, {3, 2}}, scalars, &p));
  EXPECT_EQ(p.boxes_per_image(), 12 + 48);
  p.nms.max_output_size_per_class = 0;
  p.nms.max_total_size = 4;
  s = ValidateYoloPostprocessValues(p);
  EXPECT_TRUE(Contains(s.message(), "YoloPostprocess: max_detections_per_class must be positive"));
}

}  // namespace
}  // namespace opforge

// Tests of the CombinedNonMaxSuppression core: the kernel against a naive reference written here
// from the header (per image and class: the candidates sorted by (score desc, index asc), hard
// NMS by TensorFlow's float32 IoU, or soft-NMS as NonMaxSuppressionV5's priority-queue loop;
// the classes merged by a stable sort on score), bit for bit, on random cases with q = 1 and
// q = C, clipping, padding per class, every kind of threshold, corners in either order,
// zero-area boxes, boxes past [0, 1], tied scores, NaN scores and NaN boxes; half and bfloat16
// against the reference on the float values; identical bits for every thread count; empty
// inputs and outputs, called with null pointers as the binding does; validation messages; and
// max_detections().
#include "ops/combined_non_max_suppression/combined_non_max_suppression.h"

#include <gtest/gtest.h>

#include <Eigen/Core>
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <queue>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/parallel.h"
#include "common/status.h"
#include "common/test_util.h"
#include "ops/combined_non_max_suppression/combined_non_max_suppression_op.h"

namespace opforge {
namespace {

using test::Contains;
using test::NamesWord;
using test::SameBits;
using test::TypeNames;

// CPU only: the op struct has no GPU path for a skeleton to call.
static_assert(!internal::HasGpu<combined_non_max_suppression_op::CombinedNmsOp>::value);

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

struct Case {
  int64_t batch, n, q, classes;
  CombinedNmsParams p;
};

CombinedNmsParams WithShape(CombinedNmsParams p, const Case& c) {
  p.batch = c.batch;
  p.num_boxes = c.n;
  p.q = c.q;
  p.num_classes = c.classes;
  return p;
}

std::string Describe(const Case& c) {
  std::ostringstream s;
  s << "B=" << c.batch << " N=" << c.n << " q=" << c.q << " C=" << c.classes
    << " per_class=" << c.p.max_output_size_per_class << " total=" << c.p.max_total_size
    << " iou=" << c.p.iou_threshold << " score=" << c.p.score_threshold
    << " sigma=" << c.p.soft_nms_sigma << " pad=" << c.p.pad_per_class
    << " clip=" << c.p.clip_boxes;
  return s.str();
}

template <typename T>
struct Outputs {
  std::vector<T> boxes, scores;
  std::vector<float> classes;
  std::vector<int32_t> valid;
};

// --- the reference: the header's description, written out -----------------------------------

// TensorFlow's IoU of candidate i and kept box j: corners sorted by std::min/std::max, 0 when an
// area is <= 0, the intersection clipped at 0, all in float.
float RefIou(const float* i, const float* j) {
  const float ymin_i = std::min(i[0], i[2]), xmin_i = std::min(i[1], i[3]);
  const float ymax_i = std::max(i[0], i[2]), xmax_i = std::max(i[1], i[3]);
  const float ymin_j = std::min(j[0], j[2]), xmin_j = std::min(j[1], j[3]);
  const float ymax_j = std::max(j[0], j[2]), xmax_j = std::max(j[1], j[3]);
  const float area_i = (ymax_i - ymin_i) * (xmax_i - xmin_i);
  const float area_j = (ymax_j - ymin_j) * (xmax_j - xmin_j);
  if (area_i <= 0 || area_j <= 0) return 0.0f;
  const float iymin = std::max(ymin_i, ymin_j), ixmin = std::max(xmin_i, xmin_j);
  const float iymax = std::min(ymax_i, ymax_j), ixmax = std::min(xmax_i, xmax_j);
  const float inter = std::max(iymax - iymin, 0.0f) * std::max(ixmax - ixmin, 0.0f);
  return inter / (area_i + area_j - inter);
}

struct RefKept {
  float score;
  int64_t cls, index;
};

// boxes and scores as float; outputs in float (rounded to T by the caller).
Outputs<float> RefNms(const Case& c, const std::vector<float>& boxes,
                      const std::vector<float>& scores) {
  const CombinedNmsParams p = WithShape(c.p, c);
  const int64_t d = p.max_detections();
  const int64_t limit = std::min(p.max_output_size_per_class, c.n);
  Outputs<float> out;
  out.boxes.assign(static_cast<size_t>(c.batch * d * 4), 0.0f);
  out.scores.assign(static_cast<size_t>(c.batch * d), 0.0f);
  out.classes.assign(static_cast<size_t>(c.batch * d), 0.0f);
  out.valid.assign(static_cast<size_t>(c.batch), 0);
  for (int64_t image = 0; image < c.batch; ++image) {
    std::vector<RefKept> all;  // class by class, each in kept order
    for (int64_t cls = 0; cls < c.classes; ++cls) {
      auto box = [&](int64_t i) {
        return &boxes[static_cast<size_t>(((image * c.n + i) * c.q + (c.q > 1 ? cls : 0)) * 4)];
      };
      std::vector<RefKept> cand;
      for (int64_t i = 0; i < c.n; ++i) {
        const float s = scores[static_cast<size_t>((image * c.n + i) * c.classes + cls)];
        if (s > p.score_threshold) cand.push_back({s, cls, i});
      }
      std::sort(cand.begin(), cand.end(), [](const RefKept& a, const RefKept& b) {
        return a.score > b.score || (a.score == b.score && a.index < b.index);
      });
      std::vector<RefKept> kept;
      if (p.soft_nms_sigma == 0.0f) {
        for (const RefKept& k : cand) {
          if (static_cast<int64_t>(kept.size()) >= limit) break;
          bool keep = true;
          for (const RefKept& j : kept) {
            if (RefIou(box(k.index), box(j.index)) > p.iou_threshold) keep = false;
          }
          if (keep) kept.push_back(k);
        }
      } else {
        // NonMaxSuppressionV5's loop.
        struct Cand {
          float score;
          int64_t index;
          int64_t suppress_begin;
        };
        auto less = [](const Cand& a, const Cand& b) {
          return (a.score == b.score && a.index > b.index) || a.score < b.score;
        };
        std::priority_queue<Cand, std::vector<Cand>, decltype(less)> queue(less);
        for (const RefKept& k : cand) queue.push({k.score, k.index, 0});
        const float scale = -0.5f / p.soft_nms_sigma;
        while (static_cast<int64_t>(kept.size()) < limit && !queue.empty()) {
          Cand next = queue.top();
          queue.pop();
          const float original = next.score;
          for (int64_t j = static_cast<int64_t>(kept.size()) - 1; j >= next.suppress_begin; --j) {
            const float sim = RefIou(box(next.index), box(kept[static_cast<size_t>(j)].index));
            next.score *= std::exp(scale * sim * sim);
            if (next.score <= p.score_threshold) break;
          }
          next.suppress_begin = static_cast<int64_t>(kept.size());
          if (next.score == original) {
            kept.push_back({next.score, cls, next.index});
          } else if (next.score > p.score_threshold) {
            queue.push(next);
          }
        }
      }
      all.insert(all.end(), kept.begin(), kept.end());
    }
    // Decreasing score; ties: the lower class, then the earlier kept box (stable).
    std::stable_sort(all.begin(), all.end(),
                     [](const RefKept& a, const RefKept& b) { return a.score > b.score; });
    const int64_t count = std::min<int64_t>(d, static_cast<int64_t>(all.size()));
    for (int64_t r = 0; r < count; ++r) {
      const RefKept& k = all[static_cast<size_t>(r)];
      const float* b =
          &boxes[static_cast<size_t>(((image * c.n + k.index) * c.q + (c.q > 1 ? k.cls : 0)) * 4)];
      for (int j = 0; j < 4; ++j) {
        out.boxes[static_cast<size_t>((image * d + r) * 4 + j)] =
            p.clip_boxes ? std::max(std::min(b[j], 1.0f), 0.0f) : b[j];
      }
      out.scores[static_cast<size_t>(image * d + r)] = k.score;
      out.classes[static_cast<size_t>(image * d + r)] = static_cast<float>(k.cls);
    }
    out.valid[static_cast<size_t>(image)] = static_cast<int32_t>(count);
  }
  return out;
}

template <typename T>
std::vector<float> ToFloat(const std::vector<T>& v) {
  std::vector<float> f(v.size());
  for (size_t i = 0; i < v.size(); ++i) f[i] = static_cast<float>(v[i]);
  return f;
}

template <typename T>
std::vector<T> FromFloat(const std::vector<float>& v) {
  std::vector<T> t(v.size());
  for (size_t i = 0; i < v.size(); ++i) t[i] = static_cast<T>(v[i]);
  return t;
}

template <typename T>
Outputs<T> RefNmsAs(const Case& c, const std::vector<T>& boxes, const std::vector<T>& scores) {
  const Outputs<float> f = RefNms(c, ToFloat(boxes), ToFloat(scores));
  return {FromFloat<T>(f.boxes), FromFloat<T>(f.scores), f.classes, f.valid};
}

// Null for an empty buffer, as the binding passes it.
template <typename V>
auto Ptr(V& v) {
  return v.empty() ? nullptr : v.data();
}

// The kernel, its outputs filled with garbage first (so that the zero padding is checked).
template <typename T>
Outputs<T> RunNms(const Case& c, const std::vector<T>& boxes, const std::vector<T>& scores,
                  const Parallel& parallel) {
  const CombinedNmsParams p = WithShape(c.p, c);
  const int64_t d = p.max_detections();
  Outputs<T> out;
  out.boxes.assign(static_cast<size_t>(c.batch * d * 4), T(-7.0f));
  out.scores.assign(static_cast<size_t>(c.batch * d), T(-7.0f));
  out.classes.assign(static_cast<size_t>(c.batch * d), -7.0f);
  out.valid.assign(static_cast<size_t>(c.batch), -7);
  CombinedNms<T>(p, Ptr(boxes), Ptr(scores), Ptr(out.boxes), Ptr(out.scores), Ptr(out.classes),
                 Ptr(out.valid), parallel);
  return out;
}

template <typename T>
::testing::AssertionResult SameOutputs(const Outputs<T>& got, const Outputs<T>& want) {
  if (auto r = SameBits(got.valid, want.valid); !r) return r << "\n  in valid_detections";
  if (auto r = SameBits(got.classes, want.classes); !r) return r << "\n  in nmsed_classes";
  if (auto r = SameBits(got.scores, want.scores); !r) return r << "\n  in nmsed_scores";
  if (auto r = SameBits(got.boxes, want.boxes); !r) return r << "\n  in nmsed_boxes";
  return ::testing::AssertionSuccess();
}

// --- random inputs ----------------------------------------------------------------------------

// Boxes around a few centres (so that many overlap), corners in random order, some past [0, 1],
// some of zero area (one side or both), a few NaN coordinates.
template <typename T>
std::vector<T> RandomBoxes(std::mt19937_64& rng, int64_t count, bool nans) {
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::uniform_int_distribution<int> percent(0, 99);
  std::vector<float> centres;
  for (int k = 0; k < 8; ++k) centres.push_back(u(rng) * 1.2f - 0.1f);
  std::uniform_int_distribution<int> pick(0, 7);
  std::vector<T> v;
  for (int64_t i = 0; i < count; ++i) {
    float b[4];
    for (int axis = 0; axis < 2; ++axis) {
      const float centre = centres[static_cast<size_t>(pick(rng))] + 0.05f * (u(rng) - 0.5f);
      const float half = 0.02f + 0.2f * u(rng);
      float lo = centre - half, hi = centre + half;
      if (percent(rng) < 30) std::swap(lo, hi);  // y1 > y2 or x1 > x2
      b[axis] = lo;
      b[axis + 2] = hi;
    }
    if (percent(rng) < 5) b[2] = b[0];  // zero height
    if (percent(rng) < 3) {             // a point
      b[2] = b[0];
      b[3] = b[1];
    }
    if (percent(rng) < 3) b[percent(rng) % 4] *= 4.0f;  // far outside
    if (nans && percent(rng) < 3) b[percent(rng) % 4] = kNan;
    for (float x : b) v.push_back(static_cast<T>(x));
  }
  return v;
}

// Scores in [0, 1), or with `negative` in [-1, 1); with `ties` from a few values only (so that
// equal scores in a class and across classes are common); a few NaN with `nans`.
template <typename T>
std::vector<T> RandomScores(std::mt19937_64& rng, int64_t count, bool ties, bool negative,
                            bool nans) {
  std::uniform_real_distribution<float> u(negative ? -1.0f : 0.0f, 1.0f);
  std::uniform_int_distribution<int> percent(0, 99);
  std::vector<T> v;
  for (int64_t i = 0; i < count; ++i) {
    float s = u(rng);
    if (ties) s = std::round(s * 8.0f) / 8.0f + 0.0f;
    if (nans && percent(rng) < 4) s = percent(rng) < 50 ? kNan : -kNan;
    v.push_back(static_cast<T>(s));
  }
  return v;
}

std::vector<Case> RandomCases(uint64_t seed, int count) {
  std::mt19937_64 rng(seed);
  auto pick = [&](auto values) {
    return values[std::uniform_int_distribution<size_t>(0, values.size() - 1)(rng)];
  };
  std::vector<Case> cases;
  for (int i = 0; i < count; ++i) {
    Case c;
    c.batch = pick(std::vector<int64_t>{1, 2, 3});
    c.n = pick(std::vector<int64_t>{1, 2, 5, 17, 60, 150});
    c.classes = pick(std::vector<int64_t>{1, 2, 3, 7, 70});
    c.q = (i % 2) == 0 ? 1 : c.classes;
    c.p.pad_per_class = (i / 2) % 2 == 1;
    c.p.clip_boxes = (i / 4) % 2 == 1;
    c.p.max_output_size_per_class = pick(std::vector<int64_t>{1, 3, 10, 1000});
    c.p.max_total_size = pick(std::vector<int64_t>{1, 4, 25, 2000});
    c.p.iou_threshold = pick(std::vector<float>{0.0f, 0.5f, 1.0f, 0.3f});
    c.p.score_threshold = pick(std::vector<float>{-kInf, 0.0f, 0.0f, 0.25f, 2.0f});
    c.p.soft_nms_sigma = pick(std::vector<float>{0.0f, 0.0f, 0.0f, 0.1f, 0.5f, 2.0f});
    cases.push_back(c);
  }
  return cases;
}

// --- the kernel against the reference ---------------------------------------------------------

template <typename T>
class CombinedNmsKernelTest : public ::testing::Test {};
using NmsTypes = ::testing::Types<float, Eigen::half, Eigen::bfloat16>;
TYPED_TEST_SUITE(CombinedNmsKernelTest, NmsTypes, TypeNames);

TYPED_TEST(CombinedNmsKernelTest, MatchesReferenceBitForBit) {
  using T = TypeParam;
  std::mt19937_64 rng(7);
  int64_t total_valid = 0, padded = 0;
  int variant = 0;
  for (const Case& c : RandomCases(11, 240)) {
    const int v = variant++;
    const bool ties = v % 3 != 0, nans = v % 5 < 2;
    const auto boxes = RandomBoxes<T>(rng, c.batch * c.n * c.q, nans);
    const auto scores = RandomScores<T>(rng, c.batch * c.n * c.classes, ties,
                                        /*negative=*/false, nans);
    const auto want = RefNmsAs(c, boxes, scores);
    const auto got = RunNms(c, boxes, scores, ThreadParallel(3));
    EXPECT_TRUE(SameOutputs(got, want)) << Describe(c) << " ties=" << ties << " nans=" << nans;
    for (size_t i = 0; i < want.valid.size(); ++i) {
      total_valid += want.valid[i];
      padded += want.valid[i] < WithShape(c.p, c).max_detections();
    }
  }
  // The cases do select boxes, and do leave rows unused.
  EXPECT_GT(total_valid, 1000);
  EXPECT_GT(padded, 50);
}

TYPED_TEST(CombinedNmsKernelTest, NegativeScoresBelowAThresholdOfMinusInfinity) {
  // Negative scores are candidates too; soft-NMS then raises a decayed score towards 0.
  using T = TypeParam;
  std::mt19937_64 rng(8);
  int variant = 0;
  for (Case c : RandomCases(12, 60)) {
    c.p.score_threshold = (variant++ % 2) == 0 ? -kInf : -0.5f;
    const auto boxes = RandomBoxes<T>(rng, c.batch * c.n * c.q, /*nans=*/false);
    const auto scores = RandomScores<T>(rng, c.batch * c.n * c.classes, /*ties=*/true,
                                        /*negative=*/true, /*nans=*/false);
    EXPECT_TRUE(SameOutputs(RunNms(c, boxes, scores, SerialParallel()), RefNmsAs(c, boxes, scores)))
        << Describe(c);
  }
}

TEST(CombinedNmsKernel, SameBitsForEveryThreadCount) {
  std::mt19937_64 rng(21);
  for (int64_t q : {int64_t{1}, int64_t{20}}) {
    for (float sigma : {0.0f, 0.5f}) {
      Case c{4, 2000, q, 20, {}};
      c.p.max_output_size_per_class = 100;
      c.p.max_total_size = 300;
      c.p.iou_threshold = 0.5f;
      c.p.score_threshold = 0.05f;
      c.p.soft_nms_sigma = sigma;
      const auto boxes = RandomBoxes<float>(rng, c.batch * c.n * c.q, /*nans=*/false);
      const auto scores = RandomScores<float>(rng, c.batch * c.n * c.classes, /*ties=*/false,
                                              /*negative=*/false, /*nans=*/false);
      const auto serial = RunNms(c, boxes, scores, SerialParallel());
      EXPECT_TRUE(SameOutputs(RunNms(c, boxes, scores, ThreadParallel(3)), serial)) << Describe(c);
      EXPECT_TRUE(SameOutputs(serial, RefNmsAs(c, boxes, scores))) << Describe(c);
      EXPECT_EQ(serial.valid, std::vector<int32_t>(4, 300)) << Describe(c);
    }
  }
}

// --- hand-made cases --------------------------------------------------------------------------

Case SmallCase(int64_t n, int64_t q, int64_t classes) {
  Case c{1, n, q, classes, {}};
  c.p.max_output_size_per_class = 10;
  c.p.max_total_size = 10;
  c.p.clip_boxes = false;
  return c;
}

TEST(CombinedNmsKernel, TiesTakeTheLowerIndexThenTheLowerClass) {
  // Boxes 0 and 1 are the same; box 2 (corners swapped in y) touches them along an edge only
  // (IoU 0). Class 0 scores 0.5, 0.5, 0.5: box 0 (the lower index) suppresses box 1, box 2 is
  // kept. Class 1 scores 0.5, 0.5, 0.9: box 2, then box 0 (the lower index), which suppresses
  // box 1. The three tied 0.5s merge class 0 first, each class in kept order.
  Case c = SmallCase(3, 1, 2);
  const std::vector<float> box = {0.1f, 0.1f, 0.5f, 0.5f};
  std::vector<float> boxes;
  for (int i = 0; i < 3; ++i) boxes.insert(boxes.end(), box.begin(), box.end());
  const std::vector<float> scores = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.9f};
  boxes[8] = 0.6f;  // box 2: (0.6, 0.1, 0.5, 0.5)
  const auto got = RunNms(c, boxes, scores, SerialParallel());
  // Merged: (0.9, class 1, box 2), (0.5, 0, box 0), (0.5, 0, box 2), (0.5, 1, box 0).
  EXPECT_EQ(got.valid, std::vector<int32_t>{4});
  EXPECT_EQ(got.scores, (std::vector<float>{0.9f, 0.5f, 0.5f, 0.5f, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(got.classes, (std::vector<float>{1, 0, 0, 1, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(std::vector<float>(got.boxes.begin(), got.boxes.begin() + 16),
            (std::vector<float>{0.6f, 0.1f, 0.5f, 0.5f, 0.1f, 0.1f, 0.5f, 0.5f, 0.6f, 0.1f, 0.5f,
                                0.5f, 0.1f, 0.1f, 0.5f, 0.5f}));
  EXPECT_TRUE(SameOutputs(got, RefNmsAs(c, boxes, scores)));
}

TEST(CombinedNmsKernel, IouThresholdIsStrict) {
  // [0, 0, 1, 1] and [0, 0.5, 1, 1.5]: intersection 0.5, union 1.5. A box is suppressed only
  // when its IoU is greater than the threshold.
  Case c = SmallCase(2, 1, 1);
  const std::vector<float> boxes = {0, 0, 1, 1, 0, 0.5f, 1, 1.5f};
  const std::vector<float> scores = {0.9f, 0.8f};
  const float iou = RefIou(&boxes[4], &boxes[0]);
  c.p.iou_threshold = iou;
  EXPECT_EQ(RunNms(c, boxes, scores, SerialParallel()).valid, std::vector<int32_t>{2});
  c.p.iou_threshold = std::nextafter(iou, 0.0f);
  EXPECT_EQ(RunNms(c, boxes, scores, SerialParallel()).valid, std::vector<int32_t>{1});
  // Threshold 1: identical boxes (IoU 1) are not suppressed; threshold 0: any overlap is.
  const std::vector<float> same = {0, 0, 1, 1, 1, 1, 0, 0};  // the same box, corners swapped
  c.p.iou_threshold = 1.0f;
  EXPECT_EQ(RunNms(c, same, scores, SerialParallel()).valid, std::vector<int32_t>{2});
  c.p.iou_threshold = 0.0f;
  EXPECT_EQ(RunNms(c, same, scores, SerialParallel()).valid, std::vector<int32_t>{1});
}

TEST(CombinedNmsKernel, NanScoresAndBoxes) {
  // A NaN score is never a candidate; in hard NMS a NaN box neither suppresses nor is
  // suppressed (its IoU is NaN or 0).
  Case c = SmallCase(4, 1, 1);
  c.p.score_threshold = -kInf;
  c.p.iou_threshold = 0.0f;
  const std::vector<float> boxes = {0, 0, 1, 1, 0, 0, 1, kNan, 0, 0, 1, 1, kNan, 0, 1, 1};
  // Box 0 has a NaN score; box 1 (x2 NaN) has zero area as std::min/std::max sort its corners;
  // box 3 (y1 NaN) has a NaN area and the highest score.
  const std::vector<float> scores = {kNan, 0.7f, 0.8f, 0.9f};
  const auto got = RunNms(c, boxes, scores, SerialParallel());
  EXPECT_EQ(got.valid, std::vector<int32_t>{3});
  EXPECT_EQ(std::vector<float>(got.scores.begin(), got.scores.begin() + 3),
            (std::vector<float>{0.9f, 0.8f, 0.7f}));
  EXPECT_TRUE(SameOutputs(got, RefNmsAs(c, boxes, scores)));
  // In soft-NMS (TensorFlow's V5 loop) a NaN IoU makes the candidate's score NaN: it is dropped.
  c.p.soft_nms_sigma = 0.5f;
  const auto soft = RunNms(c, boxes, scores, SerialParallel());
  EXPECT_EQ(soft.valid, std::vector<int32_t>{2});  // box 3, then box 1 (area 0: IoU 0)
  EXPECT_TRUE(SameOutputs(soft, RefNmsAs(c, boxes, scores)));
}

TEST(CombinedNmsKernel, SoftNmsDecaysAndReordersScores) {
  // Two identical boxes, sigma 0.5: the second's score is scaled by exp(-1) and stays a
  // detection, after a third, disjoint box with a lower original score.
  Case c = SmallCase(3, 1, 1);
  c.p.soft_nms_sigma = 0.5f;
  const std::vector<float> boxes = {0, 0, 0.5f, 0.5f, 0, 0, 0.5f, 0.5f, 0.6f, 0.6f, 1, 1};
  const std::vector<float> scores = {0.9f, 0.8f, 0.5f};
  const auto got = RunNms(c, boxes, scores, SerialParallel());
  const float decayed = 0.8f * std::exp(-0.5f / 0.5f * 1.0f * 1.0f);
  EXPECT_EQ(got.valid, std::vector<int32_t>{3});
  EXPECT_EQ(std::vector<float>(got.scores.begin(), got.scores.begin() + 3),
            (std::vector<float>{0.9f, 0.5f, decayed}));
  EXPECT_TRUE(SameOutputs(got, RefNmsAs(c, boxes, scores)));
  // Above the threshold it is dropped.
  c.p.score_threshold = 0.3f;
  EXPECT_EQ(RunNms(c, boxes, scores, SerialParallel()).valid, std::vector<int32_t>{2});
}

TEST(CombinedNmsKernel, SoftNmsWithNegativeScoresOrdersByFinalScore) {
  // Below a threshold of -inf, decay raises a negative score: box 1 (-0.8, the same box as
  // box 0) decays to -0.8 * exp(-1) = -0.29 and is kept after box 0 (-0.5) with a higher
  // score, so the merge must not take a class's kept order for a score order.
  Case c = SmallCase(2, 1, 1);
  c.p.score_threshold = -kInf;
  c.p.soft_nms_sigma = 0.5f;
  const std::vector<float> boxes = {0, 0, 0.5f, 0.5f, 0, 0, 0.5f, 0.5f};
  const std::vector<float> scores = {-0.5f, -0.8f};
  const auto got = RunNms(c, boxes, scores, SerialParallel());
  EXPECT_EQ(got.valid, std::vector<int32_t>{2});
  EXPECT_EQ(std::vector<float>(got.scores.begin(), got.scores.begin() + 2),
            (std::vector<float>{-0.8f * std::exp(-1.0f), -0.5f}));
  EXPECT_TRUE(SameOutputs(got, RefNmsAs(c, boxes, scores)));
}

TEST(CombinedNmsKernel, NegativeZeroScore) {
  // -0 is a candidate above a negative threshold and ties with +0 (the lower index first).
  Case c = SmallCase(2, 1, 1);
  c.p.score_threshold = -1.0f;
  const std::vector<float> boxes = {0, 0, 0.5f, 0.5f, 0.6f, 0.6f, 1, 1};
  const std::vector<float> scores = {0.0f, -0.0f};
  const auto got = RunNms(c, boxes, scores, SerialParallel());
  EXPECT_EQ(got.valid, std::vector<int32_t>{2});
  EXPECT_EQ(std::vector<float>(got.boxes.begin(), got.boxes.begin() + 8), boxes);
  // Scores come back as given, the sign of zero included (as TensorFlow's do).
  EXPECT_EQ(got.scores[0], 0.0f);
  EXPECT_FALSE(std::signbit(got.scores[0]));
  EXPECT_EQ(got.scores[1], 0.0f);
  EXPECT_TRUE(std::signbit(got.scores[1]));
}

// --- empty inputs and outputs -----------------------------------------------------------------

TEST(CombinedNmsKernel, EmptyInputsAndOutputs) {
  for (bool pad : {false, true}) {
    for (const auto& [batch, n, q, classes] : std::vector<std::array<int64_t, 4>>{
             {0, 5, 1, 3}, {0, 0, 1, 0}, {2, 0, 1, 3}, {2, 0, 3, 3}, {2, 4, 1, 0}, {2, 4, 0, 0}}) {
      Case c{batch, n, q, classes, {}};
      c.p.pad_per_class = pad;
      c.p.max_output_size_per_class = 3;
      c.p.max_total_size = 5;
      for (float sigma : {0.0f, 0.5f}) {
        c.p.soft_nms_sigma = sigma;
        const std::vector<float> boxes(static_cast<size_t>(batch * n * q * 4), 0.5f);
        const std::vector<float> scores(static_cast<size_t>(batch * n * classes), 0.9f);
        const auto got = RunNms(c, boxes, scores, ThreadParallel(2));
        const int64_t d = WithShape(c.p, c).max_detections();
        EXPECT_EQ(d, pad && classes == 0 ? 0 : 5) << Describe(c);
        EXPECT_EQ(got.valid, std::vector<int32_t>(static_cast<size_t>(batch), 0)) << Describe(c);
        EXPECT_EQ(got.scores, std::vector<float>(static_cast<size_t>(batch * d), 0.0f));
        EXPECT_EQ(got.classes, std::vector<float>(static_cast<size_t>(batch * d), 0.0f));
        EXPECT_EQ(got.boxes, std::vector<float>(static_cast<size_t>(batch * d * 4), 0.0f));
      }
    }
  }
}

TEST(CombinedNmsKernel, HighScoreThresholdLeavesEverythingZero) {
  Case c{2, 30, 1, 4, {}};
  c.p.max_output_size_per_class = 5;
  c.p.max_total_size = 7;
  c.p.score_threshold = 1.0f;  // scores are in [0, 1]
  std::mt19937_64 rng(3);
  const auto boxes = RandomBoxes<float>(rng, 2 * 30, false);
  const auto scores = RandomScores<float>(rng, 2 * 30 * 4, false, false, false);
  const auto got = RunNms(c, boxes, scores, SerialParallel());
  EXPECT_EQ(got.valid, (std::vector<int32_t>{0, 0}));
  EXPECT_EQ(got.boxes, std::vector<float>(2 * 7 * 4, 0.0f));
  EXPECT_EQ(got.scores, std::vector<float>(2 * 7, 0.0f));
}

// --- validation -------------------------------------------------------------------------------

std::vector<std::vector<int64_t>> Scalars() { return {{}, {}, {}, {}, {}}; }

TEST(CombinedNmsValidate, AcceptsAndFillsParams) {
  CombinedNmsParams p;
  OPFORGE_ASSERT_OK(ValidateCombinedNms({2, 5, 3, 4}, {2, 5, 3}, Scalars(), &p));
  EXPECT_EQ(p.batch, 2);
  EXPECT_EQ(p.num_boxes, 5);
  EXPECT_EQ(p.q, 3);
  EXPECT_EQ(p.num_classes, 3);
  OPFORGE_ASSERT_OK(ValidateCombinedNms({2, 5, 1, 4}, {2, 5, 3}, Scalars(), &p));
  EXPECT_EQ(p.q, 1);
  // Empty shapes are valid.
  OPFORGE_ASSERT_OK(ValidateCombinedNms({0, 5, 1, 4}, {0, 5, 3}, Scalars(), &p));
  OPFORGE_ASSERT_OK(ValidateCombinedNms({2, 0, 1, 4}, {2, 0, 3}, Scalars(), &p));
  OPFORGE_ASSERT_OK(ValidateCombinedNms({2, 5, 1, 4}, {2, 5, 0}, Scalars(), &p));
  OPFORGE_ASSERT_OK(ValidateCombinedNms({2, 5, 0, 4}, {2, 5, 0}, Scalars(), &p));
}

TEST(CombinedNmsValidate, ShapesNameTheArgument) {
  struct Bad {
    std::vector<int64_t> boxes, scores;
    const char* argument;
    const char* expected;
    const char* given;
  };
  const std::vector<Bad> bad = {
      {{2, 5, 4}, {2, 5, 3}, "boxes", "4-D", "[2, 5, 4]"},
      {{2, 5, 1, 4, 1}, {2, 5, 3}, "boxes", "4-D", "[2, 5, 1, 4, 1]"},
      {{2, 5, 1, 5}, {2, 5, 3}, "boxes", "[batch, num_boxes, q, 4]", "[2, 5, 1, 5]"},
      {{2, 5, 2, 4}, {2, 5, 3}, "boxes", "q = 1 or num_classes = 3", "[2, 5, 2, 4]"},
      {{2, 5, 1, 4}, {2, 5}, "scores", "3-D", "[2, 5]"},
      {{2, 5, 1, 4}, {2, 5, 3, 1}, "scores", "3-D", "[2, 5, 3, 1]"},
      {{2, 5, 1, 4}, {3, 5, 3}, "scores", "batch and num_boxes of boxes [2, 5, 1, 4]", "[3, 5, 3]"},
      {{2, 5, 1, 4}, {2, 6, 3}, "scores", "batch and num_boxes of boxes [2, 5, 1, 4]", "[2, 6, 3]"},
      {{1, 1LL << 31, 1, 4}, {1, 1LL << 31, 3}, "boxes", "2^31 - 1", "2147483648"},
  };
  for (const Bad& b : bad) {
    CombinedNmsParams p;
    const Status s = ValidateCombinedNms(b.boxes, b.scores, Scalars(), &p);
    ASSERT_FALSE(s.ok()) << b.argument << " " << b.given;
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
    EXPECT_TRUE(NamesWord(s.message(), "CombinedNonMaxSuppression"));
    EXPECT_TRUE(NamesWord(s.message(), b.argument));
    EXPECT_TRUE(Contains(s.message(), b.expected));
    EXPECT_TRUE(Contains(s.message(), b.given));
  }
}

TEST(CombinedNmsValidate, ScalarsNameTheArgument) {
  const char* const names[] = {"max_output_size_per_class", "max_total_size", "iou_threshold",
                               "score_threshold", "soft_nms_sigma"};
  for (int i = 0; i < 5; ++i) {
    for (const std::vector<int64_t>& shape : {std::vector<int64_t>{1}, {2, 3}, {0}}) {
      auto scalars = Scalars();
      scalars[static_cast<size_t>(i)] = shape;
      CombinedNmsParams p;
      const Status s = ValidateCombinedNms({2, 5, 1, 4}, {2, 5, 3}, scalars, &p);
      ASSERT_FALSE(s.ok()) << names[i];
      EXPECT_TRUE(NamesWord(s.message(), names[i])) << s.message();
      EXPECT_TRUE(Contains(s.message(), "a scalar (0-D)"));
      EXPECT_TRUE(Contains(s.message(), ShapeString(shape)));
    }
  }
}

TEST(CombinedNmsValidate, ValuesNameTheArgument) {
  CombinedNmsParams ok;
  ok.max_output_size_per_class = 1;
  ok.max_total_size = 1;
  OPFORGE_ASSERT_OK(ValidateCombinedNmsValues(ok));
  for (float iou : {0.0f, 1.0f}) {
    CombinedNmsParams p = ok;
    p.iou_threshold = iou;
    p.score_threshold = -kInf;
    p.soft_nms_sigma = 1e30f;
    OPFORGE_ASSERT_OK(ValidateCombinedNmsValues(p));
  }
  struct Bad {
    void (*set)(CombinedNmsParams*);
    const char* argument;
    const char* expected;
    const char* given;
  };
  const std::vector<Bad> bad = {
      {[](CombinedNmsParams* p) { p->max_output_size_per_class = 0; }, "max_output_size_per_class",
       "positive", "got 0"},
      {[](CombinedNmsParams* p) { p->max_output_size_per_class = -3; }, "max_output_size_per_class",
       "positive", "got -3"},
      {[](CombinedNmsParams* p) { p->max_total_size = 0; }, "max_total_size", "positive", "got 0"},
      {[](CombinedNmsParams* p) { p->max_total_size = -1; }, "max_total_size", "positive",
       "got -1"},
      {[](CombinedNmsParams* p) { p->iou_threshold = -0.25f; }, "iou_threshold", "in [0, 1]",
       "got -0.25"},
      {[](CombinedNmsParams* p) { p->iou_threshold = 1.5f; }, "iou_threshold", "in [0, 1]",
       "got 1.5"},
      {[](CombinedNmsParams* p) { p->iou_threshold = kNan; }, "iou_threshold", "in [0, 1]",
       "got nan"},
      {[](CombinedNmsParams* p) { p->score_threshold = kNan; }, "score_threshold", "not NaN",
       "got nan"},
      {[](CombinedNmsParams* p) { p->soft_nms_sigma = -0.5f; }, "soft_nms_sigma", "finite and >= 0",
       "got -0.5"},
      {[](CombinedNmsParams* p) { p->soft_nms_sigma = kInf; }, "soft_nms_sigma", "finite and >= 0",
       "got inf"},
      {[](CombinedNmsParams* p) { p->soft_nms_sigma = kNan; }, "soft_nms_sigma", "finite and >= 0",
       "got nan"},
  };
  for (const Bad& b : bad) {
    CombinedNmsParams p = ok;
    b.set(&p);
    const Status s = ValidateCombinedNmsValues(p);
    ASSERT_FALSE(s.ok()) << b.argument << " " << b.given;
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
    EXPECT_TRUE(NamesWord(s.message(), "CombinedNonMaxSuppression"));
    EXPECT_TRUE(NamesWord(s.message(), b.argument));
    EXPECT_TRUE(Contains(s.message(), b.expected));
    EXPECT_TRUE(Contains(s.message(), b.given));
  }
}

TEST(CombinedNmsValidate, MaxDetections) {
  CombinedNmsParams p;
  p.max_output_size_per_class = 3;
  p.max_total_size = 10;
  p.num_classes = 2;
  EXPECT_EQ(p.max_detections(), 10);  // without pad_per_class: max_total_size
  p.pad_per_class = true;
  EXPECT_EQ(p.max_detections(), 6);  // 3 * 2 < 10
  p.num_classes = 4;
  EXPECT_EQ(p.max_detections(), 10);  // 12 >= 10
  p.num_classes = 0;
  EXPECT_EQ(p.max_detections(), 0);
  // A product past int64 does not wrap.
  p.max_output_size_per_class = int64_t{1} << 40;
  p.num_classes = int64_t{1} << 30;
  EXPECT_EQ(p.max_detections(), 10);
  p.pad_per_class = false;
  p.num_classes = 0;
  EXPECT_EQ(p.max_detections(), 10);
}

}  // namespace
}  // namespace opforge

// Tests of the YoloTargets core: attr and shape validation messages; the assignment against a
// naive reference written here from the header (image by image, row by row, every scale's
// output written densely), bit for bit, on random cases with several scales, masks of different
// lengths, non-square grids, padding rows and boxes on cell borders or past the edge; the later
// row winning a shared cell and anchor; the lowest anchor winning a tie; a best anchor in no
// mask dropping its box; identical bits for every thread count; and every kind of bad data
// reported with the image, the row and the value.
#include "ops/yolo_targets/yolo_targets.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "common/parallel.h"
#include "common/status.h"
#include "common/test_util.h"
#include "ops/yolo_targets/yolo_targets_test_data.h"

namespace opforge {
namespace {

using test::Contains;
using test::NamesWord;
using test::NumElements;
using test::SameBits;
using test::yolo_targets::Case;
using test::yolo_targets::Data;
using test::yolo_targets::Describe;
using test::yolo_targets::ParamsOf;
using test::yolo_targets::RandomData;
using test::yolo_targets::Run;

// --- the reference ----------------------------------------------------------------------------

// The header's assignment, written out: for each image, each row in order, overwriting.
template <typename T>
std::vector<std::vector<T>> RefTargets(const Case& c, const std::vector<T>& boxes,
                                       const std::vector<int32_t>& classes,
                                       const std::vector<T>& anchors) {
  std::vector<std::vector<T>> outputs;
  for (size_t s = 0; s < c.masks.size(); ++s) {
    const int64_t gh = c.grid_sizes[2 * s], gw = c.grid_sizes[2 * s + 1];
    outputs.emplace_back(
        static_cast<size_t>(c.batch * gh * gw * static_cast<int64_t>(c.masks[s].size()) * 6), T(0));
  }
  auto cell = [](T lo, T hi, int64_t grid) -> int64_t {
    const T centre = (lo + hi) / T(2);
    const T scaled = std::floor(centre * static_cast<T>(grid));
    if (scaled < T(0)) return 0;
    if (scaled > static_cast<T>(grid - 1)) return grid - 1;
    return static_cast<int64_t>(scaled);
  };
  for (int64_t image = 0; image < c.batch; ++image) {
    for (int64_t row = 0; row < c.max_boxes; ++row) {
      const size_t r = static_cast<size_t>(image * c.max_boxes + row);
      const T* b = &boxes[4 * r];
      if (b[0] == T(0) && b[1] == T(0) && b[2] == T(0) && b[3] == T(0)) continue;
      const T w = b[2] - b[0], h = b[3] - b[1];
      int64_t best = 0;
      T best_iou = T(-1);
      for (int64_t k = 0; k < c.num_anchors; ++k) {
        const T aw = anchors[static_cast<size_t>(2 * k)];
        const T ah = anchors[static_cast<size_t>(2 * k + 1)];
        const T inter = std::min(w, aw) * std::min(h, ah);
        const T iou = inter / (w * h + aw * ah - inter);
        if (iou > best_iou) {  // strictly: the lowest k wins a tie
          best_iou = iou;
          best = k;
        }
      }
      for (size_t s = 0; s < c.masks.size(); ++s) {
        const auto& mask = c.masks[s];
        const auto it = std::find(mask.begin(), mask.end(), best);
        if (it == mask.end()) continue;
        const int64_t slot = it - mask.begin();
        const int64_t gh = c.grid_sizes[2 * s], gw = c.grid_sizes[2 * s + 1];
        const int64_t cx = cell(b[0], b[2], gw), cy = cell(b[1], b[3], gh);
        const int64_t count = static_cast<int64_t>(mask.size());
        T* out =
            &outputs[s][static_cast<size_t>((((image * gh + cy) * gw + cx) * count + slot) * 6)];
        for (int k = 0; k < 4; ++k) out[k] = b[k];
        out[4] = T(1);
        out[5] = static_cast<T>(classes[r]);
      }
    }
  }
  return outputs;
}

// --- cases ------------------------------------------------------------------------------------

std::vector<Case> Cases() {
  return {
      // yolov3: 9 anchors, three scales of three.
      {{{6, 7, 8}, {3, 4, 5}, {0, 1, 2}}, {13, 13, 26, 26, 52, 52}, 80, 3, 40, 9},
      // Masks of different lengths, non-square grids, anchors in no mask (7, 8), no class check.
      {{{5, 6}, {2, 3, 4}, {0, 1}}, {5, 7, 10, 14, 20, 28}, -1, 2, 50, 9},
      // Grids of 8 and 16: the border rows land exactly on cell edges.
      {{{3, 4, 5}, {0, 1, 2}}, {8, 8, 16, 16}, 20, 4, 30, 6},
      // One scale, one anchor; a mask with a repeated index (its first position is used).
      {{{0}}, {1, 1}, 5, 2, 6, 1},
      {{{1, 1, 0}, {2}}, {3, 11, 7, 2}, 5, 3, 25, 3},
      // Many boxes in few cells: rows overwrite each other.
      {{{0, 1}, {2, 3}}, {2, 2, 3, 1}, 10, 2, 100, 4},
  };
}

template <typename T>
class YoloTargetsKernelTest : public ::testing::Test {};
using TargetTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(YoloTargetsKernelTest, TargetTypes, test::TypeNames);

TYPED_TEST(YoloTargetsKernelTest, MatchesReference) {
  using T = TypeParam;
  uint64_t seed = 1;
  for (const Case& c : Cases()) {
    YoloTargetsParams p;
    OPFORGE_ASSERT_OK(ParamsOf(c, &p));
    const Data<T> d = RandomData<T>(c, seed++);
    OPFORGE_ASSERT_OK(
        CheckYoloTargetsData<T>(p, d.boxes.data(), d.classes.data(), d.anchors.data()));
    const auto got = Run(p, d, SerialParallel());
    const auto want = RefTargets(c, d.boxes, d.classes, d.anchors);
    ASSERT_EQ(got.size(), want.size());
    int64_t assigned = 0;
    for (size_t s = 0; s < got.size(); ++s) {
      EXPECT_TRUE(SameBits(got[s], want[s])) << Describe(c) << " scale " << s;
      for (size_t i = 4; i < want[s].size(); i += 6) assigned += want[s][i] == T(1);
    }
    EXPECT_GT(assigned, 0) << Describe(c);
  }
}

TYPED_TEST(YoloTargetsKernelTest, SameBitsForEveryThreadCount) {
  using T = TypeParam;
  const Case c = {{{6, 7, 8}, {3, 4, 5}, {0, 1, 2}}, {13, 13, 26, 26, 52, 52}, 80, 16, 60, 9};
  YoloTargetsParams p;
  OPFORGE_ASSERT_OK(ParamsOf(c, &p));
  const Data<T> d = RandomData<T>(c, 99);
  const auto serial = Run(p, d, SerialParallel());
  for (int threads : {2, 3, 5}) {
    const auto got = Run(p, d, ThreadParallel(threads));
    for (size_t s = 0; s < got.size(); ++s) {
      EXPECT_TRUE(SameBits(got[s], serial[s])) << threads << " threads, scale " << s;
    }
  }
}

// The six values at (image, cy, cx, slot) of scale s.
template <typename T>
std::vector<T> At(const YoloTargetsParams& p, const std::vector<std::vector<T>>& out, int64_t s,
                  int64_t image, int64_t cy, int64_t cx, int64_t slot) {
  const std::vector<int64_t> shape = p.output_shape(s);
  const int64_t i = (((image * shape[1] + cy) * shape[2] + cx) * shape[3] + slot) * 6;
  return std::vector<T>(out[static_cast<size_t>(s)].begin() + i,
                        out[static_cast<size_t>(s)].begin() + i + 6);
}

template <typename T>
int64_t CountAssigned(const std::vector<std::vector<T>>& out) {
  int64_t n = 0;
  for (const auto& o : out) {
    for (size_t i = 4; i < o.size(); i += 6) n += o[i] == T(1);
  }
  return n;
}

TYPED_TEST(YoloTargetsKernelTest, LaterRowWinsASharedCellAndAnchor) {
  using T = TypeParam;
  const Case c = {{{0, 1}}, {4, 4}, 10, 2, 4, 2};
  YoloTargetsParams p;
  OPFORGE_ASSERT_OK(ParamsOf(c, &p));
  Data<T> d;
  d.anchors = {T(0.1), T(0.1), T(0.5), T(0.5)};
  // Image 0: rows 0 and 2 share cell (1, 1) and anchor 0; row 1 is padding; row 3 has anchor 1
  // in the same cell. Image 1: row 1 only.
  const std::vector<double> rows = {0.30, 0.30, 0.40, 0.40, 0,   0, 0, 0, 0.26, 0.27, 0.35,
                                    0.36, 0.1,  0.1,  0.6,  0.6, 0, 0, 0, 0,    0.8,  0.8,
                                    0.9,  0.9,  0,    0,    0,   0, 0, 0, 0,    0};
  for (double v : rows) d.boxes.push_back(static_cast<T>(v));
  d.classes = {3, 9, 4, 5, 0, 7, 0, 0};
  const auto out = Run(p, d, SerialParallel());
  EXPECT_EQ(At(p, out, 0, 0, 1, 1, 0),
            (std::vector<T>{T(0.26), T(0.27), T(0.35), T(0.36), T(1), T(4)}));
  EXPECT_EQ(At(p, out, 0, 0, 1, 1, 1),
            (std::vector<T>{T(0.1), T(0.1), T(0.6), T(0.6), T(1), T(5)}));
  EXPECT_EQ(At(p, out, 0, 1, 3, 3, 0),
            (std::vector<T>{T(0.8), T(0.8), T(0.9), T(0.9), T(1), T(7)}));
  EXPECT_EQ(CountAssigned(out), 3);
  // Swapping the two rows swaps the winner.
  for (int k = 0; k < 4; ++k) std::swap(d.boxes[static_cast<size_t>(k)], d.boxes[8 + k]);
  std::swap(d.classes[0], d.classes[2]);
  const auto swapped = Run(p, d, SerialParallel());
  EXPECT_EQ(At(p, swapped, 0, 0, 1, 1, 0),
            (std::vector<T>{T(0.30), T(0.30), T(0.40), T(0.40), T(1), T(3)}));
}

TYPED_TEST(YoloTargetsKernelTest, LowestAnchorWinsATieAndUnmaskedAnchorsDrop) {
  using T = TypeParam;
  // Anchors 1 and 3 are the same; a box of exactly that size picks 1. Scale 0 holds 3 only,
  // scale 1 holds 1 twice (its first position, slot 0, is used).
  const Case c = {{{3, 0}, {1, 1, 2}}, {2, 2, 3, 3}, -1, 1, 3, 4};
  YoloTargetsParams p;
  OPFORGE_ASSERT_OK(ParamsOf(c, &p));
  Data<T> d;
  d.anchors = {T(0.5), T(0.5), T(0.25), T(0.125), T(0.75), T(0.75), T(0.25), T(0.125)};
  const std::vector<double> rows = {0.5,  0.5,  0.75, 0.625,  // 0.25 x 0.125: anchors 1 and 3
                                    0.0,  0.0,  0.75, 0.75,   // 0.75 x 0.75: anchor 2
                                    0.25, 0.25, 0.75, 0.75};  // 0.5 x 0.5: anchor 0
  for (double v : rows) d.boxes.push_back(static_cast<T>(v));
  d.classes = {11, 12, 13};
  const auto out = Run(p, d, SerialParallel());
  EXPECT_EQ(At(p, out, 1, 0, 1, 1, 0),
            (std::vector<T>{T(0.5), T(0.5), T(0.75), T(0.625), T(1), T(11)}));
  EXPECT_EQ(At(p, out, 1, 0, 1, 1, 2),
            (std::vector<T>{T(0.0), T(0.0), T(0.75), T(0.75), T(1), T(12)}));
  EXPECT_EQ(At(p, out, 0, 0, 1, 1, 1),
            (std::vector<T>{T(0.25), T(0.25), T(0.75), T(0.75), T(1), T(13)}));
  EXPECT_EQ(CountAssigned(out), 3);
  // Anchor 1 in no mask: the first box is dropped (not given to anchor 3, its twin).
  const Case dropped = {{{3, 0}, {2}}, {2, 2, 3, 3}, -1, 1, 3, 4};
  OPFORGE_ASSERT_OK(ParamsOf(dropped, &p));
  const auto out2 = Run(p, d, SerialParallel());
  EXPECT_EQ(CountAssigned(out2), 2);
  for (T v : At(p, out2, 0, 0, 1, 1, 0)) EXPECT_EQ(v, T(0));
}

// Centres on the far edge and past it clamp into the last cell; below 0 into the first.
TYPED_TEST(YoloTargetsKernelTest, CellsAreClampedIntoTheGrid) {
  using T = TypeParam;
  const Case c = {{{0}}, {4, 8}, -1, 1, 4, 1};
  YoloTargetsParams p;
  OPFORGE_ASSERT_OK(ParamsOf(c, &p));
  Data<T> d;
  d.anchors = {T(0.1), T(0.1)};
  const std::vector<double> rows = {1.0,    1.0,   1.0,   1.0,     // centre (1, 1)
                                    1.005,  0.995, 1.005, 1.005,   // (1.005, 1)
                                    -0.005, -0.01, 0.0,   -0.002,  // below 0
                                    0.125,  0.25,  0.125, 0.25};   // on a border: x 1/8, y 1/4
  for (double v : rows) d.boxes.push_back(static_cast<T>(v));
  d.classes = {1, 2, 3, 4};
  OPFORGE_ASSERT_OK(CheckYoloTargetsData<T>(p, d.boxes.data(), d.classes.data(), d.anchors.data()));
  const auto out = Run(p, d, SerialParallel());
  // Rows 0 and 1 share the last cell: the later wins.
  EXPECT_EQ(At(p, out, 0, 0, 3, 7, 0)[5], T(2));
  EXPECT_EQ(At(p, out, 0, 0, 0, 0, 0)[5], T(3));
  EXPECT_EQ(At(p, out, 0, 0, 1, 1, 0)[5], T(4));  // floor(0.25 * 4) = 1, floor(0.125 * 8) = 1
  EXPECT_EQ(CountAssigned(out), 3);
}

TYPED_TEST(YoloTargetsKernelTest, EmptyInputs) {
  using T = TypeParam;
  const Case c = {{{0}, {1}}, {2, 2, 3, 3}, -1, 2, 0, 2};
  YoloTargetsParams p;
  OPFORGE_ASSERT_OK(ParamsOf(c, &p));
  Data<T> d;
  d.anchors = {T(0.1), T(0.1), T(0.2), T(0.2)};
  const auto out = Run(p, d, SerialParallel());  // no boxes: all zeros
  EXPECT_EQ(CountAssigned(out), 0);
  for (const auto& o : out) {
    for (T v : o) ASSERT_EQ(v, T(0));
  }
  const Case empty = {{{0}, {1}}, {2, 2, 3, 3}, -1, 0, 5, 2};
  OPFORGE_ASSERT_OK(ParamsOf(empty, &p));
  EXPECT_EQ(NumElements(p.output_shape(0)), 0);
  Run(p, d, SerialParallel());
}

// --- bad data ---------------------------------------------------------------------------------

TYPED_TEST(YoloTargetsKernelTest, BadRowsNameTheImageRowAndValue) {
  using T = TypeParam;
  const Case c = {{{0, 1}}, {4, 4}, 5, 3, 4, 2};
  YoloTargetsParams p;
  OPFORGE_ASSERT_OK(ParamsOf(c, &p));
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  struct Bad {
    std::vector<double> box;
    int32_t cls;
    const char* argument;
    std::vector<const char*> given;
  };
  const std::vector<Bad> bad = {
      {{nan, 0.1, 0.2, 0.3}, 1, "boxes", {"finite", "nan"}},
      {{0.1, 0.1, inf, 0.3}, 1, "boxes", {"finite", "inf"}},
      {{0.1, -inf, 0.2, 0.3}, 1, "boxes", {"finite", "-inf"}},
      {{0.5, 0.1, 0.4, 0.3}, 1, "boxes", {"x2 < x1", "0.5", "0.4"}},
      {{0.1, 0.3, 0.2, 0.2}, 1, "boxes", {"y2 < y1", "0.3", "0.2"}},
      {{0.1, 0.1, 1.02, 0.3}, 1, "boxes", {"[0, 1]", "1.02"}},
      {{-0.02, 0.1, 0.2, 0.3}, 1, "boxes", {"[0, 1]", "-0.02"}},
      {{0.1, 0.1, 0.2, 1.5}, 1, "boxes", {"[0, 1]", "1.5"}},
      {{0.1, 0.1, 0.2, 0.3}, -1, "classes", {"[0, 5)", "got -1"}},
      {{0.1, 0.1, 0.2, 0.3}, 5, "classes", {"[0, 5)", "got 5"}},
      {{0.1, 0.1, 0.2, 0.3}, 1 << 30, "classes", {"[0, 5)", "1073741824"}},
  };
  Data<T> good;
  good.anchors = {T(0.1), T(0.2), T(0.3), T(0.4)};
  for (int64_t r = 0; r < c.batch * c.max_boxes; ++r) {
    for (double v : {0.25, 0.25, 0.5, 0.75}) good.boxes.push_back(static_cast<T>(v));
    good.classes.push_back(static_cast<int32_t>(r % 5));
  }
  OPFORGE_ASSERT_OK(
      CheckYoloTargetsData<T>(p, good.boxes.data(), good.classes.data(), good.anchors.data()));
  for (const Bad& b : bad) {
    for (int64_t r : {int64_t{0}, int64_t{6}, int64_t{11}}) {
      Data<T> d = good;
      for (int k = 0; k < 4; ++k)
        d.boxes[static_cast<size_t>(4 * r + k)] = static_cast<T>(b.box[k]);
      d.classes[static_cast<size_t>(r)] = b.cls;
      // A second bad row later: the first one is reported.
      if (r + 1 < c.batch * c.max_boxes) d.classes[static_cast<size_t>(r + 1)] = -7;
      const Status s =
          CheckYoloTargetsData<T>(p, d.boxes.data(), d.classes.data(), d.anchors.data());
      ASSERT_FALSE(s.ok()) << b.argument << " row " << r;
      EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
      const std::string& m = s.message();
      const int64_t image = r / c.max_boxes, row = r % c.max_boxes;
      EXPECT_TRUE(NamesWord(m, "YoloTargets")) << m;
      EXPECT_TRUE(NamesWord(m, b.argument)) << m;
      EXPECT_TRUE(Contains(m, "image " + std::to_string(image))) << m;
      EXPECT_TRUE(Contains(m, "row " + std::to_string(row))) << m;
      EXPECT_TRUE(Contains(m, "[" + std::to_string(image) + ", " + std::to_string(row) + "]")) << m;
      for (const char* g : b.given) EXPECT_TRUE(Contains(m, g)) << m;
    }
  }
}

TYPED_TEST(YoloTargetsKernelTest, ToleratedDataIsAccepted) {
  using T = TypeParam;
  Case c = {{{0}}, {4, 4}, -1, 1, 5, 1};
  YoloTargetsParams p;
  OPFORGE_ASSERT_OK(ParamsOf(c, &p));
  Data<T> d;
  d.anchors = {T(0.1), T(0.1)};
  const std::vector<double> rows = {0.9,    0.9, 1.005, 1.005,  // past the edge, within 0.01
                                    -0.005, 0.1, 0.2,   0.3,    //
                                    0.4,    0.4, 0.4,   0.4,    // a point
                                    0,      0,   0,     0,      // padding with a bad class
                                    -0.0,   0,   0,     -0.0};  // padding too (-0 == 0)
  for (double v : rows) d.boxes.push_back(static_cast<T>(v));
  d.classes = {0, 1000000, 2, -5, 99};
  OPFORGE_ASSERT_OK(CheckYoloTargetsData<T>(p, d.boxes.data(), d.classes.data(), d.anchors.data()));
  // With a class count, the padding rows' classes are still not checked.
  c.num_classes = 3;
  d.classes[1] = 1;
  OPFORGE_ASSERT_OK(ParamsOf(c, &p));
  OPFORGE_ASSERT_OK(CheckYoloTargetsData<T>(p, d.boxes.data(), d.classes.data(), d.anchors.data()));
}

TYPED_TEST(YoloTargetsKernelTest, BadAnchorsAreNamed) {
  using T = TypeParam;
  const Case c = {{{0, 1, 2}}, {4, 4}, -1, 1, 2, 3};
  YoloTargetsParams p;
  OPFORGE_ASSERT_OK(ParamsOf(c, &p));
  const std::vector<T> boxes = {T(0.1), T(0.1), T(0.2), T(0.2), T(0), T(0), T(0), T(0)};
  const std::vector<int32_t> classes = {0, 0};
  const T nan = std::numeric_limits<T>::quiet_NaN(), inf = std::numeric_limits<T>::infinity();
  struct Bad {
    T w, h;
    const char* given;
  };
  for (const Bad& b : std::vector<Bad>{{T(0), T(0.2), "[0, 0.2]"},
                                       {T(0.3), T(-0.5), "[0.3, -0.5]"},
                                       {nan, T(0.2), "nan"},
                                       {T(0.2), inf, "inf"}}) {
    const std::vector<T> anchors = {T(0.1), T(0.1), b.w, b.h, T(0.4), T(0.4)};
    const Status s = CheckYoloTargetsData<T>(p, boxes.data(), classes.data(), anchors.data());
    ASSERT_FALSE(s.ok()) << b.given;
    EXPECT_TRUE(NamesWord(s.message(), "YoloTargets")) << s.message();
    EXPECT_TRUE(Contains(s.message(), "anchors[1]")) << s.message();
    EXPECT_TRUE(Contains(s.message(), b.given)) << s.message();
    EXPECT_TRUE(Contains(s.message(), "positive")) << s.message();
  }
}

// --- validation -------------------------------------------------------------------------------

TEST(YoloTargetsValidate, AcceptsAndFillsParams) {
  YoloTargetsParams p;
  OPFORGE_ASSERT_OK(
      ParamsOf({{{6, 7, 8}, {3, 4, 5}, {0, 1, 2}}, {13, 13, 26, 26, 52, 52}, 80, 8, 100, 9}, &p));
  EXPECT_EQ(p.batch, 8);
  EXPECT_EQ(p.max_boxes, 100);
  EXPECT_EQ(p.num_anchors, 9);
  EXPECT_EQ(p.num_scales(), 3);
  EXPECT_EQ(p.mask_offset(2), 6);
  EXPECT_EQ(p.output_shape(1), (std::vector<int64_t>{8, 26, 26, 3, 6}));
  OPFORGE_ASSERT_OK(ParamsOf({{{0}}, {1, 1}, -1, 0, 0, 1}, &p));
}

TEST(YoloTargetsValidate, NamesTheArgument) {
  struct Bad {
    YoloTargetsParams attrs;
    std::vector<int64_t> boxes, classes, anchors;
    const char* argument;
    const char* given;
  };
  auto attrs = [](std::vector<int64_t> masks, std::vector<int64_t> per_scale,
                  std::vector<int64_t> grids, int64_t num_classes) {
    YoloTargetsParams p;
    p.anchor_masks = std::move(masks);
    p.anchors_per_scale = std::move(per_scale);
    p.grid_sizes = std::move(grids);
    p.num_classes = num_classes;
    return p;
  };
  const YoloTargetsParams ok = attrs({0, 1, 2}, {2, 1}, {13, 13, 26, 26}, 80);
  const std::vector<int64_t> b = {2, 10, 4}, c = {2, 10}, a = {3, 2};
  const std::vector<Bad> bad = {
      {attrs({}, {}, {}, 80), b, c, a, "anchor_masks", "none"},
      {attrs({0, 1}, {2, 0}, {13, 13, 26, 26}, 80), b, c, a, "anchor_masks", "scale 1"},
      {attrs({0, 1, 2}, {2, 2}, {13, 13, 26, 26}, 80), b, c, a, "anchors_per_scale", "[2, 2]"},
      {attrs({0, -1, 2}, {2, 1}, {13, 13, 26, 26}, 80), b, c, a, "anchor_masks", "[0, -1, 2]"},
      {attrs({0, 1, 2}, {2, 1}, {13, 13, 26}, 80), b, c, a, "grid_sizes", "[13, 13, 26]"},
      {attrs({0, 1, 2}, {2, 1}, {13, 0, 26, 26}, 80), b, c, a, "grid_sizes", "[13, 0, 26, 26]"},
      {attrs({0, 1, 2}, {2, 1}, {13, 13, 26, int64_t{1} << 25}, 80), b, c, a, "grid_sizes",
       "33554432"},
      {attrs({0, 1, 2}, {2, 1}, {13, 13, 26, 26}, 0), b, c, a, "num_classes", "got 0"},
      {attrs({0, 1, 2}, {2, 1}, {13, 13, 26, 26}, -2), b, c, a, "num_classes", "got -2"},
      {ok, {2, 10}, c, a, "boxes", "[2, 10]"},
      {ok, {2, 10, 5}, c, a, "boxes", "[2, 10, 5]"},
      {ok, {2, 10, 4, 1}, c, a, "boxes", "[2, 10, 4, 1]"},
      {ok, b, {2, 9}, a, "classes", "[2, 9]"},
      {ok, b, {3, 10}, a, "classes", "[3, 10]"},
      {ok, b, {2, 10, 1}, a, "classes", "[2, 10, 1]"},
      {ok, b, c, {3}, "anchors", "[3]"},
      {ok, b, c, {3, 3}, "anchors", "[3, 3]"},
      {ok, b, c, {0, 2}, "anchors", "[0, 2]"},
      {ok, b, c, {2, 2}, "anchor_masks", "[0, 1, 2]"},
      {attrs({0}, {1}, {1 << 24, 1 << 24}, 80),
       {int64_t{1} << 40, 10, 4},
       {int64_t{1} << 40, 10},
       a,
       "grid_sizes",
       "16777216"},
  };
  for (const Bad& x : bad) {
    YoloTargetsParams p = x.attrs;
    const Status s = ValidateYoloTargets(x.boxes, x.classes, x.anchors, &p);
    ASSERT_FALSE(s.ok()) << x.argument << " " << x.given;
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
    EXPECT_TRUE(NamesWord(s.message(), "YoloTargets")) << s.message();
    EXPECT_TRUE(NamesWord(s.message(), x.argument)) << s.message();
    EXPECT_TRUE(Contains(s.message(), x.given));
  }
}

}  // namespace
}  // namespace opforge

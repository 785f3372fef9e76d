// Test inputs shared by the YoloTargets core test and its CUDA test: a case (masks, grids,
// class count and input sizes), its validated params, a description for failure messages, and
// random valid rows with the awkward kinds of box mixed in, and the CPU kernel run on them.
//
// Host-only: no CUDA header, so the core tests (built under sanitizers, without CUDA) include
// it too. Test code only; header-only.
#ifndef OPFORGE_OPS_YOLO_TARGETS_YOLO_TARGETS_TEST_DATA_H_
#define OPFORGE_OPS_YOLO_TARGETS_YOLO_TARGETS_TEST_DATA_H_

#include <algorithm>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/parallel.h"
#include "common/status.h"
#include "common/test_util.h"
#include "ops/yolo_targets/yolo_targets.h"

namespace opforge {
namespace test {
namespace yolo_targets {

struct Case {
  std::vector<std::vector<int64_t>> masks;
  std::vector<int64_t> grid_sizes;  // gh, gw per scale
  int64_t num_classes;
  int64_t batch, max_boxes, num_anchors;
};

// The attrs of `c`, not yet validated.
inline YoloTargetsParams AttrsOf(const Case& c) {
  YoloTargetsParams p;
  for (const auto& m : c.masks) {
    p.anchor_masks.insert(p.anchor_masks.end(), m.begin(), m.end());
    p.anchors_per_scale.push_back(static_cast<int64_t>(m.size()));
  }
  p.grid_sizes = c.grid_sizes;
  p.num_classes = c.num_classes;
  return p;
}

inline Status ParamsOf(const Case& c, YoloTargetsParams* p) {
  *p = AttrsOf(c);
  return ValidateYoloTargets({c.batch, c.max_boxes, 4}, {c.batch, c.max_boxes}, {c.num_anchors, 2},
                             p);
}

inline std::string Describe(const Case& c) {
  std::ostringstream s;
  s << "batch " << c.batch << ", max_boxes " << c.max_boxes << ", " << c.num_anchors
    << " anchors, masks";
  for (const auto& m : c.masks) {
    s << " [";
    for (size_t i = 0; i < m.size(); ++i) s << (i ? "," : "") << m[i];
    s << "]";
  }
  s << ", grids";
  for (size_t i = 0; i < c.grid_sizes.size(); i += 2) {
    s << " " << c.grid_sizes[i] << "x" << c.grid_sizes[i + 1];
  }
  return s.str();
}

template <typename T>
struct Data {
  std::vector<T> boxes, anchors;
  std::vector<int32_t> classes;
};

// Random boxes inside [0, 1] with ~20% padding rows, plus rows on cell borders (centres at j/8,
// exact in binary), on the edge (1.0), past it within the tolerance (1.005, -0.005: clamped
// into the grid) and degenerate (zero width or height).
template <typename T>
Data<T> RandomData(const Case& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0), size(0.0, 0.6);
  std::uniform_int_distribution<int> percent(0, 99);
  const int64_t classes = c.num_classes > 0 ? c.num_classes : 1000;
  std::uniform_int_distribution<int32_t> cls(0, static_cast<int32_t>(classes - 1));
  Data<T> d;
  const int64_t rows = c.batch * c.max_boxes;
  for (int64_t r = 0; r < rows; ++r) {
    double x1, y1, x2, y2;
    const int kind = percent(rng);
    if (kind < 20) {
      x1 = y1 = x2 = y2 = 0;
    } else if (kind < 30) {  // centre on a border of a grid of 8 (and 16, 32, ...)
      const double cx = std::uniform_int_distribution<int>(0, 8)(rng) / 8.0;
      const double cy = std::uniform_int_distribution<int>(0, 8)(rng) / 8.0;
      const double hw = std::uniform_int_distribution<int>(0, 4)(rng) / 64.0;
      const double hh = std::uniform_int_distribution<int>(0, 4)(rng) / 64.0;
      x1 = std::max(0.0, cx - hw);
      x2 = std::min(1.0, cx + hw);
      y1 = std::max(0.0, cy - hh);
      y2 = std::min(1.0, cy + hh);
      if (x1 == 0 && y1 == 0 && x2 == 0 && y2 == 0) x2 = 0.25;
    } else if (kind < 34) {  // at and past the edges
      const double edge[] = {1.0, 1.005, -0.005, 0.0};
      x2 = edge[std::uniform_int_distribution<int>(0, 1)(rng)];
      x1 = x2 - size(rng) / 4;
      y1 = edge[std::uniform_int_distribution<int>(2, 3)(rng)];
      y2 = y1 + size(rng) / 4;
    } else if (kind < 38) {  // degenerate
      x1 = x2 = unit(rng);
      y1 = unit(rng);
      y2 = std::min(1.0, y1 + size(rng));
    } else {
      x1 = unit(rng);
      y1 = unit(rng);
      x2 = std::min(1.0, x1 + size(rng));
      y2 = std::min(1.0, y1 + size(rng));
    }
    for (double v : {x1, y1, x2, y2}) d.boxes.push_back(static_cast<T>(v));
    d.classes.push_back(kind < 20 && percent(rng) < 50 ? -1 : cls(rng));  // padding: any class
  }
  std::uniform_real_distribution<double> anchor(0.02, 0.8);
  for (int64_t k = 0; k < 2 * c.num_anchors; ++k) d.anchors.push_back(static_cast<T>(anchor(rng)));
  return d;
}

// The CPU kernel's outputs (each filled with garbage first: the kernel overwrites everything).
template <typename T>
std::vector<std::vector<T>> Run(const YoloTargetsParams& p, const Data<T>& d,
                                const Parallel& parallel) {
  std::vector<std::vector<T>> outputs;
  std::vector<T*> pointers;
  for (int64_t s = 0; s < p.num_scales(); ++s) {
    outputs.emplace_back(static_cast<size_t>(NumElements(p.output_shape(s))), T(7));
  }
  for (auto& o : outputs) pointers.push_back(o.data());
  YoloTargets<T>(p, d.boxes.data(), d.classes.data(), d.anchors.data(), pointers, parallel);
  return outputs;
}

}  // namespace yolo_targets
}  // namespace test
}  // namespace opforge

#endif  // OPFORGE_OPS_YOLO_TARGETS_YOLO_TARGETS_TEST_DATA_H_

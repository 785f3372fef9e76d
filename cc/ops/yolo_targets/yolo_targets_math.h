// The per-row maths of YoloTargets, written once for the CPU and the CUDA kernels. A is float
// or double (the element type itself: boxes are compared and assigned in their own precision).
#ifndef OPFORGE_OPS_YOLO_TARGETS_YOLO_TARGETS_MATH_H_
#define OPFORGE_OPS_YOLO_TARGETS_YOLO_TARGETS_MATH_H_

#include <math.h>

#include <cstdint>

#include "common/host_device.h"
#include "ops/yolo_targets/yolo_targets.h"

namespace opforge {
namespace yolo_targets {

enum RowKind : int { kRowOk = 0, kRowPadding = 1, kRowBad = 2 };

// Whether a row is padding (all four coordinates zero), a box to assign, or bad data.
template <typename A>
OPFORGE_HOST_DEVICE inline int ClassifyRow(const A b[4], int32_t cls, int64_t num_classes) {
  if (b[0] == A(0) && b[1] == A(0) && b[2] == A(0) && b[3] == A(0)) return kRowPadding;
  const A lo = A(-kYoloBoxTolerance), hi = A(1.0 + kYoloBoxTolerance);
  for (int k = 0; k < 4; ++k) {
    // Written so that NaN fails too.
    if (!(b[k] >= lo && b[k] <= hi)) return kRowBad;
  }
  if (!(b[2] >= b[0]) || !(b[3] >= b[1])) return kRowBad;
  if (cls < 0 || (num_classes >= 0 && cls >= num_classes)) return kRowBad;
  return kRowOk;
}

// The anchor of best width-height IoU (the lowest index on ties).
template <typename A, typename AnchorT>
OPFORGE_HOST_DEVICE inline int64_t BestAnchor(const A b[4], const AnchorT* anchors,
                                              int64_t num_anchors) {
  const A w = b[2] - b[0], h = b[3] - b[1];
  const A area = w * h;
  int64_t best = 0;
  A best_iou = A(-1);
  for (int64_t k = 0; k < num_anchors; ++k) {
    const A aw = A(anchors[2 * k]), ah = A(anchors[2 * k + 1]);
    const A inter = (w < aw ? w : aw) * (h < ah ? h : ah);
    const A iou = inter / (area + aw * ah - inter);
    if (iou > best_iou) {
      best_iou = iou;
      best = k;
    }
  }
  return best;
}

// floor(centre * grid), clamped into [0, grid - 1].
template <typename A>
OPFORGE_HOST_DEVICE inline int64_t Cell(A lo, A hi, int64_t grid) {
  const A centre = (lo + hi) / A(2);
  const A scaled = floor(centre * static_cast<A>(grid));
  if (!(scaled > A(0))) return 0;
  if (scaled >= static_cast<A>(grid - 1)) return grid - 1;
  return static_cast<int64_t>(scaled);
}

}  // namespace yolo_targets
}  // namespace opforge

#endif  // OPFORGE_OPS_YOLO_TARGETS_YOLO_TARGETS_MATH_H_

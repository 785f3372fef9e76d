// YoloTargets on the CPU: validation, the data check and the assignment, parallel over images
// (each image's rows run in order, so the later row wins a shared cell whatever the partition).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "ops/yolo_targets/yolo_targets.h"
#include "ops/yolo_targets/yolo_targets_math.h"

namespace opforge {

namespace {
constexpr char kOp[] = "YoloTargets";
}  // namespace

Status ValidateYoloTargetsAttrs(const YoloTargetsParams& p) {
  const int64_t scales = p.num_scales();
  if (scales < 1) {
    return InvalidArgument(kOp, "anchor_masks", "one list of anchor indices per scale (>= 1)",
                           "none");
  }
  int64_t total = 0;
  for (int64_t s = 0; s < scales; ++s) {
    const int64_t n = p.anchors_per_scale[static_cast<size_t>(s)];
    if (n < 1) {
      std::ostringstream given;
      given << "an empty list for scale " << s;
      return InvalidArgument(kOp, "anchor_masks", "a non-empty list of anchor indices per scale",
                             given.str());
    }
    // Saturated just past len(anchor_masks) (any larger sum is as wrong), so that lengths such as
    // 2^63 - 1 cannot overflow it.
    const int64_t past = static_cast<int64_t>(p.anchor_masks.size()) + 1;
    total = std::min(total + std::min(n, past), past);
  }
  if (total != static_cast<int64_t>(p.anchor_masks.size())) {
    return InvalidArgument(
        kOp, "anchors_per_scale",
        "lengths that add up to len(anchor_masks) = " + std::to_string(p.anchor_masks.size()),
        ShapeString(p.anchors_per_scale));
  }
  for (int64_t v : p.anchor_masks) {
    if (v < 0) {
      return InvalidArgument(kOp, "anchor_masks", "anchor indices >= 0",
                             ShapeString(p.anchor_masks));
    }
  }
  if (static_cast<int64_t>(p.grid_sizes.size()) != 2 * scales) {
    return InvalidArgument(
        kOp, "grid_sizes",
        "one (grid_height, grid_width) per scale, " + std::to_string(scales) + " scales",
        ShapeString(p.grid_sizes));
  }
  for (int64_t v : p.grid_sizes) {
    if (v < 1 || v > (int64_t{1} << 24)) {
      return InvalidArgument(kOp, "grid_sizes", "positive grid sizes (at most 2^24)",
                             ShapeString(p.grid_sizes));
    }
  }
  if (p.num_classes < -1 || p.num_classes == 0) {
    return InvalidArgument(kOp, "num_classes", "a positive count (or -1: not checked)",
                           p.num_classes);
  }
  return Status::Ok();
}

Status ValidateYoloTargets(const std::vector<int64_t>& boxes, const std::vector<int64_t>& classes,
                           const std::vector<int64_t>& anchors, YoloTargetsParams* params) {
  YoloTargetsParams& p = *params;
  OPFORGE_RETURN_IF_ERROR(ValidateYoloTargetsAttrs(p));
  if (boxes.size() != 3 || boxes[2] != 4) {
    return InvalidArgument(kOp, "boxes", "3-D [batch, max_boxes, 4] (normalised x1, y1, x2, y2)",
                           ShapeString(boxes));
  }
  if (classes.size() != 2 || classes[0] != boxes[0] || classes[1] != boxes[1]) {
    return InvalidArgument(
        kOp, "classes",
        "[batch, max_boxes] = " + ShapeString({boxes[0], boxes[1]}) + " (one class per box)",
        ShapeString(classes));
  }
  if (anchors.size() != 2 || anchors[1] != 2 || anchors[0] < 1) {
    return InvalidArgument(kOp, "anchors", "[num_anchors, 2] (normalised width, height)",
                           ShapeString(anchors));
  }
  for (int64_t v : p.anchor_masks) {
    if (v >= anchors[0]) {
      return InvalidArgument(kOp, "anchor_masks",
                             "indices of anchors' " + std::to_string(anchors[0]) + " rows",
                             ShapeString(p.anchor_masks));
    }
  }
  p.batch = boxes[0];
  p.max_boxes = boxes[1];
  p.num_anchors = anchors[0];
  for (int64_t s = 0; s < p.num_scales(); ++s) {
    double elements = 1;
    for (int64_t d : p.output_shape(s)) elements *= static_cast<double>(d);
    if (elements > 9.2e18) {
      return InvalidArgument(kOp, "grid_sizes", "outputs whose size fits in int64",
                             ShapeString(p.output_shape(s)));
    }
  }
  return Status::Ok();
}

Status YoloTargetsRowError(const YoloTargetsParams& p, int64_t image, int64_t row,
                           const double v[4], int64_t cls) {
  std::ostringstream where;
  where << "[" << image << ", " << row << "] (image " << image << ", row " << row << ")";
  const bool box_ok =
      std::isfinite(v[0]) && std::isfinite(v[1]) && std::isfinite(v[2]) && std::isfinite(v[3]);
  std::ostringstream box;
  box << "[" << v[0] << ", " << v[1] << ", " << v[2] << ", " << v[3] << "]";
  if (!box_ok) {
    return InvalidArgument(kOp, ("boxes" + where.str()).c_str(), "finite", box.str());
  }
  const double lo = -kYoloBoxTolerance, hi = 1.0 + kYoloBoxTolerance;
  for (int k = 0; k < 4; ++k) {
    if (v[k] < lo || v[k] > hi) {
      std::ostringstream expected;
      expected << "normalised (x1, y1, x2, y2) inside [0, 1] (within " << kYoloBoxTolerance << ")";
      return InvalidArgument(kOp, ("boxes" + where.str()).c_str(), expected.str(), box.str());
    }
  }
  if (v[2] < v[0]) {
    return InvalidArgument(kOp, ("boxes" + where.str()).c_str(), "(x1, y1, x2, y2) with x1 <= x2",
                           box.str() + " (x2 < x1)");
  }
  if (v[3] < v[1]) {
    return InvalidArgument(kOp, ("boxes" + where.str()).c_str(), "(x1, y1, x2, y2) with y1 <= y2",
                           box.str() + " (y2 < y1)");
  }
  std::string expected = "a class index >= 0";
  if (p.num_classes >= 0) expected = "a class index in [0, " + std::to_string(p.num_classes) + ")";
  return InvalidArgument(kOp, ("classes" + where.str()).c_str(), expected, cls);
}

template <typename T>
Status CheckYoloTargetsData(const YoloTargetsParams& p, const T* boxes, const int32_t* classes,
                            const T* anchors) {
  OPFORGE_RETURN_IF_ERROR(CheckYoloAnchors(kOp, "anchors", anchors, p.num_anchors));
  const int64_t rows = p.batch * p.max_boxes;
  for (int64_t r = 0; r < rows; ++r) {
    const T* b = boxes + 4 * r;
    if (yolo_targets::ClassifyRow(b, classes[r], p.num_classes) == yolo_targets::kRowBad) {
      const double v[4] = {double(b[0]), double(b[1]), double(b[2]), double(b[3])};
      return YoloTargetsRowError(p, r / p.max_boxes, r % p.max_boxes, v, classes[r]);
    }
  }
  return Status::Ok();
}

template <typename T>
void YoloTargets(const YoloTargetsParams& p, const T* boxes, const int32_t* classes,
                 const T* anchors, const std::vector<T*>& outputs, const Parallel& parallel) {
  const int64_t scales = p.num_scales();
  double cost = 50.0 * static_cast<double>(p.max_boxes) * static_cast<double>(p.num_anchors);
  for (int64_t s = 0; s < scales; ++s) {
    const std::vector<int64_t> shape = p.output_shape(s);
    cost += static_cast<double>(shape[1] * shape[2] * shape[3] * 6);
  }
  parallel.For(p.batch, cost, [&](int64_t begin, int64_t end) {
    for (int64_t image = begin; image < end; ++image) {
      for (int64_t s = 0; s < scales; ++s) {
        const std::vector<int64_t> shape = p.output_shape(s);
        const int64_t per_image = shape[1] * shape[2] * shape[3] * 6;
        std::memset(outputs[static_cast<size_t>(s)] + image * per_image, 0,
                    static_cast<size_t>(per_image) * sizeof(T));
      }
      for (int64_t row = 0; row < p.max_boxes; ++row) {
        const int64_t r = image * p.max_boxes + row;
        const T* b = boxes + 4 * r;
        if (yolo_targets::ClassifyRow(b, classes[r], p.num_classes) != yolo_targets::kRowOk) {
          continue;
        }
        const int64_t best = yolo_targets::BestAnchor(b, anchors, p.num_anchors);
        for (int64_t s = 0; s < scales; ++s) {
          const int64_t offset = p.mask_offset(s);
          const int64_t count = p.anchors_per_scale[static_cast<size_t>(s)];
          int64_t slot = -1;
          for (int64_t j = 0; j < count && slot < 0; ++j) {
            if (p.anchor_masks[static_cast<size_t>(offset + j)] == best) slot = j;
          }
          if (slot < 0) continue;
          const std::vector<int64_t> shape = p.output_shape(s);
          const int64_t gh = shape[1], gw = shape[2];
          const int64_t cx = yolo_targets::Cell(b[0], b[2], gw);
          const int64_t cy = yolo_targets::Cell(b[1], b[3], gh);
          T* out =
              outputs[static_cast<size_t>(s)] + (((image * gh + cy) * gw + cx) * count + slot) * 6;
          for (int k = 0; k < 4; ++k) out[k] = b[k];
          out[4] = T(1);
          out[5] = static_cast<T>(classes[r]);
        }
      }
    }
  });
}

#define OPFORGE_INSTANTIATE_YOLO_TARGETS_(T, ...)                                             \
  template Status CheckYoloTargetsData<T>(const YoloTargetsParams&, const T*, const int32_t*, \
                                          const T*);                                          \
  template void YoloTargets<T>(const YoloTargetsParams&, const T*, const int32_t*, const T*,  \
                               const std::vector<T*>&, const Parallel&);
OPFORGE_YOLO_TARGETS_TYPES(OPFORGE_INSTANTIATE_YOLO_TARGETS_)
#undef OPFORGE_INSTANTIATE_YOLO_TARGETS_

}  // namespace opforge

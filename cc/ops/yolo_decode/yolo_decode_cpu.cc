// YoloDecode on the CPU: validation, and the forward and gradient kernels, parallel over the
// cells of the batch (each box is computed by one call, so any partition gives the same bits).
#include <Eigen/Core>
#include <cmath>
#include <sstream>

#include "common/arith.h"
#include "ops/yolo_decode/yolo_decode.h"
#include "ops/yolo_decode/yolo_decode_math.h"

namespace opforge {

namespace {

constexpr char kOp[] = "YoloDecode";
constexpr char kGradOp[] = "YoloDecodeGrad";

// Cycles per box and class: two exps and a handful of multiplies.
double CostPerCell(const YoloDecodeParams& p) {
  return static_cast<double>(p.anchors) * (60.0 + 25.0 * static_cast<double>(p.num_classes));
}

}  // namespace

Status ValidateYoloDecodeAttrs(YoloDecodeParams* params) {
  YoloDecodeParams& p = *params;
  if (p.num_classes < 1) {
    return InvalidArgument(kOp, "num_classes", "at least 1", p.num_classes);
  }
  if (p.num_classes > (int64_t{1} << 24)) {
    return InvalidArgument(kOp, "num_classes", "at most 2^24", p.num_classes);
  }
  if (p.input_size.size() != 2 || p.input_size[0] < 1 || p.input_size[1] < 1) {
    return InvalidArgument(kOp, "input_size", "[height, width], two positive values",
                           ShapeString(p.input_size));
  }
  if (p.box_format == "xyxy") {
    p.format = YoloBoxFormat::kXyxy;
  } else if (p.box_format == "yxyx") {
    p.format = YoloBoxFormat::kYxyx;
  } else if (p.box_format == "center_xywh") {
    p.format = YoloBoxFormat::kCenterXywh;
  } else {
    return InvalidArgument(kOp, "box_format", "one of \"xyxy\", \"yxyx\", \"center_xywh\"",
                           "\"" + p.box_format + "\"");
  }
  if (!std::isfinite(p.scale_x_y) || p.scale_x_y < 1.0f) {
    return InvalidArgument(kOp, "scale_x_y", "a finite value >= 1", p.scale_x_y);
  }
  return Status::Ok();
}

Status ValidateYoloDecode(const std::vector<int64_t>& features, const std::vector<int64_t>& anchors,
                          YoloDecodeParams* params) {
  YoloDecodeParams& p = *params;
  OPFORGE_RETURN_IF_ERROR(ValidateYoloDecodeAttrs(params));
  if (anchors.size() != 2 || anchors[1] != 2 || anchors[0] < 1) {
    return InvalidArgument(kOp, "anchors", "[num_anchors, 2] (width, height) with num_anchors >= 1",
                           ShapeString(anchors));
  }
  const int64_t a = anchors[0];
  const int64_t per_anchor = p.channels_per_anchor();
  if (features.size() == 4) {
    if (features[3] % per_anchor != 0) {
      std::ostringstream expected;
      expected << "[batch, height, width, num_anchors * (5 + num_classes)]; its last dimension is "
                  "not a multiple of 5 + num_classes = "
               << per_anchor;
      return InvalidArgument(kOp, "features", expected.str(), ShapeString(features));
    }
    if (features[3] / per_anchor != a) {
      std::ostringstream expected;
      expected << "[batch, height, width, " << a << " * (5 + " << p.num_classes << ")] = [..., "
               << a * per_anchor << "] for " << a
               << " anchors (anchors has that many rows; num_classes = " << p.num_classes << ")";
      return InvalidArgument(kOp, "features", expected.str(), ShapeString(features));
    }
  } else if (features.size() == 5) {
    if (features[3] != a || features[4] != per_anchor) {
      std::ostringstream expected;
      expected << "[batch, height, width, " << a << ", " << per_anchor << "] (" << a
               << " anchors, 5 + num_classes = " << per_anchor << ")";
      return InvalidArgument(kOp, "features", expected.str(), ShapeString(features));
    }
  } else {
    return InvalidArgument(kOp, "features",
                           "4-D [batch, height, width, num_anchors * (5 + num_classes)] or 5-D "
                           "[batch, height, width, num_anchors, 5 + num_classes]",
                           ShapeString(features));
  }
  if (features[1] < 1 || features[2] < 1) {
    return InvalidArgument(kOp, "features", "a grid of height and width >= 1",
                           ShapeString(features));
  }
  p.batch = features[0];
  p.height = features[1];
  p.width = features[2];
  p.anchors = a;
  return Status::Ok();
}

Status ValidateYoloDecodeGrad(const std::vector<int64_t>& grad_boxes,
                              const std::vector<int64_t>& grad_scores,
                              const std::vector<int64_t>& grad_class_scores,
                              const std::vector<int64_t>& features,
                              const std::vector<int64_t>& anchors, YoloDecodeParams* params) {
  Status s = ValidateYoloDecode(features, anchors, params);
  if (!s.ok()) return Status::Invalid(kGradOp + s.message().substr(sizeof(kOp) - 1));
  const YoloDecodeParams& p = *params;
  const int64_t n = p.boxes_per_image();
  const std::vector<int64_t> boxes{p.batch, n, 4}, scores{p.batch, n},
      class_scores{p.batch, n, p.num_classes};
  if (grad_boxes != boxes) {
    return InvalidArgument(kGradOp, "grad_boxes", "the shape of boxes, " + ShapeString(boxes),
                           ShapeString(grad_boxes));
  }
  if (grad_scores != scores) {
    return InvalidArgument(kGradOp, "grad_scores", "the shape of scores, " + ShapeString(scores),
                           ShapeString(grad_scores));
  }
  if (grad_class_scores != class_scores) {
    return InvalidArgument(kGradOp, "grad_class_scores",
                           "the shape of class_scores, " + ShapeString(class_scores),
                           ShapeString(grad_class_scores));
  }
  return Status::Ok();
}

template <typename T>
void YoloDecodeForward(const YoloDecodeParams& p, const T* features, const T* anchors, T* boxes,
                       T* scores, int32_t* class_indices, T* class_scores,
                       const Parallel& parallel) {
  using A = Acc<T>;
  const yolo::Geometry<A> g = yolo::MakeGeometry<A>(p);
  const int64_t na = p.anchors, nc = p.num_classes, per_anchor = p.channels_per_anchor();
  const int64_t cells = p.batch * p.height * p.width;
  parallel.For(cells, CostPerCell(p), [&](int64_t begin, int64_t end) {
    for (int64_t cell = begin; cell < end; ++cell) {
      const int64_t cx = cell % p.width;
      const int64_t cy = (cell / p.width) % p.height;
      for (int64_t a = 0; a < na; ++a) {
        const int64_t box = cell * na + a;
        const T* f = features + box * per_anchor;
        if (boxes != nullptr) {
          const A t[4] = {A(f[0]), A(f[1]), A(f[2]), A(f[3])};
          A out[4];
          yolo::DecodeBox(g, t, static_cast<A>(cx), static_cast<A>(cy), A(anchors[2 * a]),
                          A(anchors[2 * a + 1]), out);
          for (int k = 0; k < 4; ++k) boxes[box * 4 + k] = T(out[k]);
        }
        const A obj = yolo::Sigmoid(A(f[4]));
        A best = A(0);
        int32_t best_index = 0;
        for (int64_t c = 0; c < nc; ++c) {
          const T v = T(obj * yolo::Sigmoid(A(f[5 + c])));
          if (class_scores != nullptr) class_scores[box * nc + c] = v;
          if (c == 0 || yolo::Beats(A(v), best)) {
            best = A(v);
            best_index = static_cast<int32_t>(c);
          }
        }
        if (scores != nullptr) {
          scores[box] = T(best);
          class_indices[box] = best_index;
        }
      }
    }
  });
}

template <typename T>
void YoloDecodeBackward(const YoloDecodeParams& p, const T* grad_boxes, const T* grad_scores,
                        const T* grad_class_scores, const T* features, const T* anchors,
                        T* grad_features, const Parallel& parallel) {
  using A = Acc<T>;
  const yolo::Geometry<A> g = yolo::MakeGeometry<A>(p);
  const int64_t na = p.anchors, nc = p.num_classes, per_anchor = p.channels_per_anchor();
  const int64_t cells = p.batch * p.height * p.width;
  parallel.For(cells, 2 * CostPerCell(p), [&](int64_t begin, int64_t end) {
    std::vector<A> class_sigmoid(static_cast<size_t>(nc));
    for (int64_t cell = begin; cell < end; ++cell) {
      for (int64_t a = 0; a < na; ++a) {
        const int64_t box = cell * na + a;
        const T* f = features + box * per_anchor;
        T* df = grad_features + box * per_anchor;
        const A t[4] = {A(f[0]), A(f[1]), A(f[2]), A(f[3])};
        A gb[4] = {A(0), A(0), A(0), A(0)};
        if (grad_boxes != nullptr) {
          for (int k = 0; k < 4; ++k) gb[k] = A(grad_boxes[box * 4 + k]);
        }
        A dt[4];
        yolo::DecodeBoxGrad(g, t, A(anchors[2 * a]), A(anchors[2 * a + 1]), gb, dt);
        for (int k = 0; k < 4; ++k) df[k] = T(dt[k]);

        // The winning class, as the forward chose it (on the rounded class scores).
        const A obj = yolo::Sigmoid(A(f[4]));
        A best = A(0);
        int64_t best_index = 0;
        for (int64_t c = 0; c < nc; ++c) {
          const A s = yolo::Sigmoid(A(f[5 + c]));
          class_sigmoid[static_cast<size_t>(c)] = s;
          const A v = A(T(obj * s));
          if (c == 0 || yolo::Beats(v, best)) {
            best = v;
            best_index = c;
          }
        }
        const A gs = grad_scores != nullptr ? A(grad_scores[box]) : A(0);
        A d_obj = A(0);
        for (int64_t c = 0; c < nc; ++c) {
          const A s = class_sigmoid[static_cast<size_t>(c)];
          A gc = grad_class_scores != nullptr ? A(grad_class_scores[box * nc + c]) : A(0);
          if (c == best_index) gc = gc + gs;
          d_obj = d_obj + gc * s;
          df[5 + c] = T(gc * obj * (s * (A(1) - s)));
        }
        df[4] = T(d_obj * (obj * (A(1) - obj)));
      }
    }
  });
}

#define OPFORGE_INSTANTIATE_YOLO_DECODE_(T, ...)                                               \
  template void YoloDecodeForward<T>(const YoloDecodeParams&, const T*, const T*, T*, T*,      \
                                     int32_t*, T*, const Parallel&);                           \
  template void YoloDecodeBackward<T>(const YoloDecodeParams&, const T*, const T*, const T*, \
                                      const T*, const T*, T*, const Parallel&);
OPFORGE_FLOAT_TYPES(OPFORGE_INSTANTIATE_YOLO_DECODE_)
#undef OPFORGE_INSTANTIATE_YOLO_DECODE_

}  // namespace opforge

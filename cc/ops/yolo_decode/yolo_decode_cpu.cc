// YoloDecode on the CPU: validation, and the forward and gradient kernels, parallel over the
// cells of the batch (each box is computed by one call, so any partition gives the same bits).
#include <Eigen/Core>
#include <cmath>
#include <cstring>
#include <algorithm>
#include <limits>

#if defined(__AVX__)
#include <immintrin.h>
#endif

#include <sstream>
#include <type_traits>

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

namespace {

template <typename A>
using ArrayMap = Eigen::Map<Eigen::Array<A, Eigen::Dynamic, 1>>;
template <typename A>
using ConstArrayMap = Eigen::Map<const Eigen::Array<A, Eigen::Dynamic, 1>>;

// NumPy's argmax of v[0 .. n): the first maximum, or the first NaN if there is one.
template <typename A>
int64_t ArgMax(const A* v, int64_t n) {
  const ConstArrayMap<A> row(v, static_cast<Eigen::Index>(n));
  if (row.isNaN().any()) {
    int64_t c = 0;
    while (!(v[c] != v[c])) ++c;
    return c;
  }
  const A best = row.maxCoeff();
  int64_t c = 0;
  while (v[c] != best) ++c;
  return c;
}

#if defined(__AVX__)
// The same for float in one branch-free pass, eight lanes at a time: each lane keeps its
// maximum and the first index that reached it (indices as floats: exact, as num_classes <= 2^24);
// the answer is the lowest index among the lanes holding the overall maximum. NaN, rare, is
// found apart.
template <>
int64_t ArgMax<float>(const float* v, int64_t n) {
  __m256 best8 = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  __m256 index8 = _mm256_set1_ps(-1.0f);
  __m256 at8 = _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7);
  __m256 nan8 = _mm256_setzero_ps();
  const __m256 step = _mm256_set1_ps(8.0f);
  int64_t c = 0;
  for (; c + 8 <= n; c += 8) {
    const __m256 x = _mm256_loadu_ps(v + c);
    const __m256 greater = _mm256_cmp_ps(x, best8, _CMP_GT_OQ);
    best8 = _mm256_blendv_ps(best8, x, greater);
    index8 = _mm256_blendv_ps(index8, at8, greater);
    nan8 = _mm256_or_ps(nan8, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    at8 = _mm256_add_ps(at8, step);
  }
  alignas(32) float best_lanes[8], index_lanes[8];
  _mm256_store_ps(best_lanes, best8);
  _mm256_store_ps(index_lanes, index8);
  bool nan = _mm256_movemask_ps(nan8) != 0;
  float best = -std::numeric_limits<float>::infinity();
  int64_t index = -1;
  for (int k = 0; k < 8; ++k) {
    if (index_lanes[k] < 0) continue;
    const int64_t i = static_cast<int64_t>(index_lanes[k]);
    if (best_lanes[k] > best || (best_lanes[k] == best && i < index)) {
      best = best_lanes[k];
      index = i;
    }
  }
  for (; c < n; ++c) {
    nan = nan || v[c] != v[c];
    if (v[c] > best || index < 0) {
      best = v[c];
      index = c;
    }
  }
  if (nan) {
    int64_t i = 0;
    while (!(v[i] != v[i])) ++i;
    return i;
  }
  return index < 0 ? 0 : index;
}
#endif

}  // namespace

// Both kernels run a block of cells at a time: the block's features copied (as A) into a buffer
// padded to a whole number of 16-lane vectors, one vectorised sigmoid over all of it, and one
// vectorised exp over the clamped tw, th of its boxes. Every value goes through the same vector
// code whatever block it falls in (there is no scalar tail), so results do not depend on how
// cells are split between threads, and the gradient sees exactly the forward's class scores.
constexpr int64_t kCellsPerBlock = 8;
constexpr int64_t kLanes = 16;

inline int64_t PaddedLanes(int64_t n) { return (n + kLanes - 1) / kLanes * kLanes; }

template <typename A>
struct Block {
  Block(int64_t per_cell, int64_t anchors)
      : sigmoids(PaddedLanes(kCellsPerBlock * per_cell)),
        exps(PaddedLanes(kCellsPerBlock * anchors * 2)) {}
  Eigen::Matrix<A, Eigen::Dynamic, 1> sigmoids;  // of every feature of the block's cells
  Eigen::Matrix<A, Eigen::Dynamic, 1> exps;      // exp(min(t, bound)) of each box's tw, th

  template <typename T>
  void Compute(const T* features, int64_t boxes, int64_t per_anchor, A bound) {
    const int64_t n = boxes * per_anchor;
    const int64_t padded = PaddedLanes(n), padded_wh = PaddedLanes(2 * boxes);
    A* x = sigmoids.data();
    for (int64_t i = 0; i < n; ++i) x[i] = static_cast<A>(features[i]);
    for (int64_t i = n; i < padded; ++i) x[i] = A(0);
    A* e = exps.data();
    for (int64_t b = 0; b < boxes; ++b) {
      e[2 * b] = yolo::ClampLogScale(x[b * per_anchor + 2], bound);
      e[2 * b + 1] = yolo::ClampLogScale(x[b * per_anchor + 3], bound);
    }
    for (int64_t i = 2 * boxes; i < padded_wh; ++i) e[i] = A(0);
    ArrayMap<A> sv(x, padded);
    sv = A(1) / (A(1) + (-sv).exp());
    ArrayMap<A> ev(e, padded_wh);
    ev = ev.exp();
  }
};

// The class scores of a box (sigmoids s: s[4] objectness, s[5..] classes), rounded to T, into
// out (T, may be null) and v (A); returns v, which is out itself when T is A and out is given.
template <typename T, typename A>
A* ClassScoresOf(const A* s, int64_t nc, T* out, A* v) {
  const A obj = s[4];
  const A* cls = s + 5;
  if constexpr (std::is_same_v<T, A>) {
    if (out != nullptr) v = out;
    for (int64_t c = 0; c < nc; ++c) v[c] = obj * cls[c];
  } else {
    for (int64_t c = 0; c < nc; ++c) {
      const T r = T(obj * cls[c]);
      if (out != nullptr) out[c] = r;
      v[c] = A(r);
    }
  }
  return v;
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
    Block<A> block(na * per_anchor, na);
    std::vector<A> products(static_cast<size_t>(nc));
    for (int64_t first = begin; first < end; first += kCellsPerBlock) {
      const int64_t boxes_here = std::min(kCellsPerBlock, end - first) * na;
      block.Compute(features + first * na * per_anchor, boxes_here, per_anchor, g.max_log_scale);
      for (int64_t b = 0; b < boxes_here; ++b) {
        const int64_t box = first * na + b;
        const int64_t cell = box / na, a = box % na;
        const A* s = block.sigmoids.data() + b * per_anchor;
        if (boxes != nullptr) {
          A out[4];
          yolo::DecodeBoxFrom(g, s[0], s[1], block.exps[2 * b], block.exps[2 * b + 1],
                              static_cast<A>(cell % p.width),
                              static_cast<A>((cell / p.width) % p.height), A(anchors[2 * a]),
                              A(anchors[2 * a + 1]), out);
          for (int k = 0; k < 4; ++k) boxes[box * 4 + k] = T(out[k]);
        }
        const A* v = ClassScoresOf<T, A>(
            s, nc, class_scores != nullptr ? class_scores + box * nc : nullptr, products.data());
        if (scores != nullptr) {
          const int64_t best = ArgMax(v, nc);
          scores[box] = T(v[best]);
          class_indices[box] = static_cast<int32_t>(best);
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
  const Eigen::Index n = static_cast<Eigen::Index>(nc);
  parallel.For(cells, 2 * CostPerCell(p), [&](int64_t begin, int64_t end) {
    Block<A> block(na * per_anchor, na);
    std::vector<A> products(static_cast<size_t>(nc)), grads(static_cast<size_t>(nc));
    for (int64_t first = begin; first < end; first += kCellsPerBlock) {
      const int64_t boxes_here = std::min(kCellsPerBlock, end - first) * na;
      block.Compute(features + first * na * per_anchor, boxes_here, per_anchor, g.max_log_scale);
      for (int64_t b = 0; b < boxes_here; ++b) {
        const int64_t box = first * na + b;
        const int64_t a = box % na;
        const T* f = features + box * per_anchor;
        T* df = grad_features + box * per_anchor;
        const A* s = block.sigmoids.data() + b * per_anchor;
        const A t[4] = {A(f[0]), A(f[1]), A(f[2]), A(f[3])};
        A gb[4] = {A(0), A(0), A(0), A(0)};
        if (grad_boxes != nullptr) {
          for (int k = 0; k < 4; ++k) gb[k] = A(grad_boxes[box * 4 + k]);
        }
        A dt[4];
        yolo::DecodeBoxGrad(g, t, A(anchors[2 * a]), A(anchors[2 * a + 1]), gb, dt);
        for (int k = 0; k < 4; ++k) df[k] = T(dt[k]);

        const A obj = s[4];
        // gc = d class_scores, plus d scores at the class the forward chose.
        ArrayMap<A> gc(grads.data(), n);
        if (grad_class_scores == nullptr) {
          gc.setZero();
        } else if constexpr (std::is_same_v<T, A>) {
          gc = ConstArrayMap<A>(grad_class_scores + box * nc, n);
        } else {
          for (int64_t c = 0; c < nc; ++c) gc[c] = A(grad_class_scores[box * nc + c]);
        }
        if (grad_scores != nullptr) {
          const A* v = ClassScoresOf<T, A>(s, nc, nullptr, products.data());
          gc[ArgMax(v, nc)] += A(grad_scores[box]);
        }
        const ConstArrayMap<A> cls(s + 5, n);
        const A d_obj = (gc * cls).sum();
        if constexpr (std::is_same_v<T, A>) {
          ArrayMap<A>(df + 5, n) = gc * obj * (cls * (A(1) - cls));
        } else {
          for (int64_t c = 0; c < nc; ++c) {
            df[5 + c] = T(gc[c] * obj * (cls[c] * (A(1) - cls[c])));
          }
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

// YoloDecode on the CPU: validation, and the forward and gradient kernels
// (yolo_decode_kernels.inc), parallel over the cells of the batch (each box is computed by one
// call, so any partition gives the same bits). float and double run the AVX2+FMA build of the
// kernels where the CPU has both (yolo_decode_fma_cpu.cc, the faster build: `make core-bench`'s
// BM_YoloDecodeForward with OPFORGE_MAX_ISA=avx and unset compares the two); its exp rounds
// differently in the last bit, so results hold for the ISA they were computed on. Every NaN output
// is quiet_NaN() (OneNan in yolo_decode_kernels.inc), whatever NaN or arithmetic made it.
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#if defined(__AVX__)
#include <immintrin.h>
#endif

#include <sstream>
#include <type_traits>

#include "common/arith.h"
#include "ops/yolo_decode/yolo_decode.h"
#include "ops/yolo_decode/yolo_decode_kernels.h"
#include "ops/yolo_decode/yolo_decode_math.h"

namespace opforge {

namespace {

constexpr char kOp[] = "YoloDecode";
constexpr char kGradOp[] = "YoloDecodeGrad";

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
  // +inf is the default (no clamp); any finite bound clamps (a negative one shrinks every box
  // below its anchor, odd but well defined). NaN and -inf have no meaning as a bound.
  if (std::isnan(p.max_log_scale) || p.max_log_scale == -std::numeric_limits<float>::infinity()) {
    return InvalidArgument(kOp, "max_log_scale", "a finite value or +inf (no clamp)",
                           p.max_log_scale);
  }
  return Status::Ok();
}

template <typename T>
Status CheckYoloAnchors(const char* op, const char* argument, const T* anchors, int64_t count) {
  for (int64_t k = 0; k < count; ++k) {
    // In double: half and bfloat16 compare and print as numbers (exactly).
    const double w = static_cast<double>(anchors[2 * k]),
                 h = static_cast<double>(anchors[2 * k + 1]);
    if (!(w > 0.0 && h > 0.0 && std::isfinite(w) && std::isfinite(h))) {
      std::ostringstream where, given;
      where << argument << "[" << k << "]";
      given << "[" << w << ", " << h << "]";
      return InvalidArgument(op, where.str().c_str(), "a finite, positive (width, height)",
                             given.str());
    }
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
  // boxes [batch, H*W*A, 4] and class_scores [batch, H*W*A, C] must be possible tensors (an
  // empty batch does not make a 2^62-cell grid one: its shape would overflow).
  int64_t n = 0, cells = 0;
  const int64_t width = std::max<int64_t>(4, p.num_classes);
  if (__builtin_mul_overflow(features[1], features[2], &n) || __builtin_mul_overflow(n, a, &n) ||
      __builtin_mul_overflow(n, width, &cells) ||
      __builtin_mul_overflow(cells, std::max<int64_t>(features[0], 1), &cells)) {
    return InvalidArgument(kOp, "features",
                           "a shape whose outputs (height * width * num_anchors boxes per image) "
                           "have fewer than 2^63 elements",
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
  const std::vector<int64_t> kAbsent{0};  // [0]: no gradient for that output (read as zeros)
  if (grad_boxes != boxes && grad_boxes != kAbsent) {
    return InvalidArgument(kGradOp, "grad_boxes",
                           "the shape of boxes, " + ShapeString(boxes) + ", or [0] (none)",
                           ShapeString(grad_boxes));
  }
  if (grad_scores != scores && grad_scores != kAbsent) {
    return InvalidArgument(kGradOp, "grad_scores",
                           "the shape of scores, " + ShapeString(scores) + ", or [0] (none)",
                           ShapeString(grad_scores));
  }
  if (grad_class_scores != class_scores && grad_class_scores != kAbsent) {
    return InvalidArgument(
        kGradOp, "grad_class_scores",
        "the shape of class_scores, " + ShapeString(class_scores) + ", or [0] (none)",
        ShapeString(grad_class_scores));
  }
  return Status::Ok();
}

Status CheckYoloAnchors(const char* op, const char* argument, DType dtype, const void* anchors,
                        int64_t count) {
  switch (dtype) {
    case DType::kHalf:
      return CheckYoloAnchors(op, argument, static_cast<const Eigen::half*>(anchors), count);
    case DType::kBFloat16:
      return CheckYoloAnchors(op, argument, static_cast<const Eigen::bfloat16*>(anchors), count);
    case DType::kFloat:
      return CheckYoloAnchors(op, argument, static_cast<const float*>(anchors), count);
    case DType::kDouble:
      return CheckYoloAnchors(op, argument, static_cast<const double*>(anchors), count);
    default:
      return Status::Invalid(std::string(op) + ": anchors of dtype " + DTypeName(dtype) +
                             " (a float dtype expected)");
  }
}

namespace default_build {
#include "ops/yolo_decode/yolo_decode_kernels.inc"
}  // namespace default_build

template <typename T>
void YoloDecodeForward(const YoloDecodeParams& p, const T* features, const T* anchors, T* boxes,
                       T* scores, int32_t* class_indices, T* class_scores,
                       const Parallel& parallel) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    if (const YoloDecodeKernels<T>* fma = FmaYoloDecodeKernels<T>()) {
      return fma->forward(p, features, anchors, boxes, scores, class_indices, class_scores,
                          parallel);
    }
  }
  default_build::Forward<T, Acc<T>>(p, features, anchors, boxes, scores, class_indices,
                                    class_scores, parallel);
}

template <typename T>
void YoloDecodeBackward(const YoloDecodeParams& p, const T* grad_boxes, const T* grad_scores,
                        const T* grad_class_scores, const T* features, const T* anchors,
                        T* grad_features, const Parallel& parallel) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    if (const YoloDecodeKernels<T>* fma = FmaYoloDecodeKernels<T>()) {
      return fma->backward(p, grad_boxes, grad_scores, grad_class_scores, features, anchors,
                           grad_features, parallel);
    }
  }
  default_build::Backward<T, Acc<T>>(p, grad_boxes, grad_scores, grad_class_scores, features,
                                     anchors, grad_features, parallel);
}

template <typename T>
void YoloDecodeSelected(const YoloDecodeParams& p, const T* features, const T* anchors,
                        int64_t image, const int64_t* selected, int64_t count, T* boxes,
                        T* class_scores) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    if (const YoloDecodeKernels<T>* fma = FmaYoloDecodeKernels<T>()) {
      return fma->selected(p, features, anchors, image, selected, count, boxes, class_scores);
    }
  }
  default_build::DecodeSelected<T, Acc<T>>(p, features, anchors, image, selected, count, boxes,
                                           class_scores);
}

#define OPFORGE_INSTANTIATE_YOLO_DECODE_(T, ...)                                             \
  template void YoloDecodeForward<T>(const YoloDecodeParams&, const T*, const T*, T*, T*,    \
                                     int32_t*, T*, const Parallel&);                         \
  template void YoloDecodeBackward<T>(const YoloDecodeParams&, const T*, const T*, const T*, \
                                      const T*, const T*, T*, const Parallel&);              \
  template void YoloDecodeSelected<T>(const YoloDecodeParams&, const T*, const T*, int64_t,  \
                                      const int64_t*, int64_t, T*, T*);                      \
  template Status CheckYoloAnchors<T>(const char*, const char*, const T*, int64_t);
OPFORGE_FLOAT_TYPES(OPFORGE_INSTANTIATE_YOLO_DECODE_)
#undef OPFORGE_INSTANTIATE_YOLO_DECODE_

}  // namespace opforge

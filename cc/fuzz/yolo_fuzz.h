// The YOLO harnesses' shared decoding (yolo_decode_fuzz.cc, yolo_postprocess_fuzz.cc): the
// YoloDecode attrs, one scale's feature map and anchors, and the anchors' values. See fuzz_util.h
// for the byte format.
#ifndef OPFORGE_FUZZ_YOLO_FUZZ_H_
#define OPFORGE_FUZZ_YOLO_FUZZ_H_

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "ops/yolo_decode/yolo_decode.h"

namespace opforge {
namespace fuzz {

// num_classes, input_size, box_format (when with_format), scale_x_y and max_log_scale (FloatOr:
// +inf, the default, torchvision's log(62.5), 1.5), in this order.
inline void ReadYoloAttrs(Input& in, YoloDecodeParams* p, bool with_format) {
  p->num_classes = in.IntOr(1 + in.Byte() % 4);
  p->input_size = in.List(2, [&](size_t) { return in.IntOr(32 * (1 + in.Byte() % 16)); });
  if (with_format) p->box_format = in.Enum({"xyxy", "yxyx", "center_xywh"});
  p->scale_x_y = in.FloatOr({1.0f, 1.05f, 2.0f});
  p->max_log_scale = in.FloatOr(
      {std::numeric_limits<float>::infinity(), static_cast<float>(kYoloMaxLogScale), 1.5f});
}

// The anchors' values after Fill: one Byte, below 0xC0 (and past the end of the bytes): each
// value made one the bindings accept (|v|, or 1 for 0, inf and NaN), so that the kernels run on
// most inputs; else as drawn, which CheckYoloAnchors mostly refuses (the error path).
template <typename T>
void AcceptableAnchors(Input& in, Tensor<T>* anchors) {
  if (in.Byte() >= 0xC0) return;
  for (int64_t i = 0; i < anchors->size(); ++i) {
    const double v = std::fabs(static_cast<double>((*anchors)[i]));
    if (!(v > 0.0) || !std::isfinite(v))
      (*anchors)[i] = T(1.0f);
    else if (static_cast<double>((*anchors)[i]) < 0.0)
      (*anchors)[i] = static_cast<T>(v);
  }
}

// One scale: Dims H, W, A, then features ShapeOr([B, H, W, A * (5 + C)]) (five_d: [B, H, W, A,
// DimOr(5 + C)]) and anchors ShapeOr([A, 2]).
inline void YoloShapes(Input& in, bool five_d, int64_t num_classes, int64_t batch,
                       std::vector<int64_t>* features, std::vector<int64_t>* anchors) {
  const int64_t h = in.Dim(), w = in.Dim(), a = in.Dim();
  const int64_t per_anchor = num_classes >= 0 ? 5 + num_classes : in.Dim();
  const int64_t channels = MulOrMinus1(a, per_anchor);
  if (five_d) {
    *features = in.ShapeOr({batch, h, w, a, in.DimOr(per_anchor)});
  } else {
    *features = in.ShapeOr({batch, h, w, in.DimOr(channels < 0 ? 0 : channels)});
  }
  *anchors = in.ShapeOr({a, 2});
}

}  // namespace fuzz
}  // namespace opforge

#endif  // OPFORGE_FUZZ_YOLO_FUZZ_H_

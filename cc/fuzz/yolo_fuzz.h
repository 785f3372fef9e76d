// The YOLO harnesses' shared decoding (yolo_decode_fuzz.cc, yolo_postprocess_fuzz.cc): the
// YoloDecode attrs and one scale's feature map and anchors. See fuzz_util.h for the byte format.
#ifndef OPFORGE_FUZZ_YOLO_FUZZ_H_
#define OPFORGE_FUZZ_YOLO_FUZZ_H_

#include <cstdint>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "ops/yolo_decode/yolo_decode.h"

namespace opforge {
namespace fuzz {

// num_classes, input_size, box_format (when with_format) and scale_x_y, in this order.
inline void ReadYoloAttrs(Input& in, YoloDecodeParams* p, bool with_format) {
  p->num_classes = in.IntOr(1 + in.Byte() % 4);
  p->input_size = in.List(2, [&](size_t) { return in.IntOr(32 * (1 + in.Byte() % 16)); });
  if (with_format) p->box_format = in.Enum({"xyxy", "yxyx", "center_xywh"});
  p->scale_x_y = in.FloatOr({1.0f, 1.05f, 2.0f});
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

// Test cases shared by the YoloDecode core test and its CUDA test: a case (the features' shape,
// the input size and the attrs), its description for failure messages, its feature shape and
// counts, and its validated params.
//
// Host-only: no CUDA header, so the core tests (built under sanitizers, without CUDA) include
// it too. Test code only; header-only.
#ifndef OPFORGE_OPS_YOLO_DECODE_YOLO_DECODE_TEST_DATA_H_
#define OPFORGE_OPS_YOLO_DECODE_YOLO_DECODE_TEST_DATA_H_

#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "common/status.h"
#include "ops/yolo_decode/yolo_decode.h"

namespace opforge {
namespace test {
namespace yolo_decode {

struct Case {
  int64_t batch, height, width, anchors, classes;
  int64_t input_h, input_w;
  std::string format;
  bool normalized;
  float scale_x_y;
  bool five_d;
  float max_log_scale = std::numeric_limits<float>::infinity();  // the op's default: no clamp
};

inline std::string Describe(const Case& c) {
  std::ostringstream s;
  s << "[" << c.batch << ", " << c.height << ", " << c.width << ", " << c.anchors << " x (5 + "
    << c.classes << ")]" << (c.five_d ? " 5-D" : " 4-D") << " input " << c.input_h << "x"
    << c.input_w << " " << c.format << (c.normalized ? " normalized" : "")
    << " scale_x_y=" << c.scale_x_y << " max_log_scale=" << c.max_log_scale;
  return s.str();
}

inline std::vector<int64_t> FeatureShape(const Case& c) {
  if (c.five_d) return {c.batch, c.height, c.width, c.anchors, 5 + c.classes};
  return {c.batch, c.height, c.width, c.anchors * (5 + c.classes)};
}

inline int64_t NumFeatures(const Case& c) {
  return c.batch * c.height * c.width * c.anchors * (5 + c.classes);
}
inline int64_t NumBoxes(const Case& c) { return c.batch * c.height * c.width * c.anchors; }

inline Status ParamsOf(const Case& c, YoloDecodeParams* p) {
  *p = YoloDecodeParams();
  p->num_classes = c.classes;
  p->input_size = {c.input_h, c.input_w};
  p->box_format = c.format;
  p->normalized = c.normalized;
  p->scale_x_y = c.scale_x_y;
  p->max_log_scale = c.max_log_scale;
  return ValidateYoloDecode(FeatureShape(c), {c.anchors, 2}, p);
}

}  // namespace yolo_decode
}  // namespace test
}  // namespace opforge

#endif  // OPFORGE_OPS_YOLO_DECODE_YOLO_DECODE_TEST_DATA_H_

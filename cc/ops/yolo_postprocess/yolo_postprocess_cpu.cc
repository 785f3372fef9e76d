// YoloPostprocess on the CPU: per image, the boxes whose objectness can reach the score
// threshold (one read of each box's objectness logit), decoded by YoloDecodeSelected into
// compact arrays in their original order, then the CombinedNonMaxSuppression core on those.
#include <Eigen/Core>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "ops/yolo_postprocess/yolo_postprocess.h"

namespace opforge {

namespace {

constexpr char kOp[] = "YoloPostprocess";

// "YoloDecode: features must be ..." as "YoloPostprocess: features[1] must be ...".
Status OfScale(const Status& s, size_t scale) {
  if (s.ok()) return s;
  std::string m = s.message();
  const std::string prefix = "YoloDecode: ";
  if (m.compare(0, prefix.size(), prefix) == 0) m = m.substr(prefix.size());
  const size_t space = m.find(' ');
  const std::string argument = m.substr(0, space);
  if (argument == "features" || argument == "anchors") {
    m = argument + "[" + std::to_string(scale) + "]" + m.substr(space);
  }
  return Status::Invalid(std::string(kOp) + ": " + m);
}

// A CombinedNonMaxSuppression message as this op's: its op name, and the sizes by this op's
// names (max_detections_per_class, max_detections).
Status AsOwn(const Status& s) {
  if (s.ok()) return s;
  std::string m = s.message();
  m = std::string(kOp) + m.substr(m.find(": "));
  for (const auto& [from, to] : {std::pair<std::string, std::string>{"max_output_size_per_class",
                                                                     "max_detections_per_class"},
                                 {"max_total_size", "max_detections"}}) {
    for (size_t at = m.find(from); at != std::string::npos; at = m.find(from, at + to.size())) {
      m.replace(at, from.size(), to);
    }
  }
  return Status::Invalid(m);
}

// Reads T as float (half and bfloat16 exactly).
template <typename T>
inline float AsFloat(T v) {
  return static_cast<float>(v);
}

}  // namespace

int64_t YoloPostprocessParams::boxes_per_image() const {
  int64_t n = 0;
  for (const YoloDecodeParams& s : scales) n += s.boxes_per_image();
  return n;
}

Status ValidateYoloPostprocessAttrs(const YoloPostprocessParams& p) {
  YoloDecodeParams d;
  d.num_classes = p.num_classes;
  d.input_size = p.input_size;
  d.scale_x_y = p.scale_x_y;
  d.max_log_scale = p.max_log_scale;
  Status s = ValidateYoloDecodeAttrs(&d);
  if (s.ok()) return s;
  return Status::Invalid(kOp + s.message().substr(std::string("YoloDecode").size()));
}

Status ValidateYoloPostprocess(const std::vector<std::vector<int64_t>>& features,
                               const std::vector<std::vector<int64_t>>& anchors,
                               const std::vector<std::vector<int64_t>>& scalars,
                               YoloPostprocessParams* params) {
  YoloPostprocessParams& p = *params;
  if (features.empty()) {
    return InvalidArgument(kOp, "features", "at least one head map", "none");
  }
  if (anchors.size() != features.size()) {
    return InvalidArgument(
        kOp, "anchors", "one [A, 2] tensor per head map (" + std::to_string(features.size()) + ")",
        std::to_string(anchors.size()) + " tensors");
  }
  p.scales.assign(features.size(), YoloDecodeParams());
  for (size_t s = 0; s < features.size(); ++s) {
    YoloDecodeParams& d = p.scales[s];
    d.num_classes = p.num_classes;
    d.input_size = p.input_size;
    d.box_format = "xyxy";
    d.normalized = true;
    d.scale_x_y = p.scale_x_y;
    d.max_log_scale = p.max_log_scale;
    OPFORGE_RETURN_IF_ERROR(OfScale(ValidateYoloDecode(features[s], anchors[s], &d), s));
    if (d.batch != p.scales[0].batch) {
      return InvalidArgument(
          kOp, ("features[" + std::to_string(s) + "]").c_str(),
          "a map of the batch of features[0], " + std::to_string(p.scales[0].batch),
          ShapeString(features[s]));
    }
  }
  p.batch = p.scales[0].batch;
  const int64_t n = p.boxes_per_image();
  if (n > std::numeric_limits<int32_t>::max()) {
    return InvalidArgument(kOp, "features", "at most 2^31 - 1 boxes per image over all maps", n);
  }
  // The NMS shapes of the unfused path: boxes [B, N, 1, 4], scores [B, N, C].
  return AsOwn(
      ValidateCombinedNms({p.batch, n, 1, 4}, {p.batch, n, p.num_classes}, scalars, &p.nms));
}

Status ValidateYoloPostprocessValues(const YoloPostprocessParams& p) {
  return AsOwn(ValidateCombinedNmsValues(p.nms));
}

double YoloObjectnessBound(float score_threshold) {
  // A candidate has score > t, where score is sigmoid(obj) * sigmoid(class) <= sigmoid(obj),
  // computed in float (the sigmoid within a few ulps), rounded to T: up by at most 2^-8
  // relatively (bfloat16), or by at most 2^-25 absolutely among half's subnormals. So
  // sigmoid_exact(obj) > (t - 2^-24) / (1 + 1/64), with a wide margin, i.e.
  // obj > logit((t - 2^-24) / (1 + 1/64)).
  const double q =
      (static_cast<double>(score_threshold) - std::ldexp(1.0, -24)) / (1.0 + 1.0 / 64.0);
  if (!(q > 0.0)) return -std::numeric_limits<double>::infinity();
  if (q >= 1.0) return std::numeric_limits<double>::infinity();
  return std::log(q / (1.0 - q));
}

template <typename T>
void YoloPostprocess(const YoloPostprocessParams& p, const std::vector<const T*>& features,
                     const std::vector<const T*>& anchors, T* nmsed_boxes, T* nmsed_scores,
                     float* nmsed_classes, int32_t* valid_detections, const Parallel& parallel) {
  const int64_t batch = p.batch, nc = p.num_classes, n_all = p.boxes_per_image();
  const int64_t detections = p.nms.max_detections();
  const double bound = YoloObjectnessBound(p.nms.score_threshold);
  const bool all = std::isinf(bound) && bound < 0;

  // Per image: the selected boxes' decoded boxes [M, 4] and class scores [M, C], in the order
  // of the concatenated scales.
  struct Compact {
    std::vector<T> boxes, scores;
    int64_t count = 0;
  };
  std::vector<Compact> compact(static_cast<size_t>(batch));
  auto select = [&](int64_t image) {
    Compact& out = compact[static_cast<size_t>(image)];
    thread_local std::vector<int64_t> selected;
    int64_t count = 0;
    for (size_t s = 0; s < p.scales.size(); ++s) {
      const YoloDecodeParams& d = p.scales[s];
      const int64_t per_anchor = d.channels_per_anchor(), n = d.boxes_per_image();
      const T* obj = features[s] + image * n * per_anchor + 4;
      selected.clear();
      if (all) {
        for (int64_t i = 0; i < n; ++i) selected.push_back(i);
      } else {
        for (int64_t i = 0; i < n; ++i) {
          if (static_cast<double>(AsFloat(obj[i * per_anchor])) >= bound) selected.push_back(i);
        }
      }
      const int64_t m = static_cast<int64_t>(selected.size());
      out.boxes.resize(static_cast<size_t>((count + m) * 4));
      out.scores.resize(static_cast<size_t>((count + m) * nc));
      YoloDecodeSelected<T>(d, features[s], anchors[s], image, selected.data(), m,
                            out.boxes.data() + count * 4, out.scores.data() + count * nc);
      count += m;
    }
    out.count = count;
  };
  // Selection reads one logit per box and decodes a few: cheap per box, but C-wide per kept one.
  parallel.For(batch, 20.0 * static_cast<double>(n_all), [&](int64_t begin, int64_t end) {
    for (int64_t image = begin; image < end; ++image) select(image);
  });

  auto nms = [&](int64_t image, const Parallel& inner) {
    const Compact& c = compact[static_cast<size_t>(image)];
    CombinedNmsParams q = p.nms;
    q.batch = 1;
    q.num_boxes = c.count;
    q.q = 1;
    q.num_classes = nc;
    CombinedNms<T>(q, c.boxes.data(), c.scores.data(), nmsed_boxes + image * detections * 4,
                   nmsed_scores + image * detections, nmsed_classes + image * detections,
                   valid_detections + image, inner);
  };
  if (batch == 1) {
    nms(0, parallel);  // parallel over classes
  } else {
    const SerialParallel serial;
    parallel.For(batch, 1000.0 * static_cast<double>(nc), [&](int64_t begin, int64_t end) {
      for (int64_t image = begin; image < end; ++image) nms(image, serial);
    });
  }
}

#define OPFORGE_INSTANTIATE_YOLO_POSTPROCESS_(T, ...)                                          \
  template void YoloPostprocess<T>(const YoloPostprocessParams&, const std::vector<const T*>&, \
                                   const std::vector<const T*>&, T*, T*, float*, int32_t*,     \
                                   const Parallel&);
OPFORGE_YOLO_POSTPROCESS_TYPES(OPFORGE_INSTANTIATE_YOLO_POSTPROCESS_)
#undef OPFORGE_INSTANTIATE_YOLO_POSTPROCESS_

}  // namespace opforge

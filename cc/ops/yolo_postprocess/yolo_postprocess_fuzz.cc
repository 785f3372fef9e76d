// libFuzzer harness of the YoloPostprocess core, as yolo_postprocess_tf.cc calls it (see
// fuzz/fuzz_util.h), and checked against what the op promises bit for bit: YoloDecode on every
// scale (normalised xyxy), the scales concatenated, then CombinedNonMaxSuppression (q = 1).
// Bytes: mode (unused), dtype (half, bfloat16, float), flags (extra bit 0: pad_per_class,
// bit 1: clip_boxes off, bit 2: 5-D features); num_scales 1 + Byte % 3; attrs as YoloDecode's
// (no box_format); batch Dim; per scale: yolo_fuzz.h's YoloShapes; the five scalars' shapes
// ShapeOr([]) and values (Int, Int, Float, Float, Float); then the values of the maps and
// anchors (objectness logits drawn around the score threshold's logit one time in two), and per
// scale the anchors' byte (yolo_fuzz.h's AcceptableAnchors) before the binding's check.
#include <cmath>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "fuzz/yolo_fuzz.h"
#include "ops/combined_non_max_suppression/combined_non_max_suppression.h"
#include "ops/yolo_decode/yolo_decode.h"
#include "ops/yolo_postprocess/yolo_postprocess.h"

namespace opforge {
namespace fuzz {
namespace {

constexpr const char* kOp = "YoloPostprocess";
constexpr double kMaxWork = 4e6;  // boxes^2 * classes per image, the NMS's worst case

template <typename T>
void Fuzz(Input& in, int /*mode: one entry point*/, const FuzzFlags& flags) {
  YoloPostprocessParams attrs;
  const int k = 1 + in.Byte() % 3;
  YoloDecodeParams d;
  ReadYoloAttrs(in, &d, false);
  attrs.num_classes = d.num_classes;
  attrs.input_size = d.input_size;
  attrs.scale_x_y = d.scale_x_y;
  attrs.max_log_scale = d.max_log_scale;
  attrs.nms.pad_per_class = (flags.extra & 1) != 0;
  attrs.nms.clip_boxes = (flags.extra & 2) == 0;
  Note("num_scales", k);
  Note("num_classes", attrs.num_classes);
  Note("input_size", attrs.input_size);
  Note("scale_x_y", attrs.scale_x_y);
  Note("max_log_scale", attrs.max_log_scale);
  Note("pad_per_class", attrs.nms.pad_per_class);
  Note("clip_boxes", attrs.nms.clip_boxes);
  // The kernel's constructor.
  if (!Passed(ValidateYoloPostprocessAttrs(attrs), {kOp})) return;
  const int64_t batch = in.Dim();
  std::vector<std::vector<int64_t>> features(k), anchors(k), scalars(5);
  for (int s = 0; s < k; ++s) {
    YoloShapes(in, (flags.extra & 4) != 0, attrs.num_classes, in.DimOr(batch), &features[s],
               &anchors[s]);
  }
  for (auto& s : scalars) s = in.ShapeOr({});
  for (auto* v : {&features, &anchors, &scalars})
    for (auto& s : *v) Input::Fix(&s);
  YoloPostprocessParams p = attrs;
  for (int s = 0; s < k; ++s) {
    Note("features", features[s]);
    Note("anchors", anchors[s]);
  }
  if (!Passed(ValidateYoloPostprocess(features, anchors, scalars, &p), {kOp})) return;
  for (auto* v : {&features, &anchors, &scalars})
    for (auto& s : *v)
      if (!InputsPossible({&s})) return;
  // nms_binding::ReadScalars: the scalar inputs' values.
  p.nms.max_output_size_per_class = static_cast<int32_t>(in.IntOr(1 + in.Byte() % 8));
  p.nms.max_total_size = static_cast<int32_t>(in.IntOr(1 + in.Byte() % 16));
  p.nms.iou_threshold = in.FloatOr({0.5f, 0.45f, 0.0f, 1.0f});
  p.nms.score_threshold = in.FloatOr({0.5f, 0.25f, 0.0f, -1.0f, 0.001f});
  p.nms.soft_nms_sigma = in.FloatOr({0.0f, 0.0f, 0.5f});
  Note("max_detections_per_class", p.nms.max_output_size_per_class);
  Note("max_detections", p.nms.max_total_size);
  Note("iou_threshold", p.nms.iou_threshold);
  Note("score_threshold", p.nms.score_threshold);
  Note("soft_nms_sigma", p.nms.soft_nms_sigma);
  if (!Passed(ValidateYoloPostprocessValues(p), {kOp})) return;
  const int64_t b = p.batch, dets = p.nms.max_detections();
  Note("detections", dets);
  if (p.nms.num_boxes != p.boxes_per_image() || p.nms.q != 1 ||
      p.nms.num_classes != p.num_classes || p.nms.batch != b) {
    Fail("the NMS params do not match the maps");
  }
  Outputs outs;
  outs.Add<T>("nmsed_boxes", {b, dets, 4});
  outs.Add<T>("nmsed_scores", {b, dets});
  outs.Add<float>("nmsed_classes", {b, dets});
  outs.Add<int32_t>("valid_detections", {b});
  for (int s = 0; s < k; ++s) {
    if (!SmallEnough({features[s], anchors[s]})) return;
  }
  if (!outs.Small() || !outs.AnyNonEmpty()) return;
  const double n = static_cast<double>(p.boxes_per_image());
  if (n * n * static_cast<double>(p.num_classes) > kMaxWork) return;

  std::vector<Tensor<T>> f, a;
  std::vector<const T*> fp, ap;
  const bool near_threshold = in.Bool();
  const double logit =
      std::log(std::max(1e-6, std::min(1.0 - 1e-6, (double)p.nms.score_threshold)) /
               (1.0 - std::max(1e-6, std::min(1.0 - 1e-6, (double)p.nms.score_threshold))));
  for (int s = 0; s < k; ++s) {
    f.emplace_back(features[s]);
    a.emplace_back(anchors[s]);
    f.back().Fill(in);
    a.back().Fill(in);
    if (near_threshold) {  // objectness logits where the selection's bound is decided
      const int64_t per_anchor = p.scales[s].channels_per_anchor();
      for (int64_t i = 4; i < f.back().size(); i += per_anchor) {
        f.back()[i] = static_cast<T>(
            static_cast<float>(logit + (static_cast<int>(in.ValueByte()) - 128) / 512.0));
      }
    }
  }
  for (int s = 0; s < k; ++s) {
    AcceptableAnchors(in, &a[s]);
    // The binding's value check of each scale's anchors, before any work.
    const std::string name = "anchors[" + std::to_string(s) + "]";
    if (!Passed(CheckYoloAnchors(kOp, name.c_str(), a[s].data(), p.scales[s].anchors), {kOp})) {
      return;
    }
    fp.push_back(f[s].data());
    ap.push_back(a[s].data());
  }
  outs.Run(flags, [&](const Parallel& parallel) {
    YoloPostprocess<T>(p, fp, ap, outs.Get<T>(0), outs.Get<T>(1), outs.Get<float>(2),
                       outs.Get<int32_t>(3), parallel);
  });

  // The unfused path: YoloDecode per scale, concatenated, then CombinedNms.
  const int64_t n_all = p.boxes_per_image(), c = p.num_classes;
  Tensor<T> boxes({b, n_all, 1, 4}), scores({b, n_all, c});
  int64_t offset = 0;
  for (int s = 0; s < k; ++s) {
    const YoloDecodeParams& dp = p.scales[s];
    const int64_t ns = dp.boxes_per_image();
    Tensor<T> sb({b, ns, 4}), ss({b, ns}), sc({b, ns, c});
    Tensor<int32_t> si({b, ns});
    YoloDecodeForward<T>(dp, fp[s], ap[s], sb.data(), ss.data(), si.data(), sc.data(),
                         SerialParallel());
    for (int64_t i = 0; i < b; ++i) {
      std::copy(sb.data() + i * ns * 4, sb.data() + (i + 1) * ns * 4,
                boxes.data() + (i * n_all + offset) * 4);
      std::copy(sc.data() + i * ns * c, sc.data() + (i + 1) * ns * c,
                scores.data() + (i * n_all + offset) * c);
    }
    offset += ns;
  }
  Outputs ref;
  ref.Add<T>("nmsed_boxes", {b, dets, 4});
  ref.Add<T>("nmsed_scores", {b, dets});
  ref.Add<float>("nmsed_classes", {b, dets});
  ref.Add<int32_t>("valid_detections", {b});
  CombinedNms<T>(p.nms, boxes.data(), scores.data(), ref.Get<T>(0), ref.Get<T>(1),
                 ref.Get<float>(2), ref.Get<int32_t>(3), SerialParallel());
  outs.Compare(ref.Snapshot(), "YoloPostprocess against YoloDecode + CombinedNms");
}

}  // namespace
}  // namespace fuzz
}  // namespace opforge

OPFORGE_FUZZ_ENTRY(1, WithNmsFloatType)

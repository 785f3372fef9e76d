// libFuzzer harness of the CombinedNonMaxSuppression core, as
// combined_non_max_suppression_tf.cc calls it (see fuzz/fuzz_util.h), with the output contract
// checked: valid_detections in [0, D], rows past it zero, classes integral in [0, C), scores
// non-increasing, clipped boxes in [0, 1]. Bytes: mode (unused), dtype (half, bfloat16, float),
// flags (extra bit 0: pad_per_class, bit 1: clip_boxes off); Dims B, N, C; q one byte (< 0x80: 1,
// < 0xC0: C, else a Dim); boxes ShapeOr([B, N, q, DimOr(4)]); scores ShapeOr([B, N, C]); the five
// scalars' shapes ShapeOr([]) and values (Int, Int, Float, Float, Float); then the values (boxes
// and scores from a small grid one time in two, so that IoUs and ties are common).
#include <cmath>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "ops/combined_non_max_suppression/combined_non_max_suppression.h"

namespace opforge {
namespace fuzz {
namespace {

constexpr const char* kOp = "CombinedNonMaxSuppression";
constexpr double kMaxWork = 4e6;  // boxes^2 * classes per image, the NMS's worst case

template <typename T>
void Fuzz(Input& in, int /*mode: one entry point*/, const FuzzFlags& flags) {
  CombinedNmsParams p;
  p.pad_per_class = (flags.extra & 1) != 0;
  p.clip_boxes = (flags.extra & 2) == 0;
  Note("pad_per_class", p.pad_per_class);
  Note("clip_boxes", p.clip_boxes);
  const int64_t b = in.Dim(), n = in.Dim(), c = in.Dim();
  const uint8_t qb = in.Byte();
  const int64_t q = qb < 0x80 ? 1 : qb < 0xC0 ? c : in.Dim();
  std::vector<int64_t> boxes = in.ShapeOr({b, n, q, in.DimOr(4)});
  std::vector<int64_t> scores = in.ShapeOr({b, n, c});
  std::vector<std::vector<int64_t>> scalars(5);
  for (auto& s : scalars) s = in.ShapeOr({});
  Input::Fix({&boxes, &scores});
  for (auto& s : scalars) Input::Fix(&s);
  Note("boxes", boxes);
  Note("scores", scores);
  if (!Passed(ValidateCombinedNms(boxes, scores, scalars, &p), {kOp})) return;
  if (!InputsPossible({&boxes, &scores})) return;
  for (auto& s : scalars)
    if (!InputsPossible({&s})) return;
  p.max_output_size_per_class = static_cast<int32_t>(in.IntOr(1 + in.Byte() % 8));
  p.max_total_size = static_cast<int32_t>(in.IntOr(1 + in.Byte() % 16));
  p.iou_threshold = in.FloatOr({0.5f, 0.45f, 0.0f, 1.0f});
  p.score_threshold = in.FloatOr({0.0f, 0.25f, -1.0f, 0.5f});
  p.soft_nms_sigma = in.FloatOr({0.0f, 0.0f, 0.5f});
  Note("max_output_size_per_class", p.max_output_size_per_class);
  Note("max_total_size", p.max_total_size);
  Note("iou_threshold", p.iou_threshold);
  Note("score_threshold", p.score_threshold);
  Note("soft_nms_sigma", p.soft_nms_sigma);
  if (!Passed(ValidateCombinedNmsValues(p), {kOp})) return;
  const int64_t dets = p.max_detections();
  Note("detections", dets);
  if (dets < 0) Fail("max_detections() = %lld", (long long)dets);
  Outputs outs;
  outs.Add<T>("nmsed_boxes", {p.batch, dets, 4});
  outs.Add<T>("nmsed_scores", {p.batch, dets});
  outs.Add<float>("nmsed_classes", {p.batch, dets});
  outs.Add<int32_t>("valid_detections", {p.batch});
  if (!outs.Small() || !outs.AnyNonEmpty() || !SmallEnough({boxes, scores})) return;
  if (static_cast<double>(p.num_boxes) * p.num_boxes * p.num_classes > kMaxWork) return;
  Tensor<T> tb(boxes), ts(scores);
  if (in.Bool()) {  // coordinates on a grid of eighths, scores of sixteenths: overlaps and ties
    for (int64_t i = 0; i < tb.size(); ++i) tb[i] = static_cast<T>((in.ValueByte() % 10) / 8.0f);
    for (int64_t i = 0; i < ts.size(); ++i)
      ts[i] = static_cast<T>((in.ValueByte() % 18) / 16.0f - 0.0625f);
  } else {
    tb.Fill(in);
    ts.Fill(in);
  }
  outs.Run(flags, [&](const Parallel& parallel) {
    CombinedNms<T>(p, tb.data(), ts.data(), outs.Get<T>(0), outs.Get<T>(1), outs.Get<float>(2),
                   outs.Get<int32_t>(3), parallel);
  });
  // The contract of the outputs.
  const T* ob = outs.Get<T>(0);
  const T* os = outs.Get<T>(1);
  const float* oc = outs.Get<float>(2);
  const int32_t* valid = outs.Get<int32_t>(3);
  for (int64_t i = 0; i < p.batch; ++i) {
    if (valid[i] < 0 || valid[i] > dets) {
      Fail("valid_detections[%lld] = %d, outside [0, %lld]", (long long)i, valid[i],
           (long long)dets);
    }
    for (int64_t r = 0; r < dets; ++r) {
      const int64_t row = i * dets + r;
      const float score = static_cast<float>(os[row]), cls = oc[row];
      if (r >= valid[i]) {
        bool zero = score == 0.0f && cls == 0.0f;
        for (int j = 0; j < 4; ++j) zero = zero && static_cast<float>(ob[row * 4 + j]) == 0.0f;
        if (!zero)
          Fail("image %lld row %lld past valid_detections is not zero", (long long)i, (long long)r);
        continue;
      }
      if (!(cls >= 0.0f && cls < static_cast<float>(p.num_classes)) || cls != std::floor(cls)) {
        Fail("image %lld row %lld: class %g", (long long)i, (long long)r, cls);
      }
      if (std::isnan(score)) Fail("image %lld row %lld: NaN score", (long long)i, (long long)r);
      if (r > 0 && score > static_cast<float>(os[row - 1])) {
        Fail("image %lld row %lld: scores not in decreasing order", (long long)i, (long long)r);
      }
      if (p.clip_boxes) {
        for (int j = 0; j < 4; ++j) {
          const float v = static_cast<float>(ob[row * 4 + j]);
          if (!std::isnan(v) && !(v >= 0.0f && v <= 1.0f)) {  // a NaN stays NaN, as in TF
            Fail("image %lld row %lld: clipped coordinate %g", (long long)i, (long long)r, v);
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace fuzz
}  // namespace opforge

OPFORGE_FUZZ_ENTRY(1, WithNmsFloatType)

// libFuzzer harness of the YoloDecode core (forward and gradient), as yolo_decode_tf.cc calls it
// (see fuzz/fuzz_util.h). Bytes: mode (0 YoloDecode, 1 YoloDecodeGrad), dtype (half, bfloat16,
// float, double), flags (extra bit 0: 5-D features; extra bit 1: normalized); attrs: num_classes
// Int, input_size List(2), box_format Enum, scale_x_y Float, max_log_scale Float; features
// [B, H, W, A * (5 + C)] (or 5-D, or any shape) from Dims B, H, W, A; anchors ShapeOr([A, 2]);
// gradient: each of grad_boxes, grad_scores, grad_class_scores one byte (< 0x80 its full shape,
// < 0xC0 [0], else AnyShape); then the values, and the anchors' byte (yolo_fuzz.h's
// AcceptableAnchors), which the binding's CheckYoloAnchors then sees. Checks class_indices in
// [0, num_classes), and that finite features give finite boxes (saturation, yolo_decode.h).
#include <cmath>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "fuzz/yolo_fuzz.h"
#include "ops/yolo_decode/yolo_decode.h"

namespace opforge {
namespace fuzz {
namespace {

template <typename T>
void Fuzz(Input& in, int mode, const FuzzFlags& flags) {
  const char* op = mode == 0 ? "YoloDecode" : "YoloDecodeGrad";
  YoloDecodeParams attrs;
  ReadYoloAttrs(in, &attrs, true);
  attrs.normalized = (flags.extra & 2) != 0;
  Note("num_classes", attrs.num_classes);
  Note("input_size", attrs.input_size);
  Note("box_format", attrs.box_format);
  Note("normalized", attrs.normalized);
  Note("scale_x_y", attrs.scale_x_y);
  Note("max_log_scale", attrs.max_log_scale);
  // The kernel's constructor (the YoloDecode message for both kernels).
  if (!Passed(ValidateYoloDecodeAttrs(&attrs), {"YoloDecode"})) return;
  std::vector<int64_t> features, anchors;
  YoloShapes(in, (flags.extra & 1) != 0, attrs.num_classes, in.Dim(), &features, &anchors);
  YoloDecodeParams p = attrs;
  std::vector<int64_t> gb, gs, gc;
  if (mode == 0) {
    Input::Fix({&features, &anchors});
    Note("features", features);
    Note("anchors", anchors);
    if (!Passed(ValidateYoloDecode(features, anchors, &p), {op})) return;
    if (!InputsPossible({&features, &anchors})) return;
  } else {
    const int64_t b = features.empty() ? 0 : features[0];
    const int64_t n = MulOrMinus1(
        MulOrMinus1(features.size() > 2 ? features[1] : 0, features.size() > 2 ? features[2] : 0),
        anchors.empty() ? 0 : anchors[0]);
    auto grad_shape = [&](std::vector<int64_t> full) {
      const uint8_t k = in.Byte();
      if (k < 0x80) return full;
      if (k < 0xC0) return std::vector<int64_t>{0};
      return in.AnyShape();
    };
    gb = grad_shape({b, n, 4});
    gs = grad_shape({b, n});
    gc = grad_shape({b, n, attrs.num_classes});
    Input::Fix({&features, &anchors, &gb, &gs, &gc});
    Note("grad_boxes", gb);
    Note("grad_scores", gs);
    Note("grad_class_scores", gc);
    Note("features", features);
    Note("anchors", anchors);
    if (!Passed(ValidateYoloDecodeGrad(gb, gs, gc, features, anchors, &p), {op})) return;
    if (!InputsPossible({&gb, &gs, &gc, &features, &anchors})) return;
  }
  if (std::vector<int64_t>{p.batch, p.height, p.width} !=
          std::vector<int64_t>(features.begin(), features.begin() + 3) ||
      p.anchors != anchors[0]) {
    Fail("params do not match the shapes");
  }
  // n = H * W * A and the outputs' counts (the binding computes them so).
  const int64_t n = MulOrMinus1(MulOrMinus1(p.height, p.width), p.anchors);
  if (n < 0) Fail("boxes per image H * W * A overflows int64");
  Outputs outs;
  if (mode == 0) {
    outs.Add<T>("boxes", {p.batch, n, 4});
    outs.Add<T>("scores", {p.batch, n});
    outs.Add<int32_t>("class_indices", {p.batch, n});
    outs.Add<T>("class_scores", {p.batch, n, p.num_classes});
  } else {
    outs.Add<T>("grad_features", features);
  }
  if (!outs.Small() || !outs.AnyNonEmpty() || !SmallEnough({features, anchors, gb, gs, gc})) {
    return;
  }
  Tensor<T> f(features), a(anchors), tgb(gb), tgs(gs), tgc(gc);
  f.Fill(in);
  a.Fill(in);
  tgb.Fill(in);
  tgs.Fill(in);
  tgc.Fill(in);
  AcceptableAnchors(in, &a);
  // The binding's value check (host memory on both devices), before any work.
  if (!Passed(CheckYoloAnchors(op, "anchors", a.data(), p.anchors), {op})) return;
  outs.Run(flags, [&](const Parallel& parallel) {
    if (mode == 0) {
      YoloDecodeForward<T>(p, f.data(), a.data(), outs.Get<T>(0), outs.Get<T>(1),
                           outs.Get<int32_t>(2), outs.Get<T>(3), parallel);
    } else {
      YoloDecodeBackward<T>(p, tgb.data(), tgs.data(), tgc.data(), f.data(), a.data(),
                            outs.Get<T>(0), parallel);
    }
  });
  if (mode == 0) {
    const int32_t* idx = outs.Get<int32_t>(2);
    for (int64_t i = 0; i < outs.Count(2); ++i) {
      if (idx[i] < 0 || idx[i] >= p.num_classes) {
        Fail("class_indices[%lld] = %d, outside [0, %lld)", (long long)i, idx[i],
             (long long)p.num_classes);
      }
    }
    // A box reads its tx, ty, tw, th: where they are finite (and the anchors are), so is it.
    const T* boxes = outs.Get<T>(0);
    const int64_t per_anchor = p.channels_per_anchor();
    for (int64_t i = 0; i < outs.Count(0); ++i) {
      const int64_t box = i / 4;
      bool finite = true;
      for (int k = 0; k < 4; ++k) {
        finite = finite && std::isfinite(static_cast<double>(f[box * per_anchor + k]));
      }
      if (finite && !std::isfinite(static_cast<double>(boxes[i]))) {
        Fail("boxes[%lld] = %g from finite features (saturation)", (long long)i,
             static_cast<double>(boxes[i]));
      }
    }
  }
}

}  // namespace
}  // namespace fuzz
}  // namespace opforge

OPFORGE_FUZZ_ENTRY(2, WithFloatType)

// The per-box maths of YoloDecode and its gradient, written once for the CPU and the CUDA
// kernels (OPFORGE_HOST_DEVICE). A is the type the maths runs in: float (for half, bfloat16 and
// float) or double. Values arrive converted to A; the kernels do the loads and stores.
#ifndef OPFORGE_OPS_YOLO_DECODE_YOLO_DECODE_MATH_H_
#define OPFORGE_OPS_YOLO_DECODE_YOLO_DECODE_MATH_H_

#include <math.h>

#include <algorithm>
#include <cstdint>

#include "common/host_device.h"
#include "ops/yolo_decode/yolo_decode.h"

namespace opforge {
namespace yolo {

OPFORGE_HOST_DEVICE inline float Exp(float x) { return expf(x); }
OPFORGE_HOST_DEVICE inline double Exp(double x) { return exp(x); }

// 1 / (1 + e^-x): never NaN for a non-NaN x (e^-x overflows to inf below x = -88.7 in float, and
// 1 / inf is 0, where the exact value is below float's smallest normal); NaN for NaN.
template <typename A>
OPFORGE_HOST_DEVICE inline A Sigmoid(A x) {
  return A(1) / (A(1) + Exp(-x));
}

// The largest finite value of an element type: where box coordinates saturate.
inline double LargestFinite(DType dtype) {
  switch (dtype) {
    case DType::kHalf:
      return 65504.0;
    case DType::kBFloat16:
      return 3.3895313892515355e38;  // 0x1.fep127
    case DType::kFloat:
      return 3.4028234663852886e38;  // FLT_MAX
    default:
      return 1.7976931348623157e308;  // DBL_MAX
  }
}

// What every box of one call shares, in A.
template <typename A>
struct Geometry {
  A stride_x, stride_y;  // input_w / W, input_h / H
  A input_w, input_h;    // the divisors of normalized boxes
  A scale, offset;       // scale_x_y and (scale_x_y - 1) / 2
  A max_log_scale;       // the clamp of tw, th (+inf: none)
  A largest;             // the output type's largest finite value: box coordinates saturate there
  A finite_max;          // A's own largest finite value (v > finite_max: v is +inf)
  A safe_size;           // sizes exp(t) * anchor up to this never saturate (Unsaturated); or -1
  YoloBoxFormat format;
  bool normalized;
};

// `output` is the element type T the boxes are written in (A for float and double).
template <typename A>
Geometry<A> MakeGeometry(const YoloDecodeParams& p, DType output) {
  Geometry<A> g;
  g.input_h = static_cast<A>(p.input_size[0]);
  g.input_w = static_cast<A>(p.input_size[1]);
  g.stride_y = g.input_h / static_cast<A>(p.height);
  g.stride_x = g.input_w / static_cast<A>(p.width);
  g.scale = static_cast<A>(p.scale_x_y);
  g.offset = (g.scale - A(1)) / A(2);
  g.max_log_scale = static_cast<A>(p.max_log_scale);
  // Exact in A: half's and bfloat16's maxima are floats, and they are computed in float.
  g.largest = static_cast<A>(LargestFinite(output));
  g.finite_max = static_cast<A>(LargestFinite(sizeof(A) == 4 ? DType::kFloat : DType::kDouble));
  // |centre| <= ((scale + 1) / 2 + W) * stride_x (sigmoid in [0, 1], cx < W; `normalized` only
  // divides), and a corner is a centre plus or minus half a size: with a size (before
  // `normalized`) up to largest - centre, no coordinate comes near largest, rounding included.
  const double s = p.scale_x_y;
  const double centre =
      1.000001 *
      std::max((s + 1) / 2 + static_cast<double>(p.width),
               (s + 1) / 2 + static_cast<double>(p.height)) *
      std::max(static_cast<double>(p.input_size[1]) / static_cast<double>(p.width),
               static_cast<double>(p.input_size[0]) / static_cast<double>(p.height));
  const double largest = LargestFinite(output);
  g.safe_size = centre < largest / 2 ? static_cast<A>(largest - centre) : A(-1);
  g.format = p.format;
  g.normalized = p.normalized;
  return g;
}

// Whether no coordinate of the box can saturate (nor its centre overflow): exp(tw) * anchor_w
// and exp(th) * anchor_h at most safe_size; false for NaN. Every box of a sane map: the kernels
// then skip the saturation's work, a noticeable part of the gradient's where every box takes it.
template <typename A>
OPFORGE_HOST_DEVICE inline bool Unsaturated(const Geometry<A>& g, A ew, A eh, A aw, A ah) {
  return ew * aw <= g.safe_size && eh * ah <= g.safe_size;
}

// tw above the bound scales by the bound (NaN stays NaN: the comparison is false). With the
// default bound +inf this is t itself, so exp gets the raw value.
template <typename A>
OPFORGE_HOST_DEVICE inline A ClampLogScale(A t, A bound) {
  return t > bound ? bound : t;
}

// Whether a box coordinate lies beyond +-largest (inf included; NaN does not).
template <typename A>
OPFORGE_HOST_DEVICE inline bool Saturates(A v, A largest) {
  return v > largest || v < -largest;
}

// v clamped to [-largest, largest] (NaN stays NaN).
template <typename A>
OPFORGE_HOST_DEVICE inline A Saturate(A v, A largest) {
  return v > largest ? largest : (v < -largest ? -largest : v);
}

// A box's width (or height) in the output's units before saturation, exp(t) * anchor (divided
// by `divisor` when normalized), from e = exp(t), t already clamped at max_log_scale: the plain
// formula, bit for bit. Where it overflows A (e = exp(t) is inf from t = 88.7 in float, or
// e * anchor is) though t is finite, the size may yet be finite: an anchor below 1 (normalised
// anchors), or the division of a normalized box (exp(86) * 30 px / 416 px is 4e36 in float). It
// is then exp(t / 2) * anchor / divisor * exp(t / 2), every intermediate finite, within a few
// ulps of the exact value; an inf after that is a size beyond A itself, which saturates.
template <typename A>
OPFORGE_HOST_DEVICE inline A BoxSize(const Geometry<A>& g, A e, A t, A anchor, A divisor) {
  A v = e * anchor;
  if (g.normalized) v = v / divisor;
  if (v > g.finite_max && t <= g.finite_max) {  // +inf from a finite t: rare, off the hot path
    const A h = Exp(t / A(2));                  // t / 2 is exact
    v = h * anchor;
    if (g.normalized) v = v / divisor;
    v = v * h;
  }
  return v;
}

// The box before saturation, in the output format: the plain formula (and the sizes bw, bh it
// used, in the output's units), from sigmoid(tx), sigmoid(ty), exp(min(tw, bound)),
// exp(min(th, bound)) and the raw tw, th, in cell (cx, cy) with anchor (aw, ah). RawBoxFrom
// below adds float's rescue from inf - inf.
template <typename A>
struct RawBox {
  A out[4];
  A bw, bh;
};

template <typename A>
OPFORGE_HOST_DEVICE inline RawBox<A> PlainBoxFrom(const Geometry<A>& g, A sx, A sy, A ew, A eh,
                                                  A tw, A th, A cx, A cy, A aw, A ah) {
  RawBox<A> r;
  A bx = (g.scale * sx - g.offset + cx) * g.stride_x;
  A by = (g.scale * sy - g.offset + cy) * g.stride_y;
  if (g.normalized) {
    bx = bx / g.input_w;
    by = by / g.input_h;
  }
  const A bw = BoxSize(g, ew, ClampLogScale(tw, g.max_log_scale), aw, g.input_w);
  const A bh = BoxSize(g, eh, ClampLogScale(th, g.max_log_scale), ah, g.input_h);
  r.bw = bw;
  r.bh = bh;
  if (g.format == YoloBoxFormat::kCenterXywh) {
    r.out[0] = bx;
    r.out[1] = by;
    r.out[2] = bw;
    r.out[3] = bh;
    return r;
  }
  const A hw = bw / A(2), hh = bh / A(2);
  if (g.format == YoloBoxFormat::kXyxy) {
    r.out[0] = bx - hw;
    r.out[1] = by - hh;
    r.out[2] = bx + hw;
    r.out[3] = by + hh;
  } else {
    r.out[0] = by - hh;
    r.out[1] = bx - hw;
    r.out[2] = by + hh;
    r.out[3] = bx + hw;
  }
  return r;
}

// d beyond float's range as +-inf (a plain conversion would be undefined there).
OPFORGE_HOST_DEVICE inline float ToFloatOrInf(double d, float finite_max) {
  const float inf = finite_max * 2.0f;  // overflows to +inf (IEEE arithmetic, not a conversion)
  return d > static_cast<double>(finite_max)    ? inf
         : d < -static_cast<double>(finite_max) ? -inf
                                                : static_cast<float>(d);
}

// PlainBoxFrom; in float, where that made a NaN of non-NaN values, the box in double. A centre
// beyond float's range (scale_x_y times the input size past 3.4e38) plus or minus a size beyond
// it is inf - inf; in double neither the centre (at most 3.4e38 * 2^63) nor the sum overflows,
// so each corner is the formula's, then +-inf beyond float's range (and saturated as such):
// finite features give finite boxes for every attr. Sane attrs never take it: four NaN tests.
template <typename A>
OPFORGE_HOST_DEVICE inline RawBox<A> RawBoxFrom(const Geometry<A>& g, A sx, A sy, A ew, A eh, A tw,
                                                A th, A cx, A cy, A aw, A ah) {
  RawBox<A> r = PlainBoxFrom(g, sx, sy, ew, eh, tw, th, cx, cy, aw, ah);
  if constexpr (sizeof(A) == sizeof(float)) {
    const bool nan_out = r.out[0] != r.out[0] || r.out[1] != r.out[1] || r.out[2] != r.out[2] ||
                         r.out[3] != r.out[3];
    if (nan_out && sx == sx && sy == sy && tw == tw && th == th && aw == aw && ah == ah) {
      Geometry<double> d;
      d.stride_x = g.stride_x;
      d.stride_y = g.stride_y;
      d.input_w = g.input_w;
      d.input_h = g.input_h;
      d.scale = g.scale;
      d.offset = g.offset;
      d.max_log_scale = g.max_log_scale;
      d.largest = g.largest;
      d.finite_max = 1.7976931348623157e308;  // DBL_MAX
      d.format = g.format;
      d.normalized = g.normalized;
      const double dtw = ClampLogScale<double>(tw, d.max_log_scale);
      const double dth = ClampLogScale<double>(th, d.max_log_scale);
      const RawBox<double> w =
          PlainBoxFrom<double>(d, sx, sy, Exp(dtw), Exp(dth), tw, th, cx, cy, aw, ah);
      for (int k = 0; k < 4; ++k) r.out[k] = ToFloatOrInf(w.out[k], g.finite_max);
      r.bw = ToFloatOrInf(w.bw, g.finite_max);
      r.bh = ToFloatOrInf(w.bh, g.finite_max);
    }
  }
  return r;
}

// The box as written: RawBoxFrom, each coordinate saturated at the output type's largest value.
template <typename A>
OPFORGE_HOST_DEVICE inline void DecodeBoxFrom(const Geometry<A>& g, A sx, A sy, A ew, A eh, A tw,
                                              A th, A cx, A cy, A aw, A ah, A out[4]) {
  if (Unsaturated(g, ew, eh, aw, ah)) {  // the same bits as below, without the tests
    const RawBox<A> r = PlainBoxFrom(g, sx, sy, ew, eh, tw, th, cx, cy, aw, ah);
    for (int k = 0; k < 4; ++k) out[k] = r.out[k];
    return;
  }
  const RawBox<A> r = RawBoxFrom(g, sx, sy, ew, eh, tw, th, cx, cy, aw, ah);
  for (int k = 0; k < 4; ++k) out[k] = Saturate(r.out[k], g.largest);
}

// The box of raw (tx, ty, tw, th) in cell (cx, cy) with anchor (aw, ah), in the output format.
template <typename A>
OPFORGE_HOST_DEVICE inline void DecodeBox(const Geometry<A>& g, const A t[4], A cx, A cy, A aw,
                                          A ah, A out[4]) {
  DecodeBoxFrom(g, Sigmoid(t[0]), Sigmoid(t[1]), Exp(ClampLogScale(t[2], g.max_log_scale)),
                Exp(ClampLogScale(t[3], g.max_log_scale)), t[2], t[3], cx, cy, aw, ah, out);
}

// d(tx, ty, tw, th) from the gradient gb of the box DecodeBoxFrom wrote (same arguments; cx, cy
// are read only where !Unsaturated, so a caller may skip computing them otherwise).
template <typename A>
OPFORGE_HOST_DEVICE inline void DecodeBoxGradFrom(const Geometry<A>& g, A sx, A sy, A ew, A eh,
                                                  A tw, A th, A cx, A cy, A aw, A ah, const A gb[4],
                                                  A dt[4]) {
  // A saturated coordinate is constant: its gradient does not reach t.
  A gs[4], bw, bh;  // bw, bh: the sizes as output
  bool sat[4];
  if (Unsaturated(g, ew, eh, aw, ah)) {
    for (int k = 0; k < 4; ++k) {
      sat[k] = false;
      gs[k] = gb[k];
    }
    bw = BoxSize(g, ew, ClampLogScale(tw, g.max_log_scale), aw, g.input_w);
    bh = BoxSize(g, eh, ClampLogScale(th, g.max_log_scale), ah, g.input_h);
  } else {
    const RawBox<A> r = RawBoxFrom(g, sx, sy, ew, eh, tw, th, cx, cy, aw, ah);
    for (int k = 0; k < 4; ++k) {
      sat[k] = Saturates(r.out[k], g.largest);
      gs[k] = sat[k] ? A(0) : gb[k];
    }
    bw = r.bw;
    bh = r.bh;
  }
  // d bx, d by (of the normalised centre when normalized), d bw, d bh (of the sizes as output);
  // w_fixed (h_fixed): every coordinate that bw (bh) moves saturated.
  A gx, gy, gw, gh;
  bool w_fixed, h_fixed;
  if (g.format == YoloBoxFormat::kCenterXywh) {
    gx = gs[0];
    gy = gs[1];
    gw = gs[2];
    gh = gs[3];
    w_fixed = sat[2];
    h_fixed = sat[3];
  } else if (g.format == YoloBoxFormat::kXyxy) {
    gx = gs[0] + gs[2];
    gy = gs[1] + gs[3];
    gw = (gs[2] - gs[0]) / A(2);
    gh = (gs[3] - gs[1]) / A(2);
    w_fixed = sat[0] && sat[2];
    h_fixed = sat[1] && sat[3];
  } else {
    gy = gs[0] + gs[2];
    gx = gs[1] + gs[3];
    gh = (gs[2] - gs[0]) / A(2);
    gw = (gs[3] - gs[1]) / A(2);
    h_fixed = sat[0] && sat[2];
    w_fixed = sat[1] && sat[3];
  }
  if (g.normalized) {
    gx = gx / g.input_w;
    gy = gy / g.input_h;
  }
  dt[0] = gx * g.stride_x * g.scale * (sx * (A(1) - sx));
  dt[1] = gy * g.stride_y * g.scale * (sy * (A(1) - sy));
  // d bw / d tw = bw (bw = exp(tw) * aw [/ input_w]). Above the bound the box no longer moves
  // with t, nor where it saturated (where bw may be inf, and 0 * inf would be NaN): no gradient.
  // A coordinate that did not saturate is finite, so then bw is too.
  dt[2] = tw > g.max_log_scale || w_fixed ? A(0) : gw * bw;
  dt[3] = th > g.max_log_scale || h_fixed ? A(0) : gh * bh;
}

// d(tx, ty, tw, th) from the gradient gb of the box DecodeBox returned.
template <typename A>
OPFORGE_HOST_DEVICE inline void DecodeBoxGrad(const Geometry<A>& g, const A t[4], A cx, A cy, A aw,
                                              A ah, const A gb[4], A dt[4]) {
  DecodeBoxGradFrom(g, Sigmoid(t[0]), Sigmoid(t[1]), Exp(ClampLogScale(t[2], g.max_log_scale)),
                    Exp(ClampLogScale(t[3], g.max_log_scale)), t[2], t[3], cx, cy, aw, ah, gb, dt);
}

// Whether class score v replaces the best so far (NumPy's argmax: the first maximum, NaN wins).
template <typename A>
OPFORGE_HOST_DEVICE inline bool Beats(A v, A best) {
  return best == best && (v > best || v != v);
}

}  // namespace yolo
}  // namespace opforge

#endif  // OPFORGE_OPS_YOLO_DECODE_YOLO_DECODE_MATH_H_

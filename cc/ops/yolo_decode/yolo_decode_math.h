// The per-box maths of YoloDecode and its gradient, written once for the CPU and the CUDA
// kernels (OPFORGE_HOST_DEVICE). A is the type the maths runs in: float (for half, bfloat16 and
// float) or double. Values arrive converted to A; the kernels do the loads and stores.
#ifndef OPFORGE_OPS_YOLO_DECODE_YOLO_DECODE_MATH_H_
#define OPFORGE_OPS_YOLO_DECODE_YOLO_DECODE_MATH_H_

#include <math.h>

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

// What every box of one call shares, in A.
template <typename A>
struct Geometry {
  A stride_x, stride_y;  // input_w / W, input_h / H
  A input_w, input_h;    // the divisors of normalized boxes
  A scale, offset;       // scale_x_y and (scale_x_y - 1) / 2
  A max_log_scale;       // kYoloMaxLogScale
  YoloBoxFormat format;
  bool normalized;
};

template <typename A>
Geometry<A> MakeGeometry(const YoloDecodeParams& p) {
  Geometry<A> g;
  g.input_h = static_cast<A>(p.input_size[0]);
  g.input_w = static_cast<A>(p.input_size[1]);
  g.stride_y = g.input_h / static_cast<A>(p.height);
  g.stride_x = g.input_w / static_cast<A>(p.width);
  g.scale = static_cast<A>(p.scale_x_y);
  g.offset = (g.scale - A(1)) / A(2);
  g.max_log_scale = static_cast<A>(kYoloMaxLogScale);
  g.format = p.format;
  g.normalized = p.normalized;
  return g;
}

// tw above the bound scales by the bound (NaN stays NaN: the comparison is false).
template <typename A>
OPFORGE_HOST_DEVICE inline A ClampLogScale(A t, A bound) {
  return t > bound ? bound : t;
}

// The box from sigmoid(tx), sigmoid(ty), exp(min(tw, bound)) and exp(min(th, bound)) in cell
// (cx, cy) with anchor (aw, ah), in the output format.
template <typename A>
OPFORGE_HOST_DEVICE inline void DecodeBoxFrom(const Geometry<A>& g, A sx, A sy, A ew, A eh, A cx,
                                              A cy, A aw, A ah, A out[4]) {
  A bx = (g.scale * sx - g.offset + cx) * g.stride_x;
  A by = (g.scale * sy - g.offset + cy) * g.stride_y;
  A bw = ew * aw;
  A bh = eh * ah;
  if (g.normalized) {
    bx = bx / g.input_w;
    bw = bw / g.input_w;
    by = by / g.input_h;
    bh = bh / g.input_h;
  }
  if (g.format == YoloBoxFormat::kCenterXywh) {
    out[0] = bx;
    out[1] = by;
    out[2] = bw;
    out[3] = bh;
    return;
  }
  const A hw = bw / A(2), hh = bh / A(2);
  if (g.format == YoloBoxFormat::kXyxy) {
    out[0] = bx - hw;
    out[1] = by - hh;
    out[2] = bx + hw;
    out[3] = by + hh;
  } else {
    out[0] = by - hh;
    out[1] = bx - hw;
    out[2] = by + hh;
    out[3] = bx + hw;
  }
}

// The box of raw (tx, ty, tw, th) in cell (cx, cy) with anchor (aw, ah), in the output format.
template <typename A>
OPFORGE_HOST_DEVICE inline void DecodeBox(const Geometry<A>& g, const A t[4], A cx, A cy, A aw,
                                          A ah, A out[4]) {
  DecodeBoxFrom(g, Sigmoid(t[0]), Sigmoid(t[1]), Exp(ClampLogScale(t[2], g.max_log_scale)),
                Exp(ClampLogScale(t[3], g.max_log_scale)), cx, cy, aw, ah, out);
}

// d(tx, ty, tw, th) from the gradient gb of the box, given sigmoid(tx), sigmoid(ty),
// exp(min(tw, bound)), exp(min(th, bound)) and the raw tw, th (for the bound).
template <typename A>
OPFORGE_HOST_DEVICE inline void DecodeBoxGradFrom(const Geometry<A>& g, A sx, A sy, A ew, A eh,
                                                  A tw, A th, A aw, A ah, const A gb[4], A dt[4]) {
  A gx, gy, gw, gh;  // d bx, d by, d bw, d bh (of the normalised values when normalized)
  if (g.format == YoloBoxFormat::kCenterXywh) {
    gx = gb[0];
    gy = gb[1];
    gw = gb[2];
    gh = gb[3];
  } else if (g.format == YoloBoxFormat::kXyxy) {
    gx = gb[0] + gb[2];
    gy = gb[1] + gb[3];
    gw = (gb[2] - gb[0]) / A(2);
    gh = (gb[3] - gb[1]) / A(2);
  } else {
    gy = gb[0] + gb[2];
    gx = gb[1] + gb[3];
    gh = (gb[2] - gb[0]) / A(2);
    gw = (gb[3] - gb[1]) / A(2);
  }
  if (g.normalized) {
    gx = gx / g.input_w;
    gw = gw / g.input_w;
    gy = gy / g.input_h;
    gh = gh / g.input_h;
  }
  dt[0] = gx * g.stride_x * g.scale * (sx * (A(1) - sx));
  dt[1] = gy * g.stride_y * g.scale * (sy * (A(1) - sy));
  // Above the bound the box no longer moves with t: no gradient.
  dt[2] = tw > g.max_log_scale ? A(0) : gw * (ew * aw);
  dt[3] = th > g.max_log_scale ? A(0) : gh * (eh * ah);
}

// d(tx, ty, tw, th) from the gradient gb of the box DecodeBox returned.
template <typename A>
OPFORGE_HOST_DEVICE inline void DecodeBoxGrad(const Geometry<A>& g, const A t[4], A aw, A ah,
                                              const A gb[4], A dt[4]) {
  DecodeBoxGradFrom(g, Sigmoid(t[0]), Sigmoid(t[1]), Exp(ClampLogScale(t[2], g.max_log_scale)),
                    Exp(ClampLogScale(t[3], g.max_log_scale)), t[2], t[3], aw, ah, gb, dt);
}

// Whether class score v replaces the best so far (NumPy's argmax: the first maximum, NaN wins).
template <typename A>
OPFORGE_HOST_DEVICE inline bool Beats(A v, A best) {
  return best == best && (v > best || v != v);
}

}  // namespace yolo
}  // namespace opforge

#endif  // OPFORGE_OPS_YOLO_DECODE_YOLO_DECODE_MATH_H_

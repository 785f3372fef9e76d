// The bodies of Conv2DTranspose's CUDA kernels, written once for nvcc (conv2d_transpose.cu) and
// the host compiler (conv2d_transpose_cuda_test.cc runs them on the CPU, a block's threads as
// cooperative fibers, against a float64 reference, so that the index and reduction logic is
// tested on machines without a GPU). No CUDA or Eigen header: element
// conversions come from a policy Cv (static C To(T), static T From(C)), a block's thread index
// and barrier from a policy Block (int thread() const, void sync() const).
//
// Index is the type of every index and offset: int32_t when they all fit (LargestIndex), else
// int64_t. Sums use fused multiply-adds in the accumulation type C (float for half, bfloat16 and
// float, double for double): one rounding per term, and the same bits on the host (glibc's fmaf
// and fma are correctly rounded) as on the device.
//
// The filter gradient, grad_filter[tap, co, ci] = sum over pixels q = (b, ih, iw) of
// grad[b, h(ih, fh), w(iw, fw), co] * input[b, ih, iw, ci], is a product of a [pixels, CO] and a
// [pixels, CI] matrix per tap (fh, fw). It is tiled (FilterGradPlan):
//   - a block computes a tile of TM out_channels by TN in_channels of one tap over one slice of
//     the pixels (a "unit"); TM, TN are powers of two up to 32, fitted to the channel counts;
//   - per stage it stages KP pixels' rows of grad and input in shared memory with coalesced
//     loads (consecutive threads read consecutive channels in NHWC, consecutive pixels in NCHW)
//     and every thread multiplies them into its 1, 2 or 4 outputs; where a tile has fewer than
//     256 outputs, R = 256 / (TM * TN) lanes each take every R-th pixel and a fixed tree adds the
//     lanes' sums;
//   - the pixels are split into S slices so that even a 3x3x1x1 filter (9 tiles) gets ~1024
//     blocks: each slice's sums go to scratch memory and a second kernel adds the slices in
//     order (S = 1 writes the result directly).
// Every sum is thus taken in an order fixed by the shapes alone (never by the device, the grid
// or timing): the same bits on every run and every GPU. Pixels whose output position is outside
// grad (padding) contribute nothing: not 0 * input, which would be NaN for an infinite input
// (the CPU kernel's rule).
#ifndef OPFORGE_OPS_CONV2D_TRANSPOSE_CONV2D_TRANSPOSE_GPU_H_
#define OPFORGE_OPS_CONV2D_TRANSPOSE_CONV2D_TRANSPOSE_GPU_H_

#include <math.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "common/host_device.h"
#include "ops/conv2d_transpose/conv2d_transpose.h"

namespace opforge {
namespace conv2d_transpose_gpu {

template <typename Index>
struct Geometry {
  Index n, ih, iw, ci, oh, ow, co, fh, fw;
  Index sh, sw, dh, dw, pt, pl;
  bool nchw;
};

template <typename Index>
Geometry<Index> MakeGeometry(const Conv2DTransposeParams& p) {
  auto i = [](int64_t v) { return static_cast<Index>(v); };
  return Geometry<Index>{i(p.batch),      i(p.in_h),     i(p.in_w),     i(p.in_c),
                         i(p.out_h),      i(p.out_w),    i(p.out_c),    i(p.filter_h),
                         i(p.filter_w),   i(p.stride_h), i(p.stride_w), i(p.dilation_h),
                         i(p.dilation_w), i(p.pad_top),  i(p.pad_left), p.nchw};
}

OPFORGE_HOST_DEVICE inline float Fma(float a, float b, float c) { return fmaf(a, b, c); }
OPFORGE_HOST_DEVICE inline double Fma(double a, double b, double c) { return fma(a, b, c); }

// Offset of (b, y, x, c) in a [n, h, w, ch] image tensor of the data format.
template <typename Index>
OPFORGE_HOST_DEVICE inline Index Offset(bool nchw, Index b, Index y, Index x, Index c, Index h,
                                        Index w, Index ch) {
  return nchw ? ((b * ch + c) * h + y) * w + x : ((b * h + y) * w + x) * ch + c;
}

// Splits a flat index in the data format's order into (b, y, x, c).
template <typename Index>
OPFORGE_HOST_DEVICE inline void Split(bool nchw, Index i, Index h, Index w, Index ch, Index* b,
                                      Index* y, Index* x, Index* c) {
  if (nchw) {
    *x = i % w;
    i /= w;
    *y = i % h;
    i /= h;
    *c = i % ch;
    *b = i / ch;
  } else {
    *c = i % ch;
    i /= ch;
    *x = i % w;
    i /= w;
    *y = i % h;
    *b = i / h;
  }
}

// The input position that output position o receives from tap f, or -1.
template <typename Index>
OPFORGE_HOST_DEVICE inline Index Source(Index o, Index f, Index stride, Index pad, Index dilation,
                                        Index size) {
  const Index t = o + pad - f * dilation;
  if (t < 0 || t % stride != 0) return -1;
  const Index i = t / stride;
  return i < size ? i : -1;
}

// Output element i (flat, in the data format's order) of the forward pass: taps from the last
// to the first, in_channels in order.
template <typename C, typename Cv, typename T, typename Index>
OPFORGE_HOST_DEVICE inline T ForwardElement(const Geometry<Index>& g, Index i, const T* in,
                                            const T* filter) {
  Index b, h, w, co;
  Split(g.nchw, i, g.oh, g.ow, g.co, &b, &h, &w, &co);
  C acc = C(0);
  for (Index fh = g.fh - 1; fh >= 0; --fh) {
    const Index ih = Source(h, fh, g.sh, g.pt, g.dh, g.ih);
    if (ih < 0) continue;
    for (Index fw = g.fw - 1; fw >= 0; --fw) {
      const Index iw = Source(w, fw, g.sw, g.pl, g.dw, g.iw);
      if (iw < 0) continue;
      const T* f = filter + ((fh * g.fw + fw) * g.co + co) * g.ci;
      for (Index ci = 0; ci < g.ci; ++ci) {
        acc = Fma(Cv::To(in[Offset(g.nchw, b, ih, iw, ci, g.ih, g.iw, g.ci)]), Cv::To(f[ci]), acc);
      }
    }
  }
  return Cv::From(acc);
}

// Input-gradient element i (flat, in the data format's order): taps in order, out_channels in
// order.
template <typename C, typename Cv, typename T, typename Index>
OPFORGE_HOST_DEVICE inline T InputGradElement(const Geometry<Index>& g, Index i, const T* grad,
                                              const T* filter) {
  Index b, ih, iw, ci;
  Split(g.nchw, i, g.ih, g.iw, g.ci, &b, &ih, &iw, &ci);
  C acc = C(0);
  for (Index fh = 0; fh < g.fh; ++fh) {
    const Index h = ih * g.sh - g.pt + fh * g.dh;
    if (h < 0 || h >= g.oh) continue;
    for (Index fw = 0; fw < g.fw; ++fw) {
      const Index w = iw * g.sw - g.pl + fw * g.dw;
      if (w < 0 || w >= g.ow) continue;
      const T* f = filter + (fh * g.fw + fw) * g.co * g.ci + ci;
      for (Index co = 0; co < g.co; ++co) {
        acc = Fma(Cv::To(grad[Offset(g.nchw, b, h, w, co, g.oh, g.ow, g.co)]), Cv::To(f[co * g.ci]),
                  acc);
      }
    }
  }
  return Cv::From(acc);
}

// --- filter gradient ---------------------------------------------------------------------------

constexpr int kFilterGradThreads = 256;
// Blocks the slicing aims for (an H100/H200 holds ~8 of these 256-thread blocks on each of its
// 132 SMs), and the fewest pixels a slice is cut to (below that a block spends more on its
// partial sums than on its pixels).
constexpr int64_t kFilterGradTargetBlocks = 1024;
constexpr int64_t kFilterGradMinSlicePixels = 1024;
// Largest pixels per stage, and shared memory in C elements for the two staged tiles: rows of
// TM + 1 and TN + 1 (the extra column keeps NCHW's column-wise stores free of bank conflicts),
// at most 64 * 33 * 2. Reused for the lanes' tree (256 elements).
constexpr int kFilterGradMaxStagePixels = 256;
constexpr int kFilterGradTileElements = 64 * 33 * 2;

// The tiling of one call (host: MakeFilterGradPlan). Units are numbered
// ((tap * co_tiles + co_tile) * ci_tiles + ci_tile) * slices + slice.
struct FilterGradPlan {
  int log_tm = 0, log_tn = 0;  // tile: TM out_channels by TN in_channels
  int log_e = 0;               // output slots: E = min(TM * TN, 256) threads per pixel lane
  int log_r = 0;               // pixel lanes: R = 256 / E
  int log_kp = 0;              // pixels per stage: KP = max(64, R)
  int jm = 1, jn = 1;          // each thread's outputs: jm out_channels by jn in_channels
  int64_t taps = 0, co_tiles = 0, ci_tiles = 0;
  int64_t pixels = 0;        // N * IH * IW
  int64_t slices = 0;        // S
  int64_t slice_pixels = 0;  // L, a multiple of KP (the last slice may be shorter)
  int64_t units = 0;
};

inline int CeilLog2(int64_t v) {
  int l = 0;
  while ((int64_t{1} << l) < v) ++l;
  return l;
}

// The plan of a filter gradient with FilterSize() > 0, pixels > 0 and OutputSize() > 0 (the
// caller zeroes the gradient otherwise). Depends on the shapes only.
inline FilterGradPlan MakeFilterGradPlan(const Conv2DTransposeParams& p) {
  FilterGradPlan plan;
  plan.log_tm = std::min(5, CeilLog2(p.out_c));
  plan.log_tn = std::min(5, CeilLog2(p.in_c));
  plan.log_e = std::min(8, plan.log_tm + plan.log_tn);
  plan.log_r = 8 - plan.log_e;
  plan.log_kp = std::max(6, plan.log_r);
  const int log_j = plan.log_tm + plan.log_tn - plan.log_e;  // 0, 1 or 2
  if (log_j == 2) {
    plan.jm = plan.jn = 2;
  } else if (log_j == 1) {
    (plan.log_tm >= plan.log_tn ? plan.jm : plan.jn) = 2;
  }
  plan.taps = p.filter_h * p.filter_w;
  plan.co_tiles = (p.out_c + (int64_t{1} << plan.log_tm) - 1) >> plan.log_tm;
  plan.ci_tiles = (p.in_c + (int64_t{1} << plan.log_tn) - 1) >> plan.log_tn;
  plan.pixels = p.batch * p.in_h * p.in_w;
  const int64_t tiles = plan.taps * plan.co_tiles * plan.ci_tiles;
  int64_t slices = 1;
  if (tiles < kFilterGradTargetBlocks) {
    slices = std::min((kFilterGradTargetBlocks + tiles - 1) / tiles,
                      (plan.pixels + kFilterGradMinSlicePixels - 1) / kFilterGradMinSlicePixels);
    slices = std::max<int64_t>(slices, 1);
  }
  const int64_t kp = int64_t{1} << plan.log_kp;
  const int64_t per_slice = (plan.pixels + slices - 1) / slices;
  plan.slice_pixels = (per_slice + kp - 1) / kp * kp;
  plan.slices = (plan.pixels + plan.slice_pixels - 1) / plan.slice_pixels;
  plan.units = tiles * plan.slices;
  return plan;
}

// Elements (of C) of scratch memory the plan's slice sums take: 0 with one slice.
inline int64_t FilterGradScratchElements(const FilterGradPlan& plan,
                                         const Conv2DTransposeParams& p) {
  return plan.slices > 1 ? plan.slices * p.FilterSize() : 0;
}

// The largest index or offset any of the kernels forms, with margins for a stage that reaches
// past the last pixel and a tile past the last channel: the kernels use int32_t when it fits.
inline int64_t LargestIndex(const Conv2DTransposeParams& p, int64_t scratch_elements) {
  const int64_t margin = 2 * kFilterGradMaxStagePixels + 64;
  auto axis = [](int64_t in, int64_t stride, int64_t filter, int64_t dilation, int64_t pad,
                 int64_t out) { return in * stride + filter * dilation + std::abs(pad) + out; };
  return std::max({p.InputSize(), p.OutputSize(), p.FilterSize(), scratch_elements,
                   p.batch * p.in_h * p.in_w,
                   axis(p.in_h, p.stride_h, p.filter_h, p.dilation_h, p.pad_top, p.out_h),
                   axis(p.in_w, p.stride_w, p.filter_w, p.dilation_w, p.pad_left, p.out_w), p.out_c,
                   p.in_c}) +
         margin;
}

// The plan as the kernel takes it (by value, in Index).
template <typename Index>
struct FilterGradArgs {
  int log_tm, log_tn, log_e, log_r, log_kp, jm, jn;
  int64_t co_tiles, ci_tiles, slices, units;
  Index pixels, slice_pixels, filter_size;
};

template <typename Index>
FilterGradArgs<Index> MakeFilterGradArgs(const FilterGradPlan& plan,
                                         const Conv2DTransposeParams& p) {
  return FilterGradArgs<Index>{plan.log_tm,
                               plan.log_tn,
                               plan.log_e,
                               plan.log_r,
                               plan.log_kp,
                               plan.jm,
                               plan.jn,
                               plan.co_tiles,
                               plan.ci_tiles,
                               plan.slices,
                               plan.units,
                               static_cast<Index>(plan.pixels),
                               static_cast<Index>(plan.slice_pixels),
                               static_cast<Index>(p.FilterSize())};
}

// One block's work on unit `unit`, run by all kFilterGradThreads threads of the block. `tile`
// (kFilterGradTileElements), `g_off` and `in_off` (kFilterGradMaxStagePixels each) are the
// block's shared memory. With one slice the result goes to grad_filter, otherwise to
// partial[slice * filter_size + element]. Ends with a barrier, so that the block may go on to
// another unit with the same shared memory.
template <typename C, typename Cv, typename T, typename Index, typename Block>
OPFORGE_HOST_DEVICE void FilterGradUnit(const Block& block, const Geometry<Index>& g,
                                        const FilterGradArgs<Index>& a, int64_t unit, const T* in,
                                        const T* grad, T* grad_filter, C* partial, C* tile,
                                        Index* g_off, Index* in_off) {
  const int t = block.thread();
  const int tm = 1 << a.log_tm, tn = 1 << a.log_tn, kp = 1 << a.log_kp;
  const int lanes = 1 << a.log_r;
  const int slot = t & ((1 << a.log_e) - 1), lane = t >> a.log_e;
  // This thread's outputs: (mi + x * tm / jm, ni + y * tn / jn) for x < jm, y < jn.
  const int cols = tn / a.jn;  // slots per row of the slot grid
  const int mi = slot / cols, ni = slot % cols;
  const int m_step = tm / a.jm, n_step = tn / a.jn;

  // The unit: its slice, tile and tap.
  const int64_t slice = unit % a.slices;
  int64_t rest = unit / a.slices;
  const Index ci0 = static_cast<Index>((rest % a.ci_tiles) << a.log_tn);
  rest /= a.ci_tiles;
  const Index co0 = static_cast<Index>((rest % a.co_tiles) << a.log_tm);
  const Index tap = static_cast<Index>(rest / a.co_tiles);
  const Index fh = tap / g.fw, fw = tap % g.fw;
  const Index p_begin = static_cast<Index>(slice) * a.slice_pixels;
  const Index p_end = a.pixels - p_begin < a.slice_pixels ? a.pixels : p_begin + a.slice_pixels;

  const Index g_cs = g.nchw ? g.oh * g.ow : Index(1);  // channel strides
  const Index in_cs = g.nchw ? g.ih * g.iw : Index(1);
  C* tile_g = tile;                     // [kp][tm + 1]
  C* tile_x = tile + kp * (tm + 1);     // [kp][tn + 1]
  C acc[4] = {C(0), C(0), C(0), C(0)};  // [x * 2 + y]

  for (Index base = p_begin; base < p_end; base += kp) {
    // Where each staged pixel's rows start; -1: the pixel contributes nothing (past the slice,
    // or its output position is outside grad).
    if (t < kp) {
      Index go = -1, io = 0;
      const Index q = base + t;
      if (q < p_end) {
        const Index iw = q % g.iw;
        const Index r = q / g.iw;
        const Index ih = r % g.ih;
        const Index b = r / g.ih;
        const Index h = ih * g.sh - g.pt + fh * g.dh;
        const Index w = iw * g.sw - g.pl + fw * g.dw;
        if (h >= 0 && h < g.oh && w >= 0 && w < g.ow) {
          go = g.nchw ? (b * g.co * g.oh + h) * g.ow + w : ((b * g.oh + h) * g.ow + w) * g.co;
          io = g.nchw ? (b * g.ci * g.ih + ih) * g.iw + iw : q * g.ci;
        }
      }
      g_off[t] = go;
      in_off[t] = io;
    }
    block.sync();
    for (int e = t; e < kp * tm; e += kFilterGradThreads) {
      int k, m;
      if (g.nchw) {  // consecutive threads: consecutive pixels
        m = e >> a.log_kp;
        k = e & (kp - 1);
      } else {  // consecutive threads: consecutive channels
        k = e >> a.log_tm;
        m = e & (tm - 1);
      }
      const Index go = g_off[k], co = co0 + m;
      tile_g[k * (tm + 1) + m] = go >= 0 && co < g.co ? Cv::To(grad[go + co * g_cs]) : C(0);
    }
    for (int e = t; e < kp * tn; e += kFilterGradThreads) {
      int k, n;
      if (g.nchw) {
        n = e >> a.log_kp;
        k = e & (kp - 1);
      } else {
        k = e >> a.log_tn;
        n = e & (tn - 1);
      }
      const Index ci = ci0 + n;
      tile_x[k * (tn + 1) + n] =
          g_off[k] >= 0 && ci < g.ci ? Cv::To(in[in_off[k] + ci * in_cs]) : C(0);
    }
    block.sync();
    // A skipped pixel holds zeros in both tiles: its fma adds +0, which changes no sum (a sum
    // that starts at +0 is never -0).
    for (int k = lane; k < kp; k += lanes) {
      const C* gr = tile_g + k * (tm + 1) + mi;
      const C* xr = tile_x + k * (tn + 1) + ni;
      const C g0 = gr[0], x0 = xr[0];
      const C g1 = a.jm > 1 ? gr[m_step] : C(0);
      const C x1 = a.jn > 1 ? xr[n_step] : C(0);
      acc[0] = Fma(g0, x0, acc[0]);
      if (a.jn > 1) acc[1] = Fma(g0, x1, acc[1]);
      if (a.jm > 1) acc[2] = Fma(g1, x0, acc[2]);
      if (a.jm > 1 && a.jn > 1) acc[3] = Fma(g1, x1, acc[3]);
    }
    block.sync();
  }

  // The lanes' sums (one output per thread when there are several lanes), in a fixed tree.
  if (lanes > 1) {
    tile[t] = acc[0];
    block.sync();
    for (int s = lanes >> 1; s > 0; s >>= 1) {
      if (lane < s) tile[t] = tile[t] + tile[t + (s << a.log_e)];
      block.sync();
    }
    acc[0] = tile[t];
  }
  if (lane == 0) {
    // Constant trip counts (unrolled), so that acc stays in registers.
    for (int x = 0; x < 2; ++x) {
      for (int y = 0; y < 2; ++y) {
        if (x >= a.jm || y >= a.jn) continue;
        const Index co = co0 + mi + x * m_step, ci = ci0 + ni + y * n_step;
        if (co >= g.co || ci >= g.ci) continue;
        const Index e = (tap * g.co + co) * g.ci + ci;
        if (partial == nullptr) {
          grad_filter[e] = Cv::From(acc[x * 2 + y]);
        } else {
          partial[static_cast<Index>(slice) * a.filter_size + e] = acc[x * 2 + y];
        }
      }
    }
  }
  block.sync();
}

// Element e of the filter gradient from the slices' sums, added in slice order.
template <typename C, typename Cv, typename T, typename Index>
OPFORGE_HOST_DEVICE inline T FilterGradSumElement(Index e, Index filter_size, Index slices,
                                                  const C* partial) {
  C acc = C(0);
  for (Index s = 0; s < slices; ++s) acc = acc + partial[s * filter_size + e];
  return Cv::From(acc);
}

}  // namespace conv2d_transpose_gpu
}  // namespace opforge

#endif  // OPFORGE_OPS_CONV2D_TRANSPOSE_CONV2D_TRANSPOSE_GPU_H_

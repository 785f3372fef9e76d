// The convolution core (conv2d_core.h): im2col per tile of output pixels, one product per tile.
#include "common/conv2d_core.h"

#include <algorithm>
#include <cstring>

#include "common/gemm.h"
#include "common/scratch.h"

namespace opforge {
namespace conv {

namespace {

// im2col of the input for output pixels [p0, p0 + rows) of image b: row r holds, for every tap
// (kh, kw), the input pixel that tap reads (zeros outside), in_c values each.
template <typename C>
void Im2Col(const Conv2DGeometry& g, const C* in, int64_t b, int64_t p0, int64_t rows, C* col) {
  const int64_t k = g.Depth();
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t oh = (p0 + r) / g.out_w, ow = (p0 + r) % g.out_w;
    C* dst = col + r * k;
    for (int64_t kh = 0; kh < g.filter_h; ++kh) {
      const int64_t h = oh * g.stride_h - g.pad_top + kh * g.dilation_h;
      for (int64_t kw = 0; kw < g.filter_w; ++kw, dst += g.in_c) {
        const int64_t w = ow * g.stride_w - g.pad_left + kw * g.dilation_w;
        if (h < 0 || h >= g.in_h || w < 0 || w >= g.in_w) {
          std::fill(dst, dst + g.in_c, C(0));
        } else {
          std::memcpy(dst, in + ((b * g.in_h + h) * g.in_w + w) * g.in_c,
                      sizeof(C) * static_cast<size_t>(g.in_c));
        }
      }
    }
  }
}

// Below this many tiles the products are split by blocks of output channels as well.
constexpr int64_t kMinUnits = 8;
constexpr int64_t kColumnBlock = 64;

// A 1x1 convolution with stride 1 and no padding reads the input rows as they are.
bool IsPointwise(const Conv2DGeometry& g) {
  return g.filter_h == 1 && g.filter_w == 1 && g.stride_h == 1 && g.stride_w == 1 &&
         g.pad_top == 0 && g.pad_left == 0 && g.out_h == g.in_h && g.out_w == g.in_w;
}

}  // namespace

template <typename C>
void Conv2DForward(const Conv2DGeometry& g, const C* in, const C* filter, C* out,
                   const Epilogue<C>* epilogue, const Parallel& parallel) {
  const int64_t k = g.Depth();
  const int64_t pixels = g.out_h * g.out_w;
  if (g.OutputSize() == 0) return;
  const int64_t tiles = (pixels + kConvTileRows - 1) / kConvTileRows;
  if (g.InputSize() == 0 || k == 0) {
    // Nothing to sum: zeros, then the epilogue.
    parallel.For(g.batch * tiles, static_cast<double>(kConvTileRows * g.out_c),
                 [&](int64_t begin, int64_t end) {
                   for (int64_t u = begin; u < end; ++u) {
                     const int64_t b = u / tiles, t0 = (u % tiles) * kConvTileRows;
                     const int64_t rows = std::min(kConvTileRows, pixels - t0);
                     C* o = out + (b * pixels + t0) * g.out_c;
                     std::fill(o, o + rows * g.out_c, C(0));
                     if (epilogue != nullptr) (*epilogue)(o, rows, b * pixels + t0);
                   }
                 });
    return;
  }
  const auto& gemm = gemm::BestGemm<C>();
  const bool pointwise = IsPointwise(g);
  const int64_t units = g.batch * tiles;
  if (units < kMinUnits && g.out_c >= 2 * kColumnBlock) {
    // Few tiles (a small image, a batch of one): too few to give every thread work, so the
    // products are split by blocks of output channels too. im2col of every tile first, then
    // one product per (tile, block of columns), then the epilogue per tile.
    const int64_t rows_max = std::min(pixels, kConvTileRows);
    Scratch<C> col(pointwise ? 0 : static_cast<size_t>(units * rows_max * k));
    if (!pointwise) {
      parallel.For(units, static_cast<double>(rows_max * k), [&](int64_t begin, int64_t end) {
        for (int64_t u = begin; u < end; ++u) {
          const int64_t b = u / tiles, t0 = (u % tiles) * kConvTileRows;
          Im2Col(g, in, b, t0, std::min(kConvTileRows, pixels - t0), col.data() + u * rows_max * k);
        }
      });
    }
    const int64_t blocks = (g.out_c + kColumnBlock - 1) / kColumnBlock;
    parallel.For(units * blocks, static_cast<double>(rows_max * k * kColumnBlock),
                 [&](int64_t begin, int64_t end) {
                   for (int64_t v = begin; v < end; ++v) {
                     const int64_t u = v / blocks, c0 = (v % blocks) * kColumnBlock;
                     const int64_t b = u / tiles, t0 = (u % tiles) * kConvTileRows;
                     const int64_t rows = std::min(kConvTileRows, pixels - t0);
                     const C* a = pointwise ? in + (b * pixels + t0) * g.in_c
                                            : col.data() + u * rows_max * k;
                     gemm.a_b_strided(a, filter + c0, out + (b * pixels + t0) * g.out_c + c0, rows,
                                      k, std::min(kColumnBlock, g.out_c - c0), g.out_c, g.out_c);
                   }
                 });
    if (epilogue != nullptr) {
      parallel.For(units, static_cast<double>(rows_max * g.out_c), [&](int64_t begin, int64_t end) {
        for (int64_t u = begin; u < end; ++u) {
          const int64_t b = u / tiles, t0 = (u % tiles) * kConvTileRows;
          (*epilogue)(out + (b * pixels + t0) * g.out_c, std::min(kConvTileRows, pixels - t0),
                      b * pixels + t0);
        }
      });
    }
    return;
  }
  parallel.For(
      g.batch * tiles, static_cast<double>(std::min(pixels, kConvTileRows) * k * g.out_c),
      [&](int64_t begin, int64_t end) {
        Scratch<C> col(pointwise ? 0 : static_cast<size_t>(std::min(pixels, kConvTileRows) * k));
        for (int64_t u = begin; u < end; ++u) {
          const int64_t b = u / tiles, t0 = (u % tiles) * kConvTileRows;
          const int64_t rows = std::min(kConvTileRows, pixels - t0);
          const C* a = in + (b * pixels + t0) * g.in_c;
          if (!pointwise) {
            Im2Col(g, in, b, t0, rows, col.data());
            a = col.data();
          }
          C* o = out + (b * pixels + t0) * g.out_c;
          gemm.a_b(a, filter, o, rows, k, g.out_c);
          if (epilogue != nullptr) (*epilogue)(o, rows, b * pixels + t0);
        }
      });
}

template void Conv2DForward<float>(const Conv2DGeometry&, const float*, const float*, float*,
                                   const Epilogue<float>*, const Parallel&);
template void Conv2DForward<double>(const Conv2DGeometry&, const double*, const double*, double*,
                                    const Epilogue<double>*, const Parallel&);

}  // namespace conv
}  // namespace opforge

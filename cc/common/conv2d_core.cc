// The convolution core (conv2d_core.h): im2col per tile of output pixels, one product per tile.
#include "common/conv2d_core.h"

#include <Eigen/Core>
#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

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
constexpr int64_t kColumnBlock = 64;  // the narrowest group of columns

// A 1x1 convolution with stride 1 and no padding reads the input rows as they are.
bool IsPointwise(const Conv2DGeometry& g) {
  return g.filter_h == 1 && g.filter_w == 1 && g.stride_h == 1 && g.stride_w == 1 &&
         g.pad_top == 0 && g.pad_left == 0 && g.out_h == g.in_h && g.out_w == g.in_w;
}

// --- Winograd F(2x2, 3x3) for 3x3 convolutions with stride 1 and dilation 1 ----------------------
//
// Each 2x2 block of output pixels comes from a 4x4 block of input pixels: with the input block
// d and the filter g of one (input, output) channel pair, the block is A^T [(G g G^T) . (B^T d
// B)] A (Lavin and Gray's transforms). Summed over the input channels, the 16 elementwise
// products become 16 matrix products [tiles, C_in] x [C_in, C_out], 2.25 times fewer
// multiplications than the direct sum. Tiles are processed a band of tile rows at a time, and
// the epilogue runs on the band's output rows right after their output transform.

constexpr int64_t kWinogradBandTiles = 128;  // tiles per band, about

// One row of channel values as an Eigen array (the transforms are vectorised over channels).
template <typename C>
using Row = Eigen::Map<const Eigen::Array<C, Eigen::Dynamic, 1>>;
template <typename C>
using OutRow = Eigen::Map<Eigen::Array<C, Eigen::Dynamic, 1>>;

// Tile rows per band. Bands are runs of tile rows numbered across the batch (the last rows of
// one image and the first of the next can share a band, so that small images still give wide
// products): about kWinogradBandTiles tiles each, at least two bands (so that two threads have
// work), of equal size.
int64_t WinogradBandRows(const Conv2DGeometry& g) {
  const int64_t tiles_w = (g.out_w + 1) / 2, rows_total = g.batch * ((g.out_h + 1) / 2);
  int64_t bands =
      std::max<int64_t>(2, (rows_total * tiles_w + kWinogradBandTiles - 1) / kWinogradBandTiles);
  bands = std::max<int64_t>(1, std::min(bands, rows_total));
  return (rows_total + bands - 1) / bands;
}

// Winograd where it pays: a 3x3 stride-1 convolution with enough channels for the 16 products,
// enough tiles per band to amortise the filter transform and each product's packing, and work
// for more than one thread (a small image at batch 1 runs the direct path, whose products split
// by output channels).
bool UseWinograd(const Conv2DGeometry& g, bool cached) {
  if (!(g.filter_h == 3 && g.filter_w == 3 && g.stride_h == 1 && g.stride_w == 1 &&
        g.dilation_h == 1 && g.dilation_w == 1 && g.in_c >= 16 && g.out_c >= 16 && g.out_h >= 4 &&
        g.out_w >= 4)) {
    return false;
  }
  const int64_t tiles_w = (g.out_w + 1) / 2, rows_total = g.batch * ((g.out_h + 1) / 2);
  const int64_t rows = WinogradBandRows(g);
  const int64_t bands = (rows_total + rows - 1) / rows;
  // With the transformed filter cached (a kernel called again with the same weights), bands
  // of 16 tiles already pay: a 13x13 image at batch 1 (two bands of 28 and 21 tiles).
  return bands >= 2 && rows * tiles_w >= (cached ? 16 : 32);
}

// U[xi][ci][:] = (G g G^T)[xi] for filter [3, 3, in_c, out_c], vectorised over the output
// channels (tap (i, j) of input channel ci is a contiguous row of out_c values).
template <typename C>
void WinogradFilter(const Conv2DGeometry& g, const C* filter, C* u, const Parallel& parallel) {
  const int64_t ci_n = g.in_c, co_n = g.out_c, plane = ci_n * co_n;
  parallel.For(ci_n, 40.0 * static_cast<double>(co_n), [&](int64_t begin, int64_t end) {
    for (int64_t ci = begin; ci < end; ++ci) {
      auto w = [&](int i, int j) { return Row<C>(filter + (i * 3 + j) * plane + ci * co_n, co_n); };
      // Rows of G w (4 x 3), each a row of out_c values.
      auto gw = [&](int i, int j) {
        return i == 0   ? (w(0, j) * C(1)).eval()
               : i == 1 ? ((w(0, j) + w(1, j) + w(2, j)) * C(0.5)).eval()
               : i == 2 ? ((w(0, j) - w(1, j) + w(2, j)) * C(0.5)).eval()
                        : (w(2, j) * C(1)).eval();
      };
      for (int i = 0; i < 4; ++i) {
        const auto t0 = gw(i, 0), t1 = gw(i, 1), t2 = gw(i, 2);
        C* dst = u + (i * 4) * plane + ci * co_n;
        OutRow<C>(dst, co_n) = t0;
        OutRow<C>(dst + plane, co_n) = (t0 + t1 + t2) * C(0.5);
        OutRow<C>(dst + 2 * plane, co_n) = (t0 - t1 + t2) * C(0.5);
        OutRow<C>(dst + 3 * plane, co_n) = t2;
      }
    }
  });
}

// Input transform of the nt tiles from tile row r0 (numbered across the batch: image
// r0 / tiles_h, row r0 % tiles_h): V[xi][t][:] = (B^T d B)[xi], vectorised over the channels
// (each of the 16 input pixels of a tile is a contiguous row of in_c values; outside the image,
// `zeros`).
template <typename C>
void WinogradInputTransform(const Conv2DGeometry& g, const C* in, int64_t r0, int64_t nt,
                            const C* zeros, C* v) {
  const int64_t ci_n = g.in_c;
  const int64_t tiles_w = (g.out_w + 1) / 2, tiles_h = (g.out_h + 1) / 2;
  const int64_t vstride = nt * ci_n;
  for (int64_t t = 0; t < nt; ++t) {
    const int64_t r = r0 + t / tiles_w, b = r / tiles_h, ty = r % tiles_h, tx = t % tiles_w;
    const int64_t h0 = 2 * ty - g.pad_top, w0 = 2 * tx - g.pad_left;
    const C* src[4][4];
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) {
        const int64_t h = h0 + i, w = w0 + j;
        src[i][j] = (h < 0 || h >= g.in_h || w < 0 || w >= g.in_w)
                        ? zeros
                        : in + ((b * g.in_h + h) * g.in_w + w) * ci_n;
      }
    auto d = [&](int i, int j) { return Row<C>(src[i][j], ci_n); };
    C* base = v + t * ci_n;
    for (int i = 0; i < 4; ++i) {
      // Row i of B^T d, then its product with B.
      auto t0 = [&](int j) {
        return i == 0   ? (d(0, j) - d(2, j)).eval()
               : i == 1 ? (d(1, j) + d(2, j)).eval()
               : i == 2 ? (d(2, j) - d(1, j)).eval()
                        : (d(1, j) - d(3, j)).eval();
      };
      const auto c0 = t0(0), c1 = t0(1), c2 = t0(2), c3 = t0(3);
      OutRow<C>(base + (i * 4 + 0) * vstride, ci_n) = c0 - c2;
      OutRow<C>(base + (i * 4 + 1) * vstride, ci_n) = c1 + c2;
      OutRow<C>(base + (i * 4 + 2) * vstride, ci_n) = c2 - c1;
      OutRow<C>(base + (i * 4 + 3) * vstride, ci_n) = c1 - c3;
    }
  }
}

// The 16 transformed filters, packed for the products of every band (for bands of about
// kWinogradBandTiles tiles, whatever the batch: the packing, and so the sums, depend on the
// channels only).
template <typename C>
struct WinogradPacked {
  std::vector<std::unique_ptr<gemm::PackedB<C>>> packed;
  bool finite = true;  // every transformed filter value finite
};

// Winograd mixes the values of a tile in its transforms: an inf or NaN in the input or the filter
// would turn outputs that a direct sum gives finite (or +-inf) into NaN (inf - inf, 0 * inf).
// So the Winograd paths check what they transform and leave a call with non-finite values to
// the direct path, which sums the true terms.
template <typename C>
bool AllFinite(const C* data, int64_t n) {
  return Eigen::Map<const Eigen::Array<C, Eigen::Dynamic, 1>>(data, n).allFinite();
}

template <typename C>
std::shared_ptr<const WinogradPacked<C>> PrepareWinograd(const Conv2DGeometry& g, const C* filter,
                                                         const Parallel& parallel) {
  const int64_t ci_n = g.in_c, co_n = g.out_c;
  Scratch<C> u(static_cast<size_t>(16 * ci_n * co_n));
  WinogradFilter(g, filter, u.data(), parallel);
  const auto& gemm = gemm::BestGemm<C>();
  auto prepared = std::make_shared<WinogradPacked<C>>();
  prepared->finite = AllFinite(u.data(), 16 * ci_n * co_n);
  prepared->packed.resize(16);
  parallel.For(16, 2.0 * static_cast<double>(ci_n * co_n), [&](int64_t begin, int64_t end) {
    const SerialParallel serial;
    for (int64_t xi = begin; xi < end; ++xi) {
      prepared->packed[xi] = std::make_unique<gemm::PackedB<C>>(
          gemm, u.data() + xi * ci_n * co_n, co_n, false, ci_n, co_n, kWinogradBandTiles, serial);
    }
  });
  return prepared;
}

}  // namespace

struct FilterCache::Impl {
  std::mutex mutex;
  int dtype_size = 0;                 // sizeof the compute type of the entry
  int64_t in_c = 0, out_c = 0;        // the filter [3, 3, in_c, out_c]
  std::vector<unsigned char> filter;  // its bytes
  std::shared_ptr<const void> prepared;
};

FilterCache::FilterCache() : impl_(std::make_unique<Impl>()) {}
FilterCache::~FilterCache() = default;

namespace {

// The cached transform of `filter`, or null after storing a fresh one (or when another call holds
// the cache: that call's work is not waited for).
template <typename C>
std::shared_ptr<const WinogradPacked<C>> CachedWinograd(const Conv2DGeometry& g, const C* filter,
                                                        const Parallel& parallel,
                                                        FilterCache::Impl* cache) {
  std::unique_lock<std::mutex> lock(cache->mutex, std::try_to_lock);
  if (!lock.owns_lock()) return nullptr;
  const size_t bytes = sizeof(C) * static_cast<size_t>(9 * g.in_c * g.out_c);
  const auto* data = reinterpret_cast<const unsigned char*>(filter);
  if (cache->prepared != nullptr && cache->dtype_size == static_cast<int>(sizeof(C)) &&
      cache->in_c == g.in_c && cache->out_c == g.out_c && cache->filter.size() == bytes) {
    // Compared in chunks, in parallel; a training step's new weights differ in the first chunk.
    constexpr size_t kChunk = size_t{1} << 20;
    const int64_t chunks = static_cast<int64_t>((bytes + kChunk - 1) / kChunk);
    std::atomic<bool> same{std::memcmp(data, cache->filter.data(), std::min(bytes, kChunk)) == 0};
    if (same && chunks > 1) {
      parallel.For(chunks - 1, static_cast<double>(kChunk), [&](int64_t begin, int64_t end) {
        for (int64_t c = begin + 1; c < end + 1 && same.load(std::memory_order_relaxed); ++c) {
          const size_t off = static_cast<size_t>(c) * kChunk;
          if (std::memcmp(data + off, cache->filter.data() + off, std::min(kChunk, bytes - off)) !=
              0) {
            same.store(false, std::memory_order_relaxed);
          }
        }
      });
    }
    if (same) return std::static_pointer_cast<const WinogradPacked<C>>(cache->prepared);
  }
  auto prepared = PrepareWinograd(g, filter, parallel);
  cache->dtype_size = static_cast<int>(sizeof(C));
  cache->in_c = g.in_c;
  cache->out_c = g.out_c;
  cache->filter.assign(data, data + bytes);
  cache->prepared = prepared;
  return prepared;
}

// False (the output unspecified) where the filter or the input holds inf or NaN: the caller
// runs the direct path.
template <typename C>
bool WinogradForward(const Conv2DGeometry& g, const C* in, const C* filter, C* out,
                     const Epilogue<C>* epilogue, const Parallel& parallel, FilterCache* cache) {
  const int64_t ci_n = g.in_c, co_n = g.out_c;
  const int64_t tiles_w = (g.out_w + 1) / 2, tiles_h = (g.out_h + 1) / 2;
  const int64_t rows_total = g.batch * tiles_h;
  const int64_t band_rows = WinogradBandRows(g);  // tile rows per band
  const int64_t bands = (rows_total + band_rows - 1) / band_rows;
  const int64_t band_tiles = band_rows * tiles_w;
  std::shared_ptr<const WinogradPacked<C>> prepared =
      cache != nullptr ? CachedWinograd(g, filter, parallel, &cache->impl()) : nullptr;
  if (prepared == nullptr) prepared = PrepareWinograd(g, filter, parallel);
  if (!prepared->finite) return false;
  const auto& packed = prepared->packed;
  std::atomic<bool> non_finite{false};
  parallel.For(
      bands, 16.0 * static_cast<double>(band_tiles * ci_n * co_n), [&](int64_t begin, int64_t end) {
        Scratch<C> v(static_cast<size_t>(16 * band_tiles * ci_n));
        const std::vector<C> zeros(static_cast<size_t>(ci_n), C(0));
        Scratch<C> m(static_cast<size_t>(16 * band_tiles * co_n));
        for (int64_t unit = begin; unit < end; ++unit) {
          const int64_t r0 = unit * band_rows;
          const int64_t nty = std::min(band_rows, rows_total - r0);
          const int64_t nt = nty * tiles_w;
          if (non_finite.load(std::memory_order_relaxed)) break;
          WinogradInputTransform(g, in, r0, nt, zeros.data(), v.data());
          if (!AllFinite(v.data(), 16 * nt * ci_n)) {
            non_finite.store(true, std::memory_order_relaxed);
            break;
          }
          // The 16 products M[xi] = V[xi] U[xi].
          for (int xi = 0; xi < 16; ++xi) {
            packed[static_cast<size_t>(xi)]->Multiply(v.data() + xi * nt * ci_n, ci_n,
                                                      m.data() + xi * nt * co_n, nt, co_n);
          }
          // Output transform: the 2x2 block A^T M A of every tile, written where it falls,
          // vectorised over the output channels.
          const int64_t mstride = nt * co_n;
          for (int64_t t = 0; t < nt; ++t) {
            const int64_t r = r0 + t / tiles_w, b = r / tiles_h, ty = r % tiles_h;
            const int64_t oh = 2 * ty, ow = 2 * (t % tiles_w);
            C* o00 = out + ((b * g.out_h + oh) * g.out_w + ow) * co_n;
            const bool has_right = ow + 1 < g.out_w, has_below = oh + 1 < g.out_h;
            const C* mt = m.data() + t * co_n;
            auto x = [&](int i, int j) { return Row<C>(mt + (i * 4 + j) * mstride, co_n); };
            // A^T x: r0 = x0 + x1 + x2, r1 = x1 - x2 - x3 (rows), then the same on
            // columns.
            auto r0 = [&](int j) { return (x(0, j) + x(1, j) + x(2, j)).eval(); };
            auto r1 = [&](int j) { return (x(1, j) - x(2, j) - x(3, j)).eval(); };
            {
              const auto a0 = r0(0), a1 = r0(1), a2 = r0(2), a3 = r0(3);
              OutRow<C>(o00, co_n) = a0 + a1 + a2;
              if (has_right) OutRow<C>(o00 + co_n, co_n) = a1 - a2 - a3;
            }
            if (has_below) {
              C* o10 = o00 + g.out_w * co_n;
              const auto b0 = r1(0), b1 = r1(1), b2 = r1(2), b3 = r1(3);
              OutRow<C>(o10, co_n) = b0 + b1 + b2;
              if (has_right) OutRow<C>(o10 + co_n, co_n) = b1 - b2 - b3;
            }
          }
          if (epilogue != nullptr) {
            // The band's output rows are contiguous, across images too (an image's last
            // tile row ends at its last output row).
            const int64_t r1 = r0 + nty - 1;
            const int64_t p0 = ((r0 / tiles_h) * g.out_h + 2 * (r0 % tiles_h)) * g.out_w;
            const int64_t p1 =
                ((r1 / tiles_h) * g.out_h + std::min(g.out_h, 2 * (r1 % tiles_h) + 2)) * g.out_w;
            (*epilogue)(out + p0 * co_n, p1 - p0, p0);
          }
        }
      });
  return !non_finite.load();
}

// The filter gradient of the same convolution by the transposed transforms: with the forward
// block Y = A^T [U . V] A, U = G g G^T, the gradient of one (input, output) channel pair is
// dU = sum over tiles of V . (A dY A^T), then dg = G^T dU G. Summed over the tiles, the 16
// elementwise products become 16 products V[xi]^T W[xi] ([C_in, tiles] x [tiles, C_out]), 2.25
// times fewer multiplications than the direct sum. The tiles are reduced in a fixed number of
// groups (each a run of bands, in order), then the groups in order: the same sums for any
// thread count.
constexpr int64_t kWinogradGradBandTiles = 512;
constexpr int64_t kWinogradGradGroups = 8;

// False (grad_filter unspecified) where the input or the gradient holds inf or NaN.
template <typename C>
bool WinogradFilterGrad(const Conv2DGeometry& g, const C* in, const C* grad, C* grad_filter,
                        const Parallel& parallel) {
  const int64_t ci_n = g.in_c, co_n = g.out_c, plane = ci_n * co_n;
  const int64_t tiles_w = (g.out_w + 1) / 2, tiles_h = (g.out_h + 1) / 2;
  const int64_t band_rows =
      std::clamp<int64_t>(kWinogradGradBandTiles / std::max<int64_t>(tiles_w, 1), 1, tiles_h);
  const int64_t bands = (tiles_h + band_rows - 1) / band_rows;
  const int64_t units = g.batch * bands;
  const int64_t groups = std::min(units, kWinogradGradGroups);
  const int64_t band_tiles = band_rows * tiles_w;
  Scratch<C> du(static_cast<size_t>(groups * 16 * plane));
  const auto& gemm = gemm::BestGemm<C>();
  std::atomic<bool> non_finite{false};
  parallel.For(
      groups, 16.0 * static_cast<double>(units / groups + 1) * band_tiles * plane,
      [&](int64_t begin, int64_t end) {
        Scratch<C> v(static_cast<size_t>(16 * band_tiles * ci_n));
        Scratch<C> w(static_cast<size_t>(16 * band_tiles * co_n));
        const std::vector<C> zeros(static_cast<size_t>(std::max(ci_n, co_n)), C(0));
        for (int64_t group = begin; group < end; ++group) {
          C* acc = du.data() + group * 16 * plane;
          std::fill(acc, acc + 16 * plane, C(0));
          const int64_t u0 = group * units / groups, u1 = (group + 1) * units / groups;
          for (int64_t unit = u0; unit < u1; ++unit) {
            const int64_t b = unit / bands, ty0 = (unit % bands) * band_rows;
            const int64_t nty = std::min(band_rows, tiles_h - ty0);
            const int64_t nt = nty * tiles_w;
            WinogradInputTransform(g, in, b * tiles_h + ty0, nt, zeros.data(), v.data());
            // W[xi][t][:] = (A dY A^T)[xi] of the tile's 2x2 output gradient (zeros past the
            // output's edge), vectorised over the output channels.
            const int64_t wstride = nt * co_n;
            for (int64_t t = 0; t < nt; ++t) {
              const int64_t ty = ty0 + t / tiles_w, tx = t % tiles_w;
              const int64_t oh = 2 * ty, ow = 2 * tx;
              const C* y[2][2];
              for (int i = 0; i < 2; ++i)
                for (int j = 0; j < 2; ++j) {
                  y[i][j] = (oh + i < g.out_h && ow + j < g.out_w)
                                ? grad + ((b * g.out_h + oh + i) * g.out_w + ow + j) * co_n
                                : zeros.data();
                }
              auto dy = [&](int i, int j) { return Row<C>(y[i][j], co_n); };
              C* base = w.data() + t * co_n;
              // Rows of A dY: y0, y0 + y1, y0 - y1, -y1 (per column).
              const auto a00 = dy(0, 0), a01 = dy(0, 1);
              const auto a10 = (dy(0, 0) + dy(1, 0)).eval(), a11 = (dy(0, 1) + dy(1, 1)).eval();
              const auto a20 = (dy(0, 0) - dy(1, 0)).eval(), a21 = (dy(0, 1) - dy(1, 1)).eval();
              auto put = [&](int i, const auto& x0, const auto& x1) {
                // Row i of (A dY) A^T: x0, x0 + x1, x0 - x1, -x1.
                OutRow<C>(base + (i * 4 + 0) * wstride, co_n) = x0;
                OutRow<C>(base + (i * 4 + 1) * wstride, co_n) = x0 + x1;
                OutRow<C>(base + (i * 4 + 2) * wstride, co_n) = x0 - x1;
                OutRow<C>(base + (i * 4 + 3) * wstride, co_n) = -x1;
              };
              put(0, a00, a01);
              put(1, a10, a11);
              put(2, a20, a21);
              put(3, (-dy(1, 0)).eval(), (-dy(1, 1)).eval());
            }
            if (non_finite.load(std::memory_order_relaxed) ||
                !AllFinite(v.data(), 16 * nt * ci_n) || !AllFinite(w.data(), 16 * nt * co_n)) {
              non_finite.store(true, std::memory_order_relaxed);
              return;
            }
            for (int xi = 0; xi < 16; ++xi) {
              gemm.at_b_add(v.data() + xi * nt * ci_n, w.data() + xi * nt * co_n, acc + xi * plane,
                            ci_n, nt, co_n);
            }
          }
        }
      });
  if (non_finite.load()) return false;
  // The groups summed in order, then dg = G^T dU G, vectorised over the output channels.
  parallel.For(ci_n, 40.0 * static_cast<double>(co_n * groups), [&](int64_t begin, int64_t end) {
    std::vector<Eigen::Array<C, Eigen::Dynamic, 1>> s(16);
    for (int64_t ci = begin; ci < end; ++ci) {
      for (int xi = 0; xi < 16; ++xi) {
        s[xi] = Row<C>(du.data() + xi * plane + ci * co_n, co_n);
        for (int64_t k = 1; k < groups; ++k) {
          s[xi] += Row<C>(du.data() + (k * 16 + xi) * plane + ci * co_n, co_n);
        }
      }
      for (int i = 0; i < 3; ++i) {
        // Row i of G^T dU (3 x 4).
        auto r = [&](int j) {
          return i == 0   ? (s[j] + C(0.5) * s[4 + j] + C(0.5) * s[8 + j]).eval()
                 : i == 1 ? (C(0.5) * s[4 + j] - C(0.5) * s[8 + j]).eval()
                          : (C(0.5) * s[4 + j] + C(0.5) * s[8 + j] + s[12 + j]).eval();
        };
        const auto r0 = r(0), r1 = r(1), r2 = r(2), r3 = r(3);
        C* dst = grad_filter + (i * 3) * plane + ci * co_n;
        OutRow<C>(dst, co_n) = r0 + C(0.5) * r1 + C(0.5) * r2;
        OutRow<C>(dst + plane, co_n) = C(0.5) * r1 - C(0.5) * r2;
        OutRow<C>(dst + 2 * plane, co_n) = C(0.5) * r1 + C(0.5) * r2 + r3;
      }
    }
  });
  return true;
}

}  // namespace

namespace {

// The direct sum with a filter holding inf or NaN: im2col's zeros for the padding would meet
// them as 0 x inf = NaN, so here each filter tap's product takes only the output pixels whose
// source pixel exists (gathered rows, one product per tap, added in tap order): padding
// contributes nothing. Slower than the im2col path; for filters that are not all finite only.
template <typename C>
void ExactForward(const Conv2DGeometry& g, const C* in, const C* filter, C* out,
                  const Epilogue<C>* epilogue, const Parallel& parallel) {
  const int64_t pixels = g.out_h * g.out_w;
  const int64_t tiles = (pixels + kConvTileRows - 1) / kConvTileRows;
  const auto& gemm = gemm::BestGemm<C>();
  parallel.For(
      g.batch * tiles, static_cast<double>(std::min(pixels, kConvTileRows) * g.Depth() * g.out_c),
      [&](int64_t begin, int64_t end) {
        Scratch<C> a(static_cast<size_t>(kConvTileRows * g.in_c));
        Scratch<C> prod(static_cast<size_t>(kConvTileRows * g.out_c));
        std::vector<int64_t> rows_of(static_cast<size_t>(kConvTileRows));
        for (int64_t u = begin; u < end; ++u) {
          const int64_t b = u / tiles, t0 = (u % tiles) * kConvTileRows;
          const int64_t rows = std::min(kConvTileRows, pixels - t0);
          C* o = out + (b * pixels + t0) * g.out_c;
          std::fill(o, o + rows * g.out_c, C(0));
          for (int64_t kh = 0; kh < g.filter_h; ++kh) {
            for (int64_t kw = 0; kw < g.filter_w; ++kw) {
              int64_t n = 0;
              for (int64_t r = 0; r < rows; ++r) {
                const int64_t oh = (t0 + r) / g.out_w, ow = (t0 + r) % g.out_w;
                const int64_t h = oh * g.stride_h - g.pad_top + kh * g.dilation_h;
                const int64_t w = ow * g.stride_w - g.pad_left + kw * g.dilation_w;
                if (h < 0 || h >= g.in_h || w < 0 || w >= g.in_w) continue;
                std::memcpy(a.data() + n * g.in_c, in + ((b * g.in_h + h) * g.in_w + w) * g.in_c,
                            sizeof(C) * static_cast<size_t>(g.in_c));
                rows_of[static_cast<size_t>(n++)] = r;
              }
              if (n == 0) continue;
              gemm.a_b(a.data(), filter + (kh * g.filter_w + kw) * g.in_c * g.out_c, prod.data(), n,
                       g.in_c, g.out_c);
              for (int64_t i = 0; i < n; ++i) {
                C* dst = o + rows_of[static_cast<size_t>(i)] * g.out_c;
                const C* src = prod.data() + i * g.out_c;
                for (int64_t c = 0; c < g.out_c; ++c) dst[c] += src[c];
              }
            }
          }
          if (epilogue != nullptr) (*epilogue)(o, rows, b * pixels + t0);
        }
      });
}

}  // namespace

template <typename C>
void Conv2DForward(const Conv2DGeometry& g, const C* in, const C* filter, C* out,
                   const Epilogue<C>* epilogue, const Parallel& parallel, FilterCache* cache) {
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
  if (g.InputSize() > 0 && UseWinograd(g, cache != nullptr) &&
      WinogradForward(g, in, filter, out, epilogue, parallel, cache)) {
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
    // The filter packed once, in blocks of columns; a unit of work is a tile and a group of
    // blocks, with enough groups for kMinUnits units. (Each group packs the tile again, which
    // is why the groups are few and wide.)
    const int64_t groups_wanted = (kMinUnits + units - 1) / units;
    const int64_t n_block_max =
        std::max<int64_t>(16, ((g.out_c + groups_wanted - 1) / groups_wanted + 15) / 16 * 16);
    const gemm::PackedB<C> packed(gemm, filter, g.out_c, false, k, g.out_c, rows_max, parallel,
                                  n_block_max);
    if (!packed.finite()) {
      ExactForward(g, in, filter, out, epilogue, parallel);
      return;
    }
    const int64_t n_blocks = packed.layout().n_blocks;
    const int64_t per_group = std::max<int64_t>(1, n_blocks / groups_wanted);
    const int64_t groups = (n_blocks + per_group - 1) / per_group;
    parallel.For(units * groups,
                 static_cast<double>(rows_max * k * per_group * packed.layout().n_block),
                 [&](int64_t begin, int64_t end) {
                   for (int64_t v = begin; v < end; ++v) {
                     const int64_t u = v / groups, nb0 = (v % groups) * per_group;
                     const int64_t b = u / tiles, t0 = (u % tiles) * kConvTileRows;
                     const int64_t rows = std::min(kConvTileRows, pixels - t0);
                     const C* a = pointwise ? in + (b * pixels + t0) * g.in_c
                                            : col.data() + u * rows_max * k;
                     packed.MultiplyBlocks(a, k, out + (b * pixels + t0) * g.out_c, rows, g.out_c,
                                           nb0, std::min(nb0 + per_group, n_blocks));
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
  // The filter packed once for the products of every tile.
  const gemm::PackedB<C> packed(gemm, filter, g.out_c, false, k, g.out_c,
                                std::min(pixels, kConvTileRows), parallel);
  if (!packed.finite()) {
    // im2col's zeros for the padding would meet the filter's inf or NaN as NaN.
    ExactForward(g, in, filter, out, epilogue, parallel);
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
          packed.Multiply(a, k, o, rows, g.out_c);
          if (epilogue != nullptr) (*epilogue)(o, rows, b * pixels + t0);
        }
      });
}

template <typename C>
bool Conv2DFilterGradWinograd(const Conv2DGeometry& g, const C* in, const C* grad, C* grad_filter,
                              const Parallel& parallel) {
  if (!(g.filter_h == 3 && g.filter_w == 3 && g.stride_h == 1 && g.stride_w == 1 &&
        g.dilation_h == 1 && g.dilation_w == 1 && g.in_c >= 16 && g.out_c >= 16 && g.out_h >= 4 &&
        g.out_w >= 4 && g.batch * ((g.out_h + 1) / 2) * ((g.out_w + 1) / 2) >= 64)) {
    return false;
  }
  return WinogradFilterGrad(g, in, grad, grad_filter, parallel);
}

template bool Conv2DFilterGradWinograd<float>(const Conv2DGeometry&, const float*, const float*,
                                              float*, const Parallel&);
template bool Conv2DFilterGradWinograd<double>(const Conv2DGeometry&, const double*, const double*,
                                               double*, const Parallel&);
template void Conv2DForward<float>(const Conv2DGeometry&, const float*, const float*, float*,
                                   const Epilogue<float>*, const Parallel&, FilterCache*);
template void Conv2DForward<double>(const Conv2DGeometry&, const double*, const double*, double*,
                                    const Epilogue<double>*, const Parallel&, FilterCache*);

}  // namespace conv
}  // namespace opforge

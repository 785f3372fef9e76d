#include <Eigen/Core>
#if defined(__AVX__)
#include <immintrin.h>
#endif
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "common/arith.h"
#include "ops/resize_bilinear/resize_bilinear.h"

namespace opforge {
namespace {

constexpr const char* kOp = "ResizeBilinear";
constexpr const char* kGradOp = "ResizeBilinearGrad";
constexpr int64_t kMaxInt32 = std::numeric_limits<int32_t>::max();

// True if the product of dims fits in int64 (so every flat index does).
bool ElementCountFits(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (__builtin_mul_overflow(n, d, &n)) return false;
  }
  return true;
}

Status ValidateImageDims(const char* op, const char* argument, const std::vector<int64_t>& dims) {
  if (dims.size() != 4) {
    return InvalidArgument(op, argument, "a 4-D tensor [batch, height, width, channels]",
                           "shape " + ShapeString(dims));
  }
  if (dims[1] <= 0 || dims[2] <= 0) {
    return InvalidArgument(op, argument, "an image of non-zero height and width",
                           "shape " + ShapeString(dims));
  }
  if (dims[1] >= kMaxInt32 || dims[2] >= kMaxInt32) {
    return InvalidArgument(op, argument, "an image with height and width below 2^31 - 1",
                           "shape " + ShapeString(dims));
  }
  return Status::Ok();
}

}  // namespace

Status ValidateResizeBilinearAttrs(const char* op, bool align_corners, bool half_pixel_centers) {
  if (align_corners && half_pixel_centers) {
    return InvalidArgument(op, "align_corners", "false when half_pixel_centers is true", "true");
  }
  return Status::Ok();
}

Status ValidateResizeBilinear(const std::vector<int64_t>& images, const std::vector<int64_t>& size,
                              const std::vector<int64_t>& size_values, bool align_corners,
                              bool half_pixel_centers, ResizeBilinearParams* params) {
  OPFORGE_RETURN_IF_ERROR(ValidateResizeBilinearAttrs(kOp, align_corners, half_pixel_centers));
  OPFORGE_RETURN_IF_ERROR(ValidateImageDims(kOp, "images", images));
  if (images[3] <= 0) {
    return InvalidArgument(kOp, "images", "an image with at least one channel",
                           "shape " + ShapeString(images));
  }
  if (size.size() != 1 || size[0] != 2 || size_values.size() != 2) {
    return InvalidArgument(
        kOp, "size", "a 1-D tensor of two elements [new_height, new_width]",
        "shape " + ShapeString(size) +
            (size_values.empty() ? std::string() : " with values " + ShapeString(size_values)));
  }
  if (size_values[0] <= 0 || size_values[1] <= 0) {
    return InvalidArgument(kOp, "size", "positive [new_height, new_width]",
                           ShapeString(size_values));
  }
  if (!ElementCountFits({images[0], size_values[0], size_values[1], images[3]})) {
    return InvalidArgument(
        kOp, "size", "small enough for the output to fit in memory",
        ShapeString(size_values) + " for images of shape " + ShapeString(images));
  }
  *params = {images[0],      images[1],      images[2],     images[3],
             size_values[0], size_values[1], align_corners, half_pixel_centers};
  return Status::Ok();
}

Status ValidateResizeBilinearGrad(const std::vector<int64_t>& grads,
                                  const std::vector<int64_t>& original_image, bool align_corners,
                                  bool half_pixel_centers, ResizeBilinearParams* params) {
  OPFORGE_RETURN_IF_ERROR(ValidateResizeBilinearAttrs(kGradOp, align_corners, half_pixel_centers));
  OPFORGE_RETURN_IF_ERROR(ValidateImageDims(kGradOp, "grads", grads));
  OPFORGE_RETURN_IF_ERROR(ValidateImageDims(kGradOp, "original_image", original_image));
  if (grads[0] != original_image[0] || grads[3] != original_image[3]) {
    return InvalidArgument(kGradOp, "original_image",
                           "the batch size and channels of grads " + ShapeString(grads),
                           "shape " + ShapeString(original_image));
  }
  *params = {grads[0], original_image[1], original_image[2], grads[3],
             grads[1], grads[2],          align_corners,     half_pixel_centers};
  return Status::Ok();
}

namespace {

std::vector<ResizeTap> Taps(int64_t out_size, int64_t in_size, bool align_corners,
                            bool half_pixel_centers) {
  const float scale = ResizeScale(in_size, out_size, align_corners);
  std::vector<ResizeTap> taps(static_cast<size_t>(out_size));
  for (int64_t i = 0; i < out_size; ++i) {
    taps[static_cast<size_t>(i)] = ComputeResizeTap(i, scale, in_size, half_pixel_centers);
  }
  return taps;
}

// The horizontal taps, shared by every row: for each output column x its source pixels (as
// element offsets: pixel * channels) and lerp.
struct ColumnTaps {
  std::vector<int64_t> left, right;
  std::vector<float> lerp;
};

ColumnTaps MakeColumnTaps(const ResizeBilinearParams& p) {
  ColumnTaps columns;
  for (const ResizeTap& t : Taps(p.out_width, p.in_width, p.align_corners, p.half_pixel_centers)) {
    columns.left.push_back(t.lower * p.channels);
    columns.right.push_back(t.upper * p.channels);
    columns.lerp.push_back(t.lerp);
  }
  return columns;
}

// Returns make(std::integral_constant<int, C>{}) with C = channels for 1 to 4, and C = 0 (count
// known only at run time) otherwise: the per-pixel loops over so few channels unroll into
// straight-line code, without a loop's overhead on every pixel, which dominates at 3 channels
// (`make core-bench`: BM_ResizeBilinearBackward/1, [16,224,224,3] -> 512x512).
template <typename Make>
auto ByChannelCount(int64_t channels, Make make) {
  switch (channels) {
    case 1:
      return make(std::integral_constant<int, 1>{});
    case 2:
      return make(std::integral_constant<int, 2>{});
    case 3:
      return make(std::integral_constant<int, 3>{});
    case 4:
      return make(std::integral_constant<int, 4>{});
    default:
      return make(std::integral_constant<int, 0>{});
  }
}

// --- forward ----------------------------------------------------------------------------------
// The interpolation is separable and TensorFlow's order is horizontal first, so each output row
// is computed from two horizontally interpolated input rows (kept while consecutive output rows
// share them) and one vertical pass over contiguous memory.

// h[x, c] = l + (r - l) * lerp for the row's pixels l = row[lower(x), c], r = row[upper(x), c].
// kChannels > 0 fixes the channel count at compile time (small counts unroll fully).
template <int kChannels, typename T>
void HorizontalRow(const T* row, const int64_t* left, const int64_t* right, const float* lerp,
                   int64_t out_width, int64_t channels, float* h) {
  const int64_t c_count = kChannels > 0 ? kChannels : channels;
  for (int64_t x = 0; x < out_width; ++x) {
    const T* l = row + left[x];
    const T* r = row + right[x];
    const float w = lerp[x];
    float* dst = h + x * c_count;
    for (int64_t c = 0; c < c_count; ++c) {
      const float a = static_cast<float>(l[c]);
      const float b = static_cast<float>(r[c]);
      dst[c] = a + (b - a) * w;
    }
  }
}

void VerticalRow(const float* top, const float* bottom, float lerp, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float t = top[i];
    out[i] = t + (bottom[i] - t) * lerp;
  }
}

template <typename T>
void ConvertRange(const T* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(in[i]);
}

template <typename T>
using HorizontalFn = void (*)(const T*, const int64_t*, const int64_t*, const float*, int64_t,
                              int64_t, float*);

}  // namespace

template <typename T>
void ResizeBilinearForward(const ResizeBilinearParams& p, const T* images, float* output,
                           const Parallel& parallel) {
  const int64_t channels = p.channels;
  const int64_t row_len = p.out_width * channels;
  const int64_t out_rows = p.batch * p.out_height;
  if (out_rows == 0 || row_len == 0) return;
  if (p.out_height == p.in_height && p.out_width == p.in_width) {
    // Same size: TensorFlow returns the input converted to float, whatever the attrs.
    parallel.For(out_rows * row_len, kCostElementwise, [=](int64_t begin, int64_t end) {
      ConvertRange(images + begin, output + begin, end - begin);
    });
    return;
  }
  const std::vector<ResizeTap> ys =
      Taps(p.out_height, p.in_height, p.align_corners, p.half_pixel_centers);
  const ColumnTaps columns = MakeColumnTaps(p);
  const HorizontalFn<T> horizontal = ByChannelCount(
      channels, [](auto k) -> HorizontalFn<T> { return &HorizontalRow<decltype(k)::value, T>; });
  const int64_t in_row_len = p.in_width * channels;
  const int64_t in_height = p.in_height;
  const int64_t out_height = p.out_height;
  const int64_t out_width = p.out_width;
  const double cost = 4.0 * static_cast<double>(row_len);
  parallel.For(out_rows, cost, [&](int64_t begin, int64_t end) {
    // Two horizontally interpolated input rows, keyed by their flat row index.
    std::vector<float> buffer(static_cast<size_t>(2 * row_len));
    float* slot[2] = {buffer.data(), buffer.data() + row_len};
    int64_t key[2] = {-1, -1};
    auto interpolated = [&](int64_t in_row, int64_t keep) -> const float* {
      for (int s = 0; s < 2; ++s) {
        if (key[s] == in_row) return slot[s];
      }
      const int s = key[0] == keep ? 1 : 0;
      key[s] = in_row;
      horizontal(images + in_row * in_row_len, columns.left.data(), columns.right.data(),
                 columns.lerp.data(), out_width, channels, slot[s]);
      return slot[s];
    };
    for (int64_t row = begin; row < end; ++row) {
      const int64_t b = row / out_height;
      const ResizeTap& y = ys[static_cast<size_t>(row - b * out_height)];
      const int64_t top_row = b * in_height + y.lower;
      const int64_t bottom_row = b * in_height + y.upper;
      const float* top = interpolated(top_row, bottom_row);
      const float* bottom = bottom_row == top_row ? top : interpolated(bottom_row, top_row);
      VerticalRow(top, bottom, y.lerp, row_len, output + row * row_len);
    }
  });
}

// --- gradient ---------------------------------------------------------------------------------
// TensorFlow scatters sequentially: for y, for x, for c, four additions (top-left, top-right,
// bottom-left, bottom-right). Output row r therefore receives, in order, the contributions of
// the gradient rows y whose top or bottom source row is r (a contiguous range of y, since both
// are non-decreasing in y), x ascending, corners in that order. Each output row is computed by
// one task replaying exactly that sequence (a gradient row reaching two rows of another task is
// read by both, each taking its own row's share): no races, any partition gives the same bits.

namespace {

// The output indices [first[i], last[i]) whose taps reach input index i (both taps are
// non-decreasing and at most one apart, so each such set is contiguous).
void ReachingRanges(const std::vector<ResizeTap>& taps, int64_t in_size,
                    std::vector<int64_t>* first, std::vector<int64_t>* last) {
  first->assign(static_cast<size_t>(in_size), 0);
  last->assign(static_cast<size_t>(in_size), 0);
  for (int64_t o = static_cast<int64_t>(taps.size()) - 1; o >= 0; --o) {
    const ResizeTap& t = taps[static_cast<size_t>(o)];
    for (int64_t i : {t.lower, t.upper}) {
      if ((*last)[static_cast<size_t>(i)] == 0) (*last)[static_cast<size_t>(i)] = o + 1;
      (*first)[static_cast<size_t>(i)] = o;
    }
  }
}

// Scatter of one gradient pixel (channels vectorised): left[c] += (g[c] * wy) * wx_left, then
// right[c] += (g[c] * wy) * wx_right, each product rounded in float (g * wy computed once: the
// same rounding as TensorFlow's left-to-right g * wy * wx). The pointers of one call never
// alias (restrict parameters, so the loops vectorise without run-time overlap checks); where
// left and right are one pixel, the OnePixel variants add the two shares in that order.
template <int kChannels, typename A>
inline void ScatterTwoPixels(const float* __restrict g, float wy, float wx_left, float wx_right,
                             int64_t runtime_channels, A* __restrict l, A* __restrict r) {
  const int64_t channels = kChannels > 0 ? kChannels : runtime_channels;
  for (int64_t c = 0; c < channels; ++c) {
    const float gy = g[c] * wy;
    l[c] += static_cast<A>(gy * wx_left);
    r[c] += static_cast<A>(gy * wx_right);
  }
}

template <int kChannels, typename A>
inline void ScatterOnePixel(const float* __restrict g, float wy, float wx_left, float wx_right,
                            int64_t runtime_channels, A* __restrict l) {
  const int64_t channels = kChannels > 0 ? kChannels : runtime_channels;
  for (int64_t c = 0; c < channels; ++c) {
    const float gy = g[c] * wy;
    l[c] = (l[c] + static_cast<A>(gy * wx_left)) + static_cast<A>(gy * wx_right);
  }
}

// The same for the top and the bottom source row at once (two different rows), so that the
// gradient pixel is read once.
template <int kChannels, typename A>
inline void ScatterTwoRowsTwoPixels(const float* __restrict g, float inv_y, float y_lerp,
                                    float wx_left, float wx_right, int64_t runtime_channels,
                                    A* __restrict tl, A* __restrict tr, A* __restrict bl,
                                    A* __restrict br) {
  const int64_t channels = kChannels > 0 ? kChannels : runtime_channels;
  for (int64_t c = 0; c < channels; ++c) {
    const float gt = g[c] * inv_y;
    const float gb = g[c] * y_lerp;
    tl[c] += static_cast<A>(gt * wx_left);
    tr[c] += static_cast<A>(gt * wx_right);
    bl[c] += static_cast<A>(gb * wx_left);
    br[c] += static_cast<A>(gb * wx_right);
  }
}

template <int kChannels, typename A>
inline void ScatterTwoRowsOnePixel(const float* __restrict g, float inv_y, float y_lerp,
                                   float wx_left, float wx_right, int64_t runtime_channels,
                                   A* __restrict t, A* __restrict b) {
  const int64_t channels = kChannels > 0 ? kChannels : runtime_channels;
  for (int64_t c = 0; c < channels; ++c) {
    const float gt = g[c] * inv_y;
    const float gb = g[c] * y_lerp;
    t[c] = (t[c] + static_cast<A>(gt * wx_left)) + static_cast<A>(gt * wx_right);
    b[c] = (b[c] + static_cast<A>(gb * wx_left)) + static_cast<A>(gb * wx_right);
  }
}

template <int kChannels, typename A>
inline void ScatterPixel(const float* g, float wy, float wx_left, float wx_right, int64_t channels,
                         A* left, A* right) {
  if (left != right) {
    ScatterTwoPixels<kChannels>(g, wy, wx_left, wx_right, channels, left, right);
  } else {
    ScatterOnePixel<kChannels>(g, wy, wx_left, wx_right, channels, left);
  }
}

template <int kChannels, typename A>
inline void ScatterPixelTwoRows(const float* g, float inv_y, float y_lerp, float wx_left,
                                float wx_right, int64_t channels, A* top_left, A* top_right,
                                A* bottom_left, A* bottom_right) {
  if (top_left != top_right) {
    ScatterTwoRowsTwoPixels<kChannels>(g, inv_y, y_lerp, wx_left, wx_right, channels, top_left,
                                       top_right, bottom_left, bottom_right);
  } else {
    ScatterTwoRowsOnePixel<kChannels>(g, inv_y, y_lerp, wx_left, wx_right, channels, top_left,
                                      bottom_left);
  }
}

// Adds gradient row `g` to the accumulator rows of its top source row (`top`, weight
// 1 - y_lerp) and of its bottom one (`bottom`, weight y_lerp); either may be null (a row another
// task computes), and they are the same pointer when both source rows are one row, in which
// case each gradient pixel adds its top corners before its bottom ones, as the scatter does.
template <int kChannels, typename A>
void AccumulateRow(const float* g, const ColumnTaps& t, int64_t runtime_channels, float y_lerp,
                   A* top, A* bottom) {
  const int64_t channels = kChannels > 0 ? kChannels : runtime_channels;
  const float inv_y = 1.0f - y_lerp;
  const int64_t out_width = static_cast<int64_t>(t.lerp.size());
  const bool two_rows = top != nullptr && bottom != nullptr && top != bottom;
  for (int64_t x = 0; x < out_width; ++x) {
    const float* gx = g + x * channels;
    const float x_lerp = t.lerp[static_cast<size_t>(x)];
    const float inv_x = 1.0f - x_lerp;
    const int64_t l = t.left[static_cast<size_t>(x)];
    const int64_t r = t.right[static_cast<size_t>(x)];
    if (two_rows) {
      ScatterPixelTwoRows<kChannels>(gx, inv_y, y_lerp, inv_x, x_lerp, channels, top + l, top + r,
                                     bottom + l, bottom + r);
      continue;
    }
    if (top != nullptr)
      ScatterPixel<kChannels>(gx, inv_y, inv_x, x_lerp, channels, top + l, top + r);
    if (bottom != nullptr) {
      ScatterPixel<kChannels>(gx, y_lerp, inv_x, x_lerp, channels, bottom + l, bottom + r);
    }
  }
}

template <typename A>
using AccumulateFn = void (*)(const float*, const ColumnTaps&, int64_t, float, A*, A*);

// Copies a finished block of accumulators to the output. float goes through non-temporal
// stores: the output is written once and not read again here, and ordinary stores would first
// read every output line from memory; accumulating in the output itself is slower at every case
// of `make core-bench`'s BM_ResizeBilinearBackward.
template <typename T, typename A>
void StoreRows(const A* acc, T* out, int64_t n) {
  int64_t i = 0;
#if defined(__AVX__)
  if constexpr (std::is_same_v<T, float> && std::is_same_v<A, float>) {
    for (; i < n && (reinterpret_cast<uintptr_t>(out + i) & 31) != 0; ++i) out[i] = acc[i];
    for (; i + 8 <= n; i += 8) _mm256_stream_ps(out + i, _mm256_loadu_ps(acc + i));
  }
#endif
  for (; i < n; ++i) out[i] = static_cast<T>(acc[i]);
}

}  // namespace

template <typename T>
void ResizeBilinearBackward(const ResizeBilinearParams& p, const float* grads, T* output,
                            const Parallel& parallel) {
  // double accumulates in double, in the output itself; half, bfloat16 and float in float, in a
  // cache-resident block buffer (TensorFlow converts the float sums to half or bfloat16 once).
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  constexpr bool kInPlace = std::is_same_v<T, double>;
  const int64_t channels = p.channels;
  const int64_t row_len = p.in_width * channels;
  const int64_t out_rows = p.batch * p.in_height;
  if (out_rows == 0 || row_len == 0) return;
  const std::vector<ResizeTap> ys =
      Taps(p.out_height, p.in_height, p.align_corners, p.half_pixel_centers);
  std::vector<int64_t> first_y, last_y;  // the gradient rows that reach each image row
  ReachingRanges(ys, p.in_height, &first_y, &last_y);
  const ColumnTaps columns = MakeColumnTaps(p);
  const AccumulateFn<A> accumulate = ByChannelCount(
      channels, [](auto k) -> AccumulateFn<A> { return &AccumulateRow<decltype(k)::value, A>; });
  const int64_t in_height = p.in_height;
  const int64_t out_height = p.out_height;
  const int64_t grad_row_len = p.out_width * channels;
  // Rows are accumulated in blocks: each gradient row is read once for the two image rows it
  // reaches when both are in the block (only rows at a block's edges are read twice). A block
  // of accumulators stays within ~256 KiB.
  const int64_t block_rows = std::clamp<int64_t>(
      (int64_t{256} << 10) / std::max<int64_t>(1, row_len * static_cast<int64_t>(sizeof(A))), 2,
      64);
  const double cost = 8.0 * static_cast<double>(grad_row_len) *
                      std::max(1.0, static_cast<double>(p.out_height) / p.in_height);
  parallel.For(out_rows, cost, [&](int64_t begin, int64_t end) {
    std::vector<A> buffer(kInPlace ? 0 : static_cast<size_t>(block_rows * row_len));
    for (int64_t row0 = begin; row0 < end;) {
      // The block [row0, row1) of image b's rows [r0, r1).
      const int64_t b = row0 / in_height;
      const int64_t r0 = row0 - b * in_height;
      const int64_t r1 = std::min({r0 + block_rows, in_height, r0 + (end - row0)});
      const int64_t row1 = row0 + (r1 - r0);
      T* out = output + row0 * row_len;
      A* acc = kInPlace ? reinterpret_cast<A*>(out) : buffer.data();
      std::fill(acc, acc + (r1 - r0) * row_len, A(0));
      int64_t y_begin = out_height;
      int64_t y_end = 0;
      for (int64_t r = r0; r < r1; ++r) {
        if (last_y[static_cast<size_t>(r)] == first_y[static_cast<size_t>(r)]) continue;
        y_begin = std::min(y_begin, first_y[static_cast<size_t>(r)]);
        y_end = std::max(y_end, last_y[static_cast<size_t>(r)]);
      }
      for (int64_t y = y_begin; y < y_end; ++y) {
        const ResizeTap& t = ys[static_cast<size_t>(y)];
        A* top = t.lower >= r0 && t.lower < r1 ? acc + (t.lower - r0) * row_len : nullptr;
        A* bottom = t.upper >= r0 && t.upper < r1 ? acc + (t.upper - r0) * row_len : nullptr;
        if (top == nullptr && bottom == nullptr) continue;
        accumulate(grads + (b * out_height + y) * grad_row_len, columns, channels, t.lerp, top,
                   bottom);
      }
      if constexpr (!kInPlace) StoreRows(acc, out, (r1 - r0) * row_len);
      row0 = row1;
    }
#if defined(__AVX__)
    // Streaming stores are weakly ordered: each task fences its own before it reports done.
    if constexpr (std::is_same_v<T, float>) _mm_sfence();
#endif
  });
}

#define OPFORGE_INSTANTIATE_FORWARD(T, ...)                                             \
  template void ResizeBilinearForward<T>(const ResizeBilinearParams&, const T*, float*, \
                                         const Parallel&);
OPFORGE_RESIZE_IMAGE_TYPES(OPFORGE_INSTANTIATE_FORWARD)
#undef OPFORGE_INSTANTIATE_FORWARD

#define OPFORGE_INSTANTIATE_BACKWARD(T, ...)                                             \
  template void ResizeBilinearBackward<T>(const ResizeBilinearParams&, const float*, T*, \
                                          const Parallel&);
OPFORGE_FLOAT_TYPES(OPFORGE_INSTANTIATE_BACKWARD)
#undef OPFORGE_INSTANTIATE_BACKWARD

}  // namespace opforge

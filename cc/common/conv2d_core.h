// The convolution core: a 2-D convolution (NHWC input, HWIO filter, in the compute type C:
// float or double) as im2col in tiles of output pixels and one matrix product per tile
// (common/gemm.h, the widest build the CPU has), with an optional epilogue run on each tile of
// output rows right after its product, while the tile is still in cache (FusedConv2DBiasLeakyRelu
// adds its bias and applies its activation there). Conv2DTranspose's input gradient is this
// convolution.
//
// The filter is packed once per call for the products of every tile (gemm::PackedB). Tiles
// never cross images and hold at most kConvTileRows output pixels; with fewer than 8 tiles (a
// small image at batch 1) each tile's product is also split into a few groups of output
// channels, so that every thread gets work. 3x3 stride-1 convolutions with 16+ channels run
// Winograd F(2x2, 3x3) instead (conv2d_core.cc), forward and filter gradient. The partition
// depends on the shapes only (never on the thread count), so results are the same bits for any
// number of threads.
#ifndef OPFORGE_COMMON_CONV2D_CORE_H_
#define OPFORGE_COMMON_CONV2D_CORE_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "common/parallel.h"

namespace opforge {
namespace conv {

constexpr int64_t kConvTileRows = 256;

struct Conv2DGeometry {
  int64_t batch = 0;
  int64_t in_h = 0, in_w = 0, in_c = 0;
  int64_t out_h = 0, out_w = 0, out_c = 0;
  int64_t filter_h = 0, filter_w = 0;
  int64_t stride_h = 1, stride_w = 1;
  int64_t dilation_h = 1, dilation_w = 1;
  int64_t pad_top = 0, pad_left = 0;

  int64_t InputSize() const { return batch * in_h * in_w * in_c; }
  int64_t OutputSize() const { return batch * out_h * out_w * out_c; }
  // Rows of the product's right operand (the filter as [filter_h * filter_w * in_c, out_c]).
  int64_t Depth() const { return filter_h * filter_w * in_c; }
};

// Called with a tile of `rows` output pixels (rows x out_c values, contiguous) and the index of
// its first pixel in the batch.
template <typename C>
using Epilogue = std::function<void(C* rows, int64_t count, int64_t first_pixel)>;

// One kernel's transformed filter kept between calls: a 3x3 convolution on Winograd transforms
// its filter into 16 matrices and packs them for the products on every call, which on small
// images costs as much as the products (at 13x13 with 512 -> 1024 channels, 34 MB written and
// read back). With a cache the transform is redone only when the filter's contents change; they
// are compared in full with the copy kept (exact, no hash), which reads the filter twice
// instead of the transform's writing and reading it four times. Inference calls a kernel with
// the same (folded) weights again and again; a training step with new weights finds a
// difference within the first bytes. Thread-safe; results are the same bits with or without it.
class FilterCache {
 public:
  FilterCache();
  ~FilterCache();
  FilterCache(const FilterCache&) = delete;
  FilterCache& operator=(const FilterCache&) = delete;

  struct Impl;  // conv2d_core.cc
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// out[b, oh, ow, co] = sum over (kh, kw, ci) of
//   in[b, oh * stride_h - pad_top + kh * dilation_h, ow * stride_w - pad_left + kw * dilation_w,
//   ci]
//   * filter[kh, kw, ci, co], positions outside the input contributing 0;
// then epilogue(tile) when given. in [batch, in_h, in_w, in_c], filter [filter_h, filter_w, in_c,
// out_c], out [batch, out_h, out_w, out_c], all contiguous.
// `cache`, when given, keeps the transformed filter between calls (see FilterCache).
template <typename C>
void Conv2DForward(const Conv2DGeometry& g, const C* in, const C* filter, C* out,
                   const Epilogue<C>* epilogue, const Parallel& parallel,
                   FilterCache* cache = nullptr);

// The filter gradient of the same convolution, grad_filter[kh, kw, ci, co] = sum over (b, oh,
// ow) of in[b, oh * stride_h - pad_top + kh * dilation_h, ...] * grad[b, oh, ow, co], by
// Winograd F(2x2, 3x3)'s transposed transforms, for a 3x3 convolution with stride 1, dilation 1,
// at least 16 channels on each side and 64 tiles of 2x2 output pixels; returns false for any
// other geometry, and where `in` or `grad` holds inf or NaN (Winograd's transforms would turn
// them into NaN where the direct sum is finite), with grad_filter unspecified: the caller then
// runs its direct path. grad [batch, out_h, out_w, out_c].
template <typename C>
bool Conv2DFilterGradWinograd(const Conv2DGeometry& g, const C* in, const C* grad, C* grad_filter,
                              const Parallel& parallel);

}  // namespace conv
}  // namespace opforge

#endif  // OPFORGE_COMMON_CONV2D_CORE_H_

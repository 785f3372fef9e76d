// The interpolation taps of ResizeBilinear, shared by the CPU kernels (resize_bilinear_cpu.cc)
// and the CUDA kernels (resize_bilinear.cu), so that both compute the same bits: TensorFlow's
// CalculateResizeScale and its lower/upper/lerp per output index. floorf/ceilf and ternaries
// (not std::floor, std::min, std::max) so that nvcc compiles them for the device too.
#ifndef OPFORGE_OPS_RESIZE_BILINEAR_RESIZE_TAPS_H_
#define OPFORGE_OPS_RESIZE_BILINEAR_RESIZE_TAPS_H_

#include <math.h>

#include <cstdint>

#include "common/host_device.h"

namespace opforge {

// The source-coordinate scale of one axis (TensorFlow's CalculateResizeScale): int64 to float,
// then a float division, as TensorFlow computes it.
OPFORGE_HOST_DEVICE inline float ResizeScale(int64_t in, int64_t out, bool align_corners) {
  return (align_corners && in > 1 && out > 1)
             ? static_cast<float>(in - 1) / static_cast<float>(out - 1)
             : static_cast<float>(in) / static_cast<float>(out);
}

// The interpolation of one output index along one axis.
struct ResizeTap {
  int64_t lower;
  int64_t upper;
  float lerp;
};

OPFORGE_HOST_DEVICE inline ResizeTap ComputeResizeTap(int64_t out_index, float scale,
                                                      int64_t in_size, bool half_pixel_centers) {
  const float x = static_cast<float>(out_index);
  const float source = half_pixel_centers ? (x + 0.5f) * scale - 0.5f : x * scale;
  const float floor = floorf(source);
  // lower is clamped from below and upper from above; the lerp uses the unclamped floor (so a
  // negative half-pixel source keeps its fractional weight on the border pixel). The source
  // never reaches in_size, so lower's upper clamp changes nothing but guards memory should
  // rounding ever get it there.
  const int64_t lower = static_cast<int64_t>(floor);
  const int64_t upper = static_cast<int64_t>(ceilf(source));
  ResizeTap tap;
  tap.lower = lower < 0 ? 0 : (lower < in_size - 1 ? lower : in_size - 1);
  tap.upper = upper < in_size - 1 ? upper : in_size - 1;
  tap.lerp = source - floor;
  return tap;
}

}  // namespace opforge

#endif  // OPFORGE_OPS_RESIZE_BILINEAR_RESIZE_TAPS_H_

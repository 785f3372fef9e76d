// Bilinear resize of NHWC images, and its gradient, with TensorFlow's exact semantics in its
// three coordinate conventions:
//   legacy         source = x * scale                      (align_corners=false)
//   align-corners  source = x * (in - 1) / (out - 1)        (align_corners=true)
//   half-pixel     source = (x + 0.5) * scale - 0.5         (half_pixel_centers=true)
// with scale = in / out (or (in-1)/(out-1) for align-corners when in > 1 and out > 1) in float32,
// lower = max(floor(source), 0), upper = min(ceil(source), in - 1), lerp = source - floor(source)
// (the unclamped floor), and every value interpolated in float32 in TensorFlow's order:
//   top = tl + (tr - tl) * x_lerp;  bottom = bl + (br - bl) * x_lerp;  out = top + (bottom - top) *
//   y_lerp
// so results are bit-identical to tf.raw_ops.ResizeBilinear (the core is compiled without FMA
// contraction). Inputs of any real type are converted to float first; the output is float32.
//
// The gradient scatters each incoming gradient to its four source pixels with the forward's
// weights, products (g * y_weight) * x_weight in float32, added in TensorFlow's order. The CPU
// kernel gathers instead (each output row sums the gradient rows that touch it, in the order the
// sequential scatter would add them), which is parallel, race-free and bit-identical to
// tf.raw_ops.ResizeBilinearGrad. half and bfloat16 accumulate in float, double in double.
#ifndef OPFORGE_OPS_RESIZE_BILINEAR_RESIZE_BILINEAR_H_
#define OPFORGE_OPS_RESIZE_BILINEAR_RESIZE_BILINEAR_H_

#include <cstdint>
#include <vector>

#include "common/dtype.h"
#include "common/parallel.h"
#include "common/status.h"
#include "ops/resize_bilinear/resize_taps.h"  // ResizeScale, ComputeResizeTap

namespace opforge {

// An aggregate: {batch, in_height, in_width, channels, out_height, out_width, align_corners,
// half_pixel_centers} initialises it in this order.
struct ResizeBilinearParams {
  int64_t batch = 0;
  int64_t in_height = 0;  // the images' size (for the gradient: the original image's)
  int64_t in_width = 0;
  int64_t channels = 0;
  int64_t out_height = 0;  // the resized size (for the gradient: the incoming gradient's)
  int64_t out_width = 0;
  bool align_corners = false;
  bool half_pixel_centers = false;
};

// align_corners and half_pixel_centers may not both be true; `op` names the op in the message
// ("ResizeBilinear" or "ResizeBilinearGrad").
Status ValidateResizeBilinearAttrs(const char* op, bool align_corners, bool half_pixel_centers);

// images: [batch, height, width, channels] with height, width, channels > 0; size: the shape of
// the size tensor (must be [2]) and its values, however many there are (they must be two,
// [new_height, new_width], both > 0; a message about a wrong count names them). Fills params.
Status ValidateResizeBilinear(const std::vector<int64_t>& images, const std::vector<int64_t>& size,
                              const std::vector<int64_t>& size_values, bool align_corners,
                              bool half_pixel_centers, ResizeBilinearParams* params);

// grads: [batch, resized_height, resized_width, channels], original_image: [batch, height,
// width, channels] (same batch and channels; TensorFlow silently takes them from grads).
Status ValidateResizeBilinearGrad(const std::vector<int64_t>& grads,
                                  const std::vector<int64_t>& original_image, bool align_corners,
                                  bool half_pixel_centers, ResizeBilinearParams* params);

// The image types of the forward (the X-macro lists of common/dtype.h).
#define OPFORGE_RESIZE_SMALL_INT_TYPES(X, ...) \
  X(int8_t, __VA_ARGS__)                       \
  X(uint8_t, __VA_ARGS__)                      \
  X(int16_t, __VA_ARGS__)                      \
  X(uint16_t, __VA_ARGS__)
#define OPFORGE_RESIZE_IMAGE_TYPES(X, ...)       \
  OPFORGE_RESIZE_SMALL_INT_TYPES(X, __VA_ARGS__) \
  X(int32_t, __VA_ARGS__)                        \
  X(int64_t, __VA_ARGS__)                        \
  OPFORGE_FLOAT_TYPES(X, __VA_ARGS__)

// output[b, y, x, c] (float32, [batch, out_height, out_width, channels]) from images (T).
// T: OPFORGE_RESIZE_IMAGE_TYPES (int8, uint8, int16, uint16, int32, int64, half, bfloat16, float,
// double).
template <typename T>
void ResizeBilinearForward(const ResizeBilinearParams& params, const T* images, float* output,
                           const Parallel& parallel);

// output ([batch, in_height, in_width, channels], T) = the gradient with respect to the images
// of ResizeBilinearForward, given grads ([batch, out_height, out_width, channels], float32).
// T: half, bfloat16, float, double.
template <typename T>
void ResizeBilinearBackward(const ResizeBilinearParams& params, const float* grads, T* output,
                            const Parallel& parallel);

// CUDA versions (resize_bilinear.cu), asynchronous on `stream` (a cudaStream_t). The forward
// takes any of the forward's input dtypes; the gradient half, bfloat16, float or double. The
// gradient is a gather (one thread per output element, summing in the CPU kernel's order): no
// atomics, deterministic, and bit-identical to the CPU kernel. Compiled only where nvcc exists.
Status ResizeBilinearForwardGpu(DType dtype, const ResizeBilinearParams& params, const void* images,
                                float* output, void* stream);
Status ResizeBilinearBackwardGpu(DType dtype, const ResizeBilinearParams& params,
                                 const float* grads, void* output, void* stream);

}  // namespace opforge

#endif  // OPFORGE_OPS_RESIZE_BILINEAR_RESIZE_BILINEAR_H_

// Conv2DTranspose: the transposed 2-D convolution of tf.nn.conv2d_transpose (TensorFlow's
// Conv2DBackpropInput), and its two gradients.
//
// Notation (NHWC; NCHW is transposed in the core): the op's `input` is [N, IH, IW, CI], the
// `filter` is [FH, FW, CO, CI] and the output is [N, OH, OW, CO]. With the forward pads of a
// convolution from the output to the input (pad_top, pad_left), every input pixel scatters
//   output[b, ih*sh - pad_top + fh*dh, iw*sw - pad_left + fw*dw, co]
//       += input[b, ih, iw, ci] * filter[fh, fw, co, ci],
// positions outside the output are dropped. The gradient with respect to the input is the
// ordinary convolution of the output gradient with the filter; the gradient with respect to
// the filter correlates the output gradient with the input.
//
// CPU: Eigen matrix products on large blocks (a tile of input rows times the whole filter),
// then a col2im that gathers, per output pixel, the contributions in TensorFlow's order (input
// position row-major, then fh, then fw). half and bfloat16 are computed in float and rounded
// once. Every result is computed by one call in a fixed order, whatever the thread count.
// int32 (the forward op only, as TensorFlow's CPU kernel takes it; integers have no gradient):
// a direct loop that sums each output element in 32-bit arithmetic wrapping modulo 2^32, which
// is TensorFlow's result whatever its summation order.
#ifndef OPFORGE_OPS_CONV2D_TRANSPOSE_CONV2D_TRANSPOSE_H_
#define OPFORGE_OPS_CONV2D_TRANSPOSE_CONV2D_TRANSPOSE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/parallel.h"
#include "common/status.h"

// The forward op's dtypes; the gradients take the float types (OPFORGE_FLOAT_TYPES).
#define OPFORGE_CONV2D_TRANSPOSE_TYPES(X, ...) \
  OPFORGE_FLOAT_TYPES(X, __VA_ARGS__)          \
  X(int32_t, __VA_ARGS__)

namespace opforge {

// The op's attributes as the binding reads them (TensorFlow's names and conventions): strides
// and dilations have 4 values in data_format order; explicit_paddings has 8 (pairs in
// data_format order) when padding is "EXPLICIT" and is empty otherwise.
struct Conv2DTransposeAttrs {
  std::vector<int64_t> strides = {1, 1, 1, 1};
  std::vector<int64_t> dilations = {1, 1, 1, 1};
  std::string padding = "SAME";
  std::vector<int64_t> explicit_paddings;
  std::string data_format = "NHWC";
};

// Everything the kernels need, in NHWC terms whatever the data format.
struct Conv2DTransposeParams {
  int64_t batch = 0;
  int64_t in_h = 0, in_w = 0, in_c = 0;     // the op's input (CI = filter dim 3)
  int64_t out_h = 0, out_w = 0, out_c = 0;  // the op's output (CO = filter dim 2)
  int64_t filter_h = 0, filter_w = 0;
  int64_t stride_h = 1, stride_w = 1;
  int64_t dilation_h = 1, dilation_w = 1;
  int64_t pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0;
  bool nchw = false;

  // Shapes in the data format's order (filter: always [FH, FW, CO, CI]).
  std::vector<int64_t> InputShape() const;
  std::vector<int64_t> OutputShape() const;
  std::vector<int64_t> FilterShape() const;
  int64_t InputSize() const { return batch * in_h * in_w * in_c; }
  int64_t OutputSize() const { return batch * out_h * out_w * out_c; }
  int64_t FilterSize() const { return filter_h * filter_w * out_c * in_c; }
};

// Checks the attributes alone (strides, dilations, padding, explicit_paddings, data_format).
Status ValidateConv2DTransposeAttrs(const Conv2DTransposeAttrs& attrs);

// Checks the forward op's arguments and fills `params`. `output_shape` holds the values of the
// output_shape tensor: 4 values in data_format order, or 2 values [OH, OW] (batch from input,
// channels from filter). `output_name` names that argument in messages ("output_shape"; the
// filter gradient passes "grad", whose shape plays its part). When the output size does not fit
// the input, the message names the range of output sizes that would.
Status ValidateConv2DTranspose(const Conv2DTransposeAttrs& attrs,
                               const std::vector<int64_t>& input_shape,
                               const std::vector<int64_t>& filter_shape,
                               const std::vector<int64_t>& output_shape,
                               Conv2DTransposeParams* params,
                               const char* output_name = "output_shape");

// Checks the filter gradient's arguments: `grad` is the forward output's gradient, a 4-D tensor
// of the forward output's shape (never the 2-value [OH, OW] form output_shape may take).
Status ValidateConv2DTransposeFilterGrad(const Conv2DTransposeAttrs& attrs,
                                         const std::vector<int64_t>& input_shape,
                                         const std::vector<int64_t>& filter_shape,
                                         const std::vector<int64_t>& grad_shape,
                                         Conv2DTransposeParams* params);

// Checks the input gradient's arguments: `grad` has the forward output's shape; the input's
// spatial size is the convolution output size that the attributes give for it.
Status ValidateConv2DTransposeInputGrad(const Conv2DTransposeAttrs& attrs,
                                        const std::vector<int64_t>& grad_shape,
                                        const std::vector<int64_t>& filter_shape,
                                        Conv2DTransposeParams* params);

// The spatial size of the op's input that an output of size `out` gives (a convolution's output
// size, TensorFlow's GetWindowedOutputSize): -1 when it would be negative.
int64_t Conv2DTransposeInputSize(int64_t out, int64_t filter, int64_t dilation, int64_t stride,
                                 const std::string& padding, int64_t pad_before, int64_t pad_after);

// output = conv2d_transpose(input, filter), layouts per params.nchw. T: Eigen::half,
// Eigen::bfloat16, float, double, int32_t (wrapping modulo 2^32).
template <typename T>
void Conv2DTransposeForward(const Conv2DTransposeParams& p, const T* input, const T* filter,
                            T* output, const Parallel& parallel);

// grad_input[b, ih, iw, ci] = sum grad[b, ih*sh - pt + fh*dh, iw*sw - pl + fw*dw, co]
//                                 * filter[fh, fw, co, ci]   (a convolution of grad).
template <typename T>
void Conv2DTransposeInputGrad(const Conv2DTransposeParams& p, const T* grad, const T* filter,
                              T* grad_input, const Parallel& parallel);

// grad_filter[fh, fw, co, ci] = sum over b, ih, iw of
//     grad[b, ih*sh - pt + fh*dh, iw*sw - pl + fw*dw, co] * input[b, ih, iw, ci].
template <typename T>
void Conv2DTransposeFilterGrad(const Conv2DTransposeParams& p, const T* input, const T* grad,
                               T* grad_filter, const Parallel& parallel);

// CUDA versions (conv2d_transpose.cu, kernel bodies in conv2d_transpose_gpu.h), asynchronous on
// `stream`. The forward pass and the input gradient: one thread per result element. The filter
// gradient: a tiled product per tap, split over slices of the pixels and reduced in a fixed order
// (deterministic); it needs Conv2DTransposeFilterGradGpuScratchBytes(dtype, p) bytes of device
// scratch memory (0 for many shapes), aligned to 8 bytes and usable on `stream`, which the caller
// provides (TensorFlow owns the GPU's memory: the binding takes it from allocate_temp). An empty
// batch or image gives a zero filter gradient.
Status Conv2DTransposeForwardGpu(DType dtype, const Conv2DTransposeParams& p, const void* input,
                                 const void* filter, void* output, void* stream);
Status Conv2DTransposeInputGradGpu(DType dtype, const Conv2DTransposeParams& p, const void* grad,
                                   const void* filter, void* grad_input, void* stream);
int64_t Conv2DTransposeFilterGradGpuScratchBytes(DType dtype, const Conv2DTransposeParams& p);
Status Conv2DTransposeFilterGradGpu(DType dtype, const Conv2DTransposeParams& p, const void* input,
                                    const void* grad, void* grad_filter, void* scratch,
                                    int64_t scratch_bytes, void* stream);

}  // namespace opforge

#endif  // OPFORGE_OPS_CONV2D_TRANSPOSE_CONV2D_TRANSPOSE_H_

// FusedConv2DBiasLeakyRelu: leaky_relu(conv2d(input, filter) + bias) in one op, the bias and the
// activation applied to each tile of output rows right after its matrix product, while it is in
// cache (the convolution core's epilogue, common/conv2d_core.h), where TensorFlow's unfused
// graph writes the convolution output and reads it back twice.
//
// Inference form of a Darknet block: batch norm folded into the filter and bias
// (W' = W * gamma / sqrt(var + eps), b' = beta - mean * gamma / sqrt(var + eps)).
//
// input [B, H, W, C_in] (NHWC), filter [KH, KW, C_in, C_out] (HWIO, as tf.nn.conv2d), bias
// [C_out]; strides, dilations and explicit_paddings in TensorFlow's 4- and 8-value NHWC forms;
// padding SAME, VALID or EXPLICIT with TensorFlow's output sizes and pads. The activation is
// TensorFlow's leaky_relu: z > 0 ? z : z * alpha, with alpha >= 0 (so that the sign of the output
// is the sign of z, which the gradient reads). half and bfloat16 are computed in float and
// rounded once; float in float; double in double.
#ifndef OPFORGE_OPS_FUSED_CONV2D_BIAS_LEAKY_RELU_FUSED_CONV2D_BIAS_LEAKY_RELU_H_
#define OPFORGE_OPS_FUSED_CONV2D_BIAS_LEAKY_RELU_FUSED_CONV2D_BIAS_LEAKY_RELU_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/conv2d_core.h"
#include "common/dtype.h"
#include "common/parallel.h"
#include "common/status.h"

namespace opforge {

struct FusedConv2DParams {
  // Attrs.
  std::vector<int64_t> strides{1, 1, 1, 1};
  std::string padding = "SAME";
  std::vector<int64_t> explicit_paddings;
  std::vector<int64_t> dilations{1, 1, 1, 1};
  float alpha = 0.2f;
  // From the shapes (ValidateFusedConv2D fills it).
  conv::Conv2DGeometry g;

  std::vector<int64_t> OutputShape() const { return {g.batch, g.out_h, g.out_w, g.out_c}; }
};

// The attrs alone: strides and dilations 4 positive values with 1 for batch and channels,
// padding SAME/VALID/EXPLICIT, explicit_paddings 8 non-negative values (zero for batch and
// channels) exactly when EXPLICIT, alpha finite and >= 0.
Status ValidateFusedConv2DAttrs(const FusedConv2DParams& params);

// The shapes: input 4-D, filter 4-D with input's channels, bias [C_out], an output of at least
// one pixel per side unless the input is empty. Fills params->g.
Status ValidateFusedConv2D(const std::vector<int64_t>& input, const std::vector<int64_t>& filter,
                           const std::vector<int64_t>& bias, FusedConv2DParams* params);

// TensorFlow's output size and leading pad of one spatial dimension (pad_before and pad_after:
// the explicit pads, read for EXPLICIT only); out is 0 when the dilated filter does not fit.
void FusedConv2DOutputSize(const std::string& padding, int64_t in, int64_t filter, int64_t dilation,
                           int64_t stride, int64_t pad_before, int64_t pad_after, int64_t* out,
                           int64_t* pad);

// output [B, OH, OW, C_out]. Parallel over tiles of output pixels; the same bits for any thread
// count.
// `cache`: the kernel's conv::FilterCache (the transformed filter kept between calls), or null.
template <typename T>
void FusedConv2DBiasLeakyRelu(const FusedConv2DParams& params, const T* input, const T* filter,
                              const T* bias, T* output, const Parallel& parallel,
                              conv::FilterCache* cache = nullptr);

}  // namespace opforge

#endif  // OPFORGE_OPS_FUSED_CONV2D_BIAS_LEAKY_RELU_FUSED_CONV2D_BIAS_LEAKY_RELU_H_

// FusedConv2DBiasLeakyRelu on the CPU: validation, and the convolution core with a bias +
// leaky_relu epilogue per tile.
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <type_traits>

#include "common/onednn.h"
#include "common/scratch.h"
#include "ops/fused_conv2d_bias_leaky_relu/fused_conv2d_bias_leaky_relu.h"

namespace opforge {

namespace {

constexpr char kOp[] = "FusedConv2DBiasLeakyRelu";
// Sizes beyond this are refused before any arithmetic on them can overflow.
constexpr int64_t kMaxAttr = int64_t{1} << 30;

std::string List(const std::vector<int64_t>& v) { return ShapeString(v); }

Status CheckFour(const char* name, const std::vector<int64_t>& v) {
  if (v.size() != 4 || v[0] != 1 || v[3] != 1 || v[1] < 1 || v[2] < 1 || v[1] > kMaxAttr ||
      v[2] > kMaxAttr) {
    return InvalidArgument(kOp, name, "4 values [1, h, w, 1] (NHWC) with h and w in [1, 2^30]",
                           List(v));
  }
  return Status::Ok();
}

}  // namespace

void FusedConv2DOutputSize(const std::string& padding, int64_t in, int64_t filter, int64_t dilation,
                           int64_t stride, int64_t pad_before, int64_t pad_after, int64_t* out,
                           int64_t* pad) {
  const int64_t eff = (filter - 1) * dilation + 1;
  if (padding == "VALID") {
    *out = in >= eff ? (in - eff) / stride + 1 : 0;
    *pad = 0;
  } else if (padding == "SAME") {
    *out = (in + stride - 1) / stride;
    const int64_t total = std::max<int64_t>((*out - 1) * stride + eff - in, 0);
    *pad = total / 2;
  } else {
    const int64_t span = in + pad_before + pad_after;
    *out = span >= eff ? (span - eff) / stride + 1 : 0;
    *pad = pad_before;
  }
}

Status ValidateFusedConv2DAttrs(const FusedConv2DParams& p) {
  OPFORGE_RETURN_IF_ERROR(CheckFour("strides", p.strides));
  OPFORGE_RETURN_IF_ERROR(CheckFour("dilations", p.dilations));
  if (p.padding != "SAME" && p.padding != "VALID" && p.padding != "EXPLICIT") {
    return InvalidArgument(kOp, "padding", "\"SAME\", \"VALID\" or \"EXPLICIT\"",
                           "\"" + p.padding + "\"");
  }
  if (p.padding == "EXPLICIT") {
    const auto& e = p.explicit_paddings;
    bool ok = e.size() == 8 && e[0] == 0 && e[1] == 0 && e[6] == 0 && e[7] == 0;
    for (size_t i = 0; ok && i < e.size(); ++i) ok = e[i] >= 0 && e[i] <= kMaxAttr;
    if (!ok) {
      return InvalidArgument(kOp, "explicit_paddings",
                             "8 values (4 pairs, NHWC) in [0, 2^30], zero for batch and channels",
                             List(e));
    }
  } else if (!p.explicit_paddings.empty()) {
    return InvalidArgument(kOp, "explicit_paddings", "empty unless padding is EXPLICIT",
                           List(p.explicit_paddings));
  }
  if (!std::isfinite(p.alpha) || p.alpha < 0.0f) {
    return InvalidArgument(kOp, "alpha", "finite and >= 0", p.alpha);
  }
  return Status::Ok();
}

Status ValidateFusedConv2D(const std::vector<int64_t>& input, const std::vector<int64_t>& filter,
                           const std::vector<int64_t>& bias, FusedConv2DParams* params) {
  FusedConv2DParams& p = *params;
  OPFORGE_RETURN_IF_ERROR(ValidateFusedConv2DAttrs(p));
  if (input.size() != 4) {
    return InvalidArgument(kOp, "input", "4-D [batch, height, width, channels] (NHWC)",
                           ShapeString(input));
  }
  if (filter.size() != 4) {
    return InvalidArgument(kOp, "filter",
                           "4-D [filter_height, filter_width, in_channels, out_channels]",
                           ShapeString(filter));
  }
  for (int64_t d : input) {
    if (d < 0 || d > (int64_t{1} << 40)) {
      return InvalidArgument(kOp, "input", "dimensions in [0, 2^40]", ShapeString(input));
    }
  }
  for (int64_t d : filter) {
    if (d < 0 || d > kMaxAttr) {
      return InvalidArgument(kOp, "filter", "dimensions in [0, 2^30]", ShapeString(filter));
    }
  }
  if (filter[2] != input[3]) {
    std::ostringstream e;
    e << "[filter_height, filter_width, " << input[3]
      << ", out_channels] (in_channels = the input's " << input[3] << " channels)";
    return InvalidArgument(kOp, "filter", e.str(), ShapeString(filter));
  }
  if (filter[0] < 1 || filter[1] < 1) {
    return InvalidArgument(kOp, "filter", "a kernel of at least 1x1", ShapeString(filter));
  }
  if (bias != std::vector<int64_t>{filter[3]}) {
    return InvalidArgument(kOp, "bias", "[" + std::to_string(filter[3]) + "] (out_channels)",
                           ShapeString(bias));
  }
  conv::Conv2DGeometry& g = p.g;
  g.batch = input[0];
  g.in_h = input[1];
  g.in_w = input[2];
  g.in_c = input[3];
  g.filter_h = filter[0];
  g.filter_w = filter[1];
  g.out_c = filter[3];
  g.stride_h = p.strides[1];
  g.stride_w = p.strides[2];
  g.dilation_h = p.dilations[1];
  g.dilation_w = p.dilations[2];
  const bool expl = p.padding == "EXPLICIT";
  FusedConv2DOutputSize(p.padding, g.in_h, g.filter_h, g.dilation_h, g.stride_h,
                        expl ? p.explicit_paddings[2] : 0, expl ? p.explicit_paddings[3] : 0,
                        &g.out_h, &g.pad_top);
  FusedConv2DOutputSize(p.padding, g.in_w, g.filter_w, g.dilation_w, g.stride_w,
                        expl ? p.explicit_paddings[4] : 0, expl ? p.explicit_paddings[5] : 0,
                        &g.out_w, &g.pad_left);
  if ((g.out_h == 0 || g.out_w == 0) && g.in_h > 0 && g.in_w > 0) {
    std::ostringstream e;
    e << "at least the dilated filter size " << (g.filter_h - 1) * g.dilation_h + 1 << "x"
      << (g.filter_w - 1) * g.dilation_w + 1 << " in height and width with " << p.padding
      << " padding";
    return InvalidArgument(kOp, "input", e.str(), ShapeString(input));
  }
  // The output must be a shape TensorFlow can build (TensorShape::AddDim CHECK-fails otherwise):
  // an empty input such as [1, 2^31, 2^31, 0] gives [1, 2^31, 2^31, C_out].
  int64_t count = 1;
  for (int64_t d : p.OutputShape()) {
    if (d != 0 && count > std::numeric_limits<int64_t>::max() / d) {
      return InvalidArgument(kOp, "input", "a size whose output has fewer than 2^63 elements",
                             ShapeString(input) + " (output " + ShapeString(p.OutputShape()) + ")");
    }
    count *= d;
  }
  return Status::Ok();
}

namespace {

template <typename C>
inline C Leaky(C z, C alpha) {
  return z > C(0) ? z : z * alpha;
}

}  // namespace

template <typename T>
void FusedConv2DBiasLeakyRelu(const FusedConv2DParams& p, const T* input, const T* filter,
                              const T* bias, T* output, const Parallel& parallel,
                              conv::FilterCache* cache) {
  using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const conv::Conv2DGeometry& g = p.g;
  if (g.OutputSize() == 0) return;
  const int64_t co = g.out_c;
  const C alpha = static_cast<C>(p.alpha);
  // The bias in the compute type (half and bfloat16 convert exactly).
  std::vector<C> b(static_cast<size_t>(co));
  for (int64_t c = 0; c < co; ++c) b[static_cast<size_t>(c)] = static_cast<C>(bias[c]);
  // oneDNN (common/onednn.h), the bias and the activation applied to the float sums before the
  // one rounding, as below: every bfloat16 convolution (oneDNN multiplies bfloat16 at the
  // CPU's bfloat16 rate, opforge's products at the float32 rate), and the float32 ones but the
  // 3x3 stride-1 convolutions with 16+ channels on each side, which run opforge's Winograd (fewer
  // multiplications than any direct kernel; at the 1x1 and stride-2 shapes oneDNN beats opforge's
  // im2col products): `opforge bench fused_conv2d_bias_leaky_relu` compares each with TensorFlow.
  constexpr bool kBf16 = std::is_same_v<T, Eigen::bfloat16>;
  if constexpr (kBf16 || std::is_same_v<T, float>) {
    const bool winograd = g.filter_h == 3 && g.filter_w == 3 && g.stride_h == 1 &&
                          g.stride_w == 1 && g.dilation_h == 1 && g.dilation_w == 1 &&
                          g.in_c >= 16 && g.out_c >= 16;
    if (kBf16 || !winograd) {
      // oneDNN's relu with slope 0 is a max(x, 0), which turns NaN into 0: with alpha 0 the
      // activation runs here, on the rounded result (rounding and x > 0 ? x : 0 * x commute).
      const bool post_op = alpha != C(1) && alpha != C(0);
      std::vector<float> bias_f(b.begin(), b.end());
      if (onednn::ConvForward(onednn::ShapeOf(g),
                              kBf16 ? onednn::DType::kBFloat16 : onednn::DType::kFloat32, input,
                              filter, bias_f.data(), post_op, static_cast<float>(alpha), output)) {
        if (alpha == C(0)) {
          parallel.For(g.OutputSize(), 1.0, [&](int64_t begin, int64_t end) {
            for (int64_t i = begin; i < end; ++i) {
              output[i] = static_cast<T>(Leaky<C>(static_cast<C>(output[i]), C(0)));
            }
          });
        }
        return;
      }
    }
  }
  if constexpr (std::is_same_v<T, C>) {
    const conv::Epilogue<C> epilogue = [&](C* rows, int64_t count, int64_t) {
      for (int64_t r = 0; r < count; ++r) {
        C* row = rows + r * co;
        for (int64_t c = 0; c < co; ++c)
          row[c] = Leaky<C>(row[c] + b[static_cast<size_t>(c)], alpha);
      }
    };
    conv::Conv2DForward<C>(g, input, filter, output, &epilogue, parallel, cache);
  } else {
    // half, bfloat16: the operands converted to float once, the output rounded once.
    Scratch<C> in(static_cast<size_t>(g.InputSize()));
    Scratch<C> f(static_cast<size_t>(g.filter_h * g.filter_w * g.in_c * co));
    parallel.For(g.InputSize(), 1.0, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) in[static_cast<size_t>(i)] = static_cast<C>(input[i]);
    });
    for (size_t i = 0; i < f.size(); ++i) f[i] = static_cast<C>(filter[i]);
    Scratch<C> out(static_cast<size_t>(g.OutputSize()));
    const conv::Epilogue<C> epilogue = [&](C* rows, int64_t count, int64_t first) {
      T* dst = output + first * co;
      for (int64_t r = 0; r < count; ++r) {
        const C* row = rows + r * co;
        for (int64_t c = 0; c < co; ++c) {
          dst[r * co + c] = static_cast<T>(Leaky<C>(row[c] + b[static_cast<size_t>(c)], alpha));
        }
      }
    };
    conv::Conv2DForward<C>(g, in.data(), f.data(), out.data(), &epilogue, parallel, cache);
  }
}

#define OPFORGE_INSTANTIATE_FUSED_CONV_(T, ...)                                           \
  template void FusedConv2DBiasLeakyRelu<T>(const FusedConv2DParams&, const T*, const T*, \
                                            const T*, T*, const Parallel&, conv::FilterCache*);
OPFORGE_FLOAT_TYPES(OPFORGE_INSTANTIATE_FUSED_CONV_)
#undef OPFORGE_INSTANTIATE_FUSED_CONV_

}  // namespace opforge

// TensorFlow binding of FusedConv2DBiasLeakyRelu: op registration with its shape function, and
// the op struct that TfKernel (common/tf_kernel.h) runs. CPU only: on a GPU the layers run
// TensorFlow's convolution (cuDNN) and opforge's bias + leaky_relu kernel.
#include <string>
#include <vector>

#include "common/tf_kernel.h"
#include "ops/fused_conv2d_bias_leaky_relu/fused_conv2d_bias_leaky_relu.h"
#include "ops/fused_conv2d_bias_leaky_relu/fused_conv2d_bias_leaky_relu_op.h"

namespace opforge {

namespace {

using namespace fused_conv2d_bias_leaky_relu_op;  // NOLINT: the op's constants and attr reader,
                                                  // shared with its kernels

absl::Status Shape(InferenceContext* c) {
  FusedConv2DParams p;
  TF_RETURN_IF_ERROR(ReadShapeAttrs(c, ReadAttrs, &p));
  TF_RETURN_IF_ERROR(ToTfStatus(ValidateFusedConv2DAttrs(p)));
  const ShapeFn fn(c, kOp);
  ShapeHandle input, filter, bias;
  TF_RETURN_IF_ERROR(fn.Rank(0, "input", 4, &input, "4-D"));
  TF_RETURN_IF_ERROR(fn.Rank(1, "filter", 4, &filter, "4-D"));
  TF_RETURN_IF_ERROR(fn.Rank(2, "bias", 1, &bias, "1-D"));
  if (fn.Known({input, filter, bias})) {  // every check of the kernel, with its messages
    FusedConv2DParams full = p;
    TF_RETURN_IF_ERROR(
        ToTfStatus(ValidateFusedConv2D(fn.Dims(input), fn.Dims(filter), fn.Dims(bias), &full)));
    c->set_output(0, fn.Make(full.OutputShape()));
    return absl::OkStatus();
  }
  DimensionHandle channels;
  TF_RETURN_IF_ERROR(fn.MergeDim(c->Dim(filter, 3), c->Dim(bias, 0), "bias",
                                 "[out_channels] of the filter " + fn.Text(filter), fn.Text(bias),
                                 &channels));
  DimensionHandle in_channels;
  TF_RETURN_IF_ERROR(
      fn.MergeDim(c->Dim(input, 3), c->Dim(filter, 2), "filter",
                  "in_channels equal to the input's channels (input " + fn.Text(input) + ")",
                  fn.Text(filter), &in_channels));
  // Each spatial size is known when the input's size and the filter's are.
  DimensionHandle spatial[2] = {c->UnknownDim(), c->UnknownDim()};
  for (int d = 0; d < 2; ++d) {
    DimensionHandle in = c->Dim(input, 1 + d), k = c->Dim(filter, d);
    if (c->ValueKnown(in) && c->ValueKnown(k)) {
      const bool expl = p.padding == "EXPLICIT";
      int64_t out = 0, pad = 0;
      FusedConv2DOutputSize(p.padding, c->Value(in), c->Value(k), p.dilations[1 + d],
                            p.strides[1 + d], expl ? p.explicit_paddings[2 + 2 * d] : 0,
                            expl ? p.explicit_paddings[3 + 2 * d] : 0, &out, &pad);
      if (out == 0 && c->Value(in) > 0) {
        return ToTfStatus(InvalidArgument(
            kOp, "input",
            std::string(d == 0 ? "a height" : "a width") + " of at least the dilated filter's " +
                std::to_string((c->Value(k) - 1) * p.dilations[1 + d] + 1) + " with " + p.padding +
                " padding",
            c->Value(in)));
      }
      spatial[d] = c->MakeDim(out);
    }
  }
  c->set_output(0, c->MakeShape({c->Dim(input, 0), spatial[0], spatial[1], channels}));
  return absl::OkStatus();
}

}  // namespace

OPFORGE_REGISTER_OP(FusedConv2DOp)
    .SetShapeFn(Shape)
    .Doc(
        "leaky_relu(conv2d(input, filter) + bias), NHWC, the bias and activation applied to "
        "each tile of the convolution's output while it is in cache.");

namespace {

OPFORGE_REGISTER_KERNELS(Name(FusedConv2DOp::kSignature.name), FusedConv2DOp, OPFORGE_FLOAT_TYPES,
                         OPFORGE_NO_TYPES)

}  // namespace
}  // namespace opforge

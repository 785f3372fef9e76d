// TensorFlow binding of Conv2DTranspose (tf.nn.conv2d_transpose) and its two gradient ops: op
// registration with shape functions, and the op structs that TfKernel (common/tf_kernel.h) runs.
#include <string>
#include <vector>

#include "common/tf_kernel.h"
#include "ops/conv2d_transpose/conv2d_transpose.h"
#include "ops/conv2d_transpose/conv2d_transpose_op.h"

namespace opforge {

namespace {

using namespace conv2d_transpose_op;  // NOLINT: the op's constants and attr reader, shared with its
                                      // kernels

// The attrs after T: the forward op takes int32 too (as TensorFlow's CPU kernel), the gradient
// ops the float types (integers have no gradient).
struct LayoutIndex {
  int h, w, c;
};
LayoutIndex IndexOf(const std::string& data_format) {
  return data_format == "NCHW" ? LayoutIndex{2, 3, 1} : LayoutIndex{1, 2, 3};
}

// Builds a 4-D shape in data_format order from batch, height, width and channels.
ShapeHandle MakeImageShape(InferenceContext* c, const std::string& data_format, DimensionHandle n,
                           DimensionHandle h, DimensionHandle w, DimensionHandle ch) {
  if (data_format == "NCHW") return c->MakeShape({n, ch, h, w});
  return c->MakeShape({n, h, w, ch});
}

constexpr char kOp[] = "Conv2DTranspose";

absl::Status ForwardShape(InferenceContext* c) {
  Conv2DTransposeAttrs a;
  TF_RETURN_IF_ERROR(ReadShapeAttrs(c, ReadAttrs, &a));
  TF_RETURN_IF_ERROR(ToTfStatus(ValidateConv2DTransposeAttrs(a)));
  const ShapeFn fn(c, kOp);
  const LayoutIndex l = IndexOf(a.data_format);
  ShapeHandle input, filter, sizes;
  TF_RETURN_IF_ERROR(fn.Rank(0, "input", 4, &input));
  TF_RETURN_IF_ERROR(fn.Rank(1, "filter", 4, &filter));
  TF_RETURN_IF_ERROR(fn.Rank(2, "output_shape", 1, &sizes, "a 1-D tensor"));
  DimensionHandle in_channels;
  TF_RETURN_IF_ERROR(
      fn.MergeDim(c->Dim(input, l.c), c->Dim(filter, 3), "filter's last dimension (in_channels)",
                  "the input's channels (" + fn.Text(c->Dim(input, l.c)) + ", dimension " +
                      std::to_string(l.c) + " of input " + fn.Text(input) + ")",
                  fn.Text(c->Dim(filter, 3)) + " in filter " + fn.Text(filter), &in_channels));
  DimensionHandle batch = c->Dim(input, 0);
  DimensionHandle channels = c->Dim(filter, 2);
  DimensionHandle h = c->UnknownDim(), w = c->UnknownDim();
  const DimensionHandle length = c->Dim(sizes, 0);
  if (c->ValueKnown(length)) {
    const int64_t n = c->Value(length);
    if (n != 4 && n != 2) {
      return fn.Invalid("output_shape", "4 values (in data_format order) or 2 values",
                        std::to_string(n) + " values");
    }
    // Keeps every value that is known: a constant, or a tf.stack of constants and
    // tf.shape(x)[i] pieces (partial evaluation of the shape tensor).
    ShapeHandle values;
    if (!c->MakeShapeFromShapeTensor(2, &values).ok()) {
      return fn.Invalid("output_shape", "sizes between 0 and 2^31", "a negative size");
    }
    if (fn.Known({input, filter, values})) {
      // Everything is known: the kernel's own checks, with its messages.
      Conv2DTransposeParams p;
      TF_RETURN_IF_ERROR(ToTfStatus(
          ValidateConv2DTranspose(a, fn.Dims(input), fn.Dims(filter), fn.Dims(values), &p)));
      c->set_output(0, fn.Make(p.OutputShape()));
      return absl::OkStatus();
    }
    if (n == 4) {
      // As TensorFlow's: the batch comes from the input (an unknown one stays unknown); the
      // value in output_shape is only checked against it.
      DimensionHandle checked;
      TF_RETURN_IF_ERROR(fn.MergeDim(batch, c->Dim(values, 0), "output_shape",
                                     "the input's batch size " + fn.Text(batch) + " first",
                                     fn.Text(values), &checked));
      TF_RETURN_IF_ERROR(fn.MergeDim(channels, c->Dim(values, l.c), "output_shape",
                                     "the filter's out_channels (dimension 2 of filter " +
                                         fn.Text(filter) + ") as its channel size",
                                     fn.Text(values), &channels));
      h = c->Dim(values, l.h);
      w = c->Dim(values, l.w);
    } else {
      h = c->Dim(values, 0);
      w = c->Dim(values, 1);
    }
  }
  c->set_output(0, MakeImageShape(c, a.data_format, batch, h, w, channels));
  return absl::OkStatus();
}

absl::Status InputGradShape(InferenceContext* c) {
  Conv2DTransposeAttrs a;
  TF_RETURN_IF_ERROR(ReadShapeAttrs(c, ReadAttrs, &a));
  TF_RETURN_IF_ERROR(ToTfStatus(ValidateConv2DTransposeAttrs(a)));
  const ShapeFn fn(c, kOp);
  const LayoutIndex l = IndexOf(a.data_format);
  ShapeHandle grad, filter;
  TF_RETURN_IF_ERROR(fn.Rank(0, "grad", 4, &grad));
  TF_RETURN_IF_ERROR(fn.Rank(1, "filter", 4, &filter));
  if (fn.Known({grad, filter})) {
    Conv2DTransposeParams p;
    TF_RETURN_IF_ERROR(
        ToTfStatus(ValidateConv2DTransposeInputGrad(a, fn.Dims(grad), fn.Dims(filter), &p)));
    c->set_output(0, fn.Make(p.InputShape()));
    return absl::OkStatus();
  }
  DimensionHandle out_channels;
  TF_RETURN_IF_ERROR(fn.MergeDim(
      c->Dim(grad, l.c), c->Dim(filter, 2), "grad",
      "the filter's out_channels " + fn.Text(c->Dim(filter, 2)) + " as its channel size",
      fn.Text(grad), &out_channels));
  DimensionHandle spatial[2] = {c->UnknownDim(), c->UnknownDim()};
  {
    const std::vector<int64_t>& e = a.explicit_paddings;
    const int index[2] = {l.h, l.w};
    for (int i = 0; i < 2; ++i) {
      const DimensionHandle out = c->Dim(grad, index[i]);
      const DimensionHandle f = c->Dim(filter, i);
      // Sizes the kernel would refuse (and whose arithmetic could overflow) stay unknown.
      if (!c->ValueKnown(out) || !c->ValueKnown(f) || c->Value(out) > (int64_t{1} << 31) ||
          c->Value(f) > (int64_t{1} << 31)) {
        continue;
      }
      const int64_t before = e.empty() ? 0 : e[2 * index[i]];
      const int64_t after = e.empty() ? 0 : e[2 * index[i] + 1];
      const int64_t in = Conv2DTransposeInputSize(c->Value(out), c->Value(f), a.dilations[index[i]],
                                                  a.strides[index[i]], a.padding, before, after);
      if (in >= 0) spatial[i] = c->MakeDim(in);
    }
  }
  c->set_output(0, MakeImageShape(c, a.data_format, c->Dim(grad, 0), spatial[0], spatial[1],
                                  c->Dim(filter, 3)));
  return absl::OkStatus();
}

}  // namespace

OPFORGE_REGISTER_OP(Conv2DTransposeOp).SetShapeFn(ForwardShape).Doc(R"doc(
Transposed 2-D convolution, as tf.nn.conv2d_transpose: filter [FH, FW, out_channels,
in_channels]; output_shape has 4 values in data_format order or 2 values [height, width].
)doc");

OPFORGE_REGISTER_OP(Conv2DTransposeInputGradOp)
    .SetShapeFn(InputGradShape)
    .Doc("Gradient of Conv2DTranspose with respect to its input: conv2d(grad, filter).");

OPFORGE_REGISTER_OP(Conv2DTransposeFilterGradOp)
    .SetShapeFn([](InferenceContext* c) {
      Conv2DTransposeAttrs a;
      TF_RETURN_IF_ERROR(ReadShapeAttrs(c, ReadAttrs, &a));
      TF_RETURN_IF_ERROR(ToTfStatus(ValidateConv2DTransposeAttrs(a)));
      const ShapeFn fn(c, kOp);
      ShapeHandle input, filter, grad;
      TF_RETURN_IF_ERROR(fn.Rank(0, "input", 4, &input));
      TF_RETURN_IF_ERROR(fn.Rank(2, "grad", 4, &grad));
      TF_RETURN_IF_ERROR(fn.Rank(1, "filter", 4, &filter));
      if (fn.Known({input, filter, grad})) {
        Conv2DTransposeParams p;
        TF_RETURN_IF_ERROR(ToTfStatus(ValidateConv2DTransposeFilterGrad(
            a, fn.Dims(input), fn.Dims(filter), fn.Dims(grad), &p)));
      }
      c->set_output(0, filter);
      return absl::OkStatus();
    })
    .Doc(R"doc(
Gradient of Conv2DTranspose with respect to its filter (the filter input gives only its shape).
)doc");

namespace {

// int32 runs on the CPU only (TensorFlow's GPU kernels keep int32 tensors in host memory).
OPFORGE_REGISTER_KERNELS(Name(Conv2DTransposeOp::kSignature.name).HostMemory("output_shape"),
                         Conv2DTransposeOp, OPFORGE_CONV2D_TRANSPOSE_TYPES, OPFORGE_FLOAT_TYPES)
OPFORGE_REGISTER_KERNELS(Name(Conv2DTransposeInputGradOp::kSignature.name),
                         Conv2DTransposeInputGradOp, OPFORGE_FLOAT_TYPES, OPFORGE_FLOAT_TYPES)
OPFORGE_REGISTER_KERNELS(Name(Conv2DTransposeFilterGradOp::kSignature.name),
                         Conv2DTransposeFilterGradOp, OPFORGE_FLOAT_TYPES, OPFORGE_FLOAT_TYPES)

}  // namespace
}  // namespace opforge

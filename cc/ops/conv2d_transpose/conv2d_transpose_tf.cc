// TensorFlow binding of Conv2DTranspose (tf.nn.conv2d_transpose) and its two gradient ops.
#include <string>
#include <vector>

#include "common/tf_glue.h"
#include "ops/conv2d_transpose/conv2d_transpose.h"

namespace opforge {

using tensorflow::DEVICE_CPU;
using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
namespace shape_inference = tensorflow::shape_inference;
using shape_inference::DimensionHandle;
using shape_inference::InferenceContext;
using shape_inference::ShapeHandle;

namespace {

#define OPFORGE_CONV2D_TRANSPOSE_ATTRS                \
  Attr("T: {half, bfloat16, float, double}")          \
      .Attr("strides: list(int)")                     \
      .Attr("padding: {'SAME', 'VALID', 'EXPLICIT'}") \
      .Attr("explicit_paddings: list(int) = []")      \
      .Attr("data_format: {'NHWC', 'NCHW'} = 'NHWC'") \
      .Attr("dilations: list(int) = [1, 1, 1, 1]")

template <typename Context>
absl::Status ReadAttrs(Context* c, Conv2DTransposeAttrs* a) {
  // list(int) attributes are int64 in the NodeDef; read them as such.
  std::vector<int64_t> strides, dilations, pads;
  TF_RETURN_IF_ERROR(c->GetAttr("strides", &strides));
  TF_RETURN_IF_ERROR(c->GetAttr("dilations", &dilations));
  TF_RETURN_IF_ERROR(c->GetAttr("explicit_paddings", &pads));
  TF_RETURN_IF_ERROR(c->GetAttr("padding", &a->padding));
  TF_RETURN_IF_ERROR(c->GetAttr("data_format", &a->data_format));
  a->strides = strides;
  a->dilations = dilations;
  a->explicit_paddings = pads;
  return absl::OkStatus();
}

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

absl::Status ForwardShape(InferenceContext* c) {
  Conv2DTransposeAttrs a;
  TF_RETURN_IF_ERROR(ReadAttrs(c, &a));
  const LayoutIndex l = IndexOf(a.data_format);
  ShapeHandle input, filter, sizes;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 4, &input));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 4, &filter));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 1, &sizes));
  DimensionHandle in_channels;
  TF_RETURN_IF_ERROR(c->Merge(c->Dim(input, l.c), c->Dim(filter, 3), &in_channels));
  DimensionHandle batch = c->Dim(input, 0);
  DimensionHandle channels = c->Dim(filter, 2);
  DimensionHandle h = c->UnknownDim(), w = c->UnknownDim();
  const DimensionHandle length = c->Dim(sizes, 0);
  if (c->ValueKnown(length)) {
    const int64_t n = c->Value(length);
    if (n != 4 && n != 2) {
      return absl::InvalidArgumentError(
          "Conv2DTranspose: output_shape must have 4 values (in data_format order) or 2 values, "
          "got " +
          std::to_string(n) + " values");
    }
    // Keeps every value that is known: a constant, or a tf.stack of constants and
    // tf.shape(x)[i] pieces (partial evaluation of the shape tensor).
    ShapeHandle values;
    TF_RETURN_IF_ERROR(c->MakeShapeFromShapeTensor(2, &values));
    if (n == 4) {
      // As TensorFlow's: the batch comes from the input (an unknown one stays unknown); the
      // value in output_shape is only checked against it.
      DimensionHandle checked;
      TF_RETURN_IF_ERROR(c->Merge(batch, c->Dim(values, 0), &checked));
      TF_RETURN_IF_ERROR(c->Merge(channels, c->Dim(values, l.c), &channels));
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
  TF_RETURN_IF_ERROR(ReadAttrs(c, &a));
  const LayoutIndex l = IndexOf(a.data_format);
  ShapeHandle grad, filter;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 4, &grad));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 4, &filter));
  DimensionHandle out_channels;
  TF_RETURN_IF_ERROR(c->Merge(c->Dim(grad, l.c), c->Dim(filter, 2), &out_channels));
  DimensionHandle spatial[2] = {c->UnknownDim(), c->UnknownDim()};
  if (ValidateConv2DTransposeAttrs(a).ok()) {
    Conv2DTransposeParams p;
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

REGISTER_OP("Opforge>Conv2DTranspose")
    .Input("input: T")
    .Input("filter: T")
    .Input("output_shape: Tshape")
    .Output("output: T")
    .Attr("Tshape: {int32, int64} = DT_INT32")
    .OPFORGE_CONV2D_TRANSPOSE_ATTRS.SetShapeFn(ForwardShape)
    .Doc(R"doc(
Transposed 2-D convolution, as tf.nn.conv2d_transpose: filter [FH, FW, out_channels,
in_channels]; output_shape has 4 values in data_format order or 2 values [height, width].
)doc");

REGISTER_OP("Opforge>Conv2DTransposeInputGrad")
    .Input("grad: T")
    .Input("filter: T")
    .Output("grad_input: T")
    .OPFORGE_CONV2D_TRANSPOSE_ATTRS.SetShapeFn(InputGradShape)
    .Doc("Gradient of Conv2DTranspose with respect to its input: conv2d(grad, filter).");

REGISTER_OP("Opforge>Conv2DTransposeFilterGrad")
    .Input("input: T")
    .Input("filter: T")
    .Input("grad: T")
    .Output("grad_filter: T")
    .OPFORGE_CONV2D_TRANSPOSE_ATTRS
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle filter;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 4, &filter));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 4, &filter));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 4, &filter));
      c->set_output(0, filter);
      return absl::OkStatus();
    })
    .Doc(R"doc(
Gradient of Conv2DTranspose with respect to its filter (the filter input gives only its shape).
)doc");

namespace {

class Conv2DTransposeBase : public OpKernel {
 public:
  explicit Conv2DTransposeBase(OpKernelConstruction* context) : OpKernel(context) {
    OP_REQUIRES_OK(context, ReadAttrs(context, &attrs_));
    OPFORGE_OP_REQUIRES_OK(context, ValidateConv2DTransposeAttrs(attrs_));
  }

 protected:
  Conv2DTransposeAttrs attrs_;
};

template <typename Device, typename T>
class Conv2DTransposeOp : public Conv2DTransposeBase {
 public:
  using Conv2DTransposeBase::Conv2DTransposeBase;

  void Compute(OpKernelContext* context) override {
    const Tensor& input = context->input(0);
    const Tensor& filter = context->input(1);
    const Tensor& sizes = context->input(2);
    OP_REQUIRES(context, sizes.dims() == 1,
                absl::InvalidArgumentError("Conv2DTranspose: output_shape must be a 1-D tensor, "
                                           "got shape " +
                                           sizes.shape().DebugString()));
    std::vector<int64_t> output_shape(static_cast<size_t>(sizes.NumElements()));
    for (size_t i = 0; i < output_shape.size(); ++i) {
      output_shape[i] = sizes.dtype() == tensorflow::DT_INT32
                            ? static_cast<int64_t>(sizes.flat<int32_t>()(i))
                            : static_cast<int64_t>(sizes.flat<int64_t>()(i));
    }
    Conv2DTransposeParams p;
    OPFORGE_OP_REQUIRES_OK(
        context, ValidateConv2DTranspose(attrs_, Dims(input.shape()), Dims(filter.shape()),
                                         output_shape, &p));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, ToTensorShape(p.OutputShape()), &out));
    if (p.OutputSize() == 0) return;
    const T* pi = input.flat<T>().data();
    const T* pf = filter.flat<T>().data();
    T* po = out->flat<T>().data();
    if constexpr (std::is_same_v<Device, CpuTag>) {
      Conv2DTransposeForward<T>(p, pi, pf, po, TfParallel(context));
    } else {
#if GOOGLE_CUDA
      OPFORGE_OP_REQUIRES_OK(
          context, Conv2DTransposeForwardGpu(DTypeOf<T>::value, p, pi, pf, po, GpuStream(context)));
#endif
    }
  }
};

template <typename Device, typename T>
class Conv2DTransposeInputGradOp : public Conv2DTransposeBase {
 public:
  using Conv2DTransposeBase::Conv2DTransposeBase;

  void Compute(OpKernelContext* context) override {
    const Tensor& grad = context->input(0);
    const Tensor& filter = context->input(1);
    Conv2DTransposeParams p;
    OPFORGE_OP_REQUIRES_OK(context, ValidateConv2DTransposeInputGrad(attrs_, Dims(grad.shape()),
                                                                     Dims(filter.shape()), &p));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, ToTensorShape(p.InputShape()), &out));
    if (p.InputSize() == 0) return;
    const T* pg = grad.flat<T>().data();
    const T* pf = filter.flat<T>().data();
    T* po = out->flat<T>().data();
    if constexpr (std::is_same_v<Device, CpuTag>) {
      Conv2DTransposeInputGrad<T>(p, pg, pf, po, TfParallel(context));
    } else {
#if GOOGLE_CUDA
      OPFORGE_OP_REQUIRES_OK(context, Conv2DTransposeInputGradGpu(DTypeOf<T>::value, p, pg, pf, po,
                                                                  GpuStream(context)));
#endif
    }
  }
};

template <typename Device, typename T>
class Conv2DTransposeFilterGradOp : public Conv2DTransposeBase {
 public:
  using Conv2DTransposeBase::Conv2DTransposeBase;

  void Compute(OpKernelContext* context) override {
    const Tensor& input = context->input(0);
    const Tensor& filter = context->input(1);
    const Tensor& grad = context->input(2);
    Conv2DTransposeParams p;
    OPFORGE_OP_REQUIRES_OK(
        context, ValidateConv2DTranspose(attrs_, Dims(input.shape()), Dims(filter.shape()),
                                         Dims(grad.shape()), &p, "grad"));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, filter.shape(), &out));
    if (p.FilterSize() == 0) return;
    const T* pi = input.flat<T>().data();
    const T* pg = grad.flat<T>().data();
    T* po = out->flat<T>().data();
    if constexpr (std::is_same_v<Device, CpuTag>) {
      Conv2DTransposeFilterGrad<T>(p, pi, pg, po, TfParallel(context));
    } else {
#if GOOGLE_CUDA
      OPFORGE_OP_REQUIRES_OK(context, Conv2DTransposeFilterGradGpu(DTypeOf<T>::value, p, pi, pg, po,
                                                                   GpuStream(context)));
#endif
    }
  }
};

#define OPFORGE_REGISTER(DEVICE, TAG, T)                                               \
  REGISTER_KERNEL_BUILDER(Name("Opforge>Conv2DTranspose")                              \
                              .Device(DEVICE)                                          \
                              .TypeConstraint<T>("T")                                  \
                              .HostMemory("output_shape"),                             \
                          Conv2DTransposeOp<TAG, T>);                                  \
  REGISTER_KERNEL_BUILDER(                                                             \
      Name("Opforge>Conv2DTransposeInputGrad").Device(DEVICE).TypeConstraint<T>("T"),  \
      Conv2DTransposeInputGradOp<TAG, T>);                                             \
  REGISTER_KERNEL_BUILDER(                                                             \
      Name("Opforge>Conv2DTransposeFilterGrad").Device(DEVICE).TypeConstraint<T>("T"), \
      Conv2DTransposeFilterGradOp<TAG, T>);

OPFORGE_REGISTER(DEVICE_CPU, CpuTag, Eigen::half)
OPFORGE_REGISTER(DEVICE_CPU, CpuTag, Eigen::bfloat16)
OPFORGE_REGISTER(DEVICE_CPU, CpuTag, float)
OPFORGE_REGISTER(DEVICE_CPU, CpuTag, double)
#if GOOGLE_CUDA
OPFORGE_REGISTER(tensorflow::DEVICE_GPU, GpuTag, Eigen::half)
OPFORGE_REGISTER(tensorflow::DEVICE_GPU, GpuTag, Eigen::bfloat16)
OPFORGE_REGISTER(tensorflow::DEVICE_GPU, GpuTag, float)
OPFORGE_REGISTER(tensorflow::DEVICE_GPU, GpuTag, double)
#endif
#undef OPFORGE_REGISTER

}  // namespace
}  // namespace opforge

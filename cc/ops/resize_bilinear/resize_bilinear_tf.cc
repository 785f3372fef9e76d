// TensorFlow binding of ResizeBilinear and its gradient: op registration with shape functions,
// and the kernels that read tensors and attrs into the core's params, validate, allocate and
// call the core.
#include <type_traits>

#include "common/tf_glue.h"
#include "ops/resize_bilinear/resize_bilinear.h"

namespace opforge {

using tensorflow::DEVICE_CPU;
using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
namespace shape_inference = tensorflow::shape_inference;

namespace {

absl::Status CheckAttrs(shape_inference::InferenceContext* c, const char* op) {
  bool align_corners = false;
  bool half_pixel_centers = false;
  TF_RETURN_IF_ERROR(c->GetAttr("align_corners", &align_corners));
  TF_RETURN_IF_ERROR(c->GetAttr("half_pixel_centers", &half_pixel_centers));
  return ToTfStatus(ValidateResizeBilinearAttrs(op, align_corners, half_pixel_centers));
}

// [batch, new_height, new_width, channels]: batch and channels from images; the new size from
// the size tensor as far as it is known when the graph is built (a constant gives both, a
// tf.stack of a constant and a run-time value gives the constant one).
absl::Status ResizeShape(shape_inference::InferenceContext* c) {
  TF_RETURN_IF_ERROR(CheckAttrs(c, "ResizeBilinear"));
  shape_inference::ShapeHandle images;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 4, &images));
  shape_inference::ShapeHandle size;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 1, &size));
  shape_inference::DimensionHandle unused;
  TF_RETURN_IF_ERROR(c->WithValue(c->Dim(size, 0), 2, &unused));
  if (const Tensor* values = c->input_tensor(1)) {
    const auto v = values->vec<int32_t>();
    if (v(0) <= 0 || v(1) <= 0) {
      return ToTfStatus(InvalidArgument(
          "ResizeBilinear", "size", "positive [new_height, new_width]", ShapeString({v(0), v(1)})));
    }
  }
  shape_inference::ShapeHandle new_size;
  TF_RETURN_IF_ERROR(c->MakeShapeFromShapeTensor(1, &new_size));
  c->set_output(0, c->MakeShape({c->Dim(images, 0), c->Dim(new_size, 0), c->Dim(new_size, 1),
                                 c->Dim(images, 3)}));
  return absl::OkStatus();
}

// The original image's shape, with batch and channels merged with those of grads.
absl::Status ResizeGradShape(shape_inference::InferenceContext* c) {
  TF_RETURN_IF_ERROR(CheckAttrs(c, "ResizeBilinearGrad"));
  shape_inference::ShapeHandle grads;
  shape_inference::ShapeHandle image;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 4, &grads));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 4, &image));
  shape_inference::DimensionHandle batch;
  shape_inference::DimensionHandle channels;
  TF_RETURN_IF_ERROR(c->Merge(c->Dim(grads, 0), c->Dim(image, 0), &batch));
  TF_RETURN_IF_ERROR(c->Merge(c->Dim(grads, 3), c->Dim(image, 3), &channels));
  c->set_output(0, c->MakeShape({batch, c->Dim(image, 1), c->Dim(image, 2), channels}));
  return absl::OkStatus();
}

}  // namespace

REGISTER_OP("Opforge>ResizeBilinear")
    .Input("images: T")
    .Input("size: int32")
    .Output("resized_images: float")
    .Attr("T: {int8, uint8, int16, uint16, int32, int64, bfloat16, half, float, double}")
    .Attr("align_corners: bool = false")
    .Attr("half_pixel_centers: bool = false")
    .SetShapeFn(ResizeShape)
    .Doc(
        "Bilinear resize of NHWC images to size = [new_height, new_width], float32 output, "
        "bit-identical to tf.raw_ops.ResizeBilinear in its three coordinate conventions.");

REGISTER_OP("Opforge>ResizeBilinearGrad")
    .Input("grads: float")
    .Input("original_image: T")
    .Output("output: T")
    .Attr("T: {float, bfloat16, half, double}")
    .Attr("align_corners: bool = false")
    .Attr("half_pixel_centers: bool = false")
    .SetShapeFn(ResizeGradShape)
    .Doc(
        "Gradient of Opforge>ResizeBilinear with respect to the images, bit-identical to "
        "tf.raw_ops.ResizeBilinearGrad, parallel and deterministic.");

namespace {

class ResizeBilinearBase : public OpKernel {
 public:
  ResizeBilinearBase(OpKernelConstruction* context, const char* op) : OpKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("align_corners", &align_corners_));
    OP_REQUIRES_OK(context, context->GetAttr("half_pixel_centers", &half_pixel_centers_));
    OPFORGE_OP_REQUIRES_OK(context,
                           ValidateResizeBilinearAttrs(op, align_corners_, half_pixel_centers_));
  }

 protected:
  bool align_corners_ = false;
  bool half_pixel_centers_ = false;
};

template <typename Device, typename T>
class ResizeBilinearOp : public ResizeBilinearBase {
 public:
  explicit ResizeBilinearOp(OpKernelConstruction* context)
      : ResizeBilinearBase(context, "ResizeBilinear") {}

  void Compute(OpKernelContext* context) override {
    const Tensor& images = context->input(0);
    const Tensor& size = context->input(1);
    std::vector<int64_t> size_values;
    if (size.dims() == 1 && size.NumElements() == 2) {
      const auto v = size.vec<int32_t>();
      size_values = {v(0), v(1)};
    }
    ResizeBilinearParams params;
    OPFORGE_OP_REQUIRES_OK(
        context, ValidateResizeBilinear(Dims(images.shape()), Dims(size.shape()), size_values,
                                        align_corners_, half_pixel_centers_, &params));
    Tensor* output = nullptr;
    OP_REQUIRES_OK(
        context,
        context->allocate_output(
            0, ToTensorShape({params.batch, params.out_height, params.out_width, params.channels}),
            &output));
    if (output->NumElements() == 0) return;
    const T* in = images.flat<T>().data();
    float* out = output->flat<float>().data();
    if constexpr (std::is_same_v<Device, CpuTag>) {
      AdviseHugePages(output);
      ResizeBilinearForward<T>(params, in, out, TfParallel(context));
    } else {
#if GOOGLE_CUDA
      OPFORGE_OP_REQUIRES_OK(context, ResizeBilinearForwardGpu(DTypeOf<T>::value, params, in, out,
                                                               GpuStream(context)));
#endif
    }
  }
};

template <typename Device, typename T>
class ResizeBilinearGradOp : public ResizeBilinearBase {
 public:
  explicit ResizeBilinearGradOp(OpKernelConstruction* context)
      : ResizeBilinearBase(context, "ResizeBilinearGrad") {}

  void Compute(OpKernelContext* context) override {
    const Tensor& grads = context->input(0);
    const Tensor& original_image = context->input(1);
    ResizeBilinearParams params;
    OPFORGE_OP_REQUIRES_OK(
        context, ValidateResizeBilinearGrad(Dims(grads.shape()), Dims(original_image.shape()),
                                            align_corners_, half_pixel_centers_, &params));
    Tensor* output = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, original_image.shape(), &output));
    if (output->NumElements() == 0) return;
    const float* g = grads.flat<float>().data();
    T* out = output->flat<T>().data();
    if constexpr (std::is_same_v<Device, CpuTag>) {
      AdviseHugePages(output);
      ResizeBilinearBackward<T>(params, g, out, TfParallel(context));
    } else {
#if GOOGLE_CUDA
      OPFORGE_OP_REQUIRES_OK(context, ResizeBilinearBackwardGpu(DTypeOf<T>::value, params, g, out,
                                                                GpuStream(context)));
#endif
    }
  }
};

#define OPFORGE_REGISTER_FORWARD(T)                                             \
  REGISTER_KERNEL_BUILDER(                                                      \
      Name("Opforge>ResizeBilinear").Device(DEVICE_CPU).TypeConstraint<T>("T"), \
      ResizeBilinearOp<CpuTag, T>);
#define OPFORGE_REGISTER_GRAD(T)                                                    \
  REGISTER_KERNEL_BUILDER(                                                          \
      Name("Opforge>ResizeBilinearGrad").Device(DEVICE_CPU).TypeConstraint<T>("T"), \
      ResizeBilinearGradOp<CpuTag, T>);
OPFORGE_REGISTER_FORWARD(int8_t)
OPFORGE_REGISTER_FORWARD(uint8_t)
OPFORGE_REGISTER_FORWARD(int16_t)
OPFORGE_REGISTER_FORWARD(uint16_t)
OPFORGE_REGISTER_FORWARD(int32_t)
OPFORGE_REGISTER_FORWARD(int64_t)
OPFORGE_REGISTER_FORWARD(Eigen::half)
OPFORGE_REGISTER_FORWARD(Eigen::bfloat16)
OPFORGE_REGISTER_FORWARD(float)
OPFORGE_REGISTER_FORWARD(double)
OPFORGE_REGISTER_GRAD(Eigen::half)
OPFORGE_REGISTER_GRAD(Eigen::bfloat16)
OPFORGE_REGISTER_GRAD(float)
OPFORGE_REGISTER_GRAD(double)
#undef OPFORGE_REGISTER_FORWARD
#undef OPFORGE_REGISTER_GRAD

#if GOOGLE_CUDA
// size is read on the host; the images and the gradient's original_image stay on the device
// (only the latter's shape is used). int32 images run on the CPU kernel: TensorFlow keeps int32
// tensors of GPU ops in host memory.
#define OPFORGE_REGISTER_FORWARD_GPU(T)                       \
  REGISTER_KERNEL_BUILDER(Name("Opforge>ResizeBilinear")      \
                              .Device(tensorflow::DEVICE_GPU) \
                              .TypeConstraint<T>("T")         \
                              .HostMemory("size"),            \
                          ResizeBilinearOp<GpuTag, T>);
#define OPFORGE_REGISTER_GRAD_GPU(T)                                                            \
  REGISTER_KERNEL_BUILDER(                                                                      \
      Name("Opforge>ResizeBilinearGrad").Device(tensorflow::DEVICE_GPU).TypeConstraint<T>("T"), \
      ResizeBilinearGradOp<GpuTag, T>);
OPFORGE_REGISTER_FORWARD_GPU(int8_t)
OPFORGE_REGISTER_FORWARD_GPU(uint8_t)
OPFORGE_REGISTER_FORWARD_GPU(int16_t)
OPFORGE_REGISTER_FORWARD_GPU(uint16_t)
OPFORGE_REGISTER_FORWARD_GPU(int64_t)
OPFORGE_REGISTER_FORWARD_GPU(Eigen::half)
OPFORGE_REGISTER_FORWARD_GPU(Eigen::bfloat16)
OPFORGE_REGISTER_FORWARD_GPU(float)
OPFORGE_REGISTER_FORWARD_GPU(double)
OPFORGE_REGISTER_GRAD_GPU(Eigen::half)
OPFORGE_REGISTER_GRAD_GPU(Eigen::bfloat16)
OPFORGE_REGISTER_GRAD_GPU(float)
OPFORGE_REGISTER_GRAD_GPU(double)
#undef OPFORGE_REGISTER_FORWARD_GPU
#undef OPFORGE_REGISTER_GRAD_GPU
#endif

}  // namespace
}  // namespace opforge

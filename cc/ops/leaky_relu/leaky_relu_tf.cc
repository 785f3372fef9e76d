// TensorFlow binding of LeakyReLU: op registration with shape functions, and the kernels that
// read tensors and attrs into the core's params, validate, allocate and call the core.
#include "common/tf_glue.h"
#include "ops/leaky_relu/leaky_relu.h"

namespace opforge {

using tensorflow::DEVICE_CPU;
using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
namespace shape_inference = tensorflow::shape_inference;

REGISTER_OP("Opforge>LeakyRelu")
    .Input("features: T")
    .Output("activations: T")
    .Attr("alpha: float = 0.2")
    .Attr("T: {half, bfloat16, float, double} = DT_FLOAT")
    .SetShapeFn(shape_inference::UnchangedShape)
    .Doc("activations = features > 0 ? features : alpha * features (as tf.nn.leaky_relu).");

REGISTER_OP("Opforge>LeakyReluWithMask")
    .Input("features: T")
    .Output("activations: T")
    .Output("mask: T")
    .Attr("alpha: float = 0.2")
    .Attr("T: {half, bfloat16, float, double} = DT_FLOAT")
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      c->set_output(0, c->input(0));
      c->set_output(1, c->input(0));
      return absl::OkStatus();
    })
    .Doc("LeakyRelu that also returns mask = features > 0 ? 1 : alpha.");

REGISTER_OP("Opforge>LeakyReluGrad")
    .Input("gradients: T")
    .Input("features: T")
    .Output("backprops: T")
    .Attr("alpha: float = 0.2")
    .Attr("T: {half, bfloat16, float, double} = DT_FLOAT")
    .SetShapeFn(shape_inference::MergeBothInputsShapeFn)
    .Doc("backprops = features > 0 ? gradients : alpha * gradients.");

namespace {

void ReadParams(OpKernelConstruction* context, LeakyReluParams* params) {
  OP_REQUIRES_OK(context, context->GetAttr("alpha", &params->alpha));
  OPFORGE_OP_REQUIRES_OK(context, ValidateLeakyRelu(*params));
}

template <typename Device, typename T, bool kWithMask>
class LeakyReluOp : public OpKernel {
 public:
  explicit LeakyReluOp(OpKernelConstruction* context) : OpKernel(context) {
    ReadParams(context, &params_);
  }

  void Compute(OpKernelContext* context) override {
    const Tensor& features = context->input(0);
    Tensor* activations = nullptr;
    // Reuse the input buffer when nobody else holds it (the built-in does the same).
    OP_REQUIRES_OK(
        context, context->forward_input_or_allocate_output({0}, 0, features.shape(), &activations));
    Tensor* mask = nullptr;
    if (kWithMask) OP_REQUIRES_OK(context, context->allocate_output(1, features.shape(), &mask));
    LeakyReluParams params = params_;
    params.size = features.NumElements();
    if (params.size == 0) return;
    const T* x = features.flat<T>().data();
    T* y = activations->flat<T>().data();
    T* m = kWithMask ? mask->flat<T>().data() : nullptr;
    if constexpr (std::is_same_v<Device, CpuTag>) {
      LeakyReluForward<T>(params, x, y, m, TfParallel(context));
    } else {
#if GOOGLE_CUDA
      OPFORGE_OP_REQUIRES_OK(
          context, LeakyReluForwardGpu(DTypeOf<T>::value, params, x, y, m, GpuStream(context)));
#endif
    }
  }

 private:
  LeakyReluParams params_;
};

template <typename Device, typename T>
class LeakyReluGradOp : public OpKernel {
 public:
  explicit LeakyReluGradOp(OpKernelConstruction* context) : OpKernel(context) {
    ReadParams(context, &params_);
  }

  void Compute(OpKernelContext* context) override {
    const Tensor& gradients = context->input(0);
    const Tensor& features = context->input(1);
    LeakyReluParams params = params_;
    OPFORGE_OP_REQUIRES_OK(
        context, ValidateLeakyReluGrad(params, Dims(gradients.shape()), Dims(features.shape())));
    Tensor* backprops = nullptr;
    OP_REQUIRES_OK(
        context, context->forward_input_or_allocate_output({0}, 0, gradients.shape(), &backprops));
    params.size = gradients.NumElements();
    if (params.size == 0) return;
    const T* g = gradients.flat<T>().data();
    const T* x = features.flat<T>().data();
    T* dx = backprops->flat<T>().data();
    if constexpr (std::is_same_v<Device, CpuTag>) {
      LeakyReluBackward<T>(params, g, x, dx, TfParallel(context));
    } else {
#if GOOGLE_CUDA
      OPFORGE_OP_REQUIRES_OK(
          context, LeakyReluBackwardGpu(DTypeOf<T>::value, params, g, x, dx, GpuStream(context)));
#endif
    }
  }

 private:
  LeakyReluParams params_;
};

#define OPFORGE_REGISTER(DEVICE, TAG, T)                                                           \
  REGISTER_KERNEL_BUILDER(Name("Opforge>LeakyRelu").Device(DEVICE).TypeConstraint<T>("T"),         \
                          LeakyReluOp<TAG, T, false>);                                             \
  REGISTER_KERNEL_BUILDER(Name("Opforge>LeakyReluWithMask").Device(DEVICE).TypeConstraint<T>("T"), \
                          LeakyReluOp<TAG, T, true>);                                              \
  REGISTER_KERNEL_BUILDER(Name("Opforge>LeakyReluGrad").Device(DEVICE).TypeConstraint<T>("T"),     \
                          LeakyReluGradOp<TAG, T>);

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

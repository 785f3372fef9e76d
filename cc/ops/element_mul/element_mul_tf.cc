// TensorFlow binding of ElementMul (broadcasting multiply) and its fused gradient.
#include "common/tf_glue.h"
#include "ops/element_mul/element_mul.h"

namespace opforge {

using tensorflow::DEVICE_CPU;
using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
namespace shape_inference = tensorflow::shape_inference;

REGISTER_OP("Opforge>ElementMul")
    .Input("a: T")
    .Input("b: T")
    .Output("product: T")
    .Attr("T: {half, bfloat16, float, double, int32, int64}")
    // Broadcasts known dimensions, keeps unknown ones unknown, and rejects incompatible known
    // dimensions when the graph is built.
    .SetShapeFn(shape_inference::BroadcastBinaryOpShapeFn)
    .Doc("product = a * b with NumPy broadcasting (as tf.multiply).");

REGISTER_OP("Opforge>ElementMulGrad")
    .Input("grad: T")
    .Input("a: T")
    .Input("b: T")
    .Output("grad_a: T")
    .Output("grad_b: T")
    .Attr("T: {half, bfloat16, float, double, int32, int64}")
    // An operand whose gradient nobody needs (a constant, say) is not computed: its output is an
    // empty [0] tensor. The Python gradient sets these from the tape's skip_input_indices.
    .Attr("need_grad_a: bool = true")
    .Attr("need_grad_b: bool = true")
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      shape_inference::ShapeHandle product;
      TF_RETURN_IF_ERROR(shape_inference::BroadcastBinaryOpOutputShapeFnHelper(
          c, c->input(1), c->input(2), true, &product));
      TF_RETURN_IF_ERROR(c->Merge(c->input(0), product, &product));
      bool need_a = true, need_b = true;
      TF_RETURN_IF_ERROR(c->GetAttr("need_grad_a", &need_a));
      TF_RETURN_IF_ERROR(c->GetAttr("need_grad_b", &need_b));
      c->set_output(0, need_a ? c->input(1) : c->Vector(0));
      c->set_output(1, need_b ? c->input(2) : c->Vector(0));
      return absl::OkStatus();
    })
    .Doc("grad_a = sum(grad * b) and grad_b = sum(a * grad) over each one's broadcast dims.");

namespace {

template <typename Device, typename T>
class ElementMulOp : public OpKernel {
 public:
  explicit ElementMulOp(OpKernelConstruction* context) : OpKernel(context) {}

  void Compute(OpKernelContext* context) override {
    const Tensor& a = context->input(0);
    const Tensor& b = context->input(1);
    BroadcastPlan plan;
    OPFORGE_OP_REQUIRES_OK(context, ValidateElementMul(Dims(a.shape()), Dims(b.shape()), &plan));
    Tensor* out = nullptr;
    // Writes in place into an operand of the output's shape that nobody else holds.
    OP_REQUIRES_OK(context, context->forward_input_or_allocate_output(
                                {0, 1}, 0, ToTensorShape(plan.out_shape), &out));
    if (plan.out_size == 0) return;
    const T* pa = a.flat<T>().data();
    const T* pb = b.flat<T>().data();
    T* po = out->flat<T>().data();
    if constexpr (std::is_same_v<Device, CpuTag>) {
      ElementMulForward<T>(plan, pa, pb, po, TfParallel(context));
    } else {
#if GOOGLE_CUDA
      OPFORGE_OP_REQUIRES_OK(
          context, ElementMulForwardGpu(DTypeOf<T>::value, plan, pa, pb, po, GpuStream(context)));
#endif
    }
  }
};

template <typename Device, typename T>
class ElementMulGradOp : public OpKernel {
 public:
  explicit ElementMulGradOp(OpKernelConstruction* context) : OpKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("need_grad_a", &need_a_));
    OP_REQUIRES_OK(context, context->GetAttr("need_grad_b", &need_b_));
  }

  void Compute(OpKernelContext* context) override {
    const Tensor& grad = context->input(0);
    const Tensor& a = context->input(1);
    const Tensor& b = context->input(2);
    BroadcastPlan plan;
    OPFORGE_OP_REQUIRES_OK(context, ValidateElementMulGrad(Dims(grad.shape()), Dims(a.shape()),
                                                           Dims(b.shape()), &plan));
    const tensorflow::TensorShape skipped({0});
    // grad_b is computed first into a fresh buffer, so grad_a may then overwrite grad in place.
    Tensor* grad_b = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(1, need_b_ ? b.shape() : skipped, &grad_b));
    Tensor* grad_a = nullptr;
    if (need_a_) {
      OP_REQUIRES_OK(context,
                     context->forward_input_or_allocate_output({0}, 0, a.shape(), &grad_a));
    } else {
      OP_REQUIRES_OK(context, context->allocate_output(0, skipped, &grad_a));
    }
    T* ga = need_a_ && grad_a->NumElements() > 0 ? grad_a->flat<T>().data() : nullptr;
    T* gb = need_b_ && grad_b->NumElements() > 0 ? grad_b->flat<T>().data() : nullptr;
    if (ga == nullptr && gb == nullptr) return;
    const T* pg = grad.flat<T>().data();
    const T* pa = a.flat<T>().data();
    const T* pb = b.flat<T>().data();
    if constexpr (std::is_same_v<Device, CpuTag>) {
      TfParallel parallel(context);
      if (gb != nullptr) ElementMulBackward<T>(plan, pg, pa, pb, nullptr, gb, parallel);
      if (ga != nullptr) ElementMulBackward<T>(plan, pg, pa, pb, ga, nullptr, parallel);
    } else {
#if GOOGLE_CUDA
      // One stream: the two launches run in order.
      void* stream = GpuStream(context);
      OPFORGE_OP_REQUIRES_OK(
          context, ElementMulBackwardGpu(DTypeOf<T>::value, plan, pg, pa, pb, nullptr, gb, stream));
      OPFORGE_OP_REQUIRES_OK(
          context, ElementMulBackwardGpu(DTypeOf<T>::value, plan, pg, pa, pb, ga, nullptr, stream));
#endif
    }
  }

 private:
  bool need_a_ = true;
  bool need_b_ = true;
};

#define OPFORGE_REGISTER(DEVICE, TAG, T)                                                        \
  REGISTER_KERNEL_BUILDER(Name("Opforge>ElementMul").Device(DEVICE).TypeConstraint<T>("T"),     \
                          ElementMulOp<TAG, T>);                                                \
  REGISTER_KERNEL_BUILDER(Name("Opforge>ElementMulGrad").Device(DEVICE).TypeConstraint<T>("T"), \
                          ElementMulGradOp<TAG, T>);

OPFORGE_REGISTER(DEVICE_CPU, CpuTag, Eigen::half)
OPFORGE_REGISTER(DEVICE_CPU, CpuTag, Eigen::bfloat16)
OPFORGE_REGISTER(DEVICE_CPU, CpuTag, float)
OPFORGE_REGISTER(DEVICE_CPU, CpuTag, double)
OPFORGE_REGISTER(DEVICE_CPU, CpuTag, int32_t)
OPFORGE_REGISTER(DEVICE_CPU, CpuTag, int64_t)
#if GOOGLE_CUDA
OPFORGE_REGISTER(tensorflow::DEVICE_GPU, GpuTag, Eigen::half)
OPFORGE_REGISTER(tensorflow::DEVICE_GPU, GpuTag, Eigen::bfloat16)
OPFORGE_REGISTER(tensorflow::DEVICE_GPU, GpuTag, float)
OPFORGE_REGISTER(tensorflow::DEVICE_GPU, GpuTag, double)
OPFORGE_REGISTER(tensorflow::DEVICE_GPU, GpuTag, int64_t)
#endif
#undef OPFORGE_REGISTER

}  // namespace
}  // namespace opforge

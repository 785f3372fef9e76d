// TensorFlow binding of Swish: op registration with shape functions, and the op structs that
// TfKernel (common/tf_kernel.h) runs.
#include "common/tf_kernel.h"
#include "ops/swish/swish.h"

namespace opforge {

namespace shape_inference = tensorflow::shape_inference;

REGISTER_OP("Opforge>Swish")
    .Input("features: T")
    .Output("activations: T")
    .Attr("T: {half, bfloat16, float, double} = DT_FLOAT")
    .SetShapeFn(shape_inference::UnchangedShape)
    .Doc("activations = features * sigmoid(features) (as tf.nn.silu, tf.nn.swish).");

REGISTER_OP("Opforge>SwishGrad")
    .Input("gradients: T")
    .Input("features: T")
    .Output("backprops: T")
    .Attr("T: {half, bfloat16, float, double} = DT_FLOAT")
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      shape_inference::ShapeHandle out;
      TF_RETURN_IF_ERROR(
          ShapeFn(c, "SwishGrad")
              .MergeInput(0, "gradients", c->input(1), "the shape of features", &out));
      c->set_output(0, out);
      return absl::OkStatus();
    })
    .Doc("backprops = gradients * s * (1 + features * (1 - s)), s = sigmoid(features).");

namespace {

struct SwishOp {
  using Params = SwishParams;
  Status Init(AttrReader&) { return Status::Ok(); }
  Status Validate(TfCall& call, Params* params) const {
    params->size = call.NumElements(0);
    OPFORGE_RETURN_IF_ERROR(ValidateSwish(*params));
    call.Output(0, call.shape(0), {0});
    return Status::Ok();
  }
  template <typename T>
  void Cpu(const Params& p, const TfCall& call, const Parallel& parallel) const {
    SwishForward<T>(p, call.in<T>(0), call.out<T>(0), parallel);
  }
  Status Gpu(DType dtype, const Params& p, const TfCall& call, void* stream) const {
    return SwishForwardGpu(dtype, p, call.in(0), call.out(0), stream);
  }
};

struct SwishGradOp {
  using Params = SwishParams;
  Status Init(AttrReader&) { return Status::Ok(); }
  Status Validate(TfCall& call, Params* params) const {
    OPFORGE_RETURN_IF_ERROR(ValidateSwishGrad(*params, call.shape(0), call.shape(1)));
    params->size = call.NumElements(0);
    // The gradient may take the buffer of gradients or of features (same shape and dtype).
    call.Output(0, call.shape(0), {0, 1});
    return Status::Ok();
  }
  template <typename T>
  void Cpu(const Params& p, const TfCall& call, const Parallel& parallel) const {
    SwishBackward<T>(p, call.in<T>(0), call.in<T>(1), call.out<T>(0), parallel);
  }
  Status Gpu(DType dtype, const Params& p, const TfCall& call, void* stream) const {
    return SwishBackwardGpu(dtype, p, call.in(0), call.in(1), call.out(0), stream);
  }
};

OPFORGE_REGISTER_KERNELS(Name("Opforge>Swish"), SwishOp, OPFORGE_FLOAT_TYPES, OPFORGE_FLOAT_TYPES)
OPFORGE_REGISTER_KERNELS(Name("Opforge>SwishGrad"), SwishGradOp, OPFORGE_FLOAT_TYPES,
                         OPFORGE_FLOAT_TYPES)

}  // namespace
}  // namespace opforge

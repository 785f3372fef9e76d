// TensorFlow binding of LeakyReLU: op registration with shape functions, and the op structs
// that TfKernel (common/tf_kernel.h) runs: attrs, validation and outputs, and the core calls.
#include "common/tf_kernel.h"
#include "ops/leaky_relu/leaky_relu.h"

namespace opforge {

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
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      shape_inference::ShapeHandle out;
      TF_RETURN_IF_ERROR(
          ShapeFn(c, "LeakyReluGrad")
              .MergeInput(0, "gradients", c->input(1), "the shape of features", &out));
      c->set_output(0, out);
      return absl::OkStatus();
    })
    .Doc("backprops = features > 0 ? gradients : alpha * gradients.");

namespace {

// The attrs of all three kernels: alpha, validated once when the kernel is built.
struct LeakyReluAttrs {
  using Params = LeakyReluParams;
  LeakyReluParams attrs;

  Status Init(AttrReader& reader) {
    reader.Read("alpha", &attrs.alpha);
    return ValidateLeakyRelu(attrs);
  }
};

template <bool kWithMask>
struct LeakyReluOp : LeakyReluAttrs {
  Status Validate(TfCall& call, Params* params) const {
    *params = attrs;
    params->size = call.NumElements(0);
    // Reuse the input buffer when nobody else holds it (the built-in does the same).
    call.Output(0, call.shape(0), {0});
    if (kWithMask) call.Output(1, call.shape(0));
    return Status::Ok();
  }
  template <typename T>
  void Cpu(const Params& p, const TfCall& call, const Parallel& parallel) const {
    LeakyReluForward<T>(p, call.in<T>(0), call.out<T>(0), kWithMask ? call.out<T>(1) : nullptr,
                        parallel);
  }
  Status Gpu(DType dtype, const Params& p, const TfCall& call, void* stream) const {
    return LeakyReluForwardGpu(dtype, p, call.in(0), call.out(0), kWithMask ? call.out(1) : nullptr,
                               stream);
  }
};

struct LeakyReluGradOp : LeakyReluAttrs {
  Status Validate(TfCall& call, Params* params) const {
    *params = attrs;
    OPFORGE_RETURN_IF_ERROR(ValidateLeakyReluGrad(*params, call.shape(0), call.shape(1)));
    params->size = call.NumElements(0);
    call.Output(0, call.shape(0), {0});
    return Status::Ok();
  }
  template <typename T>
  void Cpu(const Params& p, const TfCall& call, const Parallel& parallel) const {
    LeakyReluBackward<T>(p, call.in<T>(0), call.in<T>(1), call.out<T>(0), parallel);
  }
  Status Gpu(DType dtype, const Params& p, const TfCall& call, void* stream) const {
    return LeakyReluBackwardGpu(dtype, p, call.in(0), call.in(1), call.out(0), stream);
  }
};

OPFORGE_REGISTER_KERNELS(Name("Opforge>LeakyRelu"), LeakyReluOp<false>, OPFORGE_FLOAT_TYPES,
                         OPFORGE_FLOAT_TYPES)
OPFORGE_REGISTER_KERNELS(Name("Opforge>LeakyReluWithMask"), LeakyReluOp<true>, OPFORGE_FLOAT_TYPES,
                         OPFORGE_FLOAT_TYPES)
OPFORGE_REGISTER_KERNELS(Name("Opforge>LeakyReluGrad"), LeakyReluGradOp, OPFORGE_FLOAT_TYPES,
                         OPFORGE_FLOAT_TYPES)

}  // namespace
}  // namespace opforge

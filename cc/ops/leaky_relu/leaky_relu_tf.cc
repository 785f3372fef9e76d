// TensorFlow binding of LeakyReLU: op registration with shape functions, and the op structs
// that TfKernel (common/tf_kernel.h) runs: attrs, validation and outputs, and the core calls.
#include "common/tf_kernel.h"
#include "ops/leaky_relu/leaky_relu.h"
#include "ops/leaky_relu/leaky_relu_op.h"

namespace opforge {

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

OPFORGE_REGISTER_KERNELS(Name("Opforge>LeakyRelu"), LeakyReluOp<false>, OPFORGE_FLOAT_TYPES,
                         OPFORGE_FLOAT_TYPES)
OPFORGE_REGISTER_KERNELS(Name("Opforge>LeakyReluWithMask"), LeakyReluOp<true>, OPFORGE_FLOAT_TYPES,
                         OPFORGE_FLOAT_TYPES)
OPFORGE_REGISTER_KERNELS(Name("Opforge>LeakyReluGrad"), LeakyReluGradOp, OPFORGE_FLOAT_TYPES,
                         OPFORGE_FLOAT_TYPES)

}  // namespace
}  // namespace opforge

// TensorFlow binding of LeakyReLU: op registration with shape functions, and the op structs
// that TfKernel (common/tf_kernel.h) runs: attrs, validation and outputs, and the core calls.
#include "common/tf_kernel.h"
#include "ops/leaky_relu/leaky_relu.h"
#include "ops/leaky_relu/leaky_relu_op.h"

namespace opforge {

OPFORGE_REGISTER_OP(LeakyReluOp<false>)
    .SetShapeFn(shape_inference::UnchangedShape)
    .Doc("activations = features > 0 ? features : alpha * features (as tf.nn.leaky_relu).");

OPFORGE_REGISTER_OP(LeakyReluOp<true>)
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      c->set_output(0, c->input(0));
      c->set_output(1, c->input(0));
      return absl::OkStatus();
    })
    .Doc("LeakyRelu that also returns mask = features > 0 ? 1 : alpha.");

OPFORGE_REGISTER_OP(LeakyReluGradOp)
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

OPFORGE_REGISTER_KERNELS(Name(LeakyReluOp<false>::kSignature.name), LeakyReluOp<false>,
                         OPFORGE_FLOAT_TYPES, OPFORGE_FLOAT_TYPES)
OPFORGE_REGISTER_KERNELS(Name(LeakyReluOp<true>::kSignature.name), LeakyReluOp<true>,
                         OPFORGE_FLOAT_TYPES, OPFORGE_FLOAT_TYPES)
OPFORGE_REGISTER_KERNELS(Name(LeakyReluGradOp::kSignature.name), LeakyReluGradOp,
                         OPFORGE_FLOAT_TYPES, OPFORGE_FLOAT_TYPES)

}  // namespace
}  // namespace opforge

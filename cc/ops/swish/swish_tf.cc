// TensorFlow binding of Swish: op registration with shape functions, and the op structs that
// TfKernel (common/tf_kernel.h) runs.
#include "common/tf_kernel.h"
#include "ops/swish/swish.h"
#include "ops/swish/swish_op.h"

namespace opforge {

OPFORGE_REGISTER_OP(SwishOp)
    .SetShapeFn(shape_inference::UnchangedShape)
    .Doc("activations = features * sigmoid(features) (as tf.nn.silu, tf.nn.swish).");

OPFORGE_REGISTER_OP(SwishGradOp)
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

OPFORGE_REGISTER_KERNELS(Name(SwishOp::kSignature.name), SwishOp, OPFORGE_FLOAT_TYPES,
                         OPFORGE_FLOAT_TYPES)
OPFORGE_REGISTER_KERNELS(Name(SwishGradOp::kSignature.name), SwishGradOp, OPFORGE_FLOAT_TYPES,
                         OPFORGE_FLOAT_TYPES)

}  // namespace
}  // namespace opforge

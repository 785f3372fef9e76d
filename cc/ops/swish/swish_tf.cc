// TensorFlow binding of Swish: op registration with shape functions, and the op structs that
// TfKernel (common/tf_kernel.h) runs.
#include "common/tf_kernel.h"
#include "ops/swish/swish.h"
#include "ops/swish/swish_op.h"

namespace opforge {

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

OPFORGE_REGISTER_KERNELS(Name("Opforge>Swish"), SwishOp, OPFORGE_FLOAT_TYPES, OPFORGE_FLOAT_TYPES)
OPFORGE_REGISTER_KERNELS(Name("Opforge>SwishGrad"), SwishGradOp, OPFORGE_FLOAT_TYPES,
                         OPFORGE_FLOAT_TYPES)

}  // namespace
}  // namespace opforge

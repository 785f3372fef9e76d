// TensorFlow binding of ClippedIdentity: op registration with shape functions, and the op
// structs that TfKernel (common/tf_kernel.h) runs.
#include "common/tf_kernel.h"
#include "ops/clipped_identity/clipped_identity.h"
#include "ops/clipped_identity/clipped_identity_op.h"

namespace opforge {

REGISTER_OP("Opforge>ClippedIdentity")
    .Input("x: T")
    .Output("y: T")
    .Attr("clip_min: float = -1.0")
    .Attr("clip_max: float = 1.0")
    .Attr("leak: float = 0.01")
    .Attr("T: {half, bfloat16, float, double} = DT_FLOAT")
    .SetShapeFn(shape_inference::UnchangedShape)
    .Doc(
        "y = clip(x, clip_min, clip_max) (as tf.clip_by_value); its gradient is 1 inside "
        "[clip_min, clip_max] and leak outside.");

REGISTER_OP("Opforge>ClippedIdentityGrad")
    .Input("gradients: T")
    .Input("features: T")
    .Output("backprops: T")
    .Attr("clip_min: float = -1.0")
    .Attr("clip_max: float = 1.0")
    .Attr("leak: float = 0.01")
    .Attr("T: {half, bfloat16, float, double} = DT_FLOAT")
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      shape_inference::ShapeHandle out;
      TF_RETURN_IF_ERROR(
          ShapeFn(c, "ClippedIdentityGrad")
              .MergeInput(0, "gradients", c->input(1), "the shape of features", &out));
      c->set_output(0, out);
      return absl::OkStatus();
    })
    .Doc("backprops = features outside [clip_min, clip_max] ? leak * gradients : gradients.");

namespace {

OPFORGE_REGISTER_KERNELS(Name("Opforge>ClippedIdentity"), ClippedIdentityOp, OPFORGE_FLOAT_TYPES,
                         OPFORGE_FLOAT_TYPES)
OPFORGE_REGISTER_KERNELS(Name("Opforge>ClippedIdentityGrad"), ClippedIdentityGradOp,
                         OPFORGE_FLOAT_TYPES, OPFORGE_FLOAT_TYPES)

}  // namespace
}  // namespace opforge

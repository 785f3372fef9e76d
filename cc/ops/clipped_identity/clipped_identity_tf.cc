// TensorFlow binding of ClippedIdentity: op registration with shape functions, and the op
// structs that TfKernel (common/tf_kernel.h) runs.
#include "common/tf_kernel.h"
#include "ops/clipped_identity/clipped_identity.h"
#include "ops/clipped_identity/clipped_identity_op.h"

namespace opforge {

OPFORGE_REGISTER_OP(ClippedIdentityOp)
    .SetShapeFn(shape_inference::UnchangedShape)
    .Doc(
        "y = clip(x, clip_min, clip_max) (as tf.clip_by_value); its gradient is 1 inside "
        "[clip_min, clip_max] and leak outside.");

OPFORGE_REGISTER_OP(ClippedIdentityGradOp)
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

OPFORGE_REGISTER_KERNELS(Name(ClippedIdentityOp::kSignature.name), ClippedIdentityOp,
                         OPFORGE_FLOAT_TYPES, OPFORGE_FLOAT_TYPES)
OPFORGE_REGISTER_KERNELS(Name(ClippedIdentityGradOp::kSignature.name), ClippedIdentityGradOp,
                         OPFORGE_FLOAT_TYPES, OPFORGE_FLOAT_TYPES)

}  // namespace
}  // namespace opforge

// TensorFlow binding of ClippedIdentity: op registration with shape functions, and the op
// structs that TfKernel (common/tf_kernel.h) runs.
#include "common/tf_kernel.h"
#include "ops/clipped_identity/clipped_identity.h"

namespace opforge {

namespace shape_inference = tensorflow::shape_inference;

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

// The attrs of both kernels, validated once when the kernel is built.
struct ClippedIdentityAttrs {
  using Params = ClippedIdentityParams;
  ClippedIdentityParams attrs;

  Status Init(AttrReader& reader) {
    reader.Read("clip_min", &attrs.clip_min);
    reader.Read("clip_max", &attrs.clip_max);
    reader.Read("leak", &attrs.leak);
    return ValidateClippedIdentity(attrs);
  }
};

struct ClippedIdentityOp : ClippedIdentityAttrs {
  Status Validate(TfCall& call, Params* params) const {
    *params = attrs;
    params->size = call.NumElements(0);
    call.Output(0, call.shape(0), {0});
    return Status::Ok();
  }
  template <typename T>
  void Cpu(const Params& p, const TfCall& call, const Parallel& parallel) const {
    ClippedIdentityForward<T>(p, call.in<T>(0), call.out<T>(0), parallel);
  }
  Status Gpu(DType dtype, const Params& p, const TfCall& call, void* stream) const {
    return ClippedIdentityForwardGpu(dtype, p, call.in(0), call.out(0), stream);
  }
};

struct ClippedIdentityGradOp : ClippedIdentityAttrs {
  Status Validate(TfCall& call, Params* params) const {
    *params = attrs;
    OPFORGE_RETURN_IF_ERROR(ValidateClippedIdentityGrad(*params, call.shape(0), call.shape(1)));
    params->size = call.NumElements(0);
    call.Output(0, call.shape(0), {0, 1});
    return Status::Ok();
  }
  template <typename T>
  void Cpu(const Params& p, const TfCall& call, const Parallel& parallel) const {
    ClippedIdentityBackward<T>(p, call.in<T>(0), call.in<T>(1), call.out<T>(0), parallel);
  }
  Status Gpu(DType dtype, const Params& p, const TfCall& call, void* stream) const {
    return ClippedIdentityBackwardGpu(dtype, p, call.in(0), call.in(1), call.out(0), stream);
  }
};

OPFORGE_REGISTER_KERNELS(Name("Opforge>ClippedIdentity"), ClippedIdentityOp, OPFORGE_FLOAT_TYPES,
                         OPFORGE_FLOAT_TYPES)
OPFORGE_REGISTER_KERNELS(Name("Opforge>ClippedIdentityGrad"), ClippedIdentityGradOp,
                         OPFORGE_FLOAT_TYPES, OPFORGE_FLOAT_TYPES)

}  // namespace
}  // namespace opforge

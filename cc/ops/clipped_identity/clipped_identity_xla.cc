// XLA lowering of ClippedIdentity and its gradient (tf.function(jit_compile=True)). The same
// element formulas as the CPU kernels (clipped_identity_element.h): the attrs rounded to the
// element type, comparisons and selects (NaN and ties of signed zeros keep x), one product for
// the leak; so the results are bit-identical to the CPU kernels for every dtype.
#include <vector>

#include "common/tf_xla.h"
#include "ops/clipped_identity/clipped_identity.h"

namespace opforge {
namespace {

class ClippedIdentityXlaBase : public tensorflow::XlaOpKernel {
 public:
  explicit ClippedIdentityXlaBase(tensorflow::OpKernelConstruction* context)
      : XlaOpKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("clip_min", &params_.clip_min));
    OP_REQUIRES_OK(context, context->GetAttr("clip_max", &params_.clip_max));
    OP_REQUIRES_OK(context, context->GetAttr("leak", &params_.leak));
    OPFORGE_OP_REQUIRES_OK(context, ValidateClippedIdentity(params_));
  }

 protected:
  // An attr as a scalar of the element type (rounded to it, as the CPU kernel does).
  xla::XlaOp Scalar(tensorflow::XlaOpKernelContext* context, float value) const {
    return tensorflow::XlaHelpers::FloatLiteral(context->builder(), input_type(0), value);
  }
  // x < clip_min or x > clip_max (false for NaN).
  xla::XlaOp Outside(tensorflow::XlaOpKernelContext* context, xla::XlaOp x) const {
    return xla::Or(xla::Lt(x, Scalar(context, params_.clip_min)),
                   xla::Gt(x, Scalar(context, params_.clip_max)));
  }

  ClippedIdentityParams params_;
};

// y = x < clip_min ? clip_min : (x > clip_max ? clip_max : x).
class ClippedIdentityXla : public ClippedIdentityXlaBase {
 public:
  using ClippedIdentityXlaBase::ClippedIdentityXlaBase;

  void Compile(tensorflow::XlaOpKernelContext* context) override {
    std::vector<int64_t> dims;
    OP_REQUIRES_OK(context, xla_glue::InputDims(context, 0, &dims));
    const xla::XlaOp x = context->Input(0);
    const xla::XlaOp lo = Scalar(context, params_.clip_min);
    const xla::XlaOp hi = Scalar(context, params_.clip_max);
    const xla::XlaOp upper = xla::Select(xla::Gt(x, hi), xla::Broadcast(hi, dims), x);
    context->SetOutput(0, xla::Select(xla::Lt(x, lo), xla::Broadcast(lo, dims), upper));
  }
};

// backprops = features outside [clip_min, clip_max] ? gradients * leak : gradients.
class ClippedIdentityGradXla : public ClippedIdentityXlaBase {
 public:
  using ClippedIdentityXlaBase::ClippedIdentityXlaBase;

  void Compile(tensorflow::XlaOpKernelContext* context) override {
    std::vector<int64_t> gradients, features;
    OP_REQUIRES_OK(context, xla_glue::InputDims(context, 0, &gradients));
    OP_REQUIRES_OK(context, xla_glue::InputDims(context, 1, &features));
    OPFORGE_OP_REQUIRES_OK(context, ValidateClippedIdentityGrad(params_, gradients, features));
    const xla::XlaOp g = context->Input(0);
    const xla::XlaOp x = context->Input(1);
    context->SetOutput(
        0, xla::Select(Outside(context, x), xla::Mul(g, Scalar(context, params_.leak)), g));
  }
};

OPFORGE_REGISTER_XLA_OP("Opforge>ClippedIdentity", ClippedIdentityXla)
OPFORGE_REGISTER_XLA_OP("Opforge>ClippedIdentityGrad", ClippedIdentityGradXla)

}  // namespace
}  // namespace opforge

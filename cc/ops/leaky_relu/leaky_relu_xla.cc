// XLA lowering of LeakyReLU, its mask form and its gradient (tf.function(jit_compile=True)).
// The same element formulas as the CPU kernels (leaky_relu_element.h): alpha rounded to the
// element type first, the product computed for every element, then a select on x > 0; so the
// results are bit-identical to the CPU kernels for every dtype.
#include <vector>

#include "common/tf_xla.h"
#include "ops/leaky_relu/leaky_relu.h"

namespace opforge {
namespace {

class LeakyReluXlaBase : public tensorflow::XlaOpKernel {
 public:
  explicit LeakyReluXlaBase(tensorflow::OpKernelConstruction* context) : XlaOpKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("alpha", &params_.alpha));
    OPFORGE_OP_REQUIRES_OK(context, ValidateLeakyRelu(params_));
  }

 protected:
  // The slope as a scalar of the element type: alpha rounded to it, as the CPU kernel does.
  xla::XlaOp Alpha(tensorflow::XlaOpKernelContext* context) const {
    return tensorflow::XlaHelpers::FloatLiteral(context->builder(), input_type(0), params_.alpha);
  }
  static xla::XlaOp Positive(tensorflow::XlaOpKernelContext* context, xla::XlaOp x,
                             tensorflow::DataType dtype) {
    return xla::Gt(x, tensorflow::XlaHelpers::Zero(context->builder(), dtype));
  }

  LeakyReluParams params_;
};

// activations = x > 0 ? x : x * alpha (and, with the mask, mask = x > 0 ? 1 : alpha).
template <bool kWithMask>
class LeakyReluXla : public LeakyReluXlaBase {
 public:
  using LeakyReluXlaBase::LeakyReluXlaBase;

  void Compile(tensorflow::XlaOpKernelContext* context) override {
    const tensorflow::DataType dtype = input_type(0);
    const xla::XlaOp x = context->Input(0);
    const xla::XlaOp alpha = Alpha(context);
    const xla::XlaOp positive = Positive(context, x, dtype);
    context->SetOutput(0, xla::Select(positive, x, xla::Mul(x, alpha)));
    if (kWithMask) {
      std::vector<int64_t> dims;
      OP_REQUIRES_OK(context, xla_glue::InputDims(context, 0, &dims));
      xla::XlaBuilder* b = context->builder();
      context->SetOutput(
          1, xla::Select(positive, xla::Broadcast(tensorflow::XlaHelpers::One(b, dtype), dims),
                         xla::Broadcast(alpha, dims)));
    }
  }
};

// backprops = features > 0 ? gradients : gradients * alpha.
class LeakyReluGradXla : public LeakyReluXlaBase {
 public:
  using LeakyReluXlaBase::LeakyReluXlaBase;

  void Compile(tensorflow::XlaOpKernelContext* context) override {
    std::vector<int64_t> gradients, features;
    OP_REQUIRES_OK(context, xla_glue::InputDims(context, 0, &gradients));
    OP_REQUIRES_OK(context, xla_glue::InputDims(context, 1, &features));
    OPFORGE_OP_REQUIRES_OK(context, ValidateLeakyReluGrad(params_, gradients, features));
    const xla::XlaOp g = context->Input(0);
    const xla::XlaOp x = context->Input(1);
    context->SetOutput(
        0, xla::Select(Positive(context, x, input_type(1)), g, xla::Mul(g, Alpha(context))));
  }
};

OPFORGE_REGISTER_XLA_OP("Opforge>LeakyRelu", LeakyReluXla<false>)
OPFORGE_REGISTER_XLA_OP("Opforge>LeakyReluWithMask", LeakyReluXla<true>)
OPFORGE_REGISTER_XLA_OP("Opforge>LeakyReluGrad", LeakyReluGradXla)

}  // namespace
}  // namespace opforge

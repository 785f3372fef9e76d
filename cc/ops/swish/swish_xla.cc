// XLA lowering of Swish and its gradient (tf.function(jit_compile=True)). The formulas are the
// CPU kernels' (swish_element.h) around XLA's own Logistic, which is not Eigen's: results are
// within a few ulps of the CPU kernels, not bit-identical (as TensorFlow's own Sigmoid under XLA).
#include <vector>

#include "common/tf_xla.h"
#include "ops/swish/swish.h"

namespace opforge {
namespace {

// activations = features * logistic(features).
class SwishXla : public tensorflow::XlaOpKernel {
 public:
  using XlaOpKernel::XlaOpKernel;

  void Compile(tensorflow::XlaOpKernelContext* context) override {
    const xla::XlaOp x = context->Input(0);
    context->SetOutput(0, xla::Mul(x, xla::Logistic(x)));
  }
};

// backprops = gradients * (s * (1 + features * (1 - s))), s = logistic(features).
class SwishGradXla : public tensorflow::XlaOpKernel {
 public:
  using XlaOpKernel::XlaOpKernel;

  void Compile(tensorflow::XlaOpKernelContext* context) override {
    std::vector<int64_t> gradients, features;
    OP_REQUIRES_OK(context, xla_glue::InputDims(context, 0, &gradients));
    OP_REQUIRES_OK(context, xla_glue::InputDims(context, 1, &features));
    OPFORGE_OP_REQUIRES_OK(context, ValidateSwishGrad(SwishParams(), gradients, features));
    const xla::XlaOp g = context->Input(0);
    const xla::XlaOp x = context->Input(1);
    const xla::XlaOp one = tensorflow::XlaHelpers::One(context->builder(), input_type(1));
    const xla::XlaOp s = xla::Logistic(x);
    const xla::XlaOp slope = xla::Mul(s, xla::Add(one, xla::Mul(x, xla::Sub(one, s))));
    context->SetOutput(0, xla::Mul(g, slope));
  }
};

OPFORGE_REGISTER_XLA_OP("Opforge>Swish", SwishXla)
OPFORGE_REGISTER_XLA_OP("Opforge>SwishGrad", SwishGradXla)

}  // namespace
}  // namespace opforge

// XLA lowering of ElementMul and its gradient (tf.function(jit_compile=True)).
//
// The forward is one multiply per element, as the CPU kernel: bit-identical for real types. The
// gradient of an operand that was not broadcast is one product per element too (bit-identical);
// the gradient of a broadcast operand is a sum over its broadcast dimensions, which XLA's CPU
// backend computes in its own order (a tree of partial sums) and with fused multiply-adds where
// the CPU has them, so it differs from the CPU kernel's sequential sum in the last bits (the
// README's XLA section gives the measured difference). half and bfloat16 sums accumulate in
// float, as the CPU kernel does.
#include <vector>

#include "common/tf_xla.h"
#include "ops/element_mul/element_mul.h"

namespace opforge {
namespace {

// `x` (of shape `dims`) broadcast to `out` (NumPy rules: dimensions aligned at the right).
xla::XlaOp BroadcastTo(xla::XlaOp x, const std::vector<int64_t>& dims,
                       const std::vector<int64_t>& out) {
  if (dims == out) return x;
  std::vector<int64_t> mapping(dims.size());
  const int64_t offset = static_cast<int64_t>(out.size() - dims.size());
  for (size_t i = 0; i < dims.size(); ++i) mapping[i] = offset + static_cast<int64_t>(i);
  return xla::BroadcastInDim(x, out, mapping);
}

class ElementMulXla : public tensorflow::XlaOpKernel {
 public:
  using XlaOpKernel::XlaOpKernel;

  void Compile(tensorflow::XlaOpKernelContext* context) override {
    std::vector<int64_t> a, b;
    OP_REQUIRES_OK(context, xla_glue::InputDims(context, 0, &a));
    OP_REQUIRES_OK(context, xla_glue::InputDims(context, 1, &b));
    BroadcastPlan plan;
    OPFORGE_OP_REQUIRES_OK(context, ValidateElementMul(a, b, &plan));
    context->SetOutput(0, xla::Mul(BroadcastTo(context->Input(0), a, plan.out_shape),
                                   BroadcastTo(context->Input(1), b, plan.out_shape)));
  }
};

class ElementMulGradXla : public tensorflow::XlaOpKernel {
 public:
  explicit ElementMulGradXla(tensorflow::OpKernelConstruction* context) : XlaOpKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("need_grad_a", &need_a_));
    OP_REQUIRES_OK(context, context->GetAttr("need_grad_b", &need_b_));
  }

  void Compile(tensorflow::XlaOpKernelContext* context) override {
    std::vector<int64_t> g, a, b;
    OP_REQUIRES_OK(context, xla_glue::InputDims(context, 0, &g));
    OP_REQUIRES_OK(context, xla_glue::InputDims(context, 1, &a));
    OP_REQUIRES_OK(context, xla_glue::InputDims(context, 2, &b));
    BroadcastPlan plan;
    OPFORGE_OP_REQUIRES_OK(context, ValidateElementMulGrad(g, a, b, &plan));
    const tensorflow::DataType dtype = input_type(0);
    // grad * conj(b) and conj(a) * grad (TensorFlow's _MulGrad): the same products for real T.
    auto conj = [dtype](xla::XlaOp x) {
      return tensorflow::DataTypeIsComplex(dtype) ? xla::Conj(x) : x;
    };
    const xla::XlaOp grad = context->Input(0);
    const xla::XlaOp other_of_a = conj(BroadcastTo(context->Input(2), b, plan.out_shape));
    const xla::XlaOp other_of_b = conj(BroadcastTo(context->Input(1), a, plan.out_shape));
    // An operand whose gradient nobody needs gets an empty [0] tensor, as on the CPU.
    const xla::XlaOp skipped =
        xla::Broadcast(tensorflow::XlaHelpers::Zero(context->builder(), dtype), {0});
    context->SetOutput(
        0, need_a_ ? Reduce(context, grad, other_of_a, a, plan.out_shape, false) : skipped);
    context->SetOutput(
        1, need_b_ ? Reduce(context, grad, other_of_b, b, plan.out_shape, true) : skipped);
  }

 private:
  // The gradient of the operand of shape `target`: the products grad * other (other * grad
  // when `other_first`), summed over the dimensions the target was broadcast along (those of
  // the output, of size other than 1, where the target has size 1 or no dimension at all), then
  // given the target's shape.
  xla::XlaOp Reduce(tensorflow::XlaOpKernelContext* context, xla::XlaOp grad, xla::XlaOp other,
                    const std::vector<int64_t>& target, const std::vector<int64_t>& out,
                    bool other_first) const {
    std::vector<int64_t> reduced;
    const size_t offset = out.size() - target.size();
    for (size_t d = 0; d < out.size(); ++d) {
      if (out[d] != 1 && (d < offset || target[d - offset] == 1)) {
        reduced.push_back(static_cast<int64_t>(d));
      }
    }
    const tensorflow::DataType dtype = input_type(0);
    if (reduced.empty()) {
      return xla::Reshape(other_first ? xla::Mul(other, grad) : xla::Mul(grad, other), target);
    }
    // half and bfloat16: products and sum in float, rounded once at the end (as the CPU).
    const tensorflow::DataType acc = tensorflow::XlaHelpers::SumAccumulationType(dtype);
    const xla::XlaOp g = tensorflow::XlaHelpers::ConvertElementType(grad, acc);
    const xla::XlaOp o = tensorflow::XlaHelpers::ConvertElementType(other, acc);
    const xla::XlaOp sum = xla::Reduce(other_first ? xla::Mul(o, g) : xla::Mul(g, o),
                                       tensorflow::XlaHelpers::Zero(context->builder(), acc),
                                       *context->GetOrCreateAdd(acc), reduced);
    return xla::Reshape(tensorflow::XlaHelpers::ConvertElementType(sum, dtype), target);
  }

  bool need_a_ = true;
  bool need_b_ = true;
};

OPFORGE_REGISTER_XLA_OP("Opforge>ElementMul", ElementMulXla)
OPFORGE_REGISTER_XLA_OP("Opforge>ElementMulGrad", ElementMulGradXla)

}  // namespace
}  // namespace opforge

// TensorFlow binding of ElementMul (broadcasting multiply) and its fused gradient.
#include <vector>

#include "common/tf_kernel.h"
#include "ops/element_mul/element_mul.h"
#include "ops/element_mul/element_mul_op.h"

namespace opforge {

OPFORGE_REGISTER_OP(ElementMulOp)
    // Broadcasts known dimensions, keeps unknown ones unknown, and rejects incompatible known
    // dimensions when the graph is built, with the kernel's message.
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      shape_inference::ShapeHandle product;
      TF_RETURN_IF_ERROR(ShapeFn(c, "ElementMul").Broadcast(0, "a", 1, "b", &product));
      c->set_output(0, product);
      return absl::OkStatus();
    })
    .Doc("product = a * b with NumPy broadcasting (as tf.multiply).");

OPFORGE_REGISTER_OP(ElementMulGradOp)
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      const ShapeFn fn(c, "ElementMulGrad");
      shape_inference::ShapeHandle product;
      TF_RETURN_IF_ERROR(fn.Broadcast(1, "a", 2, "b", &product));
      TF_RETURN_IF_ERROR(
          fn.MergeInput(0, "grad", product, "the broadcast shape of a and b", &product));
      bool need_a = true, need_b = true;
      TF_RETURN_IF_ERROR(c->GetAttr("need_grad_a", &need_a));
      TF_RETURN_IF_ERROR(c->GetAttr("need_grad_b", &need_b));
      c->set_output(0, need_a ? c->input(1) : c->Vector(0));
      c->set_output(1, need_b ? c->input(2) : c->Vector(0));
      return absl::OkStatus();
    })
    .Doc(
        "grad_a = sum(grad * conj(b)) and grad_b = sum(conj(a) * grad) over each one's broadcast "
        "dims (conj: the identity on real types).");

namespace {

// The other integers and the complex types run on the CPU only.
OPFORGE_REGISTER_KERNELS(Name(ElementMulOp::kSignature.name), ElementMulOp,
                         OPFORGE_ELEMENT_MUL_TYPES, OPFORGE_ELEMENT_MUL_GPU_TYPES)
OPFORGE_REGISTER_KERNELS(Name(ElementMulGradOp::kSignature.name), ElementMulGradOp,
                         OPFORGE_ELEMENT_MUL_GRAD_TYPES, OPFORGE_ELEMENT_MUL_GPU_TYPES)

}  // namespace
}  // namespace opforge

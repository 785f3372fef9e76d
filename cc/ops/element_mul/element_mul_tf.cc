// TensorFlow binding of ElementMul (broadcasting multiply) and its fused gradient.
#include <vector>

#include "common/tf_kernel.h"
#include "ops/element_mul/element_mul.h"
#include "ops/element_mul/element_mul_op.h"

namespace opforge {

REGISTER_OP("Opforge>ElementMul")
    .Input("a: T")
    .Input("b: T")
    .Output("product: T")
    .Attr(
        "T: {half, bfloat16, float, double, int8, uint8, int16, uint16, int32, uint32, int64, "
        "uint64, complex64, complex128}")
    // Broadcasts known dimensions, keeps unknown ones unknown, and rejects incompatible known
    // dimensions when the graph is built, with the kernel's message.
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      shape_inference::ShapeHandle product;
      TF_RETURN_IF_ERROR(ShapeFn(c, "ElementMul").Broadcast(0, "a", 1, "b", &product));
      c->set_output(0, product);
      return absl::OkStatus();
    })
    .Doc("product = a * b with NumPy broadcasting (as tf.multiply).");

REGISTER_OP("Opforge>ElementMulGrad")
    .Input("grad: T")
    .Input("a: T")
    .Input("b: T")
    .Output("grad_a: T")
    .Output("grad_b: T")
    .Attr("T: {half, bfloat16, float, double, int32, int64, complex64, complex128}")
    // An operand whose gradient nobody needs (a constant, say) is not computed: its output is an
    // empty [0] tensor. The Python gradient sets these from the tape's skip_input_indices.
    .Attr("need_grad_a: bool = true")
    .Attr("need_grad_b: bool = true")
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

// TensorFlow's GPU kernels keep int32 tensors in host memory: int32 runs on the CPU kernel.
#define OPFORGE_ELEMENT_MUL_GPU_TYPES(X, ...) \
  OPFORGE_FLOAT_TYPES(X, __VA_ARGS__)         \
  X(int64_t, __VA_ARGS__)

// The other integers and the complex types run on the CPU only.
OPFORGE_REGISTER_KERNELS(Name("Opforge>ElementMul"), ElementMulOp, OPFORGE_ELEMENT_MUL_TYPES,
                         OPFORGE_ELEMENT_MUL_GPU_TYPES)
OPFORGE_REGISTER_KERNELS(Name("Opforge>ElementMulGrad"), ElementMulGradOp,
                         OPFORGE_ELEMENT_MUL_GRAD_TYPES, OPFORGE_ELEMENT_MUL_GPU_TYPES)

}  // namespace
}  // namespace opforge

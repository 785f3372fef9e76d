"""Broadcasting multiply: `opforge.ops.element_mul` mirrors `tf.multiply`; C++ op `Opforge>ElementMul`."""
from __future__ import annotations

from typing import Optional

import tensorflow as tf

from opforge.ops._common import check_dtype, invalid_argument, lib

DTYPES = (tf.float16, tf.bfloat16, tf.float32, tf.float64, tf.int32, tf.int64)
_DTYPE_SET = frozenset(DTYPES)


def element_mul(a, b, name: Optional[str] = None) -> tf.Tensor:
    """`a * b` element-wise with NumPy broadcasting, as `tf.multiply(a, b)`.

    Supports half, bfloat16, float32, float64, int32 and int64 (integers wrap on overflow, as in
    TensorFlow). Python numbers and NumPy arrays are converted to the dtype of the other operand.
    The gradient sums over the dimensions each operand was broadcast along; it is computed by
    one fused C++ op, `Opforge>ElementMulGrad`.

    Raises:
      InvalidArgumentError: unsupported or mismatched dtypes, or shapes that do not broadcast.
    """
    if (
        isinstance(a, tf.Tensor)
        and isinstance(b, tf.Tensor)
        and a.dtype in _DTYPE_SET
        and a.dtype == b.dtype
    ):
        return lib().opforge_element_mul(a, b, name=name)
    op = "opforge.ops.element_mul"
    if isinstance(a, (tf.Tensor, tf.Variable)) or not isinstance(b, (tf.Tensor, tf.Variable)):
        a = tf.convert_to_tensor(a, name="a")
        b = tf.convert_to_tensor(b, dtype_hint=a.dtype, name="b")
    else:
        b = tf.convert_to_tensor(b, name="b")
        a = tf.convert_to_tensor(a, dtype_hint=b.dtype, name="a")
    check_dtype(op, "a", a, DTYPES)
    if b.dtype != a.dtype:
        raise invalid_argument(
            f"{op}: b must have the dtype of a ({a.dtype.name}), got {b.dtype.name}"
        )
    return lib().opforge_element_mul(a, b, name=name)


@tf.RegisterGradient("Opforge>ElementMul")
def _element_mul_gradient(op, grad):
    a, b = op.inputs
    # The tape says which inputs need no gradient (a constant operand, say); skip their work.
    skip = getattr(op, "skip_input_indices", None) or ()
    need_a, need_b = 0 not in skip, 1 not in skip
    grad_a, grad_b = lib().opforge_element_mul_grad(
        grad, a, b, need_grad_a=need_a, need_grad_b=need_b
    )
    return (grad_a if need_a else None), (grad_b if need_b else None)


@tf.RegisterGradient("Opforge>ElementMulGrad")
def _element_mul_grad_gradient(op, grad_ga, grad_gb):
    # grad_a = R_a(g * b), grad_b = R_b(a * g), R_x summing over x's broadcast dimensions.
    # An output that was skipped (need_grad_x false) contributes nothing.
    g, a, b = op.inputs
    if grad_ga is None or not op.get_attr("need_grad_a"):
        grad_ga = tf.zeros_like(a)
    if grad_gb is None or not op.get_attr("need_grad_b"):
        grad_gb = tf.zeros_like(b)
    m = lib()
    d_g = m.opforge_element_mul(grad_ga, b) + m.opforge_element_mul(a, grad_gb)
    d_a = m.opforge_element_mul_grad(g, a, grad_gb, need_grad_b=False)[0]
    d_b = m.opforge_element_mul_grad(g, grad_ga, b, need_grad_a=False)[1]
    return d_g, d_a, d_b

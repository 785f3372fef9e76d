"""opforge.jax's element_mul: the handlers of `Opforge>ElementMul` and `Opforge>ElementMulGrad`."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from opforge.jax._batching import Broadcasting, apply
from opforge.jax._checks import array, check_dtype, message

__all__ = ["element_mul"]

DTYPES = tuple(np.dtype(d) for d in (jnp.float16, jnp.bfloat16, np.float32, np.float64, np.int8, np.uint8,
                                     np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64,
                                     np.complex64, np.complex128))
_BROADCAST = Broadcasting()
_GRAD_BROADCAST = Broadcasting(expand=True)  # each gradient keeps its operand's shape per element


def _mul(a, b):
    return apply("Opforge>ElementMul", (a, b), {}, _BROADCAST)[0]


def _mul_grad(g, a, b, need_a=True, need_b=True):
    return apply("Opforge>ElementMulGrad", (g, a, b), {"need_grad_a": need_a, "need_grad_b": need_b},
                 _GRAD_BROADCAST)


@jax.custom_vjp
def _element_mul(a, b):
    return _mul(a, b)


def _bwd(res, g):
    a, b = res
    if jnp.issubdtype(a.dtype, jnp.integer):  # integers have no gradient (float0)
        return (np.zeros(a.shape, jax.dtypes.float0), np.zeros(b.shape, jax.dtypes.float0))
    grad_a, grad_b = _mul_grad(g, a, b)
    return grad_a, grad_b


_element_mul.defvjp(lambda a, b: (_mul(a, b), (a, b)), _bwd)


def element_mul(a, b) -> jax.Array:
    """opforge.ops.element_mul in JAX: `a * b` with NumPy broadcasting (tf.multiply's bits, every
    dtype it takes); the gradient sums over the axes each operand was broadcast along
    (ElementMulGrad: `grad * conj(b)` and `conj(a) * grad`). Python numbers and NumPy arrays take
    the other operand's dtype."""
    op = "ElementMul"
    a_array = isinstance(a, (jax.Array, jax.core.Tracer))
    b_array = isinstance(b, (jax.Array, jax.core.Tracer))
    if a_array or not b_array:
        a = array(op, "a", a)
        b = array(op, "b", b, dtype=a.dtype)
    else:
        b = array(op, "b", b)
        a = array(op, "a", a, dtype=b.dtype)
    check_dtype(op, "a", a, DTYPES)
    if b.dtype != a.dtype:
        raise TypeError(message(op, "b", f"the dtype of a ({np.dtype(a.dtype).name})", np.dtype(b.dtype).name))
    return _element_mul(a, b)

"""opforge.jax's fused_batch_norm_leaky_relu: the handlers of `Opforge>FusedBatchNormLeakyRelu` and
`Opforge>FusedBatchNormLeakyReluGrad` (opforge.ops.fused_batch_norm_leaky_relu's kernels)."""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from opforge.jax._batching import SEQUENTIAL, apply
from opforge.jax._checks import FLOAT_DTYPES, array, check_dtype, message, number
from opforge.ops.fused_batch_norm_leaky_relu import FusedBatchNormLeakyReluResult

__all__ = ["fused_batch_norm_leaky_relu", "FusedBatchNormLeakyReluResult"]

_OP = "FusedBatchNormLeakyRelu"


def _number(name: str, value, minimum_exclusive: bool) -> float:
    v = number(_OP, name, value)
    ok = np.isfinite(v) and abs(v) <= 3.4e38 and (v > 0 if minimum_exclusive else v >= 0)
    if not ok:
        raise ValueError(message(_OP, name, "finite and > 0" if minimum_exclusive else "finite and >= 0",
                                 repr(value)))
    return v


def _attrs(x, epsilon, alpha) -> dict:
    u = "float64" if x.dtype == np.float64 else "float32"
    return {"U": u, "epsilon": epsilon, "alpha": alpha}


# Both ops mix the batch (the statistics, the sums of the scale and offset gradients): under
# jax.vmap each element is its own call.
def _forward(x, scale, offset, epsilon, alpha):
    return apply("Opforge>FusedBatchNormLeakyRelu", (x, scale, offset), _attrs(x, epsilon, alpha), SEQUENTIAL)


def _grad_call(grad_y, x, scale, offset, mean, variance, epsilon, alpha):
    return apply("Opforge>FusedBatchNormLeakyReluGrad", (grad_y, x, scale, offset, mean, variance),
                 _attrs(x, epsilon, alpha), SEQUENTIAL)


@functools.partial(jax.custom_vjp, nondiff_argnums=(6, 7))
def _grad(grad_y, x, scale, offset, mean, variance, epsilon, alpha):
    return _grad_call(grad_y, x, scale, offset, mean, variance, epsilon, alpha)


def _grad_fwd(grad_y, x, scale, offset, mean, variance, epsilon, alpha):
    return _grad(grad_y, x, scale, offset, mean, variance, epsilon, alpha), (
        grad_y, x, scale, offset, mean, variance)


def _grad_bwd(epsilon, alpha, res, g):
    # tf.no_gradient("Opforge>FusedBatchNormLeakyReluGrad"): TensorFlow propagates nothing
    # through the gradient op, so a second derivative through it is zero there too.
    return tuple(jnp.zeros_like(r) for r in res)


_grad.defvjp(_grad_fwd, _grad_bwd)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def _bn(x, scale, offset, epsilon, alpha):
    return _forward(x, scale, offset, epsilon, alpha)


def _bn_fwd(x, scale, offset, epsilon, alpha):
    out = _bn(x, scale, offset, epsilon, alpha)  # itself: a second derivative goes through its gradient
    return out, (x, scale, offset, out[1], out[2])


def _bn_bwd(epsilon, alpha, res, g):
    # The statistics feed the moving averages: their cotangents are dropped, as TensorFlow's.
    x, scale, offset, mean, variance = res
    return tuple(_grad(g[0], x, scale, offset, mean, variance, epsilon, alpha))


_bn.defvjp(_bn_fwd, _bn_bwd)


def fused_batch_norm_leaky_relu(x, scale, offset, epsilon: float = 1e-3,
                                alpha: float = 0.2) -> FusedBatchNormLeakyReluResult:
    """opforge.ops.fused_batch_norm_leaky_relu in JAX: `leaky_relu(batch_norm(x))` with the batch's
    statistics per channel (the last axis), TensorFlow's bits. scale and offset (any float dtype)
    are cast to float32, float64 for float64 x. Returns FusedBatchNormLeakyReluResult(y,
    batch_mean, batch_variance); the gradient (to x, scale and offset) is
    FusedBatchNormLeakyReluGrad's, the statistics carry none."""
    x = array(_OP, "x", x)
    check_dtype(_OP, "x", x, FLOAT_DTYPES)
    u = np.dtype(np.float64 if x.dtype == np.float64 else np.float32)
    scale = array(_OP, "scale", scale, dtype=u)
    offset = array(_OP, "offset", offset, dtype=u)
    for arg, t in (("scale", scale), ("offset", offset)):
        if not jnp.issubdtype(t.dtype, jnp.floating):
            raise TypeError(message(_OP, arg, f"a float tensor (computed as {u.name} for "
                                    f"{np.dtype(x.dtype).name} x)", np.dtype(t.dtype).name))
    scale, offset = scale.astype(u), offset.astype(u)
    out = _bn(x, scale, offset, _number("epsilon", epsilon, True), _number("alpha", alpha, False))
    return FusedBatchNormLeakyReluResult(*out)

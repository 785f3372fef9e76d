"""opforge.jax's leaky_relu, leaky_relu_with_mask and leaky_relu_grad: the handlers of
`Opforge>LeakyRelu`, `Opforge>LeakyReluWithMask` and `Opforge>LeakyReluGrad` (opforge.ops.leaky_relu's
kernels)."""
from __future__ import annotations

import functools
from typing import Tuple

import jax
import jax.numpy as jnp
import numpy as np

from opforge.jax._batching import ELEMENTWISE, apply
from opforge.jax._checks import FLOAT_DTYPES, array, check_dtype, number, same_dtype

__all__ = ["leaky_relu", "leaky_relu_with_mask", "leaky_relu_grad"]


def _features(op: str, features) -> jax.Array:
    features = array(op, "features", features)
    if jnp.issubdtype(features.dtype, jnp.integer):  # as tf.nn.leaky_relu does
        features = features.astype(jnp.float32)
    check_dtype(op, "features", features, FLOAT_DTYPES)
    return features


def _grad(gradients, features, alpha: float) -> jax.Array:
    return apply("Opforge>LeakyReluGrad", (gradients, features), {"alpha": alpha}, ELEMENTWISE)[0]


@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def _leaky_relu(features, alpha):
    return apply("Opforge>LeakyRelu", (features,), {"alpha": alpha}, ELEMENTWISE)[0]


def _leaky_relu_fwd(features, alpha):
    return _leaky_relu(features, alpha), features


def _leaky_relu_bwd(alpha, features, g):
    return (_grad(g, features, alpha),)


_leaky_relu.defvjp(_leaky_relu_fwd, _leaky_relu_bwd)


def leaky_relu(features, alpha: float = 0.2) -> jax.Array:
    """opforge.ops.leaky_relu in JAX: `features` where > 0, `alpha * features` elsewhere (integer
    inputs as float32), TensorFlow's bits; its gradient is LeakyReluGrad's."""
    features = _features("LeakyRelu", features)
    return _leaky_relu(features, number("LeakyRelu", "alpha", alpha))


@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def _with_mask(features, alpha):
    return apply("Opforge>LeakyReluWithMask", (features,), {"alpha": alpha}, ELEMENTWISE)


def _with_mask_fwd(features, alpha):
    out = _with_mask(features, alpha)
    return out, out[1]


def _with_mask_bwd(alpha, mask, g):
    from opforge.jax.element_mul import element_mul

    # d activations / d features = mask; the mask is piecewise constant (no gradient).
    return (element_mul(g[0], mask),)


_with_mask.defvjp(_with_mask_fwd, _with_mask_bwd)


def leaky_relu_with_mask(features, alpha: float = 0.2) -> Tuple[jax.Array, jax.Array]:
    """opforge.ops.leaky_relu_with_mask in JAX: `(activations, mask)`, mask 1 where features > 0
    and alpha elsewhere."""
    op = "LeakyReluWithMask"
    return tuple(_with_mask(_features(op, features), number(op, "alpha", alpha)))


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _leaky_relu_grad(gradients, features, alpha):
    return _grad(gradients, features, alpha)


def _leaky_relu_grad_fwd(gradients, features, alpha):
    return _grad(gradients, features, alpha), features


def _leaky_relu_grad_bwd(alpha, features, g):
    # backprops is linear in gradients with the same slope mask, and piecewise constant in x.
    return _grad(g, features, alpha), jnp.zeros_like(features)


_leaky_relu_grad.defvjp(_leaky_relu_grad_fwd, _leaky_relu_grad_bwd)


def leaky_relu_grad(gradients, features, alpha: float = 0.2) -> jax.Array:
    """opforge.ops.leaky_relu_grad in JAX: `gradients` where features > 0, `alpha * gradients`
    elsewhere (tf.raw_ops.LeakyReluGrad)."""
    op = "LeakyReluGrad"
    features = _features(op, features)
    gradients = array(op, "gradients", gradients)
    same_dtype(op, "gradients", gradients, features, "features")
    return _leaky_relu_grad(gradients, features, number(op, "alpha", alpha))

"""opforge.jax's swish and swish_grad: the handlers of `Opforge>Swish` and `Opforge>SwishGrad`."""
from __future__ import annotations

import jax
import jax.numpy as jnp

from opforge.jax._batching import ELEMENTWISE, apply
from opforge.jax._checks import FLOAT_DTYPES, array, check_dtype, same_dtype

__all__ = ["swish", "swish_grad"]


def _features(op: str, features) -> jax.Array:
    features = array(op, "features", features)
    check_dtype(op, "features", features, FLOAT_DTYPES)
    return features


def _grad(gradients, features):
    return apply("Opforge>SwishGrad", (gradients, features), {}, ELEMENTWISE)[0]


@jax.custom_vjp
def _swish(features):
    return apply("Opforge>Swish", (features,), {}, ELEMENTWISE)[0]


_swish.defvjp(lambda x: (_swish(x), x), lambda x, g: (_grad(g, x),))


@jax.custom_vjp
def _swish_grad(gradients, features):
    return _grad(gradients, features)


def _swish_grad_bwd(res, g):
    # backprops = g * swish'(x) is linear in g; d/dx = g * swish''(x), with
    # swish''(x) = s (1 - s) (2 + x (1 - 2 s)) (opforge.ops.swish's gradient of SwishGrad).
    gradients, features = res
    s = jax.nn.sigmoid(features)
    second = s * (1.0 - s) * (2.0 + features * (1.0 - 2.0 * s))
    return _grad(g, features), g * gradients * second


_swish_grad.defvjp(lambda g, x: (_grad(g, x), (g, x)), _swish_grad_bwd)


def swish(features) -> jax.Array:
    """opforge.ops.swish in JAX: `features * sigmoid(features)` (tf.nn.silu's bits); its
    gradient is SwishGrad's."""
    return _swish(_features("Swish", features))


def swish_grad(gradients, features) -> jax.Array:
    """opforge.ops.swish_grad in JAX: `gradients * s * (1 + features * (1 - s))`."""
    op = "SwishGrad"
    features = _features(op, features)
    gradients = array(op, "gradients", gradients)
    same_dtype(op, "gradients", gradients, features, "features")
    return _swish_grad(gradients, features)

"""opforge.jax's clipped_identity and clipped_identity_grad: the handlers of
`Opforge>ClippedIdentity` and `Opforge>ClippedIdentityGrad`."""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from opforge.jax._batching import ELEMENTWISE, apply
from opforge.jax._checks import FLOAT_DTYPES, array, check_dtype, number, same_dtype

__all__ = ["clipped_identity", "clipped_identity_grad"]


def _x(op: str, x, argument: str = "x") -> jax.Array:
    x = array(op, argument, x)
    check_dtype(op, argument, x, FLOAT_DTYPES)
    return x


def _attrs(op: str, clip_min, clip_max, leak) -> tuple:
    return (number(op, "clip_min", clip_min), number(op, "clip_max", clip_max), number(op, "leak", leak))


def _grad(gradients, features, attrs):
    clip_min, clip_max, leak = attrs
    return apply("Opforge>ClippedIdentityGrad", (gradients, features),
                 {"clip_min": clip_min, "clip_max": clip_max, "leak": leak}, ELEMENTWISE)[0]


@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def _clipped(x, attrs):
    clip_min, clip_max, leak = attrs
    return apply("Opforge>ClippedIdentity", (x,), {"clip_min": clip_min, "clip_max": clip_max, "leak": leak},
                 ELEMENTWISE)[0]


_clipped.defvjp(lambda x, attrs: (_clipped(x, attrs), x), lambda attrs, x, g: (_grad(g, x, attrs),))


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _clipped_grad(gradients, features, attrs):
    return _grad(gradients, features, attrs)


_clipped_grad.defvjp(
    lambda g, x, attrs: (_grad(g, x, attrs), x),
    # backprops is linear in gradients with the same mask, and piecewise constant in features.
    lambda attrs, x, g: (_grad(g, x, attrs), jnp.zeros_like(x)))


def clipped_identity(x, clip_min: float = -1.0, clip_max: float = 1.0, leak: float = 0.01) -> jax.Array:
    """opforge.ops.clipped_identity in JAX: `clip(x, clip_min, clip_max)` forward, gradient 1
    inside the range and `leak` outside (ClippedIdentityGrad)."""
    op = "ClippedIdentity"
    return _clipped(_x(op, x), _attrs(op, clip_min, clip_max, leak))


def clipped_identity_grad(gradients, features, clip_min: float = -1.0, clip_max: float = 1.0,
                          leak: float = 0.01) -> jax.Array:
    """opforge.ops.clipped_identity_grad in JAX: `leak * gradients` where features lie outside
    [clip_min, clip_max], `gradients` elsewhere."""
    op = "ClippedIdentityGrad"
    features = _x(op, features, "features")
    gradients = array(op, "gradients", gradients)
    same_dtype(op, "gradients", gradients, features, "features")
    return _clipped_grad(gradients, features, _attrs(op, clip_min, clip_max, leak))

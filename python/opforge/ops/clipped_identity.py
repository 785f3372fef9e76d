"""Clipped identity with a leaky straight-through gradient: `opforge.ops.clipped_identity`;
C++ op `Opforge>ClippedIdentity`.

The forward is `tf.clip_by_value(x, clip_min, clip_max)`; the gradient is 1 inside
[clip_min, clip_max] and `leak` outside (where `tf.clip_by_value`'s is 0), so that values pushed
past the range still get a small signal back (a "leaky straight-through" estimator, as used for
quantisation-aware training and hard activations).
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import tensorflow as tf

from opforge._export import STATE as _EXPORT
from opforge.ops._common import FLOAT_DTYPES, check_dtype, invalid_argument, lib, python_number, to_tensor
from opforge.ops.spec import BadInput, Case, OpSpec, Sample, elementwise_speed
from opforge.ops.spec import numpy_copy

__all__ = ["clipped_identity", "clipped_identity_grad"]
OP_NAMES = ("Opforge>ClippedIdentity", "Opforge>ClippedIdentityGrad")

_FLOAT_SET = frozenset(FLOAT_DTYPES)


def _attrs(op: str, clip_min, clip_max, leak) -> dict:
    # Only the Python conversions; the C++ core checks the values (finite, clip_min <= clip_max).
    return {"clip_min": python_number(op, "clip_min", clip_min),
            "clip_max": python_number(op, "clip_max", clip_max),
            "leak": python_number(op, "leak", leak)}


def _x(op: str, x, argument: str = "x") -> tf.Tensor:
    x = to_tensor(op, argument, x)
    check_dtype(op, argument, x, FLOAT_DTYPES)
    return x


def clipped_identity(x, clip_min: float = -1.0, clip_max: float = 1.0, leak: float = 0.01,
                     name: Optional[str] = None) -> tf.Tensor:
    """`clip(x, clip_min, clip_max)` forward, with gradient 1 inside the range and `leak` outside.

    The forward is `tf.clip_by_value(x, clip_min, clip_max)`'s: the same values, NaN passing
    through. The bounds are 32-bit float attrs (as `tf.nn.leaky_relu`'s alpha), rounded to x's
    dtype; so in float64 a bound such as 0.7 is float32's 0.7. Where x is a zero and the bound
    it meets a zero of the other sign, x is returned (TensorFlow's Minimum and Maximum return
    either zero there, depending on the element's position and the operands' shapes). The
    gradient is `gradients` where
    `clip_min <= x <= clip_max` (the bounds included, NaN counted as inside) and
    `leak * gradients` elsewhere, computed by the C++ op `Opforge>ClippedIdentityGrad`; with
    `leak=0` it is `tf.clip_by_value`'s gradient. Half, bfloat16, float32 and float64.

    Raises:
      InvalidArgumentError: x not of a floating dtype; clip_min or clip_max not finite, or
        clip_min > clip_max; leak not finite.
    """
    if not (isinstance(x, tf.Tensor) and x.dtype in _FLOAT_SET and type(clip_min) is float
            and type(clip_max) is float and type(leak) is float):
        x = _x("ClippedIdentity", x)
        attrs = _attrs("ClippedIdentity", clip_min, clip_max, leak)
        clip_min, clip_max, leak = attrs["clip_min"], attrs["clip_max"], attrs["leak"]
    if _EXPORT.standard and "clipped_identity" not in _EXPORT.keep:  # tracing for export (opforge._export)
        return tf.raw_ops.ClipByValue(t=x, clip_value_min=_attr(clip_min, x.dtype),
                                      clip_value_max=_attr(clip_max, x.dtype), name=name)
    return lib().opforge_clipped_identity(x, clip_min=clip_min, clip_max=clip_max, leak=leak, name=name)


def clipped_identity_grad(gradients, features, clip_min: float = -1.0, clip_max: float = 1.0,
                          leak: float = 0.01, name: Optional[str] = None) -> tf.Tensor:
    """The gradient op: `leak * gradients` where features lie outside [clip_min, clip_max],
    `gradients` elsewhere. gradients and features must have one shape and dtype."""
    op = "ClippedIdentityGrad"
    features = _x(op, features, "features")
    gradients = to_tensor(op, "gradients", gradients)
    if gradients.dtype != features.dtype:
        raise invalid_argument(
            op, "gradients", f"the dtype of features ({features.dtype.name})", gradients.dtype.name
        )
    return lib().opforge_clipped_identity_grad(gradients, features, **_attrs(op, clip_min, clip_max, leak),
                                               name=name)


def _op_attrs(op) -> dict:
    return {k: op.get_attr(k) for k in ("clip_min", "clip_max", "leak")}


@tf.RegisterGradient("Opforge>ClippedIdentity")
def _clipped_identity_gradient(op, grad):
    return lib().opforge_clipped_identity_grad(grad, op.inputs[0], **_op_attrs(op))


@tf.RegisterGradient("Opforge>ClippedIdentityGrad")
def _clipped_identity_grad_gradient(op, grad):
    # backprops is linear in gradients with the same mask, and piecewise constant in features.
    features = op.inputs[1]
    return lib().opforge_clipped_identity_grad(grad, features, **_op_attrs(op)), tf.zeros_like(features)


# --- specs -----------------------------------------------------------------------------------


def _attr(value: float, dtype) -> tf.Tensor:
    """An attr as the op applies it: a 32-bit float attr, then rounded to the element type."""
    return tf.cast(tf.constant(np.float32(value)), dtype)


def reference(x, clip_min=-1.0, clip_max=1.0, leak=0.01):
    """In TensorFlow ops: the clip as two tf.where (what tf.clip_by_value computes, with x kept
    on a tie of signed zeros), the gradient tf.where(outside, leak * dy, dy)."""
    lo, hi = _attr(clip_min, x.dtype), _attr(clip_max, x.dtype)

    @tf.custom_gradient
    def clipped(x):
        def grad(dy):
            return tf.where(tf.logical_or(x < lo, x > hi), dy * _attr(leak, dy.dtype), dy)

        return tf.where(x < lo, lo, tf.where(x > hi, hi, x)), grad

    return clipped(x)


ATTRS = (
    {"clip_min": -1.0, "clip_max": 1.0, "leak": 0.01},
    {"clip_min": 0.0, "clip_max": 6.0, "leak": 0.1},
    {"clip_min": -0.3, "clip_max": 0.7, "leak": -0.5},
    {"clip_min": 2.0, "clip_max": 2.0, "leak": 1.5},
)
_SHAPES = ((), (0,), (1,), (7,), (3, 5, 2), (2, 0, 4), (1000,))


def _inside(attrs, n):
    """n values spread over the open range, away from the bounds (and from 0)."""
    lo, hi = attrs["clip_min"], attrs["clip_max"]
    return tuple(v if abs(v) > 1e-3 else 0.5 * (lo + hi) + 1e-3 for v in np.linspace(lo, hi, n + 2)[1:-1])


def _tf_gradient(g, x):
    return tf.where(tf.logical_or(x < -1.0, x > 1.0), g * 0.01, g)


def _numpy_clip(t):
    v = t.numpy()
    return np.clip(v, -1.0, 1.0).astype(v.dtype, copy=False)  # bfloat16 in, bfloat16 out


SPECS = (
    OpSpec(
        name="clipped_identity",
        op=clipped_identity,
        reference=reference,
        reference_name="tf.where(x < lo, lo, tf.where(x > hi, hi, x)) (= tf.clip_by_value), tf.where (gradient)",
        dtypes=FLOAT_DTYPES,
        cases=tuple(
            Case(f"{list(s)} {a['clip_min']}..{a['clip_max']}", (Sample(s, seed=len(s), scale=3, specials=True),), a)
            for s in _SHAPES
            for a in ATTRS
        ),
        # Inside the range only: outside it, the straight-through gradient (leak) is by design
        # not the derivative (0). The leak is checked against the reference's gradient (the
        # generic inf/NaN gradient test) and in tests/test_paths.py.
        gradient_cases=tuple(
            Case(f"inside {a['clip_min']}..{a['clip_max']} leak={a['leak']}",
                 (Sample((5, 9), values=_inside(a, 45)),), a)
            for a in ATTRS if a["clip_min"] < a["clip_max"]
        ),
        gradient_tolerance=1e-7,
        determinism_case=Case("1M", (Sample(((1 << 20) + 17,), seed=42, scale=2),), ATTRS[0]),
        speed=(
            elementwise_speed("forward", lambda x, g: {
                "opforge": lambda: clipped_identity(x, -1.0, 1.0, 0.01),
                "tf": lambda: tf.clip_by_value(x, -1.0, 1.0),
                "copy": numpy_copy(int(x.shape[0]), x.dtype)}, elements_moved=2),
            elementwise_speed("gradient", lambda x, g: {
                "opforge": lambda: lib().opforge_clipped_identity_grad(g, x, clip_min=-1.0, clip_max=1.0, leak=0.01),
                "tf": lambda: _tf_gradient(g, x),
                "copy": numpy_copy(int(x.shape[0]), x.dtype)}, elements_moved=3),
            elementwise_speed("forward vs py_function", lambda x, g: {
                "opforge": lambda: clipped_identity(x, -1.0, 1.0, 0.01),
                "py_function": lambda: tf.py_function(_numpy_clip, [x], x.dtype)}, default=1 << 16),
        ),
        bad_inputs={
            "string x": BadInput("opforge.ops.clipped_identity(tf.constant(['a']))", ("x", "string")),
            "int x": BadInput("opforge.ops.clipped_identity(tf.constant([1, 2]))", ("x", "int32")),
            "min above max": BadInput("opforge.ops.clipped_identity(tf.ones([3]), clip_min=2.0, clip_max=1.0)",
                                      ("clip_max", "at least clip_min", "2")),
            "nan clip_min": BadInput("opforge.ops.clipped_identity(tf.ones([3]), clip_min=float('nan'))",
                                     ("clip_min", "finite", "nan")),
            "inf clip_max": BadInput("opforge.ops.clipped_identity(tf.ones([3]), clip_max=float('inf'))",
                                     ("clip_max", "finite", "inf")),
            "nan leak": BadInput("opforge.ops.clipped_identity(tf.ones([3]), leak=float('nan'))", ("leak", "finite")),
            "text leak": BadInput("opforge.ops.clipped_identity(tf.ones([3]), leak='small')", ("leak", "small"), error="TypeError"),
            "tensor clip_min": BadInput("opforge.ops.clipped_identity(tf.ones([3]), clip_min=tf.constant(0.0))",
                                        ("clip_min", "tensor"), error="TypeError"),
            "graph min above max": BadInput(
                "tf.function(lambda x: opforge.ops.clipped_identity(x, clip_min=1.0, clip_max=0.0))(tf.ones([3]))",
                ("clip_max", "at least clip_min")),
            "grad shape mismatch": BadInput(
                "opforge.ops.clipped_identity_grad(tf.ones([2, 3]), tf.ones([3, 2]))", ("gradients", "[2, 3]", "[3, 2]")),
            "grad dtype mismatch": BadInput(
                "opforge.ops.clipped_identity_grad(tf.ones([3], tf.float64), tf.ones([3]))",
                ("gradients", "float64", "float32")),
            "raw grad nan leak": BadInput(
                "lib().opforge_clipped_identity_grad(tf.ones([3]), tf.ones([3]), leak=float('nan'))", ("leak", "finite")),
            "raw op int dtype": BadInput("lib().opforge_clipped_identity(tf.ones([3], tf.int32))", ("T", "int32")),
        },
    ),
)

"""Swish (SiLU): `opforge.ops.swish` computes `tf.nn.silu` / `tf.nn.swish`; C++ op `Opforge>Swish`."""
from __future__ import annotations

from typing import Optional

import numpy as np
import tensorflow as tf

from opforge._export import STATE as _EXPORT
from opforge.ops._common import check_dtype, dtype_error, FLOAT_DTYPES, lib, to_tensor
from opforge.ops.spec import BadInput, Case, OpSpec, Sample, elementwise_speed
from opforge.ops.spec import numpy_copy

__all__ = ["swish", "swish_grad"]
OP_NAMES = ("Opforge>Swish", "Opforge>SwishGrad")

_FLOAT_SET = frozenset(FLOAT_DTYPES)


def _features(op: str, features) -> tf.Tensor:
    features = to_tensor(op, "features", features)
    check_dtype(op, "features", features, FLOAT_DTYPES)
    return features


def swish(features, name: Optional[str] = None) -> tf.Tensor:
    """Swish (also called SiLU): `features * sigmoid(features)`.

    The same results as `tf.nn.silu(features)` and `tf.nn.swish(features)` (beta = 1), bit for
    bit on the CPU for half, bfloat16, float32 and float64: the C++ kernel evaluates Eigen's
    logistic exactly as TensorFlow's Sigmoid kernel does, then multiplies, in one pass instead of
    two kernels. The gradient, `gradients * s * (1 + features * (1 - s))` with
    `s = sigmoid(features)`, is TensorFlow's formula in TensorFlow's order, computed by the C++
    op `Opforge>SwishGrad` (NaN at features = +-inf, as TensorFlow's). On a GPU and under XLA
    the sigmoid is CUDA's or XLA's, within a few ulps.

    Raises:
      InvalidArgumentError: features not of a floating dtype (TensorFlow's Sigmoid has no integer
        kernel either).
    """
    if not (isinstance(features, tf.Tensor) and features.dtype in _FLOAT_SET):
        features = _features("Swish", features)
    if _EXPORT.standard:  # tracing for export (opforge._export): TensorFlow's ops, x * sigmoid(x)
        return tf.multiply(features, tf.math.sigmoid(features), name=name)
    return lib().opforge_swish(features, name=name)


def swish_grad(gradients, features, name: Optional[str] = None) -> tf.Tensor:
    """The gradient op: `gradients * s * (1 + features * (1 - s))`, `s = sigmoid(features)`.

    gradients and features must have one shape and dtype.
    """
    op = "SwishGrad"
    features = _features(op, features)
    gradients = to_tensor(op, "gradients", gradients)
    if gradients.dtype != features.dtype:
        raise dtype_error(
            op, "gradients", f"the dtype of features ({features.dtype.name})", gradients.dtype.name
        )
    return lib().opforge_swish_grad(gradients, features, name=name)


@tf.RegisterGradient("Opforge>Swish")
def _swish_gradient(op, grad):
    return lib().opforge_swish_grad(grad, op.inputs[0])


@tf.RegisterGradient("Opforge>SwishGrad")
def _swish_grad_gradient(op, grad):
    # backprops = g * swish'(x) is linear in g; d/dx = g * swish''(x), with
    # swish''(x) = s (1 - s) (2 + x (1 - 2 s)).
    gradients, features = op.inputs[0], op.inputs[1]
    s = tf.sigmoid(features)
    second = s * (1.0 - s) * (2.0 + features * (1.0 - 2.0 * s))
    return lib().opforge_swish_grad(grad, features), grad * gradients * second


# --- specs -----------------------------------------------------------------------------------

_SHAPES = ((), (0,), (1,), (7,), (8,), (9,), (3, 5, 2), (2, 0, 4), (1000,), (4099,))


def _tf_swish_gradient(g, x):
    """TensorFlow's gradient of tf.nn.silu, as its kernels compute it (the rival of SwishGrad)."""
    s = tf.sigmoid(x)
    return g * (s * (1.0 + x * (1.0 - s)))


def _numpy_swish(t):
    v = t.numpy()
    return (v / (1.0 + np.exp(-v))).astype(v.dtype, copy=False)  # bfloat16 in, bfloat16 out


SPECS = (
    OpSpec(
        name="swish",
        replaces="tf.nn.silu",
        op=swish,
        reference=tf.nn.silu,
        reference_name="tf.nn.silu",
        dtypes=FLOAT_DTYPES,
        cases=tuple(
            Case(f"{list(s)}", (Sample(s, seed=len(s) + n, scale=4, specials=True),))
            for n, s in enumerate(_SHAPES)
        ) + (Case("wide range [4099]", (Sample((4099,), seed=3, scale=40),)),),
        gradient_cases=(
            Case("[4, 9]", (Sample((4, 9), seed=11, scale=3),)),
            Case("[67] wide", (Sample((67,), seed=12, scale=12),)),
        ),
        gradient_tolerance=1e-7,
        determinism_case=Case("1M", (Sample(((1 << 20) + 17,), seed=42, scale=4),)),
        speed=(
            elementwise_speed("forward", lambda x, g: {
                "opforge": lambda: swish(x), "tf": lambda: tf.nn.silu(x),
                "copy": numpy_copy(int(x.shape[0]), x.dtype)}, elements_moved=2),
            elementwise_speed("gradient", lambda x, g: {
                "opforge": lambda: lib().opforge_swish_grad(g, x),
                "tf": lambda: _tf_swish_gradient(g, x),
                "copy": numpy_copy(int(x.shape[0]), x.dtype)}, elements_moved=3),
            elementwise_speed("forward vs py_function", lambda x, g: {
                "opforge": lambda: swish(x),
                "py_function": lambda: tf.py_function(_numpy_swish, [x], x.dtype)}, default=1 << 16),
        ),
        bad_inputs={
            "string features": BadInput("opforge.ops.swish(tf.constant(['a', 'b']))", ("features", "string")),
            "int features": BadInput("opforge.ops.swish(tf.constant([1, 2]))", ("features", "int32")),
            "complex features": BadInput("opforge.ops.swish(tf.constant([1+2j]))", ("features", "complex128")),
            "none features": BadInput("opforge.ops.swish(None)", ("features", "None"), error="ValueError"),
            "grad shape mismatch": BadInput(
                "opforge.ops.swish_grad(tf.ones([2, 3]), tf.ones([3, 2]))", ("gradients", "[2, 3]", "[3, 2]")),
            "grad dtype mismatch": BadInput(
                "opforge.ops.swish_grad(tf.ones([3], tf.float64), tf.ones([3]))", ("gradients", "float64", "float32")),
            "raw grad shape mismatch": BadInput(
                "lib().opforge_swish_grad(tf.ones([4]), tf.ones([5]))", ("gradients", "[4]", "[5]")),
            "raw op int dtype": BadInput("lib().opforge_swish(tf.ones([3], tf.int32))", ("T", "int32")),
        },
    ),
)

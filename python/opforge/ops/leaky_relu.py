"""LeakyReLU: `opforge.ops.leaky_relu` mirrors `tf.nn.leaky_relu`; C++ op `Opforge>LeakyRelu`."""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np
import tensorflow as tf

from opforge._export import STATE as _EXPORT
from opforge.ops._common import check_dtype, dtype_error, FLOAT_DTYPES, lib, python_number, to_tensor
from opforge.ops.spec import BadInput, Case, OpSpec, Sample, elementwise_speed
from opforge.ops.spec import numpy_copy

__all__ = ["leaky_relu", "leaky_relu_grad", "leaky_relu_with_mask"]
OP_NAMES = ("Opforge>LeakyRelu", "Opforge>LeakyReluWithMask", "Opforge>LeakyReluGrad")

_FLOAT_SET = frozenset(FLOAT_DTYPES)


def _alpha(op: str, alpha) -> float:
    # Only the Python conversion; the C++ core checks the value (finite) for every entry point.
    return python_number(op, "alpha", alpha)


def _features(op: str, features) -> tf.Tensor:
    features = to_tensor(op, "features", features)
    if features.dtype.is_integer:  # as tf.nn.leaky_relu does
        features = tf.cast(features, tf.float32)
    check_dtype(op, "features", features, FLOAT_DTYPES)
    return features


def leaky_relu(features, alpha: float = 0.2, name: Optional[str] = None) -> tf.Tensor:
    """Leaky ReLU: `features` where it is > 0, `alpha * features` elsewhere.

    Same arguments, dtypes and results as `tf.nn.leaky_relu` (bit for bit), for half, bfloat16,
    float32 and float64; integer inputs are cast to float32 as TensorFlow does. Any finite alpha
    works, including alpha > 1 and alpha < 0. The gradient is `gradients` where features > 0 and
    `alpha * gradients` elsewhere (also at 0), computed by the C++ op `Opforge>LeakyReluGrad`.

    Raises:
      InvalidArgumentError: features of a non-numeric dtype, or alpha not a finite number.
    """
    # Fast path for the common call (a float tensor and a float alpha): the wrapper's overhead is
    # part of every call, so it converts only what needs converting.
    if not (isinstance(features, tf.Tensor) and features.dtype in _FLOAT_SET and type(alpha) is float):
        features, alpha = _features("LeakyRelu", features), _alpha("LeakyRelu", alpha)
    if _EXPORT.standard:  # tracing for export (opforge._export): TensorFlow's op, the same values
        return tf.nn.leaky_relu(features, alpha=alpha, name=name)
    return lib().opforge_leaky_relu(features, alpha=alpha, name=name)


def leaky_relu_with_mask(
    features, alpha: float = 0.2, name: Optional[str] = None
) -> Tuple[tf.Tensor, tf.Tensor]:
    """Leaky ReLU that also returns its slope mask: `(activations, mask)`.

    `mask` is 1 where features > 0 and `alpha` elsewhere, so `activations == mask * features`
    and the gradient with respect to features is `mask * gradients`. One kernel computes both
    outputs (the same kernel as :func:`leaky_relu`).
    """
    op = "LeakyReluWithMask"
    if _EXPORT.standard:
        features, alpha = _features(op, features), _alpha(op, alpha)
        return tuple(_mask_reference(features, alpha))
    outputs = lib().opforge_leaky_relu_with_mask(
        _features(op, features), alpha=_alpha(op, alpha), name=name
    )
    return outputs[0], outputs[1]


def leaky_relu_grad(gradients, features, alpha: float = 0.2, name: Optional[str] = None) -> tf.Tensor:
    """The gradient op: `gradients` where features > 0, `alpha * gradients` elsewhere.

    Mirrors `tf.raw_ops.LeakyReluGrad`. gradients and features must have one shape and dtype.
    """
    op = "LeakyReluGrad"
    features = _features(op, features)
    gradients = to_tensor(op, "gradients", gradients)
    if gradients.dtype != features.dtype:
        raise dtype_error(
            op, "gradients", f"the dtype of features ({features.dtype.name})", gradients.dtype.name
        )
    return lib().opforge_leaky_relu_grad(gradients, features, alpha=_alpha(op, alpha), name=name)


@tf.RegisterGradient("Opforge>LeakyRelu")
def _leaky_relu_gradient(op, grad):
    return lib().opforge_leaky_relu_grad(grad, op.inputs[0], alpha=op.get_attr("alpha"))


@tf.RegisterGradient("Opforge>LeakyReluGrad")
def _leaky_relu_grad_gradient(op, grad):
    # backprops is linear in gradients with the same slope mask, and piecewise constant in x.
    features = op.inputs[1]
    return (
        lib().opforge_leaky_relu_grad(grad, features, alpha=op.get_attr("alpha")),
        tf.zeros_like(features),
    )


@tf.RegisterGradient("Opforge>LeakyReluWithMask")
def _leaky_relu_with_mask_gradient(op, grad_activations, grad_mask):
    # d activations / d features = mask; the mask is piecewise constant (no gradient).
    from opforge.ops.element_mul import element_mul

    if grad_activations is None:
        return tf.zeros_like(op.inputs[0])
    return element_mul(grad_activations, op.outputs[1])


# --- specs -----------------------------------------------------------------------------------

ALPHAS = (0.0, 0.2, 1.5, -0.3)
_SHAPES = ((), (0,), (1,), (7,), (3, 5, 2), (2, 0, 4), (1000,))


def _mask_reference(features, alpha):
    mask = tf.where(features > 0, tf.ones_like(features), tf.cast(alpha, features.dtype))
    return tf.nn.leaky_relu(features, alpha), mask


def _numpy_leaky_relu(t):
    v = t.numpy()
    return np.where(v > 0, v, v * np.float32(0.2)).astype(v.dtype, copy=False)  # bfloat16 in, bfloat16 out


SPECS = (
    OpSpec(
        name="leaky_relu",
        replaces="tf.nn.leaky_relu",
        op=leaky_relu,
        reference=tf.nn.leaky_relu,
        reference_name="tf.nn.leaky_relu",
        dtypes=FLOAT_DTYPES,
        cases=tuple(
            Case(f"{list(s)} alpha={a}", (Sample(s, seed=len(s), scale=4, specials=True),), {"alpha": a})
            for s in _SHAPES
            for a in ALPHAS
        ),
        gradient_cases=tuple(
            Case(f"alpha={a}", (Sample((4, 9), seed=11, scale=3, away_from_zero=0.1),), {"alpha": a})
            for a in ALPHAS
        ),
        gradient_tolerance=1e-7,
        determinism_case=Case("1M", (Sample(((1 << 20) + 17,), seed=42),), {"alpha": 0.3}),
        speed=(
            elementwise_speed("forward", lambda x, g: {
                "opforge": lambda: leaky_relu(x, 0.2), "tf": lambda: tf.nn.leaky_relu(x, 0.2),
                "copy": numpy_copy(int(x.shape[0]), x.dtype)}, elements_moved=2),
            elementwise_speed("gradient", lambda x, g: {
                "opforge": lambda: lib().opforge_leaky_relu_grad(g, x, alpha=0.2),
                "tf": lambda: tf.raw_ops.LeakyReluGrad(gradients=g, features=x, alpha=0.2),
                "copy": numpy_copy(int(x.shape[0]), x.dtype)}, elements_moved=3),
            elementwise_speed("forward vs py_function", lambda x, g: {
                "opforge": lambda: leaky_relu(x, 0.2),
                "py_function": lambda: tf.py_function(_numpy_leaky_relu, [x], x.dtype)}, default=1 << 10),
            elementwise_speed("forward vs py_function", lambda x, g: {
                "opforge": lambda: leaky_relu(x, 0.2),
                "py_function": lambda: tf.py_function(_numpy_leaky_relu, [x], x.dtype)}, default=1 << 20,
                only_default=True),
        ),
        bad_inputs={
            "string features": BadInput("opforge.ops.leaky_relu(tf.constant(['a', 'b']))", ("features", "string")),
            "complex features": BadInput("opforge.ops.leaky_relu(tf.constant([1+2j]))", ("features", "complex128")),
            "bool features": BadInput("opforge.ops.leaky_relu(tf.constant([True]))", ("features", "bool")),
            "nan alpha": BadInput("opforge.ops.leaky_relu(tf.ones([3]), alpha=float('nan'))", ("alpha", "finite", "nan")),
            "inf alpha": BadInput("opforge.ops.leaky_relu(tf.ones([3]), alpha=float('inf'))", ("alpha", "finite", "inf")),
            "numpy nan alpha": BadInput("opforge.ops.leaky_relu(tf.ones([3]), alpha=np.float32('nan'))", ("alpha", "finite")),
            "text alpha": BadInput("opforge.ops.leaky_relu(tf.ones([3]), alpha='big')", ("alpha", "big"), error="TypeError"),
            "tensor alpha": BadInput("opforge.ops.leaky_relu(tf.ones([3]), alpha=tf.constant(0.2))", ("alpha", "tensor"), error="TypeError"),
            "graph nan alpha": BadInput(
                "tf.function(lambda x: opforge.ops.leaky_relu(x, alpha=float('nan')))(tf.ones([3]))",
                ("alpha", "finite")),
            "grad shape mismatch": BadInput(
                "opforge.ops.leaky_relu_grad(tf.ones([2, 3]), tf.ones([3, 2]))", ("gradients", "[2, 3]", "[3, 2]")),
            "grad dtype mismatch": BadInput(
                "opforge.ops.leaky_relu_grad(tf.ones([3], tf.float64), tf.ones([3]))", ("gradients", "float64", "float32")),
            "grad gradients None": BadInput(
                "opforge.ops.leaky_relu_grad(None, tf.ones([3]))", ("LeakyReluGrad", "gradients", "None"),
                error="ValueError"),
            "grad features None": BadInput(
                "opforge.ops.leaky_relu_grad(tf.ones([3]), None)", ("LeakyReluGrad", "features", "None"),
                error="ValueError"),
            "grad nan alpha": BadInput(
                "opforge.ops.leaky_relu_grad(tf.ones([3]), tf.ones([3]), alpha=float('nan'))", ("alpha", "finite")),
            "raw op nan alpha": BadInput("lib().opforge_leaky_relu(tf.ones([3]), alpha=float('nan'))", ("alpha", "finite")),
            "raw grad shape mismatch": BadInput(
                "lib().opforge_leaky_relu_grad(tf.ones([4]), tf.ones([5]), alpha=0.2)", ("gradients", "[4]", "[5]")),
            "raw op int dtype": BadInput("lib().opforge_leaky_relu(tf.ones([3], tf.int32))", ("T", "int32")),
        },
    ),
    OpSpec(
        name="leaky_relu_with_mask",
        op=leaky_relu_with_mask,
        reference=_mask_reference,
        reference_name="tf.nn.leaky_relu, tf.where",
        dtypes=FLOAT_DTYPES,
        cases=tuple(
            Case(f"alpha={a}", (Sample((6, 11), seed=7, scale=4, specials=True),), {"alpha": a}) for a in ALPHAS
        ),
        gradient_cases=tuple(
            Case(f"alpha={a}", (Sample((4, 9), seed=11, scale=3, away_from_zero=0.1),), {"alpha": a})
            for a in (0.2, -0.3)
        ),
        gradient_tolerance=1e-7,
        determinism_case=Case("1M", (Sample(((1 << 20) + 17,), seed=42),), {"alpha": -0.1}),
        speed=(
            elementwise_speed("forward", lambda x, g: {
                "opforge": lambda: leaky_relu_with_mask(x, 0.2),
                "tf": lambda: (tf.nn.leaky_relu(x, 0.2),
                       tf.where(x > 0, tf.constant(1.0, x.dtype), tf.constant(0.2, x.dtype)))},
                elements_moved=3),
        ),
        bad_inputs={
            "nan alpha": BadInput("opforge.ops.leaky_relu_with_mask(tf.ones([3]), alpha=float('nan'))", ("alpha", "finite")),
            "int dtype raw": BadInput("lib().opforge_leaky_relu_with_mask(tf.ones([3], tf.int64))", ("T", "int64")),
        },
    ),
)

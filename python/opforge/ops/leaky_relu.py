"""LeakyReLU: `opforge.ops.leaky_relu` mirrors `tf.nn.leaky_relu`; C++ op `Opforge>LeakyRelu`."""
from __future__ import annotations

import math
from typing import Optional, Tuple

import numpy as np
import tensorflow as tf

from opforge.ops._common import FLOAT_DTYPES, check_dtype, invalid_argument, lib


_FLOAT_SET = frozenset(FLOAT_DTYPES)


def _alpha(op: str, alpha) -> float:
    if isinstance(alpha, np.ndarray):
        alpha = alpha.item()
    if isinstance(alpha, tf.Tensor):
        raise invalid_argument(f"{op}: alpha must be a Python number, got a tensor")
    try:
        value = float(alpha)
    except (TypeError, ValueError):
        raise invalid_argument(f"{op}: alpha must be a number, got {alpha!r}") from None
    if not math.isfinite(value):
        raise invalid_argument(f"{op}: alpha must be a finite number, got {value}")
    return value


def _features(op: str, features) -> tf.Tensor:
    features = tf.convert_to_tensor(features, name="features")
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
    # part of every call, so it checks only what the C++ op cannot.
    if not (
        isinstance(features, tf.Tensor)
        and features.dtype in _FLOAT_SET
        and type(alpha) is float
        and math.isfinite(alpha)
    ):
        op = "opforge.ops.leaky_relu"
        features, alpha = _features(op, features), _alpha(op, alpha)
    return lib().opforge_leaky_relu(features, alpha=alpha, name=name)


def leaky_relu_with_mask(
    features, alpha: float = 0.2, name: Optional[str] = None
) -> Tuple[tf.Tensor, tf.Tensor]:
    """Leaky ReLU that also returns its slope mask: `(activations, mask)`.

    `mask` is 1 where features > 0 and `alpha` elsewhere, so `activations == mask * features`
    and the gradient with respect to features is `mask * gradients`. One kernel computes both
    outputs (the same kernel as :func:`leaky_relu`).
    """
    op = "opforge.ops.leaky_relu_with_mask"
    outputs = lib().opforge_leaky_relu_with_mask(
        _features(op, features), alpha=_alpha(op, alpha), name=name
    )
    return outputs[0], outputs[1]


def leaky_relu_grad(gradients, features, alpha: float = 0.2, name: Optional[str] = None) -> tf.Tensor:
    """The gradient op: `gradients` where features > 0, `alpha * gradients` elsewhere.

    Mirrors `tf.raw_ops.LeakyReluGrad`. gradients and features must have one shape and dtype.
    """
    op = "opforge.ops.leaky_relu_grad"
    features = _features(op, features)
    gradients = tf.convert_to_tensor(gradients, name="gradients")
    if gradients.dtype != features.dtype:
        raise invalid_argument(
            f"{op}: gradients must have the dtype of features ({features.dtype.name}), "
            f"got {gradients.dtype.name}"
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

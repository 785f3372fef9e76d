"""opforge.jax's yolo_decode: the handlers of `Opforge>YoloDecode` and `Opforge>YoloDecodeGrad`
(opforge.ops.yolo_decode's kernels).

Also the helpers the other YOLO and NMS modules share: TensorFlow's conversion of Python values
(`tf_like`), its casts of host values (`cast_like_tf`).
"""
from __future__ import annotations

import math
import numbers
from typing import Any, Mapping, Optional, Sequence, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from opforge.jax import _ffi
from opforge.jax._batching import Fold, Rule, apply
from opforge.jax._checks import FLOAT_DTYPES, check_dtype, integer, message, short_repr
from opforge.ops.yolo_decode import BOX_FORMATS, YOLO_MAX_LOG_SCALE, YoloDecodeResult

__all__ = ["yolo_decode", "YoloDecodeResult", "YOLO_MAX_LOG_SCALE", "BOX_FORMATS"]

_OP = "YoloDecode"
_FLOAT32_MAX = float(np.finfo(np.float32).max)


# --- shared helpers ---------------------------------------------------------------------------------


def is_array(value) -> bool:
    return isinstance(value, (jax.Array, jax.core.Tracer))


def tf_like(op: str, argument: str, value, dtype_hint=None):
    """`value` as tf.convert_to_tensor makes it, as a NumPy array (a JAX array or tracer is
    returned as it is): arrays keep their dtype; Python numbers and lists are float32 and int32
    (int64 beyond int32), or, for a float `dtype_hint`, numbers in that dtype directly."""
    if is_array(value):
        return value
    if isinstance(value, (np.ndarray, np.generic)) or hasattr(value, "dtype"):  # typed (a TensorFlow tensor too)
        return np.asarray(value)
    bad = message(op, argument, "an array or a value convertible to one", short_repr(value))
    if value is None:
        raise TypeError(bad)
    try:
        a = np.asarray(value)
    except (TypeError, ValueError, OverflowError) as exc:
        raise type(exc)(f"{bad} ({str(exc).splitlines()[0][:120]})") from None
    if a.dtype.kind not in "biufc":
        raise TypeError(bad)
    if dtype_hint is not None and a.dtype.kind in "iuf" and jnp.issubdtype(dtype_hint, jnp.floating):
        return cast_like_tf(a, dtype_hint)
    if a.dtype == np.float64:
        return a.astype(np.float32)
    if a.dtype.kind == "i" and (a.size == 0 or (a.min() >= -2**31 and a.max() < 2**31)):
        return a.astype(np.int32)
    return a


def cast_like_tf(a: np.ndarray, dtype) -> np.ndarray:
    """tf.cast of a host array on the CPU: Eigen casts to half and bfloat16 through float (a
    float64 or an integer is rounded to float first, then to 16 bits)."""
    dtype = np.dtype(dtype)
    a = np.asarray(a)
    if a.dtype == dtype:
        return a
    with np.errstate(over="ignore", invalid="ignore"):
        if dtype.itemsize == 2 and jnp.issubdtype(dtype, jnp.floating):
            a = a.astype(np.float32)
        return a.astype(dtype)


def concrete_error(op: str, argument: str) -> ValueError:
    return ValueError(f"{op}: {argument} must be a concrete array (its values decide the results' shapes or are "
                      "checked before the call: under jax.jit, close over it or mark it static), got a tracer")


def host_value(op: str, argument: str, value) -> np.ndarray:
    """The value of an input the op reads on the host; a tracer is an error naming it. Under
    jax.grad (not jit) the primal counts: these inputs get no gradient."""
    if isinstance(value, jax.core.Tracer):  # a JVP tracer under eager jax.grad: its primal
        value = jax.lax.stop_gradient(value)
    if not _ffi.is_concrete(value):
        raise concrete_error(op, argument)
    return np.asarray(value)


# --- yolo_decode -----------------------------------------------------------------------------------


def max_log_scale_attr(op: str, max_log_scale) -> float:
    """The op's float attr for `max_log_scale`: None is +inf (no clamp); a number is checked for
    its Python type and the float32 range here, its value by the core (NaN and -inf are errors)."""
    if max_log_scale is None:
        return math.inf
    if isinstance(max_log_scale, np.ndarray) and max_log_scale.ndim == 0:
        max_log_scale = max_log_scale.item()
    if isinstance(max_log_scale, (bool, np.bool_)) or not isinstance(max_log_scale, numbers.Real):
        raise TypeError(message(op, "max_log_scale", "None (no clamp) or a number, e.g. YOLO_MAX_LOG_SCALE",
                                short_repr(max_log_scale)))
    try:
        value = float(max_log_scale)
    except OverflowError:
        value = math.inf if max_log_scale > 0 else -math.inf  # an int beyond any float: named below
    if (math.isinf(value) and not isinstance(max_log_scale, (float, np.floating))) or (
            math.isfinite(value) and abs(value) > _FLOAT32_MAX):
        raise ValueError(message(op, "max_log_scale", "a finite value within the float32 range or +inf (no clamp)",
                                 short_repr(max_log_scale)))
    return value


def decode_attrs(op: str, num_classes, input_size, box_format, normalized, scale_x_y, max_log_scale=None) -> dict:
    """The attrs of the C++ op from the wrapper's arguments, checked for Python types (TypeError;
    the core checks the values, a ValueError at trace time)."""
    num_classes = integer(op, "num_classes", num_classes)
    if isinstance(input_size, numbers.Integral) and not isinstance(input_size, (bool, np.bool_)):
        input_size = (input_size, input_size)
    expected = "[height, width] as two ints"
    try:
        size = [integer(op, "input_size", v) for v in input_size]
    except TypeError:
        raise TypeError(message(op, "input_size", expected, repr(input_size))) from None
    except ValueError:
        raise ValueError(message(op, "input_size", expected, repr(input_size))) from None
    if not isinstance(box_format, str):
        raise TypeError(message(op, "box_format", "one of " + ", ".join(repr(f) for f in BOX_FORMATS),
                                repr(box_format)))
    if not isinstance(normalized, bool):
        raise TypeError(message(op, "normalized", "a Python bool", repr(normalized)))
    if isinstance(scale_x_y, (bool, np.bool_)) or not isinstance(scale_x_y, numbers.Real):
        raise TypeError(message(op, "scale_x_y", "a number >= 1", repr(scale_x_y)))
    try:
        scale = float(scale_x_y)
    except OverflowError:
        raise OverflowError(message(op, "scale_x_y", "a finite value >= 1", short_repr(scale_x_y))) from None
    if abs(scale) > 3.4e38:
        raise ValueError(message(op, "scale_x_y", "a finite value >= 1", repr(scale_x_y)))
    return dict(num_classes=num_classes, input_size=size, box_format=box_format, normalized=normalized,
                scale_x_y=scale, max_log_scale=max_log_scale_attr(op, max_log_scale))


def _fold(data) -> Rule:
    # One batch axis, the first, on `data`; every output (and grad_features) per image.
    return Fold(tuple(data))


_FORWARD_RULE = _fold((0,))
_GRAD_RULE = _fold((0, 1, 2, 3))


def _forward(features, anchors: np.ndarray, attrs):
    return apply("Opforge>YoloDecode", (features, anchors), attrs, _FORWARD_RULE, concrete={1: "anchors"})


def _backward(grads, features, anchors: np.ndarray, attrs):
    grad_boxes, grad_scores, grad_class_scores = grads
    return apply("Opforge>YoloDecodeGrad", (grad_boxes, grad_scores, grad_class_scores, features, anchors),
                        attrs, _GRAD_RULE, concrete={4: "anchors"})[0]


def _decode(features, anchors: np.ndarray, attrs: dict):
    """The op on `features`, its gradient YoloDecodeGrad's as `_yolo_decode_gradient` composes it
    in TensorFlow; `anchors` (host values in the features' dtype) closed over: no gradient."""

    @jax.custom_vjp
    def decode(x):
        return _forward(x, anchors, attrs)

    def fwd(x):
        return _forward(x, anchors, attrs), x

    def bwd(x, g):
        grad_boxes, grad_scores, _, grad_class_scores = g  # class_indices: integer, no gradient
        # TensorFlow passes zeros for an output the loss does not use (its tape and graph
        # gradients both), as JAX's custom_vjp does: the same tensors for the kernel.
        return (_backward((grad_boxes, grad_scores, grad_class_scores), x, anchors, attrs),)

    decode.defvjp(fwd, bwd)
    return decode(features)


def yolo_decode(
    features,
    anchors,
    num_classes: int,
    input_size: Sequence[int],
    box_format: str = "xyxy",
    normalized: bool = False,
    scale_x_y: float = 1.0,
    max_log_scale: Optional[float] = None,
) -> YoloDecodeResult:
    """opforge.ops.yolo_decode in JAX: one YOLO-v3 head output [B, H, W, A*(5+C)] (or
    [B, H, W, A, 5+C]) to boxes [B, N, 4], scores [B, N], class_indices [B, N] (int32) and
    class_scores [B, N, C], N = H * W * A, TensorFlow's bits; see opforge.ops.yolo_decode.

    `anchors` [A, 2] are read while JAX traces (their values are checked before the call): a
    NumPy array, a list or a concrete JAX array (under jax.jit: closed over, not an argument);
    they are cast to the dtype of features, as in TensorFlow, and get no gradient. Gradients flow
    to features from boxes, scores and class_scores (YoloDecodeGrad). Under jax.vmap the mapped
    axis is merged into the batch axis (one call).
    """
    attrs = decode_attrs(_OP, num_classes, input_size, box_format, normalized, scale_x_y, max_log_scale)
    features = tf_like(_OP, "features", features)
    features = features if is_array(features) else jnp.asarray(features)
    check_dtype(_OP, "features", features, FLOAT_DTYPES)
    anchors = tf_like(_OP, "anchors", anchors)
    if not (jnp.issubdtype(anchors.dtype, jnp.floating) or jnp.issubdtype(anchors.dtype, jnp.integer)):
        raise TypeError(message(_OP, "anchors", "a float or integer array", np.dtype(anchors.dtype).name))
    anchors = cast_like_tf(host_value(_OP, "anchors", anchors), features.dtype)
    return YoloDecodeResult(*_decode(features, anchors, attrs))

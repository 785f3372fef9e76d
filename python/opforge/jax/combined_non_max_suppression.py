"""opforge.jax's combined_non_max_suppression: the handler of `Opforge>CombinedNonMaxSuppression`
(opforge.ops.combined_non_max_suppression's kernel; CPU)."""
from __future__ import annotations

import numbers

import jax
import jax.numpy as jnp
import numpy as np

from opforge.jax import _ffi
from opforge.jax._batching import Fold, apply
from opforge.jax._checks import check_dtype, message, number, short_repr
from opforge.jax.yolo_decode import cast_like_tf, concrete_error, is_array, tf_like
from opforge.ops.combined_non_max_suppression import CombinedNonMaxSuppressionResult

__all__ = ["combined_non_max_suppression", "CombinedNonMaxSuppressionResult"]

NMS_DTYPES = (jnp.float16, jnp.bfloat16, np.float32)
_OP = "CombinedNonMaxSuppression"
# The NMS of each image is its own: the mapped axis is merged into the batch of boxes and scores.
_RULE = Fold((0, 1))
SCALARS = ("max_output_size_per_class", "max_total_size", "iou_threshold", "score_threshold", "soft_nms_sigma")


def _int32_error(op: str, name: str, given) -> ValueError:
    """A size that is no int32 where TensorFlow's function wants one: ValueError, as TensorFlow
    raises it eagerly."""
    return ValueError(message(op, name, "an int32 (TensorFlow's op takes int32 sizes)", given))


def scalar(name: str, value, integer: bool, op: str = _OP, converted_first: bool = False,
           exact_int32: bool = True) -> np.ndarray:
    """A scalar input of the op (a size: int32, or a threshold: float32) as the host value the op
    reads at trace time, with the error classes opforge.ops' `_scalar` raises eagerly for the same
    value: None a ValueError; another type, or a Python size that is no int32 (3.5, 2**31), a
    TypeError (`converted_first`: a ValueError, TensorFlow converts max_total_size first); an
    array size that is not int32 a ValueError (`exact_int32=False`: any integer array whose
    values fit int32). An array must be concrete (not a tracer under jax.jit)."""
    dtype = np.int32 if integer else np.float32
    if isinstance(value, np.ndarray) or is_array(value) or hasattr(value, "dtype"):  # typed: a tensor too
        kind = np.dtype(getattr(value.dtype, "as_numpy_dtype", value.dtype))  # a tf.DType too
        if integer and kind != np.int32 and (exact_int32 or not jnp.issubdtype(kind, jnp.integer)):
            raise _int32_error(op, name, f"a {kind.name} array")
        if not _ffi.is_concrete(value):
            raise concrete_error(op, name)
        host = np.asarray(value)
        if integer and kind != np.int32:
            cast = host.astype(np.int32)
            if not np.array_equal(cast.astype(kind), host):
                raise ValueError(f"{op}: {name} must be an int32, got a value beyond int32")
            return cast
        return cast_like_tf(host, dtype)
    expected = "an int32" if integer else "a number"
    if value is None:
        raise ValueError(message(op, name, expected, "None"))
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(message(op, name, expected, short_repr(value)))
    if integer:
        if not isinstance(value, numbers.Integral) or abs(int(value)) > 2**31 - 1:
            if converted_first:
                raise _int32_error(op, name, short_repr(value))
            raise TypeError(message(op, name, expected, short_repr(value)))
        return np.array(int(value), np.int32)
    # A float beyond the float32 range is +-inf there (a threshold of 1e39 keeps nothing).
    with np.errstate(over="ignore"):
        return np.array(number(op, name, value), np.float64).astype(np.float32)


def boolean(op: str, name: str, value) -> bool:
    if not isinstance(value, bool):
        raise TypeError(message(op, name, "a Python bool", repr(value)))
    return value


def no_gradient(x):
    """TensorFlow's `tf.no_gradient`: the op's results are constants for differentiation (zero
    gradients to its inputs), and JAX never differentiates the handler."""
    return jax.lax.stop_gradient(x) if is_array(x) else x


def combined_non_max_suppression(
    boxes,
    scores,
    max_output_size_per_class,
    max_total_size,
    iou_threshold=0.5,
    score_threshold=float("-inf"),
    pad_per_class: bool = False,
    clip_boxes: bool = True,
    soft_nms_sigma=0.0,
) -> CombinedNonMaxSuppressionResult:
    """opforge.ops.combined_non_max_suppression in JAX: greedy per-class (or Gaussian soft-) NMS
    over a batch, TensorFlow's bits; see opforge.ops.combined_non_max_suppression.

    The sizes and thresholds are read while JAX traces (they fix the results' shapes or are
    checked before the call): Python numbers, NumPy arrays or concrete JAX arrays (under
    jax.jit: closed over or static, not arguments). No gradient (zeros, as tf.no_gradient).
    Under jax.vmap the mapped axis is merged into the batch (one call).
    """
    boxes = tf_like(_OP, "boxes", boxes)
    boxes = boxes if is_array(boxes) else jnp.asarray(boxes)
    check_dtype(_OP, "boxes", boxes, NMS_DTYPES)
    scores = tf_like(_OP, "scores", scores)
    scores = scores if is_array(scores) else jnp.asarray(scores)
    if scores.dtype != boxes.dtype:
        raise TypeError(message(_OP, "scores", f"of the dtype of boxes, {np.dtype(boxes.dtype).name}",
                                np.dtype(scores.dtype).name))
    attrs = dict(pad_per_class=boolean(_OP, "pad_per_class", pad_per_class),
                 clip_boxes=boolean(_OP, "clip_boxes", clip_boxes))
    values = (scalar("max_output_size_per_class", max_output_size_per_class, True),
              scalar("max_total_size", max_total_size, True, converted_first=True),
              scalar("iou_threshold", iou_threshold, False),
              scalar("score_threshold", score_threshold, False),
              scalar("soft_nms_sigma", soft_nms_sigma, False))
    out = apply("Opforge>CombinedNonMaxSuppression", (no_gradient(boxes), no_gradient(scores)) + values,
                       attrs, _RULE, concrete={2 + i: name for i, name in enumerate(SCALARS)})
    return CombinedNonMaxSuppressionResult(*out)

"""opforge.jax's yolo_postprocess: the handler of `Opforge>YoloPostprocess` (opforge.ops.yolo_postprocess's
kernel; CPU)."""
from __future__ import annotations

import math
import numbers
from typing import Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from opforge.jax._batching import Fold, apply
from opforge.jax._checks import check_dtype, message, short_repr
from opforge.jax.combined_non_max_suppression import SCALARS, boolean, no_gradient, scalar
from opforge.jax.yolo_decode import cast_like_tf, decode_attrs, is_array, tf_like
from opforge.ops.combined_non_max_suppression import CombinedNonMaxSuppressionResult

__all__ = ["yolo_postprocess"]

POSTPROCESS_DTYPES = (jnp.float16, jnp.bfloat16, np.float32)
_OP = "YoloPostprocess"
_ANCHORS = "[K, 2] (width, height) in input pixels"


def _anchor_tables(anchors, anchor_masks, scales: int):
    """anchors [K, 2] and one mask per scale -> the [K, 2] table (float64) and a list of [A, 2]
    arrays; errors name the argument. The anchors are host values (a tracer is an error)."""
    if isinstance(anchors, jax.core.Tracer):
        anchors = jax.lax.stop_gradient(anchors)  # eager jax.grad: the primal (no gradient)
    try:
        table = np.asarray(anchors, dtype=np.float64)
    except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
        raise ValueError(message(_OP, "anchors", f"{_ANCHORS}, known while JAX traces (a list, a NumPy array "
                                 "or a concrete JAX array: under jax.jit, close over it)", "a tracer")) from None
    except (TypeError, ValueError, OverflowError):
        raise TypeError(message(_OP, "anchors", _ANCHORS, short_repr(anchors))) from None
    if table.ndim != 2 or table.shape[1] != 2 or table.shape[0] < 1:
        raise ValueError(message(_OP, "anchors", _ANCHORS, str(list(table.shape))))
    expected = f"one non-empty list of indices into the {table.shape[0]} anchors per head map"
    try:
        masks = [[int(i) for i in m] for m in anchor_masks]
        integral = all(isinstance(i, numbers.Integral) and not isinstance(i, (bool, np.bool_))
                       for m in anchor_masks for i in m)
    except (TypeError, ValueError):
        masks, integral = [], False
    if not integral:
        raise TypeError(message(_OP, "anchor_masks", expected, repr(anchor_masks)))
    if any(not m or min(m) < 0 or max(m) >= table.shape[0] for m in masks):
        raise ValueError(message(_OP, "anchor_masks", expected, repr(anchor_masks)))
    if len(masks) != scales:
        raise ValueError(message(_OP, "anchor_masks", f"one list per head map ({scales})", f"{len(masks)} lists"))
    return table, [table[m] for m in masks]


def _check_anchors(table: np.ndarray) -> None:
    """The check the kernel runs on the anchors' values (CheckYoloAnchors, with its message),
    over the whole table as opforge.ops.yolo_postprocess runs it: the row named is the table's."""
    for k, (w, h) in enumerate(np.asarray(table, np.float64)):
        if not (w > 0 and h > 0 and math.isfinite(w) and math.isfinite(h)):
            raise ValueError(message(_OP, f"anchors[{k}]", "a finite, positive (width, height)", f"[{w:g}, {h:g}]"))


def yolo_postprocess(
    head_outputs,
    anchors,
    anchor_masks: Sequence[Sequence[int]],
    num_classes: int,
    input_size,
    max_detections: int = 100,
    max_detections_per_class: int = 100,
    iou_threshold: float = 0.5,
    score_threshold: float = 0.5,
    soft_nms_sigma: float = 0.0,
    scale_x_y: float = 1.0,
    clip_boxes: bool = True,
    max_log_scale: Optional[float] = None,
) -> CombinedNonMaxSuppressionResult:
    """opforge.ops.yolo_postprocess in JAX: a YOLO head's raw output maps (one per scale) to
    final detections, the bits of yolo_decode per scale + combined_non_max_suppression in one op;
    TensorFlow's bits; see opforge.ops.yolo_postprocess.

    `anchors`, `anchor_masks` and the sizes and thresholds are read while JAX traces (Python
    values, NumPy arrays or concrete JAX arrays; under jax.jit closed over, not arguments).
    float64 maps are decoded in float32. No gradient (zeros, as tf.no_gradient). Under jax.vmap
    the mapped axis is merged into the batch of the maps (one call).
    """
    maps = list(head_outputs) if isinstance(head_outputs, (list, tuple)) else [head_outputs]
    if not maps:
        raise ValueError(message(_OP, "head_outputs", "at least one head map", "none"))
    maps = [tf_like(_OP, f"head_outputs[{i}]", m) for i, m in enumerate(maps)]
    maps = [m if is_array(m) else jnp.asarray(m) for m in maps]
    for i, m in enumerate(maps):
        check_dtype(_OP, f"head_outputs[{i}]", m, POSTPROCESS_DTYPES + (np.float64,))
        if m.dtype != maps[0].dtype:
            raise TypeError(message(_OP, f"head_outputs[{i}]", f"of the dtype of head_outputs[0], "
                                    f"{np.dtype(maps[0].dtype).name}", np.dtype(m.dtype).name))
    if maps[0].dtype == np.float64:
        maps = [m.astype(np.float32) for m in maps]
    dtype = np.dtype(maps[0].dtype)
    table, per_map = _anchor_tables(anchors, anchor_masks, len(maps))
    _check_anchors(cast_like_tf(table, dtype))  # as the op gets them: in its dtype
    tables = [cast_like_tf(t, dtype) for t in per_map]
    attrs = decode_attrs(_OP, num_classes, input_size, "xyxy", True, scale_x_y, max_log_scale)
    clip_boxes = boolean(_OP, "clip_boxes", clip_boxes)
    values = (scalar("max_detections_per_class", max_detections_per_class, True, _OP, exact_int32=False),
              scalar("max_detections", max_detections, True, _OP, exact_int32=False),
              scalar("iou_threshold", iou_threshold, False, _OP),
              scalar("score_threshold", score_threshold, False, _OP),
              scalar("soft_nms_sigma", soft_nms_sigma, False, _OP))
    k = len(maps)
    # The inputs the op's Validate reads: every anchor table and the five scalars.
    concrete = {k + s: f"anchors[{s}]" for s in range(k)}
    concrete.update({2 * k + i: name for i, name in enumerate(
        ("max_detections_per_class", "max_detections") + SCALARS[2:])})
    out = apply(
        "Opforge>YoloPostprocess", [no_gradient(m) for m in maps] + tables + list(values),
        dict(num_scales=k, num_classes=attrs["num_classes"], input_size=attrs["input_size"],
             scale_x_y=attrs["scale_x_y"], max_log_scale=attrs["max_log_scale"],
             pad_per_class=False, clip_boxes=clip_boxes),  # the FFI fills in no defaults
        Fold(tuple(range(k))), dtype=dtype, concrete=concrete)
    return CombinedNonMaxSuppressionResult(*out)

"""opforge.jax's yolo_targets: the handler of `Opforge>YoloTargets` (opforge.ops.yolo_targets's
kernel)."""
from __future__ import annotations

import numbers
from typing import List, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from opforge.jax import _ffi
from opforge.jax._batching import Fold, apply
from opforge.jax._checks import check_dtype, message
from opforge.jax.combined_non_max_suppression import no_gradient
from opforge.jax.yolo_decode import cast_like_tf, is_array, tf_like
from opforge.ops.yolo_targets import BOX_TOLERANCE

__all__ = ["yolo_targets", "BOX_TOLERANCE"]

TARGET_DTYPES = (np.float32, np.float64)
_OP = "YoloTargets"
# The targets of each image are its own: the mapped axis is merged into the batch of boxes and
# classes (one call); mapped anchors: one call per element.
_RULE = Fold((0, 1))
_MASKS = "a list of lists of anchor indices"
_GRIDS = "one (grid_height, grid_width) or int per scale"


def _is_sequence(value) -> bool:
    return not isinstance(value, (str, bytes)) and isinstance(value, (Sequence, np.ndarray))


def _ints(name: str, values, expected: str) -> List[int]:
    out = []
    for v in values:
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Integral):
            raise TypeError(message(_OP, name, expected, repr(values)))
        out.append(int(v))
    return out


def target_attrs(anchor_masks, grid_sizes, num_classes=None) -> dict:
    """The attrs of the C++ op: masks and grids flattened. Python types are checked here
    (TypeError), counts too (ValueError); the values by the core (ValueError at trace time)."""
    if not _is_sequence(anchor_masks):
        raise TypeError(message(_OP, "anchor_masks", _MASKS, repr(anchor_masks)))
    masks = []
    for m in anchor_masks:
        if not _is_sequence(m):
            raise TypeError(message(_OP, "anchor_masks", _MASKS, repr(anchor_masks)))
        masks.append(_ints("anchor_masks", m, _MASKS))
    if not _is_sequence(grid_sizes):
        raise TypeError(message(_OP, "grid_sizes", _GRIDS, repr(grid_sizes)))
    grids: List[int] = []
    for g in grid_sizes:
        if isinstance(g, numbers.Integral) and not isinstance(g, (bool, np.bool_)):
            grids += [int(g), int(g)]
        else:
            pair = _ints("grid_sizes", g if _is_sequence(g) else [g], _GRIDS)
            if len(pair) != 2:
                raise ValueError(message(_OP, "grid_sizes", _GRIDS, repr(grid_sizes)))
            grids += pair
    if len(grids) != 2 * len(masks):
        raise ValueError(message(_OP, "grid_sizes", f"one grid per scale ({len(masks)} anchor masks)",
                                 repr(grid_sizes)))
    if num_classes is None:
        num_classes = -1
    elif isinstance(num_classes, (bool, np.bool_)) or not isinstance(num_classes, numbers.Integral):
        raise TypeError(message(_OP, "num_classes", "a positive int or None", repr(num_classes)))
    elif num_classes < 1:
        raise ValueError(message(_OP, "num_classes", "a positive int or None", repr(num_classes)))
    return dict(anchor_masks=[i for m in masks for i in m], anchors_per_scale=[len(m) for m in masks],
                grid_sizes=grids, num_classes=int(num_classes), num_scales=max(1, len(masks)))


def _classes(classes):
    """classes as int32, as TensorFlow casts another integer dtype: where a value does not fit,
    an error instead of a wrap (on the host for a concrete array; a tracer's such values become
    -1, which the kernel refuses with the row named)."""
    if classes.dtype == np.int32:
        return classes
    if _ffi.is_concrete(classes):
        host = np.asarray(classes)
        if host.size and (host.min() < -2**31 or host.max() > 2**31 - 1):
            raise ValueError(f"{_OP}: classes must be int32 class indices, got values beyond int32")
        return jnp.asarray(host.astype(np.int32))
    info = np.iinfo(np.int32)
    fits = (classes >= info.min) & (classes <= info.max) if jnp.issubdtype(classes.dtype, jnp.signedinteger) \
        else classes <= info.max
    return jnp.where(fits, classes, -1).astype(jnp.int32)


def yolo_targets(
    boxes,
    classes,
    anchors,
    anchor_masks: Sequence[Sequence[int]],
    grid_sizes: Sequence,
    *,
    num_classes: Optional[int] = None,
) -> List[jax.Array]:
    """opforge.ops.yolo_targets in JAX: ground-truth boxes [B, M, 4] (normalised x1, y1, x2, y2;
    float32 or float64) and classes [B, M] to one y_true [B, gh, gw, len(mask), 6] per scale,
    TensorFlow's bits; see opforge.ops.yolo_targets.

    Bad boxes or classes (NaN, x2 < x1, outside [0, 1], a negative class) are found by the kernel
    when it runs: JAX's runtime error with the core's message (its image index is that of the
    call: under jax.vmap, of the merged batch). No gradient (zeros, as tf.no_gradient). Under
    jax.vmap the mapped axis is merged into the batch (one call).
    """
    attrs = target_attrs(anchor_masks, grid_sizes, num_classes)
    boxes = tf_like(_OP, "boxes", boxes)
    boxes = boxes if is_array(boxes) else jnp.asarray(boxes)
    check_dtype(_OP, "boxes", boxes, TARGET_DTYPES)
    classes = tf_like(_OP, "classes", classes)
    classes = classes if is_array(classes) else jnp.asarray(classes)
    if not jnp.issubdtype(classes.dtype, jnp.integer):
        raise TypeError(message(_OP, "classes", "an integer array (class indices)", np.dtype(classes.dtype).name))
    classes = _classes(classes)
    anchors = tf_like(_OP, "anchors", anchors, dtype_hint=np.dtype(boxes.dtype))
    if not (jnp.issubdtype(anchors.dtype, jnp.floating) or jnp.issubdtype(anchors.dtype, jnp.integer)):
        raise TypeError(message(_OP, "anchors", "numbers (normalised width, height)", np.dtype(anchors.dtype).name))
    if is_array(anchors):
        anchors = anchors.astype(boxes.dtype)
    else:
        anchors = jnp.asarray(cast_like_tf(anchors, boxes.dtype))
    out = apply("Opforge>YoloTargets", (no_gradient(boxes), classes, no_gradient(anchors)), attrs, _RULE)
    return list(out)

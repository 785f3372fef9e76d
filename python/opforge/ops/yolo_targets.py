"""YOLO-v3 target assignment: `opforge.ops.yolo_targets`, ground-truth boxes to one y_true per
scale in one call; C++ op `Opforge>YoloTargets` (no gradient: targets are data)."""
from __future__ import annotations

import numbers
from typing import List, Optional, Sequence

import numpy as np
import tensorflow as tf

from opforge.ops._common import check_dtype, invalid_argument, lib, to_tensor
from opforge.ops.spec import BadInput, Case, OpSpec, Sample, SpeedCase, SpeedRun

__all__ = ["yolo_targets", "BOX_TOLERANCE"]
OP_NAMES = ("Opforge>YoloTargets",)

# How far outside [0, 1] a box coordinate may lie before it is an error.
BOX_TOLERANCE = 0.01
TARGET_DTYPES = (tf.float32, tf.float64)
_OP = "YoloTargets"


def _ints(name: str, values, expected: str) -> List[int]:
    try:
        out = []
        for v in values:
            if isinstance(v, bool) or not isinstance(v, numbers.Integral):
                raise TypeError
            out.append(int(v))
        return out
    except TypeError:
        raise invalid_argument(_OP, name, expected, repr(values)) from None


def target_attrs(anchor_masks, grid_sizes, num_classes=None) -> dict:
    """The attrs of the C++ op: masks and grids flattened (Python types checked here, values by
    the core)."""
    if isinstance(anchor_masks, (str, bytes)) or not isinstance(anchor_masks, (Sequence, np.ndarray)):
        raise invalid_argument(_OP, "anchor_masks", "a list of lists of anchor indices", repr(anchor_masks))
    masks = []
    for m in anchor_masks:
        if isinstance(m, (str, bytes)) or not isinstance(m, (Sequence, np.ndarray)):
            raise invalid_argument(_OP, "anchor_masks", "a list of lists of anchor indices",
                                   repr(anchor_masks))
        masks.append(_ints("anchor_masks", m, "a list of lists of anchor indices"))
    if isinstance(grid_sizes, (str, bytes)) or not isinstance(grid_sizes, (Sequence, np.ndarray)):
        raise invalid_argument(_OP, "grid_sizes", "one (grid_height, grid_width) or int per scale",
                               repr(grid_sizes))
    grids: List[int] = []
    for g in grid_sizes:
        if isinstance(g, numbers.Integral) and not isinstance(g, bool):
            grids += [int(g), int(g)]
        else:
            pair = _ints("grid_sizes", g if isinstance(g, (Sequence, np.ndarray)) else [g],
                         "one (grid_height, grid_width) or int per scale")
            if len(pair) != 2:
                raise invalid_argument(_OP, "grid_sizes", "one (grid_height, grid_width) or int per scale",
                                       repr(grid_sizes))
            grids += pair
    if len(grids) != 2 * len(masks):
        raise invalid_argument(_OP, "grid_sizes", f"one grid per scale ({len(masks)} anchor masks)",
                               repr(grid_sizes))
    if num_classes is None:
        num_classes = -1
    elif isinstance(num_classes, bool) or not isinstance(num_classes, numbers.Integral) or num_classes < 1:
        raise invalid_argument(_OP, "num_classes", "a positive int or None", repr(num_classes))
    return dict(anchor_masks=[i for m in masks for i in m], anchors_per_scale=[len(m) for m in masks],
                grid_sizes=grids, num_classes=int(num_classes), num_scales=max(1, len(masks)))


def yolo_targets(
    boxes,
    classes,
    anchors,
    anchor_masks: Sequence[Sequence[int]],
    grid_sizes: Sequence,
    name: Optional[str] = None,
    *,
    num_classes: Optional[int] = None,
) -> List[tf.Tensor]:
    """Assigns ground-truth boxes to YOLO-v3 grid cells and anchors: one y_true per scale.

    Args:
      boxes: [B, M, 4] float32 or float64, normalised (x1, y1, x2, y2); rows whose four
        coordinates are all zero are padding and skipped. (yolov3-tf2 skips every row with
        x2 == 0; a zero-width box on the left edge, x1 <= x2 = 0, is a target here.)
      classes: [B, M] int32 (any integer dtype is cast).
      anchors: [K, 2] normalised (width, height); cast to the dtype of boxes.
      anchor_masks: one list of anchor indices per scale, e.g. [[6, 7, 8], [3, 4, 5], [0, 1, 2]].
      grid_sizes: one (grid_height, grid_width), or an int for a square grid, per scale.
      num_classes: if given, a class >= num_classes is an error (keyword only, an extension of
        the issue's signature).

    Each box goes to the anchor of best width-height IoU over all K (the lowest index on ties),
    on every scale whose mask holds it, in the cell floor(centre * grid) (clamped into the grid),
    as yolov3-tf2's `transform_targets`. Two boxes on one cell and anchor: the later row wins.

    Returns:
      A list with one [B, gh, gw, len(mask), 6] tensor per scale, holding
      (x1, y1, x2, y2, 1, class) at each assigned cell and anchor and zeros elsewhere.

    Raises:
      InvalidArgumentError: a row with NaN or inf, x2 < x1, y2 < y1, a coordinate outside [0, 1]
        by more than BOX_TOLERANCE, or a bad class (the message names the image, row and value);
        bad shapes, masks or grid sizes.
    """
    attrs = target_attrs(anchor_masks, grid_sizes, num_classes)
    boxes = to_tensor(_OP, "boxes", boxes)
    check_dtype(_OP, "boxes", boxes, TARGET_DTYPES)
    classes = to_tensor(_OP, "classes", classes)
    if not classes.dtype.is_integer:
        raise invalid_argument(_OP, "classes", "an integer tensor (class indices)", classes.dtype.name)
    if classes.dtype != tf.int32:
        # A cast would wrap 2**32 + 3 to class 3: out-of-range indices are an error instead.
        with tf.control_dependencies([tf.debugging.assert_equal(
                tf.cast(tf.cast(classes, tf.int32), classes.dtype), classes,
                message=f"{_OP}: classes must be int32 class indices, got values beyond int32")]):
            classes = tf.cast(classes, tf.int32)
    anchors = to_tensor(_OP, "anchors", anchors, dtype_hint=boxes.dtype)
    if not (anchors.dtype.is_floating or anchors.dtype.is_integer):
        raise invalid_argument(_OP, "anchors", "numbers (normalised width, height)", anchors.dtype.name)
    anchors = tf.cast(anchors, boxes.dtype)
    return list(lib().opforge_yolo_targets(boxes, classes, anchors, name=name, **attrs))


tf.no_gradient("Opforge>YoloTargets")


# --- the reference and the rival -------------------------------------------------------------------


def numpy_yolo_targets(boxes, classes, anchors, anchor_masks, grid_sizes, num_classes=None):
    """An independent NumPy reference of the assignment, in the dtype of boxes."""
    b = np.asarray(boxes)
    dt = b.dtype.type
    cls = np.asarray(classes)
    a = np.asarray(tf.cast(anchors, b.dtype))
    grids = [(g, g) if isinstance(g, int) else tuple(g) for g in grid_sizes]
    outs = [np.zeros((b.shape[0], gh, gw, len(m), 6), b.dtype) for m, (gh, gw) in zip(anchor_masks, grids)]
    for i in range(b.shape[0]):
        for r in range(b.shape[1]):
            x1, y1, x2, y2 = b[i, r]
            if x1 == 0 and y1 == 0 and x2 == 0 and y2 == 0:
                continue
            w, h = x2 - x1, y2 - y1
            inter = np.minimum(w, a[:, 0]) * np.minimum(h, a[:, 1])
            iou = inter / (w * h + a[:, 0] * a[:, 1] - inter)
            best = int(np.argmax(iou))
            for s, (mask, (gh, gw)) in enumerate(zip(anchor_masks, grids)):
                if best not in mask:
                    continue
                slot = list(mask).index(best)
                cx = int(np.clip(np.floor((x1 + x2) / dt(2) * dt(gw)), 0, gw - 1))
                cy = int(np.clip(np.floor((y1 + y2) / dt(2) * dt(gh)), 0, gh - 1))
                outs[s][i, cy, cx, slot] = (x1, y1, x2, y2, 1, cls[i, r])
    return [tf.constant(o) for o in outs]


def tf_transform_targets(boxes, classes, anchors, anchor_masks, grid_sizes):
    """yolov3-tf2's `transform_targets` (a best-anchor IoU in TensorFlow ops, then per scale a
    `tf.function` double loop over images and boxes writing a TensorArray of scatter updates):
    the rival of the speed benchmark. Square grids; padding rows have x2 == 0."""
    y_train = tf.concat([boxes, tf.cast(classes[..., None], boxes.dtype)], -1)
    anchors = tf.cast(anchors, tf.float32)
    anchor_area = anchors[..., 0] * anchors[..., 1]
    box_wh = y_train[..., 2:4] - y_train[..., 0:2]
    box_wh = tf.tile(tf.expand_dims(box_wh, -2), (1, 1, tf.shape(anchors)[0], 1))
    box_area = box_wh[..., 0] * box_wh[..., 1]
    intersection = tf.minimum(box_wh[..., 0], anchors[..., 0]) * tf.minimum(box_wh[..., 1], anchors[..., 1])
    iou = intersection / (box_area + anchor_area - intersection)
    anchor_idx = tf.cast(tf.argmax(iou, axis=-1), tf.float32)[..., None]
    y_train = tf.concat([y_train, anchor_idx], axis=-1)
    return [_transform_targets_for_output(y_train, g, tf.constant(m, tf.int32))
            for m, g in zip(anchor_masks, grid_sizes)]


@tf.function
def _transform_targets_for_output(y_true, grid_size, anchor_idxs):
    n = tf.shape(y_true)[0]
    y_true_out = tf.zeros((n, grid_size, grid_size, tf.shape(anchor_idxs)[0], 6))
    indexes = tf.TensorArray(tf.int32, 1, dynamic_size=True)
    updates = tf.TensorArray(tf.float32, 1, dynamic_size=True)
    idx = 0
    for i in tf.range(n):
        for j in tf.range(tf.shape(y_true)[1]):
            if tf.equal(y_true[i][j][2], 0):
                continue
            anchor_eq = tf.equal(anchor_idxs, tf.cast(y_true[i][j][5], tf.int32))
            if tf.reduce_any(anchor_eq):
                box = y_true[i][j][0:4]
                box_xy = (y_true[i][j][0:2] + y_true[i][j][2:4]) / 2
                anchor_idx = tf.cast(tf.where(anchor_eq), tf.int32)
                grid_xy = tf.cast(box_xy // (1 / grid_size), tf.int32)
                indexes = indexes.write(idx, [i, grid_xy[1], grid_xy[0], anchor_idx[0][0]])
                updates = updates.write(idx, [box[0], box[1], box[2], box[3], 1, y_true[i][j][4]])
                idx += 1
    return tf.tensor_scatter_nd_update(y_true_out, indexes.stack(), updates.stack())


# --- spec ---------------------------------------------------------------------------------------

YOLOV3_NORMALIZED_ANCHORS = np.array([(10, 13), (16, 30), (33, 23), (30, 61), (62, 45), (59, 119),
                                      (116, 90), (156, 198), (373, 326)], np.float64) / 416.0
YOLOV3_MASKS = ((6, 7, 8), (3, 4, 5), (0, 1, 2))


def random_boxes(batch: int, max_boxes: int, seed: int, padding: int = 0, classes: int = 80):
    """Valid normalised boxes [B, M, 4] (the last `padding` rows of each image zero) and
    classes [B, M]."""
    rng = np.random.default_rng(seed)
    centre = rng.uniform(0.0, 1.0, (batch, max_boxes, 2))
    size = np.exp(rng.uniform(np.log(0.01), np.log(0.9), (batch, max_boxes, 2)))
    lo = np.clip(centre - size / 2, 0.0, 1.0)
    hi = np.clip(centre + size / 2, 0.0, 1.0)
    boxes = np.concatenate([lo, hi], -1)
    cls = rng.integers(0, classes, (batch, max_boxes))
    if padding:
        boxes[:, max_boxes - padding:] = 0
        cls[:, max_boxes - padding:] = 0
    return boxes, cls


def _case(name, batch, max_boxes, seed, masks, grids, padding=0, anchors=YOLOV3_NORMALIZED_ANCHORS, **attrs):
    boxes, cls = random_boxes(batch, max_boxes, seed, padding)
    return Case(name, (Sample(boxes.shape, values=boxes), Sample(cls.shape, values=cls, dtype="int32"),
                       Sample(np.shape(anchors), values=anchors)),
                dict(anchor_masks=masks, grid_sizes=grids, **attrs))


# Two boxes on one cell and anchor (the later wins), a box on the border (clamped), a row of
# padding, a box exactly on a cell edge.
_EDGES = np.array([[[0.10, 0.10, 0.30, 0.30], [0.12, 0.11, 0.31, 0.29], [0.0, 0.0, 0.0, 0.0],
                    [0.9, 0.95, 1.0, 1.0], [0.25, 0.25, 0.75, 0.75], [0.0, 0.0, 1.0, 1.0]]])
_EDGE_CLASSES = np.array([[3, 5, 0, 1, 2, 7]])


def _targets_speed() -> SpeedCase:
    def setup(size, dtype):
        batch = 8 if size is None else max(1, int(round(size / 400)))
        boxes, cls = random_boxes(batch, 100, seed=5, padding=10)
        b = tf.cast(tf.constant(boxes, tf.float32), dtype)
        c = tf.constant(cls, tf.int32)
        anchors = tf.cast(tf.constant(YOLOV3_NORMALIZED_ANCHORS, tf.float32), dtype)
        grids = (13, 26, 52)
        return SpeedRun(f"B={batch}, 100 boxes (10 padding), grids 13/26/52", {
            "opforge": lambda: yolo_targets(b, c, anchors, YOLOV3_MASKS, grids),
            "tf": lambda: tf_transform_targets(b, c, anchors, YOLOV3_MASKS, grids),
        })

    return SpeedCase(setup, max_repeats=10)


SPECS = (
    OpSpec(
        name="yolo_targets",
        op=yolo_targets,
        reference=numpy_yolo_targets,
        reference_name="NumPy (yolov3-tf2's assignment)",
        dtypes=TARGET_DTYPES,
        cases=(
            _case("yolov3 3 scales", 3, 40, 1, YOLOV3_MASKS, (13, 26, 52), padding=5),
            _case("non-square grids", 2, 25, 2, YOLOV3_MASKS, ((10, 14), (20, 28), (40, 56))),
            _case("tiny: 2 scales, 6 anchors", 2, 30, 3, ((3, 4, 5), (0, 1, 2)), (13, 26),
                  anchors=YOLOV3_NORMALIZED_ANCHORS[:6]),
            _case("masks of different lengths", 2, 30, 4, ((4, 5), (0, 1, 2, 3)), ((7, 9), (4, 4)),
                  anchors=YOLOV3_NORMALIZED_ANCHORS[:6], num_classes=80),
            _case("an anchor in no mask", 2, 30, 6, ((8,), (0, 1, 2)), (13, 26)),
            Case("edges", (Sample(_EDGES.shape, values=_EDGES), Sample(_EDGE_CLASSES.shape, values=_EDGE_CLASSES, dtype="int32"),
                           Sample((9, 2), values=YOLOV3_NORMALIZED_ANCHORS)),
                 dict(anchor_masks=YOLOV3_MASKS, grid_sizes=(4, 8, 16))),
            _case("batch 0", 0, 10, 7, YOLOV3_MASKS, (13, 26, 52)),
            _case("no boxes", 2, 0, 8, YOLOV3_MASKS, (13, 26, 52)),
        ),
        forward_tolerance=0.0,
        differentiable=False,
        determinism_case=_case("large", 16, 100, 9, YOLOV3_MASKS, (13, 26, 52), padding=10),
        speed=(_targets_speed(),),
        bad_inputs={
            "NaN": BadInput(
                "opforge.ops.yolo_targets([[[0.1, 0.1, 0.2, 0.2], [0.1, float('nan'), 0.2, 0.2]]], [[1, 2]], "
                "[[0.1, 0.1]], [[0]], [13])",
                ("boxes[0, 1]", "image 0, row 1", "finite", "nan")),
            "inf": BadInput(
                "opforge.ops.yolo_targets([[[0.1, 0.1, 0.2, 0.2]], [[0.1, 0.1, float('inf'), 0.2]]], [[1], [2]], "
                "[[0.1, 0.1]], [[0]], [13])",
                ("boxes[1, 0]", "image 1, row 0", "inf")),
            "x2 < x1": BadInput(
                "opforge.ops.yolo_targets([[[0.5, 0.1, 0.4, 0.2]]], [[1]], [[0.1, 0.1]], [[0]], [13])",
                ("boxes[0, 0]", "x1 <= x2", "0.5, 0.1, 0.4, 0.2", "x2 < x1")),
            "y2 < y1": BadInput(
                "opforge.ops.yolo_targets([[[0.1, 0.5, 0.4, 0.2]]], [[1]], [[0.1, 0.1]], [[0]], [13])",
                ("boxes[0, 0]", "y1 <= y2", "y2 < y1")),
            "outside": BadInput(
                "opforge.ops.yolo_targets([[[0.1, 0.1, 1.02, 0.2]]], [[1]], [[0.1, 0.1]], [[0]], [13])",
                ("boxes[0, 0]", "inside [0, 1]", "1.02")),
            "negative": BadInput(
                "opforge.ops.yolo_targets([[[-0.02, 0.1, 0.5, 0.2]]], [[1]], [[0.1, 0.1]], [[0]], [13])",
                ("boxes[0, 0]", "inside [0, 1]", "-0.02")),
            "class negative": BadInput(
                "opforge.ops.yolo_targets([[[0.1, 0.1, 0.5, 0.2]]], [[-1]], [[0.1, 0.1]], [[0]], [13])",
                ("classes[0, 0]", "image 0, row 0", ">= 0", "-1")),
            "class too large": BadInput(
                "opforge.ops.yolo_targets([[[0.1, 0.1, 0.5, 0.2], [0.1, 0.1, 0.5, 0.2]]], [[1, 80]], [[0.1, 0.1]], "
                "[[0]], [13], num_classes=80)",
                ("classes[0, 1]", "image 0, row 1", "[0, 80)", "80")),
            "anchor not positive": BadInput(
                "opforge.ops.yolo_targets([[[0.1, 0.1, 0.5, 0.2]]], [[1]], [[0.1, 0.1], [0.0, 0.2]], [[0, 1]], [13])",
                ("anchors[1]", "positive", "[0, 0.2]")),
            "mask index": BadInput(
                "opforge.ops.yolo_targets([[[0.1, 0.1, 0.5, 0.2]]], [[1]], [[0.1, 0.1]], [[0, 3]], [13])",
                ("anchor_masks", "1 rows", "[0, 3]")),
            "grid count": BadInput(
                "opforge.ops.yolo_targets([[[0.1, 0.1, 0.5, 0.2]]], [[1]], [[0.1, 0.1]], [[0]], [13, 26])",
                ("grid_sizes", "one grid per scale", "[13, 26]")),
            "grid zero": BadInput(
                "opforge.ops.yolo_targets([[[0.1, 0.1, 0.5, 0.2]]], [[1]], [[0.1, 0.1]], [[0]], [0])",
                ("grid_sizes", "positive", "[0, 0]")),
            "boxes rank": BadInput(
                "opforge.ops.yolo_targets([[0.1, 0.1, 0.5, 0.2]], [[1]], [[0.1, 0.1]], [[0]], [13])",
                ("boxes", "3-D", "[1, 4]")),
            "classes shape": BadInput(
                "opforge.ops.yolo_targets([[[0.1, 0.1, 0.5, 0.2]]], [[1, 2]], [[0.1, 0.1]], [[0]], [13])",
                ("classes", "[1, 1]", "[1, 2]")),
            "classes float": BadInput(
                "opforge.ops.yolo_targets([[[0.1, 0.1, 0.5, 0.2]]], [[1.0]], [[0.1, 0.1]], [[0]], [13])",
                ("classes", "integer", "float32")),
            "boxes half": BadInput(
                "opforge.ops.yolo_targets(tf.ones([1, 1, 4], tf.float16), [[1]], [[0.1, 0.1]], [[0]], [13])",
                ("boxes", "float16")),
            "raw num_scales": BadInput(
                "lib().opforge_yolo_targets([[[0.1, 0.1, 0.5, 0.2]]], [[1]], [[0.1, 0.1]], anchor_masks=[0], "
                "anchors_per_scale=[1], grid_sizes=[13, 13], num_scales=2)",
                ("num_scales", "len(anchors_per_scale) = 1", "2")),
            "classes beyond int32": BadInput(
                "opforge.ops.yolo_targets([[[0.1, 0.1, 0.5, 0.2]]], tf.constant([[2**32 + 3]], tf.int64), "
                "[[0.1, 0.1]], [[0]], [13], num_classes=80)",
                ("classes", "beyond int32")),
            "empty mask": BadInput(
                "opforge.ops.yolo_targets([[[0.1, 0.1, 0.5, 0.2]]], [[1]], [[0.1, 0.1]], [[0], []], [13, 13])",
                ("anchor_masks", "non-empty", "scale 1")),
        },
    ),
)

"""A YOLO head's raw maps to final detections in one op: `opforge.ops.yolo_postprocess`, what
`yolo_decode` of every scale followed by `combined_non_max_suppression` computes, bit for bit,
several times faster; C++ op `Opforge>YoloPostprocess` (CPU only; no gradient)."""
from __future__ import annotations

import numbers
from typing import Optional, Sequence

import numpy as np
import tensorflow as tf

from opforge.ops._common import check_dtype, invalid_argument, lib, short_repr, to_tensor
from opforge.ops.combined_non_max_suppression import CombinedNonMaxSuppressionResult, _scalar
from opforge.ops.combined_non_max_suppression import tf_reference as _tf_nms_reference
from opforge.ops.yolo_decode import (YOLO_MAX_LOG_SCALE, YOLOV3_SPEED_ANCHORS, YOLOV3_SPEED_MASKS,
                                    check_constant_anchors, decode_attrs, numpy_yolo_decode, tf_yolo_decode)
from opforge.ops.spec import BadInput, Case, OpSpec, Sample, SpeedCase, SpeedRun

__all__ = ["yolo_postprocess"]  # tf_yolo_postprocess, yolo_like_heads: the spec's reference and inputs
OP_NAMES = ("Opforge>YoloPostprocess",)
# Ops with a CPU kernel only (`opforge doctor` and `make gpu-build-check` read this).
CPU_ONLY = ("Opforge>YoloPostprocess",)

POSTPROCESS_DTYPES = (tf.float16, tf.bfloat16, tf.float32)
_OP = "YoloPostprocess"


def _anchor_tables(anchors, anchor_masks, scales: int):
    """anchors [K, 2] and one mask per scale -> the [K, 2] table and a list of [A, 2] arrays;
    errors name the argument."""
    try:
        table = np.asarray(anchors, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        raise invalid_argument(_OP, "anchors", "[K, 2] (width, height) in input pixels",
                               short_repr(anchors)) from None
    if table.ndim != 2 or table.shape[1] != 2 or table.shape[0] < 1:
        raise invalid_argument(_OP, "anchors", "[K, 2] (width, height) in input pixels", str(list(table.shape)))
    try:
        masks = [[int(i) for i in m] for m in anchor_masks]
        bad = any(not m or min(m) < 0 or max(m) >= table.shape[0] for m in masks)
        integral = all(isinstance(i, numbers.Integral) and not isinstance(i, bool) for m in anchor_masks for i in m)
    except (TypeError, ValueError):
        masks, bad, integral = [], True, False
    if bad or not integral:
        raise invalid_argument(_OP, "anchor_masks", f"one non-empty list of indices into the {table.shape[0]} "
                               "anchors per head map", repr(anchor_masks))
    if len(masks) != scales:
        raise invalid_argument(_OP, "anchor_masks", f"one list per head map ({scales})",
                               f"{len(masks)} lists")
    return table, [table[m] for m in masks]


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
    name: Optional[str] = None,
) -> CombinedNonMaxSuppressionResult:
    """A YOLO head's raw output maps (one per scale) to final detections, in one op.

    The result is, bit for bit, that of
    `yolo_decode(features_s, anchors[anchor_masks[s]], num_classes, input_size, "xyxy",
    normalized=True, scale_x_y, max_log_scale)` for every scale, boxes and class_scores concatenated over the
    scales (in the order given), then `combined_non_max_suppression(boxes[:, :, None],
    class_scores, max_detections_per_class, max_detections, iou_threshold, score_threshold,
    clip_boxes=clip_boxes, soft_nms_sigma=soft_nms_sigma)`. It is faster because a box's class
    scores sigmoid(obj) * sigmoid(class) never exceed sigmoid(obj): only the boxes whose objectness
    logit can reach score_threshold (a bound with a margin for rounding, so none is missed) are
    decoded and reach the NMS.

    Args:
      head_outputs: a list of maps [B, H, W, A*(5+C)] (or [B, H, W, A, 5+C]), float16,
        bfloat16, float32 or float64 (float64 maps are decoded in float32), the same B.
      anchors: [K, 2] (width, height) in input pixels, finite and positive.
      anchor_masks: per map, the indices of its anchors (YOLO-v3: [[6, 7, 8], [3, 4, 5],
        [0, 1, 2]] for the 13, 26 and 52 grids).
      num_classes: C.
      input_size: [height, width] of the network input, or an int.
      max_detections, max_detections_per_class, iou_threshold, score_threshold, soft_nms_sigma,
        clip_boxes: those of `combined_non_max_suppression` (max_total_size,
        max_output_size_per_class, ...).
      scale_x_y: YOLO-v4's grid sensitivity (1: YOLO-v3).
      max_log_scale: None (the default): box sizes exp(tw) * anchor_w as written; a number
        clamps tw, th there first (`YOLO_MAX_LOG_SCALE`: torchvision's clamp). See `yolo_decode`.

    Returns:
      A CombinedNonMaxSuppressionResult: nmsed_boxes [B, D, 4] as normalised (x1, y1, x2, y2),
      nmsed_scores [B, D], nmsed_classes [B, D] (float32), valid_detections [B] (int32),
      D = max_detections; zero-padded. Runs on the CPU; no gradient.
    """
    maps = list(head_outputs) if isinstance(head_outputs, (list, tuple)) else [head_outputs]
    if not maps:
        raise invalid_argument(_OP, "head_outputs", "at least one head map", "none")
    maps = [to_tensor(_OP, f"head_outputs[{i}]", m) for i, m in enumerate(maps)]
    for i, m in enumerate(maps):
        check_dtype(_OP, f"head_outputs[{i}]", m, POSTPROCESS_DTYPES + (tf.float64,))
        if m.dtype != maps[0].dtype:
            raise invalid_argument(_OP, f"head_outputs[{i}]", f"of the dtype of head_outputs[0], "
                                   f"{maps[0].dtype.name}", m.dtype.name)
    if maps[0].dtype == tf.float64:
        maps = [tf.cast(m, tf.float32) for m in maps]
    dtype = maps[0].dtype
    table, per_map = _anchor_tables(anchors, anchor_masks, len(maps))
    check_constant_anchors(_OP, tf.constant(table, dtype))  # as the op gets them: in its dtype
    tables = [tf.constant(t, dtype) for t in per_map]
    attrs = decode_attrs(_OP, num_classes, input_size, "xyxy", True, scale_x_y, max_log_scale)
    if not isinstance(clip_boxes, bool):
        raise invalid_argument(_OP, "clip_boxes", "a Python bool", repr(clip_boxes))
    out = lib().opforge_yolo_postprocess(
        maps, tables,
        _scalar("max_detections_per_class", max_detections_per_class, tf.int32, _OP, exact_int32=False),
        _scalar("max_detections", max_detections, tf.int32, _OP, exact_int32=False),
        _scalar("iou_threshold", iou_threshold, tf.float32, _OP),
        _scalar("score_threshold", score_threshold, tf.float32, _OP),
        _scalar("soft_nms_sigma", soft_nms_sigma, tf.float32, _OP),
        num_classes=attrs["num_classes"], input_size=attrs["input_size"], scale_x_y=attrs["scale_x_y"],
        max_log_scale=attrs["max_log_scale"], clip_boxes=clip_boxes, name=name)
    return CombinedNonMaxSuppressionResult(*out)


tf.no_gradient("Opforge>YoloPostprocess")


# --- the reference and the rival ---------------------------------------------------------------


def _concat_decoded(decode, maps, anchors, anchor_masks, num_classes, input_size, scale_x_y, max_log_scale=None):
    boxes, scores = [], []
    for f, m in zip(maps, anchor_masks):
        out = decode(f, np.asarray(anchors, np.float64)[list(m)], num_classes, input_size, box_format="xyxy",
                     normalized=True, scale_x_y=scale_x_y, max_log_scale=max_log_scale)
        boxes.append(out.boxes)
        scores.append(out.class_scores)
    return tf.concat(boxes, 1)[:, :, None, :], tf.concat(scores, 1)


def tf_yolo_postprocess(head_outputs, anchors, anchor_masks, num_classes, input_size, max_detections=100,
                        max_detections_per_class=100, iou_threshold=0.5, score_threshold=0.5,
                        soft_nms_sigma=0.0, scale_x_y=1.0, clip_boxes=True, max_log_scale=None):
    """The same with TensorFlow ops, as yolov3-tf2's `yolo_boxes` + `yolo_nms` write it:
    `tf_yolo_decode` per scale, concatenated, `tf.image.combined_non_max_suppression` (hard NMS
    only). The rival of the speed benchmarks and the post-processing of `ops="tf"` models."""
    if soft_nms_sigma:
        raise ValueError("tf_yolo_postprocess: tf.image.combined_non_max_suppression has no soft-NMS")
    boxes, scores = _concat_decoded(tf_yolo_decode, head_outputs, anchors, anchor_masks, num_classes, input_size,
                                    scale_x_y, max_log_scale)
    if boxes.dtype == tf.float32:
        r = tf.image.combined_non_max_suppression(boxes, scores, max_detections_per_class, max_detections,
                                                  iou_threshold, score_threshold, clip_boxes=clip_boxes)
        return CombinedNonMaxSuppressionResult(*r)
    # TensorFlow's NMS takes float32 only: maps decoded in half or bfloat16 (a mixed-precision
    # model's heads) go through it in float32, boxes and scores back in the maps' dtype.
    dtype = boxes.dtype
    r = tf.image.combined_non_max_suppression(tf.cast(boxes, tf.float32), tf.cast(scores, tf.float32),
                                              max_detections_per_class, max_detections, iou_threshold,
                                              score_threshold, clip_boxes=clip_boxes)
    return CombinedNonMaxSuppressionResult(tf.cast(r[0], dtype), tf.cast(r[1], dtype), r[2], r[3])


def numpy_tf_reference(*maps, anchors, anchor_masks, num_classes, input_size, max_detections=100,
                       max_detections_per_class=100, iou_threshold=0.5, score_threshold=0.5, soft_nms_sigma=0.0,
                       scale_x_y=1.0, clip_boxes=True, max_log_scale=None):
    """The spec's reference: the NumPy decode (`numpy_yolo_decode`) of every map, concatenated,
    then TensorFlow's NMS (`combined_non_max_suppression.tf_reference`: tf.image's combined NMS,
    or its soft-NMS per class)."""
    boxes, scores = _concat_decoded(numpy_yolo_decode, maps, anchors, anchor_masks, num_classes, input_size,
                                    scale_x_y, max_log_scale)
    return _tf_nms_reference(boxes, scores, max_detections_per_class, max_detections, iou_threshold,
                             score_threshold, clip_boxes=clip_boxes, soft_nms_sigma=soft_nms_sigma)


def _spec_op(*maps, **kwargs):
    """yolo_postprocess with the maps as positional arguments (how a spec calls an op)."""
    return yolo_postprocess(list(maps), **kwargs)


# --- spec ---------------------------------------------------------------------------------------


def yolo_like_heads(batch: int, size: int = 416, num_classes: int = 80, seed: int = 0, obj_mean: float = -5.0):
    """Raw YOLO-v3 head maps [B, g, g, 3*(5+C)] at `size` (g = size/32, /16, /8), logits shaped
    like a trained detector's: objectness ~ N(obj_mean, 3), mostly low; classes ~ N(-3, 2)."""
    c = num_classes
    shift = tf.constant([0.0] * 4 + [obj_mean] + [-3.0] * c)
    scale = tf.constant([1.0] * 4 + [3.0] + [2.0] * c)
    maps = []
    for s, grid in enumerate((size // 32, size // 16, size // 8)):
        f = tf.random.stateless_normal((batch, grid, grid, 3, 5 + c), seed=(seed, s)) * scale + shift
        maps.append(tf.reshape(f, (batch, grid, grid, 3 * (5 + c))))
    return maps


_ANCHORS = ((10.0, 13.0), (16.0, 30.0), (33.0, 23.0), (30.0, 61.0), (62.0, 45.0), (59.0, 119.0))


def _heads(batch, grids, a, c, seed, obj_mean=-3.0, obj_scale=3.0):
    """Head maps with few candidates (so that no two kept scores tie in bfloat16, where
    TensorFlow's NMS leaves the order of ties open)."""
    rng = np.random.default_rng(seed)
    samples = []
    for g in grids:
        h, w = g
        f = rng.normal(0, 1.5, (batch, h, w, a, 5 + c))
        f[..., 4] = rng.normal(obj_mean, obj_scale, (batch, h, w, a))
        f[..., 5:] = rng.normal(-1, 2.5, (batch, h, w, a, c))
        samples.append(Sample((batch, h, w, a * (5 + c)), values=f.reshape(batch, h, w, a * (5 + c)),
                              differentiable=False))
    return tuple(samples)


def _case(name, batch, grids, c, seed, input_size, masks, obj_mean=-3.0, **attrs):
    a = len(masks[0])
    return Case(name, _heads(batch, grids, a, c, seed, obj_mean),
                dict(anchors=_ANCHORS, anchor_masks=masks, num_classes=c, input_size=input_size, **attrs))


def _speed(batch: int) -> SpeedCase:
    def setup(size, dtype):
        b = batch if size is None else max(1, int(round(size / (10647 * 85))))
        maps = [tf.cast(m, dtype) for m in yolo_like_heads(b)]
        kw = dict(anchors=YOLOV3_SPEED_ANCHORS, anchor_masks=YOLOV3_SPEED_MASKS, num_classes=80, input_size=416,
                  max_detections=100, max_detections_per_class=100, iou_threshold=0.5, score_threshold=0.5)
        # Both inside tf.function: the rival is a graph of many ops, whose eager dispatch alone
        # would cost more than the work.
        ours = tf.function(lambda m: yolo_postprocess(m, **kw))
        theirs = tf.function(lambda m: tf_yolo_postprocess(m, **kw))
        return SpeedRun(f"YOLO-v3 416 heads (13, 26, 52), C=80, B={b}, score_threshold 0.5 "
                        "(rival: tf decode per scale + tf.image.combined_non_max_suppression"
                        + ("" if dtype == tf.float32 else f" in float32, cast from and to {dtype.name}")
                        + ", tf.function)", {
                            "opforge": lambda: ours(maps),
                            "tf": lambda: theirs(maps)})

    return SpeedCase(setup, max_repeats=20)


_MASKS3 = ((4, 5), (2, 3), (0, 1))
_MASKS2 = ((3, 4, 5), (0, 1, 2))

SPECS = (
    OpSpec(
        name="yolo_postprocess",
        op=_spec_op,
        reference=numpy_tf_reference,
        reference_name="NumPy decode + tf.image.combined_non_max_suppression",
        dtypes=POSTPROCESS_DTYPES,
        cases=(
            _case("3 scales", 2, ((2, 3), (4, 6), (8, 12)), 4, 1, (64, 96), _MASKS3,
                  max_detections=10, max_detections_per_class=5),
            _case("2 scales 5-D layout thresholds", 2, ((3, 3), (6, 6)), 3, 2, 96, _MASKS2,
                  max_detections=8, max_detections_per_class=4, iou_threshold=0.3, score_threshold=0.6),
            _case("no clip, low threshold", 1, ((4, 4),), 2, 3, 128, ((0, 1, 2),), obj_mean=-6.0,
                  max_detections=20, max_detections_per_class=20, score_threshold=0.05, clip_boxes=False),
            _case("soft-NMS", 2, ((2, 2), (4, 4)), 3, 4, 64, _MASKS2, max_detections=12,
                  max_detections_per_class=6, score_threshold=0.3, soft_nms_sigma=0.5),
            _case("nothing above threshold", 2, ((3, 3),), 2, 5, 96, ((0, 1),), obj_mean=-20.0,
                  max_detections=5),
            _case("batch 0", 0, ((2, 2), (4, 4)), 2, 6, 64, _MASKS2, max_detections=4),
            _case("torchvision's clamp", 2, ((2, 3), (4, 6)), 3, 7, (64, 96), _MASKS2,
                  max_detections=10, max_detections_per_class=5, score_threshold=0.3,
                  max_log_scale=YOLO_MAX_LOG_SCALE),
        ),
        forward_tolerance={"float32": 1e-6, "float16": 1e-3, "bfloat16": 8e-3},
        differentiable=False,
        determinism_case=Case(
            "yolo-sized", _heads(4, ((13, 13), (26, 26)), 3, 20, 12, obj_mean=-2.0),
            dict(anchors=_ANCHORS, anchor_masks=_MASKS2, num_classes=20, input_size=416, score_threshold=0.3,
                 max_detections=100, max_detections_per_class=50)),
        speed=(_speed(1), _speed(8)),
        bad_inputs={
            "no maps": BadInput(
                "opforge.ops.yolo_postprocess([], [[10, 13]], [[0]], 2, 64)",
                ("head_outputs", "at least one")),
            "map rank": BadInput(
                "opforge.ops.yolo_postprocess([tf.ones([1, 2, 14])], [[10, 13], [16, 30]], [[0, 1]], 2, 64)",
                ("YoloPostprocess", "features[0]", "[1, 2, 14]")),
            "graph map rank": BadInput(
                "tf.function(lambda f: opforge.ops.yolo_postprocess([f], [[10, 13]], [[0]], 2, 64), "
                "input_signature=[tf.TensorSpec([None, None, None], tf.float32)]).get_concrete_function()",
                ("YoloPostprocess", "features[0]", "rank 3"), "ValueError"),
            "channels": BadInput(
                "opforge.ops.yolo_postprocess([tf.ones([1, 2, 2, 14]), tf.ones([1, 4, 4, 13])], "
                "[[10, 13], [16, 30], [33, 23], [30, 61]], [[2, 3], [0, 1]], 2, 64)",
                ("features[1]", "[1, 4, 4, 13]")),
            "batch mismatch": BadInput(
                "opforge.ops.yolo_postprocess([tf.ones([1, 2, 2, 7]), tf.ones([2, 4, 4, 7])], [[10, 13], [16, 30]], "
                "[[1], [0]], 2, 64)",
                ("features[1]", "batch")),
            "mask out of range": BadInput(
                "opforge.ops.yolo_postprocess([tf.ones([1, 2, 2, 7])], [[10, 13]], [[3]], 2, 64)",
                ("anchor_masks", "indices into the 1 anchors", "[[3]]")),
            "masks per map": BadInput(
                "opforge.ops.yolo_postprocess([tf.ones([1, 2, 2, 7])], [[10, 13]], [[0], [0]], 2, 64)",
                ("anchor_masks", "one list per head map (1)", "2 lists")),
            "anchors shape": BadInput(
                "opforge.ops.yolo_postprocess([tf.ones([1, 2, 2, 7])], [10, 13], [[0]], 2, 64)",
                ("anchors", "[K, 2]", "[2]")),
            "num_classes": BadInput(
                "opforge.ops.yolo_postprocess([tf.ones([1, 2, 2, 5])], [[10, 13]], [[0]], 0, 64)",
                ("YoloPostprocess", "num_classes", "at least 1", "0")),
            "input_size": BadInput(
                "opforge.ops.yolo_postprocess([tf.ones([1, 2, 2, 7])], [[10, 13]], [[0]], 2, [64, 0])",
                ("YoloPostprocess", "input_size", "[64, 0]")),
            "max_detections zero": BadInput(
                "opforge.ops.yolo_postprocess([tf.ones([1, 2, 2, 7])], [[10, 13]], [[0]], 2, 64, max_detections=0)",
                ("YoloPostprocess", "max_detections", "positive", "0")),
            "iou above 1": BadInput(
                "opforge.ops.yolo_postprocess([tf.ones([1, 2, 2, 7])], [[10, 13]], [[0]], 2, 64, iou_threshold=2.0)",
                ("iou_threshold", "[0, 1]", "2")),
            "score NaN": BadInput(
                "opforge.ops.yolo_postprocess([tf.ones([1, 2, 2, 7])], [[10, 13]], [[0]], 2, 64, "
                "score_threshold=float('nan'))",
                ("score_threshold", "NaN")),
            "dtypes differ": BadInput(
                "opforge.ops.yolo_postprocess([tf.ones([1, 2, 2, 7]), tf.ones([1, 4, 4, 7], tf.float16)], "
                "[[10, 13], [16, 30]], [[1], [0]], 2, 64)",
                ("head_outputs[1]", "float32", "float16")),
            "int maps": BadInput(
                "opforge.ops.yolo_postprocess([tf.ones([1, 2, 2, 7], tf.int32)], [[10, 13]], [[0]], 2, 64)",
                ("head_outputs[0]", "int32")),
            "anchors NaN": BadInput(
                "opforge.ops.yolo_postprocess([tf.ones([1, 2, 2, 7])], [[10, float('nan')]], [[0]], 2, 64)",
                ("YoloPostprocess", "anchors[0]", "finite, positive", "[10, nan]")),
            "anchors zero": BadInput(
                "opforge.ops.yolo_postprocess([tf.ones([1, 2, 2, 7])], [[10, 13], [0, 4]], [[1]], 2, 64)",
                ("YoloPostprocess", "anchors[1]", "finite, positive", "[0, 4]")),
            "max_log_scale NaN": BadInput(
                "opforge.ops.yolo_postprocess([tf.ones([1, 2, 2, 7])], [[10, 13]], [[0]], 2, 64, "
                "max_log_scale=float('nan'))",
                ("YoloPostprocess", "max_log_scale", "got nan")),
            "clip not bool": BadInput(
                "opforge.ops.yolo_postprocess([tf.ones([1, 2, 2, 7])], [[10, 13]], [[0]], 2, 64, clip_boxes=1)",
                ("clip_boxes", "bool", "1")),
        },
    ),
)

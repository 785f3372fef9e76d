"""Batched per-class NMS: `opforge.ops.combined_non_max_suppression`, a drop-in for
`tf.image.combined_non_max_suppression` with Gaussian soft-NMS added; C++ op
`Opforge>CombinedNonMaxSuppression` (CPU only; no gradient)."""
from __future__ import annotations

import collections
import numbers
from typing import Optional

import numpy as np
import tensorflow as tf

from opforge.ops._common import (check_dtype, dtype_error, lib, python_number, short_repr, to_tensor, type_error,
                                 value_error)
from opforge.ops.spec import BadInput, Case, OpSpec, Sample, SpeedCase, SpeedRun

__all__ = ["combined_non_max_suppression", "CombinedNonMaxSuppressionResult"]
OP_NAMES = ("Opforge>CombinedNonMaxSuppression",)
# Ops with a CPU kernel only (`opforge doctor` and `make gpu-build-check` read this).
CPU_ONLY = ("Opforge>CombinedNonMaxSuppression",)

NMS_DTYPES = (tf.float16, tf.bfloat16, tf.float32)
_OP = "CombinedNonMaxSuppression"

CombinedNonMaxSuppressionResult = collections.namedtuple(
    "CombinedNonMaxSuppressionResult",
    ["nmsed_boxes", "nmsed_scores", "nmsed_classes", "valid_detections"])
CombinedNonMaxSuppressionResult.__doc__ = """What `combined_non_max_suppression` returns, as
tf.image.combined_non_max_suppression: nmsed_boxes [B, D, 4], nmsed_scores [B, D],
nmsed_classes [B, D] (float32), valid_detections [B] (int32)."""


def _int32_error(op: str, name: str, given) -> Exception:
    """A size that is no int32 where TensorFlow's function wants one: a ValueError eagerly (its
    conversion to the op's int32, "Tensor conversion requested dtype int32 for Tensor with dtype
    int64", which TensorFlow's own tests expect for max_total_size=2**31), a TypeError while a graph
    is built (the op's type check)."""
    error = value_error if tf.executing_eagerly() else type_error
    return error(op, name, "an int32 (TensorFlow's op takes int32 sizes)", given)


def _scalar(name: str, value, dtype, op: str = _OP, converted_first: bool = False, exact_int32: bool = True):
    """A scalar input of the op (a size or a threshold) from a tensor or a Python number, with
    the error classes tf.image.combined_non_max_suppression raises for the same value: None a
    ValueError; another type, or a Python size that is no int32 (3.5, 2**31), a TypeError, as
    TensorFlow's op arguments; a size tensor that is not int32 as TensorFlow refuses one
    (_int32_error). `converted_first`: TensorFlow converts the value to a tensor first
    (max_total_size), so a Python size that is no int32 is a tensor of the wrong dtype there.
    `exact_int32=False` (yolo_postprocess, which replaces no TensorFlow function) takes any
    integer tensor whose values fit int32, checked when it runs."""
    if isinstance(value, (tf.Tensor, tf.Variable, np.ndarray)):
        t = tf.convert_to_tensor(value)
        if dtype.is_integer and t.dtype != dtype and (exact_int32 or not t.dtype.is_integer):
            raise _int32_error(op, name, f"a {t.dtype.name} tensor")
        if dtype.is_integer and t.dtype != dtype:
            # A cast would wrap 2**32 + 10 to 10: values beyond int32 are an error instead.
            with tf.control_dependencies([tf.debugging.assert_equal(
                    tf.cast(tf.cast(t, dtype), t.dtype), t, message=f"{op}: {name} must be an int32, got a "
                                                                  "value beyond int32")]):
                return tf.cast(t, dtype)
        return tf.cast(t, dtype)
    expected = "a number" if dtype.is_floating else "an int32"
    if value is None:
        raise value_error(op, name, expected, "None")
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise type_error(op, name, expected, short_repr(value))
    if dtype.is_integer:
        if not isinstance(value, numbers.Integral) or abs(int(value)) > 2**31 - 1:
            if converted_first:
                raise _int32_error(op, name, short_repr(value))
            raise type_error(op, name, expected, short_repr(value))
        return tf.constant(value, dtype)
    # A float beyond the float32 range is +-inf there (a threshold of 1e39 keeps nothing).
    return tf.constant(python_number(op, name, value), dtype)


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
    name: Optional[str] = None,
) -> CombinedNonMaxSuppressionResult:
    """Greedy per-class non-maximum suppression over a batch, the survivors of all classes merged
    by score.

    With `soft_nms_sigma=0`, the same arguments, outputs, dtypes, shapes, padding and clipping as
    `tf.image.combined_non_max_suppression`, and the same results wherever scores have no ties
    (on ties: the lower box index first within a class, then the lower class in the merge;
    TensorFlow leaves the order unspecified), and kept scores above -1 (TensorFlow's placeholder
    entries, score -1 and class -1, can displace detections scoring below -1; opforge returns
    the detections). With `soft_nms_sigma > 0`, Gaussian soft-NMS per
    class, step for step `tf.image.non_max_suppression_with_scores` with that sigma (its scores
    are the decayed ones; `iou_threshold` plays no part, as there).

    Args:
      boxes: [B, N, q, 4] float16, bfloat16 or float32 (q = 1 or num_classes), (y1, x1, y2, x2)
        in either corner order.
      scores: [B, N, num_classes], the dtype of boxes.
      max_output_size_per_class: boxes kept per class (int, > 0).
      max_total_size: boxes returned per image (int, > 0).
      iou_threshold: in [0, 1]; a box overlapping a kept one by more is dropped.
      score_threshold: boxes with score <= this are never kept.
      pad_per_class: pad to min(max_total_size, max_output_size_per_class * num_classes) rows
        instead of max_total_size.
      clip_boxes: clip the returned coordinates to [0, 1].
      soft_nms_sigma: > 0 for Gaussian soft-NMS.

    Runs on the CPU (parallel over images and classes); there is no GPU kernel, and TensorFlow
    places the op on the CPU in a GPU process. No gradient.

    Raises:
      The exception classes tf.image.combined_non_max_suppression raises for the same call:
      TypeError for arguments of the wrong Python type; for a size that is not an int32
      (2**31, an int64 tensor) ValueError eagerly and TypeError in tf.function, as TensorFlow's
      own tests expect (TensorFlow's eager fast path raises InvalidArgumentError there when every
      other argument is a tensor); inside tf.function, ValueError for shapes its shape function
      refuses; InvalidArgumentError for what the kernel refuses (thresholds, sizes <= 0, ranks
      eagerly). Every message names the argument, what was expected and what was given.

    Returns:
      A CombinedNonMaxSuppressionResult (nmsed_boxes, nmsed_scores, nmsed_classes,
      valid_detections).
    """
    boxes = to_tensor(_OP, "boxes", boxes)
    check_dtype(_OP, "boxes", boxes, NMS_DTYPES)
    scores = to_tensor(_OP, "scores", scores)
    if scores.dtype != boxes.dtype:
        raise dtype_error(_OP, "scores", f"of the dtype of boxes, {boxes.dtype.name}", scores.dtype.name)
    for attr, value in (("pad_per_class", pad_per_class), ("clip_boxes", clip_boxes)):
        if not isinstance(value, bool):
            raise type_error(_OP, attr, "a Python bool", repr(value))
    out = lib().opforge_combined_non_max_suppression(
        boxes, scores,
        _scalar("max_output_size_per_class", max_output_size_per_class, tf.int32),
        _scalar("max_total_size", max_total_size, tf.int32, converted_first=True),
        _scalar("iou_threshold", iou_threshold, tf.float32),
        _scalar("score_threshold", score_threshold, tf.float32),
        _scalar("soft_nms_sigma", soft_nms_sigma, tf.float32),
        pad_per_class=pad_per_class, clip_boxes=clip_boxes, name=name)
    return CombinedNonMaxSuppressionResult(*out)


tf.no_gradient("Opforge>CombinedNonMaxSuppression")


# --- the reference: TensorFlow's own ops ------------------------------------------------------------


def tf_reference(boxes, scores, max_output_size_per_class, max_total_size, iou_threshold=0.5,
                 score_threshold=float("-inf"), pad_per_class=False, clip_boxes=True,
                 soft_nms_sigma=0.0):
    """TensorFlow's answer on float32 copies of the inputs: tf.image.combined_non_max_suppression
    for hard NMS; for soft-NMS (which that op lacks) tf.image.non_max_suppression_with_scores per
    image and class, merged by score (stable: class order on ties), clipped and padded as the
    combined op does. Outputs in the dtype of the inputs."""
    dtype = boxes.dtype
    b32, s32 = tf.cast(boxes, tf.float32), tf.cast(scores, tf.float32)
    if soft_nms_sigma == 0:
        out = tf.image.combined_non_max_suppression(
            b32, s32, max_output_size_per_class, max_total_size, iou_threshold, score_threshold,
            pad_per_class, clip_boxes)
        return [tf.cast(out[0], dtype), tf.cast(out[1], dtype), out[2], out[3]]
    batch, n, q, _ = b32.shape
    classes = s32.shape[2]
    d = max_total_size if not pad_per_class else min(max_total_size, max_output_size_per_class * classes)
    out_boxes = np.zeros((batch, d, 4), np.float32)
    out_scores = np.zeros((batch, d), np.float32)
    out_classes = np.zeros((batch, d), np.float32)
    valid = np.zeros((batch,), np.int32)
    for i in range(batch):
        kept = []  # (score, class, box), class-major
        for c in range(classes):
            cb = b32[i, :, c if q > 1 else 0, :]
            idx, sc = tf.image.non_max_suppression_with_scores(
                cb, s32[i, :, c], min(max_output_size_per_class, n), iou_threshold, score_threshold,
                soft_nms_sigma)
            kept += [(float(s), c, cb[j].numpy()) for j, s in zip(idx.numpy(), sc.numpy())]
        order = sorted(range(len(kept)), key=lambda k: -kept[k][0])[:d]
        for row, k in enumerate(order):
            s, c, box = kept[k]
            out_boxes[i, row] = np.clip(box, 0, 1) if clip_boxes else box
            out_scores[i, row], out_classes[i, row] = s, c
        valid[i] = len(order)
    return [tf.cast(out_boxes, dtype), tf.cast(out_scores, dtype), tf.constant(out_classes),
            tf.constant(valid)]


# --- spec ---------------------------------------------------------------------------------------


def distinct_scores(batch: int, n: int, classes: int, seed: int, spread: float = 1 / 64):
    """Scores with no ties within an image, exact in float16 and bfloat16 (integers times a
    power of two, at most 256 of them): a permutation of (k - n*classes/2) * spread."""
    assert n * classes <= 256
    rng = np.random.default_rng(seed)
    return np.stack([(rng.permutation(n * classes) - n * classes // 2).reshape(n, classes) * spread
                     for _ in range(batch)])


def random_nms_boxes(batch: int, n: int, q: int, seed: int):
    """Boxes (y1, x1, y2, x2) clustered so that many overlap, some beyond [0, 1] (to clip), some
    given with y1 > y2 or x1 > x2, a few degenerate (zero area)."""
    rng = np.random.default_rng(seed)
    centre = rng.uniform(-0.05, 1.05, (batch, 1 + n // 6, q, 2))
    centre = np.repeat(centre, 6, axis=1)[:, :n] + rng.normal(0, 0.03, (batch, n, q, 2))
    size = rng.uniform(0.05, 0.4, (batch, n, q, 2))
    boxes = np.concatenate([centre - size / 2, centre + size / 2], -1)
    flip = rng.random((batch, n, q)) < 0.2
    boxes[flip] = boxes[flip][:, [2, 3, 0, 1]]
    boxes[:, ::11, :, 2] = boxes[:, ::11, :, 0]  # zero height
    return boxes


def _case(name, batch, n, classes, q, seed, **attrs):
    boxes = random_nms_boxes(batch, n, q, seed)
    return Case(name, (Sample(boxes.shape, values=boxes, differentiable=False),
                       Sample((batch, n, classes), values=distinct_scores(batch, n, classes, seed),
                              differentiable=False, ties=False)),
                dict(attrs))


def yolo_like_detections(batch: int, seed: int = 0):
    """What NMS sees after a 416x416 YOLO-v3 head (3 scales, A=3, C=80): boxes [B, 10647, 1, 4]
    yxyx normalised, scores [B, 10647, 80], from features whose objectness logits are mostly
    low, as in a trained detector."""
    from opforge.ops.yolo_decode import YOLOV3_SPEED_ANCHORS, YOLOV3_SPEED_MASKS, yolo_decode

    boxes, scores = [], []
    for s, (grid, mask) in enumerate(zip((13, 26, 52), YOLOV3_SPEED_MASKS)):
        f = tf.random.normal((batch, grid, grid, 3, 85), seed=seed + s)
        shift = tf.constant([0.0] * 4 + [-5.0] + [-3.0] * 80)
        scale = tf.constant([1.0] * 4 + [3.0] + [2.0] * 80)
        out = yolo_decode(f * scale + shift, YOLOV3_SPEED_ANCHORS[list(mask)], 80, 416,
                          box_format="yxyx", normalized=True)
        boxes.append(out.boxes)
        scores.append(out.class_scores)
    return tf.concat(boxes, 1)[:, :, None, :], tf.concat(scores, 1)


def _nms_speed(score_threshold: float, soft: bool = False) -> SpeedCase:
    def setup(size, dtype):
        batch = 8 if size is None else max(1, int(round(size / (10647 * 80))))
        boxes, scores = (tf.cast(t, dtype) for t in yolo_like_detections(batch))
        kw = dict(max_output_size_per_class=100, max_total_size=100, iou_threshold=0.5,
                  score_threshold=score_threshold)
        label = f"B={batch}, 10647 boxes x 80 classes, score_threshold {score_threshold}"
        # TensorFlow's NMS ops take float32 only: in another dtype the rival casts its inputs to
        # float32 and its boxes and scores back (tf_reference; no casts in float32).
        cast = "" if dtype == tf.float32 else f", tf in float32 with casts from and to {dtype.name}"
        if soft:
            kw["soft_nms_sigma"] = 0.5
            return SpeedRun(label + f", soft-NMS sigma 0.5 (rival: per-class tf.image soft-NMS{cast})", {
                "opforge": lambda: combined_non_max_suppression(boxes, scores, **kw),
                "tf": lambda: tf_reference(boxes, scores, **kw)})
        if dtype == tf.float32:
            return SpeedRun(label, {
                "opforge": lambda: combined_non_max_suppression(boxes, scores, **kw),
                "tf": lambda: tf.image.combined_non_max_suppression(boxes, scores, **kw)})
        return SpeedRun(label + f" (rival: tf.image.combined_non_max_suppression{cast})", {
            "opforge": lambda: combined_non_max_suppression(boxes, scores, **kw),
            "tf": lambda: tf_reference(boxes, scores, **kw)})

    return SpeedCase(setup, max_repeats=20 if not soft else 3)


SPECS = (
    OpSpec(
        name="combined_non_max_suppression",
        replaces="tf.image.combined_non_max_suppression",
        op=combined_non_max_suppression,
        reference=tf_reference,
        reference_name="tf.image.combined_non_max_suppression / non_max_suppression_with_scores",
        dtypes=NMS_DTYPES,
        cases=(
            _case("q=1", 2, 40, 6, 1, 1, max_output_size_per_class=5, max_total_size=12),
            _case("q=C no clip", 2, 30, 5, 5, 2, max_output_size_per_class=4, max_total_size=9,
                  clip_boxes=False),
            _case("pad per class", 3, 25, 4, 1, 3, max_output_size_per_class=3, max_total_size=100,
                  pad_per_class=True, iou_threshold=0.3),
            _case("pad per class, total smaller", 2, 25, 4, 4, 4, max_output_size_per_class=6,
                  max_total_size=10, pad_per_class=True, score_threshold=0.0),
            _case("iou 0", 2, 30, 3, 1, 5, max_output_size_per_class=10, max_total_size=20,
                  iou_threshold=0.0),
            _case("iou 1", 2, 30, 3, 1, 6, max_output_size_per_class=30, max_total_size=50,
                  iou_threshold=1.0),
            _case("nothing above threshold", 2, 20, 3, 1, 7, max_output_size_per_class=5,
                  max_total_size=8, score_threshold=10.0),
            _case("more kept than room", 1, 50, 4, 1, 8, max_output_size_per_class=50,
                  max_total_size=7, iou_threshold=0.9),
            _case("soft q=1", 2, 40, 4, 1, 9, max_output_size_per_class=8, max_total_size=20,
                  soft_nms_sigma=0.5),
            _case("soft q=C threshold", 2, 30, 3, 3, 10, max_output_size_per_class=10,
                  max_total_size=15, soft_nms_sigma=0.2, score_threshold=0.0, clip_boxes=False),
            _case("soft pad per class", 1, 60, 4, 1, 11, max_output_size_per_class=5,
                  max_total_size=100, soft_nms_sigma=1.0, pad_per_class=True),
        ),
        forward_tolerance=0.0,
        differentiable=False,
        determinism_case=Case(
            "yolo-sized", (Sample((4, 2000, 1, 4), values=random_nms_boxes(4, 2000, 1, 12), differentiable=False),
                           Sample((4, 2000, 20), seed=13, differentiable=False)),
            dict(max_output_size_per_class=50, max_total_size=100, score_threshold=0.5)),
        speed=(_nms_speed(0.5), _nms_speed(0.01), _nms_speed(0.01, soft=True)),
        bad_inputs={
            "boxes rank": BadInput(
                "opforge.ops.combined_non_max_suppression(tf.ones([1, 5, 4]), tf.ones([1, 5, 2]), 3, 4)",
                ("boxes", "4-D", "[1, 5, 4]")),
            "graph boxes rank": BadInput(
                "tf.function(lambda b: opforge.ops.combined_non_max_suppression(b, tf.ones([1, 5, 2]), 3, 4), "
                "input_signature=[tf.TensorSpec([None, None, None], tf.float32)]).get_concrete_function()",
                ("CombinedNonMaxSuppression", "boxes", "rank 3"), "ValueError"),  # a shape-function error while tracing is a ValueError, as in TensorFlow
            "scores rank": BadInput(
                "opforge.ops.combined_non_max_suppression(tf.ones([1, 5, 1, 4]), tf.ones([1, 5]), 3, 4)",
                ("scores", "3-D", "[1, 5]")),
            "q": BadInput(
                "opforge.ops.combined_non_max_suppression(tf.ones([1, 5, 3, 4]), tf.ones([1, 5, 2]), 3, 4)",
                ("boxes", "q = 1 or num_classes = 2", "[1, 5, 3, 4]")),
            "num boxes": BadInput(
                "opforge.ops.combined_non_max_suppression(tf.ones([1, 5, 1, 4]), tf.ones([1, 6, 2]), 3, 4)",
                ("scores", "[1, 5, 1, 4]", "[1, 6, 2]")),
            "last dim": BadInput(
                "opforge.ops.combined_non_max_suppression(tf.ones([1, 5, 1, 3]), tf.ones([1, 5, 2]), 3, 4)",
                ("boxes", "[batch, num_boxes, q, 4]", "[1, 5, 1, 3]")),
            "per class zero": BadInput(
                "opforge.ops.combined_non_max_suppression(tf.ones([1, 5, 1, 4]), tf.ones([1, 5, 2]), 0, 4)",
                ("max_output_size_per_class", "positive", "0")),
            "total negative": BadInput(
                "opforge.ops.combined_non_max_suppression(tf.ones([1, 5, 1, 4]), tf.ones([1, 5, 2]), 3, -4)",
                ("max_total_size", "positive", "-4")),
            "iou above 1": BadInput(
                "opforge.ops.combined_non_max_suppression(tf.ones([1, 5, 1, 4]), tf.ones([1, 5, 2]), 3, 4, iou_threshold=1.5)",
                ("iou_threshold", "[0, 1]", "1.5")),
            "score NaN": BadInput(
                "opforge.ops.combined_non_max_suppression(tf.ones([1, 5, 1, 4]), tf.ones([1, 5, 2]), 3, 4, score_threshold=float('nan'))",
                ("score_threshold", "NaN")),
            "sigma negative": BadInput(
                "opforge.ops.combined_non_max_suppression(tf.ones([1, 5, 1, 4]), tf.ones([1, 5, 2]), 3, 4, soft_nms_sigma=-1.0)",
                ("soft_nms_sigma", ">= 0", "-1"), tf_code=""),
            "size not scalar": BadInput(
                "opforge.ops.combined_non_max_suppression(tf.ones([1, 5, 1, 4]), tf.ones([1, 5, 2]), tf.constant([3, 3]), 4)",
                ("max_output_size_per_class", "scalar", "[2]")),
            "size beyond int32": BadInput(
                "opforge.ops.combined_non_max_suppression(tf.ones([1, 5, 1, 4]), tf.ones([1, 5, 2]), np.array(2**32 + 10), 4)",
                ("max_output_size_per_class", "int32", "int64"), error="ValueError"),
            # TensorFlow's own test (image_ops_test.py, testInvalidPyInput): TypeError or ValueError.
            "total 2**31": BadInput(
                "opforge.ops.combined_non_max_suppression([[[[0, 0, 1, 1], [0, 0.1, 1, 1.1]]]], [[[0.9, 0.75]]], 5, 2**31)",
                ("max_total_size", "int32", "2147483648"), error="ValueError"),
            "size None": BadInput(
                "opforge.ops.combined_non_max_suppression(tf.ones([1, 5, 1, 4]), tf.ones([1, 5, 2]), 3, 4, iou_threshold=None)",
                ("iou_threshold", "None"), error="ValueError"),
            "threshold text": BadInput(
                "opforge.ops.combined_non_max_suppression(tf.ones([1, 5, 1, 4]), tf.ones([1, 5, 2]), 3, 4, score_threshold='a')",
                ("score_threshold", "a number", "'a'"), error="TypeError"),
            "size float": BadInput(
                "opforge.ops.combined_non_max_suppression(tf.ones([1, 5, 1, 4]), tf.ones([1, 5, 2]), 3.5, 4)",
                ("max_output_size_per_class", "an int", "3.5"), error="TypeError"),
            "scores dtype": BadInput(
                "opforge.ops.combined_non_max_suppression(tf.ones([1, 5, 1, 4]), tf.ones([1, 5, 2], tf.float16), 3, 4)",
                ("scores", "float32", "float16")),
            "boxes float64": BadInput(
                "opforge.ops.combined_non_max_suppression(tf.ones([1, 5, 1, 4], tf.float64), tf.ones([1, 5, 2], tf.float64), 3, 4)",
                ("boxes", "float64")),
            "pad not bool": BadInput(
                "opforge.ops.combined_non_max_suppression(tf.ones([1, 5, 1, 4]), tf.ones([1, 5, 2]), 3, 4, pad_per_class=1)",
                ("pad_per_class", "bool", "1"), error="TypeError"),
        },
    ),
)

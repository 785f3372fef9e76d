"""YoloTargets beyond its spec: later row wins, the tolerance and the clamp, and the same targets
as yolov3-tf2's transform_targets (the speed rival)."""
from __future__ import annotations

import importlib

import numpy as np
import tensorflow as tf

import opforge
from helpers import bits_equal

targets_mod = importlib.import_module("opforge.ops.yolo_targets")
yolo_targets = opforge.ops.yolo_targets


def test_targets_later_row_wins_and_padding_is_skipped():
    boxes = np.array([[[0.10, 0.10, 0.30, 0.30], [0.11, 0.12, 0.31, 0.29], [0.0, 0.0, 0.0, 0.0]]], np.float32)
    anchors = np.array([[0.2, 0.2], [0.9, 0.9]], np.float32)
    out = yolo_targets(boxes, [[3, 5, 7]], anchors, [[0, 1]], [4])
    y = out[0].numpy()
    assert np.count_nonzero(y[..., 4]) == 1
    np.testing.assert_array_equal(y[0, 0, 0, 0], np.float32([0.11, 0.12, 0.31, 0.29, 1, 5]))
    # Swapped order: the other box wins.
    y = yolo_targets(boxes[:, [1, 0, 2]], [[5, 3, 7]], anchors, [[0, 1]], [4])[0].numpy()
    np.testing.assert_array_equal(y[0, 0, 0, 0], np.float32([0.10, 0.10, 0.30, 0.30, 1, 3]))


def test_targets_tolerate_small_excursions_and_clamp_the_cell():
    boxes = np.array([[[0.9, 0.95, 1.005, 1.0], [-0.005, 0.0, 0.1, 0.1]]], np.float32)
    y = yolo_targets(boxes, [[1, 2]], [[0.1, 0.1]], [[0]], [(3, 5)])[0].numpy()
    assert y[0, 2, 4, 0, 4] == 1 and y[0, 0, 0, 0, 4] == 1


def test_targets_match_yolov3_tf2_transform_targets():
    """yolov3-tf2's function (the speed rival) and ours agree away from cell borders (the two
    compute the cell as floor(c * g) and c // (1 / g))."""
    boxes, classes = targets_mod.random_boxes(4, 50, seed=21, padding=5)
    anchors = targets_mod.YOLOV3_NORMALIZED_ANCHORS.astype(np.float32)
    b = tf.constant(boxes, tf.float32)
    ours = yolo_targets(b, classes, anchors, targets_mod.YOLOV3_MASKS, (13, 26, 52))
    theirs = targets_mod.tf_transform_targets(b, tf.constant(classes, tf.int32), anchors,
                                               targets_mod.YOLOV3_MASKS, (13, 26, 52))
    for o, t in zip(ours, theirs):
        assert bits_equal(o.numpy(), t.numpy())


def test_targets_float64_and_empty_inputs():
    out = yolo_targets(tf.zeros([0, 5, 4], tf.float64), tf.zeros([0, 5], tf.int32), [[0.1, 0.1]], [[0]], [3])
    assert out[0].shape == (0, 3, 3, 1, 6) and out[0].dtype == tf.float64
    out = yolo_targets(tf.zeros([2, 0, 4]), tf.zeros([2, 0], tf.int32), [[0.1, 0.1]], [[0]], [3])
    assert out[0].shape == (2, 3, 3, 1, 6) and not out[0].numpy().any()




def test_padding_is_an_all_zero_row_where_yolov3_tf2_skips_every_row_with_x2_zero():
    """opforge's padding rule is "all four coordinates zero"; yolov3-tf2's `transform_targets`
    skips every row whose x2 is 0. The two agree on the padding yolov3-tf2's own loader writes
    (all-zero rows) and differ only on a box of zero width on the image's left edge
    (x1 <= x2 = 0, e.g. a box clipped to the image): a target here, dropped there."""
    anchors = targets_mod.YOLOV3_NORMALIZED_ANCHORS.astype(np.float32)
    masks, grids = targets_mod.YOLOV3_MASKS, (13, 26, 52)
    real = [[0.10, 0.10, 0.30, 0.30], [0.50, 0.40, 0.90, 0.80]]
    padding = [[0.0, 0.0, 0.0, 0.0]] * 2
    left_edge = [[0.0, 0.30, 0.0, 0.60], [-0.005, 0.70, 0.0, 0.75]]  # x2 == 0, not all zero
    boxes = tf.constant([real + padding + left_edge], tf.float32)
    classes = tf.constant([[3, 5, 0, 0, 7, 8]], tf.int32)

    ours = yolo_targets(boxes, classes, anchors, masks, grids)
    theirs = targets_mod.tf_transform_targets(boxes, classes, anchors, masks, grids)
    # Without the left-edge rows both give the same targets, bit for bit: padding skipped alike.
    ours_without = yolo_targets(boxes[:, :4], classes[:, :4], anchors, masks, grids)
    for o, t in zip(ours_without, theirs):
        assert bits_equal(o.numpy(), t.numpy())
    # With them, opforge assigns both boxes (objectness 1, their classes) and yolov3-tf2 nothing more.
    assigned = [o.numpy()[..., 4].sum() for o in ours]
    assert sum(assigned) == 4 and sum(t.numpy()[..., 4].sum() for t in theirs) == 2
    extra = np.concatenate([(o.numpy() - w.numpy())[o.numpy()[..., 4] != w.numpy()[..., 4]]
                            for o, w in zip(ours, ours_without)])
    assert sorted(extra[:, 5].tolist()) == [7, 8]
    # Under yolov3-tf2's rule (x2 == 0 is padding) the left-edge rows would be dropped: the
    # same targets as giving only the first four rows.
    yolov3_rule = tf.where(boxes[..., 2:3] == 0, tf.zeros_like(boxes), boxes)
    for o, w in zip(yolo_targets(yolov3_rule, classes, anchors, masks, grids), ours_without):
        assert bits_equal(o.numpy(), w.numpy())

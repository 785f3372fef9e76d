"""YoloDecode beyond its spec: inf/NaN safety, the clamp bound, NaN isolation, argmax ties, the
4-D and 5-D layouts, the TensorFlow-ops rival, all three gradients, the shape function."""
from __future__ import annotations

import importlib
import math

import numpy as np
import pytest
import tensorflow as tf

import opforge
from helpers import bits_equal

decode_mod = importlib.import_module("opforge.ops.yolo_decode")
yolo_decode = opforge.ops.yolo_decode
yolo_targets = opforge.ops.yolo_targets

ANCHORS = np.array([[10, 13], [16, 30], [33, 23]], np.float32)


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16, tf.float32, tf.float64])
def test_decode_never_gives_inf_or_nan_for_finite_features(dtype):
    big = float(tf.as_dtype(dtype).max)
    values = np.array([0.0, 1e4, -1e4, big, -big, 88.0, 89.0, -104.0, 710.0, -710.0] * 3, np.float64)
    features = tf.cast(tf.constant(np.resize(values, (2, 3, 3, 2 * 8))), dtype)
    out = yolo_decode(features, ANCHORS[:2], 3, (96, 96))
    for t in (out.boxes, out.scores, out.class_scores):
        assert np.isfinite(t.numpy().astype(np.float64)).all()


def test_decode_clamps_the_box_scale_at_the_documented_bound():
    bound = decode_mod.YOLO_MAX_LOG_SCALE
    assert bound == pytest.approx(math.log(1000 / 16))
    f = np.zeros((1, 1, 1, 6), np.float64)
    for tw, expected in ((bound - 0.5, math.exp(bound - 0.5)), (bound, 1000 / 16), (10.0, 1000 / 16),
                         (1e300, 1000 / 16)):
        f[..., 2] = tw
        out = yolo_decode(tf.constant(f), [[2.0, 3.0]], 1, 32, box_format="center_xywh")
        assert out.boxes.numpy()[0, 0, 2] == pytest.approx(2.0 * expected, rel=1e-12)
    # Above the bound the width does not move with tw: no gradient; below it, exp(tw) * anchor.
    for tw, grad in ((10.0, 0.0), (1.0, 2.0 * math.e)):
        f[..., 2] = tw
        x = tf.constant(f)
        with tf.GradientTape() as tape:
            tape.watch(x)
            w = yolo_decode(x, [[2.0, 3.0]], 1, 32, box_format="center_xywh").boxes[0, 0, 2]
        assert tape.gradient(w, x).numpy()[0, 0, 0, 2] == pytest.approx(grad)


def test_decode_nan_stays_in_its_box():
    f = np.random.default_rng(0).normal(size=(1, 2, 2, 3 * 7)).astype(np.float32)
    f[0, 1, 0, 7 + 6] = np.nan  # cell (row 1, col 0), anchor 1, class 1
    f[0, 0, 1, 14 + 0] = np.nan  # cell (row 0, col 1), anchor 2, tx
    out = yolo_decode(f, ANCHORS, 2, 64)
    nan_scores = np.isnan(out.scores.numpy()[0])
    nan_boxes = np.isnan(out.boxes.numpy()[0]).any(-1)
    assert np.flatnonzero(nan_scores).tolist() == [(1 * 2 + 0) * 3 + 1]
    assert out.class_indices.numpy()[0, (1 * 2 + 0) * 3 + 1] == 1
    assert np.flatnonzero(nan_boxes).tolist() == [(0 * 2 + 1) * 3 + 2]


def test_decode_ties_go_to_the_lowest_class():
    f = np.zeros((1, 1, 1, 5 + 6), np.float32)
    f[0, 0, 0, 5:] = [0.5, 2.0, -1.0, 2.0, 2.0, 1.0]
    out = yolo_decode(f, [[4.0, 4.0]], 6, 32)
    assert out.class_indices.numpy().tolist() == [[1]]
    f[0, 0, 0, 5:] = 40.0  # every class score rounds to the same value
    assert yolo_decode(f, [[4.0, 4.0]], 6, 32).class_indices.numpy().tolist() == [[0]]


def test_decode_4d_and_5d_features_agree_and_match_the_tf_rival():
    f = tf.random.normal((2, 5, 3, 3 * 9), seed=3)
    four = yolo_decode(f, ANCHORS, 4, (160, 96), normalized=True)
    five = yolo_decode(tf.reshape(f, (2, 5, 3, 3, 9)), ANCHORS, 4, (160, 96), normalized=True)
    rival = decode_mod.tf_yolo_decode(f, ANCHORS, 4, (160, 96), normalized=True)
    for a, b, c in zip(four, five, rival):
        assert bits_equal(a.numpy(), b.numpy())
        np.testing.assert_allclose(a.numpy(), c.numpy(), rtol=2e-6, atol=2e-7)


@pytest.mark.parametrize("output", ["boxes", "scores", "class_scores"])
@pytest.mark.parametrize("fmt", ["xyxy", "yxyx", "center_xywh"])
def test_decode_gradient_of_every_output_matches_float64_numerical(output, fmt):
    f = tf.constant(np.random.default_rng(5).normal(size=(2, 2, 3, 2 * 8)) * 1.5)
    anchors = tf.constant([[10.0, 14.0], [23.0, 27.0]], tf.float64)
    weights = tf.constant(np.random.default_rng(6).normal(size=(2, 12, 4 if output == "boxes" else 3)))

    def fn(x):
        out = getattr(yolo_decode(x, anchors, 3, (64, 96), box_format=fmt, normalized=fmt == "yxyx",
                                  scale_x_y=1.1), output)
        w = weights if output != "scores" else weights[..., 0]
        return tf.reduce_sum(out * w)

    theoretical, numerical = tf.test.compute_gradient(fn, [f], delta=1e-6)
    np.testing.assert_allclose(theoretical[0], numerical[0], atol=1e-6)


def test_decode_shape_function_keeps_n_when_the_grid_is_known():
    fn = tf.function(lambda x: yolo_decode(x, ANCHORS, 80, 416),
                     input_signature=[tf.TensorSpec([None, 13, 13, 255])])
    out = fn.get_concrete_function().structured_outputs
    assert [o.shape.as_list() for o in out] == [[None, 507, 4], [None, 507], [None, 507], [None, 507, 80]]
    fn = tf.function(lambda x: yolo_decode(x, ANCHORS, 80, 416),
                     input_signature=[tf.TensorSpec([None, None, None, 255])])
    assert fn.get_concrete_function().structured_outputs.class_scores.shape.as_list() == [None, None, 80]


def test_decode_gradient_op_reads_an_empty_gradient_as_zeros():
    """The gradient op takes [0] for an output without gradient and reads it as zeros (the same
    bits as explicit zeros); a wrong shape that is not [0] names the argument."""
    from opforge.ops._common import lib

    f = tf.random.normal((2, 3, 3, 2 * 8), seed=9)
    anchors = tf.constant([[10.0, 14.0], [23.0, 27.0]])
    boxes = yolo_decode(f, anchors, 3, 96).boxes
    attrs = dict(num_classes=3, input_size=[96, 96])
    absent = lib().opforge_yolo_decode_grad(2 * boxes, tf.zeros([0]), tf.zeros([0]), f, anchors, **attrs)
    explicit = lib().opforge_yolo_decode_grad(2 * boxes, tf.zeros([2, 18]), tf.zeros([2, 18, 3]), f, anchors, **attrs)
    assert bits_equal(absent.numpy(), explicit.numpy())
    with pytest.raises(tf.errors.InvalidArgumentError, match="grad_scores.*or \\[0\\]"):
        lib().opforge_yolo_decode_grad(2 * boxes, tf.zeros([3]), tf.zeros([0]), f, anchors, **attrs)


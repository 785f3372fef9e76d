"""YoloDecode beyond its spec: the exact formula exp(tw) * anchor_w by default against an
independent NumPy float64 reference (random N(0, 2) features, large tw in every dtype), saturation
at each dtype's largest value with zero gradients, the clamp when max_log_scale is given, bad
max_log_scale and anchors, inf/NaN safety, NaN isolation, argmax ties, the 4-D and 5-D layouts,
the TensorFlow-ops rival, all three gradients, the shape function."""
from __future__ import annotations

import importlib
import math
import re

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


def test_decode_clamps_the_box_scale_where_max_log_scale_is_given():
    bound = decode_mod.YOLO_MAX_LOG_SCALE
    assert bound == pytest.approx(math.log(1000 / 16))
    bound32 = float(np.float32(bound))  # a float32 attr, also for float64 maths
    f = np.zeros((1, 1, 1, 6), np.float64)
    for tw, expected in ((bound - 0.5, math.exp(bound - 0.5)), (bound32, math.exp(bound32)),
                         (10.0, math.exp(bound32)), (1e300, math.exp(bound32))):
        f[..., 2] = tw
        out = yolo_decode(tf.constant(f), [[2.0, 3.0]], 1, 32, box_format="center_xywh", max_log_scale=bound)
        assert out.boxes.numpy()[0, 0, 2] == pytest.approx(2.0 * expected, rel=1e-12)
        # Without it (the default) the box follows exp(tw) up to float64's range, then saturates.
        out = yolo_decode(tf.constant(f), [[2.0, 3.0]], 1, 32, box_format="center_xywh")
        want = min(2.0 * math.exp(min(tw, 800.0)), np.finfo(np.float64).max) if tw < 800 else np.finfo(np.float64).max
        assert out.boxes.numpy()[0, 0, 2] == pytest.approx(want, rel=1e-12)
    # Above the bound the width does not move with tw: no gradient; below it, exp(tw) * anchor.
    for tw, grad in ((10.0, 0.0), (1.0, 2.0 * math.e)):
        f[..., 2] = tw
        x = tf.constant(f)
        with tf.GradientTape() as tape:
            tape.watch(x)
            w = yolo_decode(x, [[2.0, 3.0]], 1, 32, box_format="center_xywh", max_log_scale=bound).boxes[0, 0, 2]
        assert tape.gradient(w, x).numpy()[0, 0, 0, 2] == pytest.approx(grad)
    # The default: exp(tw) * anchor at tw = 10 too.
    f[..., 2] = 10.0
    x = tf.constant(f)
    with tf.GradientTape() as tape:
        tape.watch(x)
        w = yolo_decode(x, [[2.0, 3.0]], 1, 32, box_format="center_xywh").boxes[0, 0, 2]
    assert tape.gradient(w, x).numpy()[0, 0, 0, 2] == pytest.approx(2.0 * math.exp(10.0), rel=1e-12)


# --- the exact formula by default, against an independent float64 reference -------------------

LARGEST = {tf.float16: 65504.0, tf.bfloat16: float(tf.bfloat16.max), tf.float32: float(np.finfo(np.float32).max),
           tf.float64: float(np.finfo(np.float64).max)}
# Relative to a coordinate's magnitude (|centre| + |size|): a few ulps of the compute type and
# one rounding to the dtype.
RTOL = {tf.float16: 2e-3, tf.bfloat16: 1.6e-2, tf.float32: 2e-6, tf.float64: 1e-13}


def reference_boxes(f, anchors, input_size, box_format="xyxy", normalized=False, scale_x_y=1.0,
                    max_log_scale=None, largest=None):
    """Boxes [B, N, 4] and each coordinate's magnitude from features f [B, H, W, A, 5+C] (any
    float, read as float64), written from the formula: bw = exp(tw) * anchor_w, in np.longdouble
    (which holds exp of any float32 and of float64 up to 11356), then saturated at `largest`."""
    ld = np.longdouble
    f = np.asarray(f, np.float64).astype(ld)
    a = np.asarray(anchors, np.float64).astype(ld)
    in_h, in_w = (input_size, input_size) if isinstance(input_size, int) else input_size
    b, h, w, na = f.shape[:4]
    cx = np.arange(w, dtype=ld)[None, None, :, None]
    cy = np.arange(h, dtype=ld)[None, :, None, None]
    s = ld(np.float32(scale_x_y))
    sig = lambda x: 1 / (1 + np.exp(-x))  # noqa: E731
    tw, th = f[..., 2], f[..., 3]
    if max_log_scale is not None:
        bound = ld(np.float32(max_log_scale))
        tw, th = np.minimum(tw, bound), np.minimum(th, bound)
    with np.errstate(over="ignore", invalid="ignore"):
        bx = (s * sig(f[..., 0]) - (s - 1) / 2 + cx) * ld(in_w) / w
        by = (s * sig(f[..., 1]) - (s - 1) / 2 + cy) * ld(in_h) / h
        bw, bh = np.exp(tw) * a[:, 0], np.exp(th) * a[:, 1]
        if normalized:
            bx, bw, by, bh = bx / in_w, bw / in_w, by / in_h, bh / in_h
        if box_format == "xyxy":
            boxes = np.stack([bx - bw / 2, by - bh / 2, bx + bw / 2, by + bh / 2], -1)
            mag = np.stack([abs(bx) + bw, abs(by) + bh] * 2, -1)
        elif box_format == "yxyx":
            boxes = np.stack([by - bh / 2, bx - bw / 2, by + bh / 2, bx + bw / 2], -1)
            mag = np.stack([abs(by) + bh, abs(bx) + bw] * 2, -1)
        else:
            boxes = np.stack([bx, by, bw, bh], -1)
            mag = np.stack([abs(bx) + bw, abs(by) + bh] * 2, -1)
    if largest is not None:
        boxes = np.clip(boxes, -largest, largest)
        mag = np.minimum(mag, largest)
    return boxes.reshape(b, -1, 4).astype(np.float64), mag.reshape(b, -1, 4).astype(np.float64)


def assert_boxes_match(got, want, mag, rtol, where=""):
    got = np.asarray(tf.cast(got, tf.float64))
    assert np.isnan(got).tolist() == np.isnan(want).tolist(), where
    ok = np.isnan(want) | (np.abs(got - want) <= rtol * mag + 1e-300)
    assert ok.all(), f"{where}: {got[~ok][:5]} against {want[~ok][:5]}"


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16, tf.float32, tf.float64])
@pytest.mark.parametrize("fmt,normalized", [("xyxy", False), ("yxyx", True), ("center_xywh", False),
                                            ("center_xywh", True)])
def test_decode_is_the_formula_at_random_normal_features(dtype, fmt, normalized):
    """N(0, 2) features: about 2% of tw, th lie past log(62.5), where the old clamp bit; every
    box is exp(tw) * anchor_w there too."""
    rng = np.random.default_rng(17)
    f = rng.normal(0, 2, (2, 7, 5, 3, 7))
    x = tf.cast(f.reshape(2, 7, 5, 21), dtype)
    out = yolo_decode(x, ANCHORS, 2, (224, 160), box_format=fmt, normalized=normalized, scale_x_y=1.05)
    fx = np.asarray(tf.cast(x, tf.float64)).reshape(f.shape)  # the values the op saw
    assert (fx[..., 2:4] > math.log(62.5)).sum() > 10
    anchors = np.asarray(tf.cast(tf.cast(ANCHORS, dtype), tf.float64))
    want, mag = reference_boxes(fx, anchors, (224, 160), fmt, normalized, 1.05, largest=LARGEST[dtype])
    assert_boxes_match(out.boxes, want, mag, RTOL[dtype], f"{dtype.name} {fmt}")


@pytest.mark.parametrize("dtype,top,window", [(tf.float64, 700.0, (708.0, 710.0, 711.0)),
                                              (tf.float32, 88.0, (89.0, 89.5, 90.0)),
                                              (tf.bfloat16, 88.0, (89.0, 89.5, 90.0)),
                                              (tf.float16, 11.0, ())])
@pytest.mark.parametrize("normalized", [False, True])
def test_decode_follows_exp_up_to_the_dtype_range_then_saturates(dtype, top, window, normalized):
    """tw from -20 to `top` (float64: 700, float32: 88...) and beyond (+10, +50%, 1e4, the dtype's
    max, +inf): the formula while the box fits the dtype, its largest value past that, never inf.
    `window`: where exp(tw) alone, or exp(tw) * anchor_w, overflows the compute type but the box
    does not (an anchor below 1, a normalised box): the formula there too."""
    tws = np.concatenate([np.linspace(-20, top, 41), window,
                          [top + 10, top * 1.5, 1e4, LARGEST[dtype], np.inf]])
    for aw in (30.0, 0.25):
        f = np.zeros((1, 1, len(tws), 1, 6))
        f[0, 0, :, 0, 2] = tws
        f[0, 0, :, 0, 3] = 1.0
        x = tf.cast(f.reshape(1, 1, len(tws), 6), dtype)
        out = yolo_decode(x, [[aw, 20.0]], 1, (416, 416), box_format="center_xywh", normalized=normalized)
        got = np.asarray(tf.cast(out.boxes, tf.float64))[0]
        assert np.isfinite(got).all()
        fx = np.asarray(tf.cast(x, tf.float64)).reshape(f.shape)
        anchors = np.asarray(tf.cast(tf.constant([[aw, 20.0]], dtype), tf.float64))
        want, mag = reference_boxes(fx, anchors, 416, "center_xywh", normalized, largest=LARGEST[dtype])
        assert_boxes_match(out.boxes, want, mag, RTOL[dtype], f"{dtype.name} aw {aw}")
        # Past the range: the largest value exactly, for the width only.
        assert (got[-3:, 2] == LARGEST[dtype]).all()
        # d w / d tw = w below the saturation, 0 at it.
        with tf.GradientTape() as tape:
            tape.watch(x)
            w = yolo_decode(x, [[aw, 20.0]], 1, (416, 416), box_format="center_xywh",
                            normalized=normalized).boxes[..., 2]
        g = np.asarray(tf.cast(tape.gradient(w, x), tf.float64))[0, 0, :, 2]
        saturated = want[0, :, 2] >= LARGEST[dtype]
        assert (g[saturated] == 0).all()
        inside = ~saturated & (want[0, :, 2] < LARGEST[dtype] / 4)  # far from the rounding edge
        tiny = 2 * float(np.finfo(dtype.as_numpy_dtype).smallest_subnormal)  # half's subnormals
        np.testing.assert_allclose(g[inside], want[0, inside, 2], rtol=2 * RTOL[dtype], atol=tiny)


def test_half_and_bfloat16_saturate_where_float_would_not():
    """The maths runs in float: a half box of a 1000-pixel anchor at tw = 5 (148413 px) and a
    bfloat16 box between bfloat16's and float32's largest values are written as the dtype's
    largest value, not rounded to inf."""
    f = np.zeros((1, 1, 1, 6))
    f[..., 2] = 5.0
    out = yolo_decode(tf.constant(f, tf.float16), [[1000.0, 10.0]], 1, 416, box_format="center_xywh")
    assert float(out.boxes[0, 0, 2]) == 65504.0
    out = yolo_decode(tf.constant(f, tf.float16), [[1000.0, 10.0]], 1, 416)  # xyxy
    assert np.asarray(out.boxes, np.float64)[0, 0, [0, 2]].tolist() == [-65504.0, 65504.0]
    f[..., 2] = 87.5  # exp(87.5) * 3.390625 = 3.397e38: finite in float32, above bfloat16's max
    out = yolo_decode(tf.constant(f, tf.bfloat16), [[3.390625, 10.0]], 1, 416, box_format="center_xywh")
    assert float(tf.cast(out.boxes[0, 0, 2], tf.float32)) == float(tf.bfloat16.max)


@pytest.mark.parametrize("fmt", ["xyxy", "yxyx", "center_xywh"])
def test_saturated_coordinates_have_zero_gradient_and_the_others_keep_theirs(fmt):
    f = np.random.default_rng(3).normal(size=(1, 1, 2, 1, 7))
    f[0, 0, 0, 0, 2] = 800.0  # box 0: its width overflows float64
    x = tf.constant(f.reshape(1, 1, 2, 7))
    weights = tf.constant(np.random.default_rng(4).normal(size=(1, 2, 4)))
    with tf.GradientTape() as tape:
        tape.watch(x)
        boxes = yolo_decode(x, [[10.0, 20.0]], 2, (64, 96), box_format=fmt).boxes
        loss = tf.reduce_sum(boxes * weights)
    g = tape.gradient(loss, x).numpy().reshape(2, 7)
    assert np.isfinite(g).all()
    assert g[0, 2] == 0.0  # tw of the saturated box
    if fmt != "center_xywh":
        assert g[0, 0] == 0.0  # tx moves only x1 and x2, both saturated
    else:
        assert g[0, 0] != 0.0
    assert g[0, 1] != 0.0 and g[0, 3] != 0.0  # ty, th untouched
    assert (g[1, :4] != 0.0).all()  # the other box
    x_coords = [1, 3] if fmt == "yxyx" else [0, 2] if fmt == "xyxy" else [2]
    assert np.isin(np.abs(boxes.numpy()[0, 0, x_coords]), [np.finfo(np.float64).max]).all()


def test_gradient_matches_float64_numerical_where_the_default_no_longer_clamps():
    """tw, th in [4.5, 18] (past log(62.5) = 4.14, where the old clamp gave 0), in every format:
    the C++ gradient against central differences, relative to the Jacobian's size."""
    rng = np.random.default_rng(11)
    f = rng.normal(size=(1, 2, 2, 2, 7))
    f[..., 2:4] = rng.uniform(4.5, 18.0, size=f[..., 2:4].shape)
    anchors = tf.constant([[10.0, 14.0], [23.0, 27.0]], tf.float64)
    for fmt, normalized in (("xyxy", False), ("yxyx", True), ("center_xywh", True)):
        weights = tf.constant(rng.normal(size=(1, 8, 4)))

        def fn(x):
            out = yolo_decode(x, anchors, 2, (64, 96), box_format=fmt, normalized=normalized)
            return tf.reduce_sum(out.boxes * weights)

        theoretical, numerical = tf.test.compute_gradient(fn, [tf.constant(f.reshape(1, 2, 2, 14))], delta=1e-6)
        t, n = theoretical[0], numerical[0]
        np.testing.assert_allclose(t, n, rtol=1e-5, atol=1e-7 * np.abs(t).max())
        assert np.abs(t.reshape(8, 7)[:, 2:4]).min() > 0  # every tw, th has a gradient


# --- bad arguments ------------------------------------------------------------------------------

@pytest.mark.parametrize("value,given", [(float("nan"), "got nan"), (-math.inf, "got -inf")])
def test_bad_max_log_scale_is_an_error_naming_it(value, given):
    f = tf.zeros([1, 2, 2, 14])
    with pytest.raises(tf.errors.InvalidArgumentError, match=f"YoloDecode: max_log_scale must be .*{given}"):
        yolo_decode(f, ANCHORS[:2], 2, 64, max_log_scale=value)
    from opforge.ops._common import lib
    with pytest.raises(tf.errors.InvalidArgumentError, match=f"YoloDecodeGrad: max_log_scale must be .*{given}"):
        lib().opforge_yolo_decode_grad(tf.zeros([1, 8, 4]), tf.zeros([0]), tf.zeros([0]), f, ANCHORS[:2],
                                       num_classes=2, input_size=[64, 64], max_log_scale=value)
    for bad, fragment in (("4", "None \\(no clamp\\) or a number.*got '4'"), (True, ".*or a number.*got True"),
                          (1e39, ".*float32 range.*got 1e\\+39"), (10**400, ".*float32 range.*got 1000")):
        with pytest.raises(tf.errors.InvalidArgumentError, match=f"YoloDecode: max_log_scale must be {fragment}"):
            yolo_decode(f, ANCHORS[:2], 2, 64, max_log_scale=bad)
    # +inf is None; finite values (negative too) are bounds.
    for ok in (math.inf, None, 0.0, -2.0, np.float32(3.0)):
        yolo_decode(f, ANCHORS[:2], 2, 64, max_log_scale=ok)


BAD_ANCHORS = [((0.0, 13.0), "[0, 13]"), ((10.0, -2.0), "[10, -2]"), ((float("nan"), 13.0), "[nan, 13]"),
               ((10.0, math.inf), "[10, inf]"), ((-math.inf, 3.0), "[-inf, 3]")]


@pytest.mark.parametrize("row,given", BAD_ANCHORS)
def test_bad_anchors_are_an_error_naming_them(row, given):
    """NaN, infinite or non-positive anchors: an InvalidArgumentError naming anchors[k], from the
    wrapper where they are constant (eagerly and while tracing) and from the kernel where they
    are a tensor of the graph (the forward and the gradient op; an empty batch too)."""
    anchors = [[10.0, 13.0], list(row), [33.0, 23.0]]
    f = tf.zeros([1, 2, 2, 3 * 7])
    pattern = f"YoloDecode: anchors\\[1\\] must be a finite, positive \\(width, height\\), got {re.escape(given)}"
    with pytest.raises(tf.errors.InvalidArgumentError, match=pattern):
        yolo_decode(f, anchors, 2, 64)
    with pytest.raises(tf.errors.InvalidArgumentError, match=pattern):  # at trace time
        tf.function(lambda x: yolo_decode(x, anchors, 2, 64)).get_concrete_function(tf.TensorSpec([None, 2, 2, 21]))
    run = tf.function(lambda x, a: yolo_decode(x, a, 2, 64))
    for features in (f, tf.zeros([0, 2, 2, 21])):  # the kernel's check, before any work
        with pytest.raises(tf.errors.InvalidArgumentError, match=pattern):
            run(features, tf.constant(anchors))
    from opforge.ops._common import lib
    with pytest.raises(tf.errors.InvalidArgumentError, match=pattern.replace("YoloDecode", "YoloDecodeGrad")):
        lib().opforge_yolo_decode_grad(tf.zeros([1, 12, 4]), tf.zeros([0]), tf.zeros([0]), f, tf.constant(anchors),
                                       num_classes=2, input_size=[64, 64])


def test_anchors_are_checked_in_the_features_dtype():
    """An anchor of 70000 px is fine in float32 but inf in half: named, not a box of inf."""
    f = tf.zeros([1, 1, 1, 6])
    yolo_decode(f, [[70000.0, 1.0]], 1, 64)
    with pytest.raises(tf.errors.InvalidArgumentError, match="anchors\\[0\\] must be a finite.*got \\[inf, 1\\]"):
        yolo_decode(tf.cast(f, tf.float16), [[70000.0, 1.0]], 1, 64)


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


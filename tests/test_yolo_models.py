"""opforge.models: the YOLO-v3 and tiny topologies (parameter counts of yolov3-tf2's layout), the
opforge and TensorFlow-built-in twins agreeing (forward, loss, gradients, 20 steps), the
subclassed tiny model, the loss against a NumPy reference, the detector."""
from __future__ import annotations

import importlib

import keras
import numpy as np
import pytest
import tensorflow as tf

import opforge
import opforge.models as M
from helpers import bits_equal

targets_mod = importlib.import_module("opforge.ops.yolo_targets")


@pytest.mark.parametrize("fn,upsample,params", [
    (M.YoloV3, "nearest", 62_001_757),  # yolov3-tf2's YoloV3(classes=80), the published layout
    (M.YoloV3, "transpose", 62_001_757 + (256 * 256 * 16 + 256) + (128 * 128 * 16 + 128)),
    (M.YoloV3Tiny, "nearest", 8_858_734),  # yolov3-tf2's YoloV3Tiny(classes=80)
    (M.YoloV3Tiny, "transpose", 8_858_734 + 128 * 128 * 16 + 128),
])
def test_parameter_counts_match_the_published_layouts(fn, upsample, params):
    ours, twin = fn(80, 416, upsample), fn(80, 416, upsample, ops="tf")
    assert ours.count_params() == twin.count_params() == params
    assert [w.shape for w in ours.weights] == [w.shape for w in twin.weights]


def test_head_shapes_fixed_and_any_size():
    assert [tuple(o.shape) for o in M.YoloV3(80, 416).outputs] == [(None, 13, 13, 255), (None, 26, 26, 255),
                                                                   (None, 52, 52, 255)]
    tiny = M.YoloV3Tiny(5, None, "nearest")
    assert [tuple(o.shape) for o in tiny.outputs] == [(None, None, None, 30), (None, None, None, 30)]
    assert [o.shape for o in tiny(tf.zeros([1, 96, 160, 3]))] == [(1, 3, 5, 30), (1, 6, 10, 30)]


@pytest.mark.parametrize("upsample", ["transpose", "bilinear", "nearest"])
def test_opforge_and_tf_twins_agree(upsample):
    keras.utils.set_random_seed(4)
    ours = M.YoloV3Tiny(3, 64, upsample)
    twin = M.YoloV3Tiny(3, 64, upsample, ops="tf")
    twin.set_weights(ours.get_weights())
    x = tf.random.uniform((2, 64, 64, 3), seed=1)
    for a, b in zip(ours(x), twin(x)):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-5)


def test_full_model_twins_agree_at_a_small_size():
    keras.utils.set_random_seed(5)
    ours, twin = M.YoloV3(2, 64), M.YoloV3(2, 64, ops="tf")
    twin.set_weights(ours.get_weights())
    x = tf.random.uniform((1, 64, 64, 3), seed=2)
    for a, b in zip(ours(x), twin(x)):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-4)


def test_subclassed_tiny_takes_the_functional_weights():
    keras.utils.set_random_seed(6)
    functional = M.YoloV3Tiny(4, 64, "transpose")
    sub = M.YoloV3TinySubclassed(4, "transpose")
    x = tf.random.uniform((2, 64, 64, 3), seed=3)
    sub(x)
    sub.set_functional_weights(functional)
    for a, b in zip(functional(x), sub(x)):
        assert bits_equal(a.numpy(), b.numpy())


def _batch(size=64, classes=3, seed=3):
    boxes, cls = targets_mod.random_boxes(4, 6, seed=seed, padding=2, classes=classes)
    anchors = M.YOLOV3_TINY_ANCHORS / 416
    y = opforge.ops.yolo_targets(tf.constant(boxes, tf.float32), cls, anchors, M.YOLOV3_TINY_MASKS,
                                 (size // 32, size // 16))
    return tf.random.uniform((4, size, size, 3), seed=seed), y, anchors


def test_first_step_loss_and_gradients_agree_between_twins():
    keras.utils.set_random_seed(7)
    ours, twin = M.YoloV3Tiny(3, 64), M.YoloV3Tiny(3, 64, ops="tf")
    twin.set_weights(ours.get_weights())
    x, y, anchors = _batch()
    results = []
    for model, ops in ((ours, "opforge"), (twin, "tf")):
        loss = M.YoloLoss(anchors, M.YOLOV3_TINY_MASKS, 3, ops=ops)
        with tf.GradientTape() as tape:
            value = tf.reduce_mean(loss(y, model(x, training=True)))
        results.append((float(value), tape.gradient(value, model.trainable_variables)))
    (l0, g0), (l1, g1) = results
    assert abs(l0 - l1) <= 1e-5 * abs(l1)
    worst = max(float(tf.reduce_max(tf.abs(a - b)) / (tf.reduce_max(tf.abs(b)) + 1e-30)) for a, b in zip(g0, g1))
    assert worst <= 1e-4, worst


def test_twenty_steps_of_training_agree_between_twins():
    keras.utils.set_random_seed(8)
    ours, twin = M.YoloV3Tiny(3, 64), M.YoloV3Tiny(3, 64, ops="tf")
    twin.set_weights(ours.get_weights())
    x, y, anchors = _batch(seed=4)
    losses = []
    for model, ops in ((ours, "opforge"), (twin, "tf")):
        loss = M.YoloLoss(anchors, M.YOLOV3_TINY_MASKS, 3, ops=ops)
        opt = keras.optimizers.Adam(1e-3)

        @tf.function
        def step():
            with tf.GradientTape() as tape:
                value = tf.reduce_mean(loss(y, model(x, training=True)))
            opt.apply_gradients(zip(tape.gradient(value, model.trainable_variables), model.trainable_variables))
            return value

        losses.append(np.array([float(step()) for _ in range(20)]))
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-3)
    assert losses[0][-1] < losses[0][0]


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _bce(label, logit):
    p = _sigmoid(logit)
    return -(label * np.log(p) + (1 - label) * np.log(1 - p))


def test_loss_terms_against_numpy_on_a_hand_made_case():
    """One scale, a 2x2 grid, two anchors, two classes; one box in cell (row 1, col 0)."""
    rng = np.random.default_rng(0)
    f = rng.normal(size=(1, 2, 2, 2, 7)).astype(np.float64)
    anchors = np.array([[0.2, 0.3], [0.6, 0.5]], np.float64)
    y = np.zeros((1, 2, 2, 2, 6))
    box = np.array([0.1, 0.6, 0.3, 0.9])  # x1, y1, x2, y2: centre (0.2, 0.75): column 0, row 1
    y[0, 1, 0, 0] = [*box, 1, 1]
    loss = M.YoloLoss(anchors, [[0, 1]], 2, ignore_thresh=0.5)
    terms = {k: float(v.numpy()[0]) for k, v in loss.terms([tf.constant(y)], [tf.constant(f.reshape(1, 2, 2, 14))]).items()}
    # NumPy, straight from the definitions.
    cx, cy = np.meshgrid(np.arange(2), np.arange(2))
    sx, sy = _sigmoid(f[..., 0]), _sigmoid(f[..., 1])
    px = (sx + cx[None, :, :, None]) / 2
    py = (sy + cy[None, :, :, None]) / 2
    pw = np.exp(f[..., 2]) * anchors[:, 0]
    ph = np.exp(f[..., 3]) * anchors[:, 1]
    tx, ty, tw, th = 0.2, 0.75, 0.2, 0.3
    weight = 2 - tw * th
    p = (0, 1, 0, 0)
    xy = weight * (((tx - px[p]) * 2) ** 2 + ((ty - py[p]) * 2) ** 2)
    wh = weight * ((np.log(tw / 0.2) - np.log(pw[p] / 0.2)) ** 2 + (np.log(th / 0.3) - np.log(ph[p] / 0.3)) ** 2)
    x1, y1, x2, y2 = px - pw / 2, py - ph / 2, px + pw / 2, py + ph / 2
    iw = np.maximum(np.minimum(x2, box[2]) - np.maximum(x1, box[0]), 0)
    ih = np.maximum(np.minimum(y2, box[3]) - np.maximum(y1, box[1]), 0)
    iou = iw * ih / (pw * ph + 0.2 * 0.3 - iw * ih)
    obj_label = np.zeros_like(iou)
    obj_label[p] = 1
    counted = (obj_label == 1) | (iou < 0.5)
    obj = float(np.sum(np.where(counted, _bce(obj_label, f[..., 4]), 0)))
    cls = float(np.sum(_bce(np.array([0.0, 1.0]), f[p][5:])))
    np.testing.assert_allclose([terms["xy"], terms["wh"], terms["obj"], terms["class"]], [xy, wh, obj, cls], rtol=1e-9)


def test_loss_decodes_without_clamp_by_default_and_with_max_log_scale_when_given():
    """The wh term of an assigned box whose tw is far past log(62.5): by default the decode is
    exp(tw) * anchor_w (yolov3-tf2's), the term is (tw - log(true_w / anchor_w))^2 and pulls tw
    back with the gradient 2 (tw - ...); with max_log_scale the box stops at 62.5 anchors and
    tw gets no gradient from it. Both `ops` agree; a bad max_log_scale is a ValueError."""
    f = np.zeros((1, 2, 2, 1, 6))
    f[0, 1, 0, 0, 2] = 9.0  # tw of the assigned anchor
    anchors = np.array([[0.2, 0.3]])
    y = np.zeros((1, 2, 2, 1, 6))
    y[0, 1, 0, 0] = [0.1, 0.6, 0.3, 0.9, 1, 0]  # width 0.2 = the anchor's: log(0.2 / 0.2) = 0
    x = tf.constant(f.reshape(1, 2, 2, 6))
    for ops in ("opforge", "tf"):
        grads = {}
        for bound in (None, opforge.ops.YOLO_MAX_LOG_SCALE):
            loss = M.YoloLoss(anchors, [[0]], 1, ops=ops, max_log_scale=bound)
            with tf.GradientTape() as tape:
                tape.watch(x)
                wh = loss.terms([tf.constant(y)], [x])["wh"][0]
            grads[bound] = tape.gradient(wh, x).numpy().reshape(2, 2, 6)[1, 0, 2]
            weight = 2 - 0.2 * 0.3
            t = 9.0 if bound is None else float(np.float32(bound))
            assert float(wh) == pytest.approx(weight * t ** 2, rel=1e-6), (ops, bound)
        assert grads[None] == pytest.approx(2 * (2 - 0.06) * 9.0, rel=1e-6), ops
        assert grads[opforge.ops.YOLO_MAX_LOG_SCALE] == 0.0, ops
    with pytest.raises(ValueError, match="max_log_scale must be .*got nan"):
        M.YoloLoss(anchors, [[0]], 1, max_log_scale=float("nan"))


def test_detector_runs_and_pads():
    model = M.YoloV3Tiny(3, 64)
    det = M.detector(model, 3, 64, score_threshold=0.0, max_detections=7)
    boxes, scores, classes, valid = det(tf.random.uniform((2, 64, 64, 3)))
    assert boxes.shape == (2, 7, 4) and valid.shape == (2,)


@pytest.mark.parametrize("kwargs,fragment", [(dict(upsample="cubic"), "upsample"), (dict(ops="torch"), "ops"),
                                             (dict(num_classes=0), "num_classes"), (dict(input_size=100), "input_size")])
def test_bad_model_arguments(kwargs, fragment):
    args = dict(num_classes=3, input_size=64)
    args.update(kwargs)
    with pytest.raises(ValueError, match=fragment):
        M.YoloV3Tiny(**args)


def test_fit_and_custom_loop_give_the_same_first_step_loss():
    from opforge.data import shapes_dataset

    data = shapes_dataset(8, 64, seed=5)
    keras.utils.set_random_seed(9)
    a = M.YoloV3Tiny(3, 64)
    b = M.YoloV3Tiny(3, 64)
    b.set_weights(a.get_weights())
    anchors, masks = M.anchors_for(a, 64)
    ds = M.target_dataset(data.images, data.boxes, data.classes, anchors, masks, 64, 8, shuffle=False)
    trainer = M.YoloTrainer(a, M.YoloLoss(anchors, masks, 3))
    trainer.compile(optimizer=keras.optimizers.SGD(1e-3))
    fit_loss = trainer.fit(ds, epochs=1, verbose=0).history["loss"][0]
    step = M.custom_train_step(b, M.YoloLoss(anchors, masks, 3), keras.optimizers.SGD(1e-3))
    x, y = next(iter(ds))
    loop_loss = float(step(x, y))
    assert loop_loss == pytest.approx(fit_loss, rel=1e-6)


def test_parity_command_in_float64_at_a_small_size(capsys):
    """`opforge yolo parity` (the full-size check is `make yolo-parity`): in float64 round-off is
    out of the comparison, so the twins agree far inside the tolerances."""
    from opforge.tools import yolo_parity as parity

    assert parity.run(size=64, steps=3, batch=2, num_classes=4, dtype="float64") == 0
    out = capsys.readouterr().out
    assert "parity (float64)" in out and "parity passed" in out

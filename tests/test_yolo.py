"""The YOLO head ops beyond their specs: decode's numerics and all three gradients, target
assignment against yolov3-tf2's own function, NMS against independent NumPy references and
against TensorFlow over many random cases, and the two layers (saving, serving)."""
from __future__ import annotations

import importlib
import math

import keras
import numpy as np
import pytest
import tensorflow as tf

import opforge
from helpers import bits_equal, run_python

decode_mod = importlib.import_module("opforge.ops.yolo_decode")
targets_mod = importlib.import_module("opforge.ops.yolo_targets")
nms_mod = importlib.import_module("opforge.ops.combined_non_max_suppression")
yolo_decode = opforge.ops.yolo_decode
yolo_targets = opforge.ops.yolo_targets
nms = opforge.ops.combined_non_max_suppression

ANCHORS = np.array([[10, 13], [16, 30], [33, 23]], np.float32)


# --- decode ---------------------------------------------------------------------------------------


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


# --- targets --------------------------------------------------------------------------------------


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


# --- NMS ------------------------------------------------------------------------------------------


def _iou(a, b):
    """TensorFlow's IoU formula, in float32 (corners sorted, areas, clipped intersection)."""
    f = np.float32
    ay0, ax0, ay1, ax1 = min(a[0], a[2]), min(a[1], a[3]), max(a[0], a[2]), max(a[1], a[3])
    by0, bx0, by1, bx1 = min(b[0], b[2]), min(b[1], b[3]), max(b[0], b[2]), max(b[1], b[3])
    area_a, area_b = f((ay1 - ay0) * (ax1 - ax0)), f((by1 - by0) * (bx1 - bx0))
    if area_a <= 0 or area_b <= 0:
        return f(0)
    inter = f(max(f(min(ay1, by1) - max(ay0, by0)), f(0)) * max(f(min(ax1, bx1) - max(ax0, bx0)), f(0)))
    return f(inter / f(area_a + area_b - inter))


def numpy_nms(boxes, scores, per_class, total, iou_threshold=0.5, score_threshold=-np.inf,
              pad_per_class=False, clip_boxes=True, soft_nms_sigma=0.0):
    """An independent NumPy combined NMS: greedy hard NMS, or Gaussian soft-NMS as TensorFlow's
    NonMaxSuppressionV5 loop, per image and class; merged by score (stable)."""
    f = np.float32
    boxes, scores = np.asarray(boxes, f), np.asarray(scores, f)
    batch, n, q, _ = boxes.shape
    classes = scores.shape[2]
    d = min(total, per_class * classes) if pad_per_class else total
    limit = min(per_class, n)
    out = (np.zeros((batch, d, 4), f), np.zeros((batch, d), f), np.zeros((batch, d), f), np.zeros(batch, np.int32))
    for i in range(batch):
        kept_all = []
        for c in range(classes):
            cb = boxes[i, :, c if q > 1 else 0]
            s = scores[i, :, c]
            cand = [(s[k], k, 0) for k in range(n) if s[k] > f(score_threshold)]
            kept = []
            if soft_nms_sigma == 0:
                for score, k, _ in sorted(cand, key=lambda t: (-t[0], t[1])):
                    if len(kept) == limit:
                        break
                    if all(not (_iou(cb[k], cb[j]) > f(iou_threshold)) for _, j in kept):
                        kept.append((score, k))
            else:
                scale = f(-0.5) / f(soft_nms_sigma)
                queue = list(cand)
                while queue and len(kept) < limit:
                    queue.sort(key=lambda t: (-t[0], t[1]))
                    score, k, begin = queue.pop(0)
                    original = score
                    for j in range(len(kept) - 1, begin - 1, -1):
                        sim = _iou(cb[k], cb[kept[j][1]])
                        score = f(score * f(np.exp(f(f(scale * sim) * sim))))
                        if score <= f(score_threshold):
                            break
                    if score == original:
                        kept.append((score, k))
                    elif score > f(score_threshold):
                        queue.append((score, k, len(kept)))
            kept_all += [(score, c, cb[k]) for score, k in kept]
        order = sorted(range(len(kept_all)), key=lambda t: -kept_all[t][0])[:d]
        for row, t in enumerate(order):
            score, c, box = kept_all[t]
            out[0][i, row] = np.clip(box, 0, 1) if clip_boxes else box
            out[1][i, row], out[2][i, row] = score, c
        out[3][i] = len(order)
    return out


def _random_case(seed):
    rng = np.random.default_rng(seed)
    batch, n, classes = rng.integers(1, 4), rng.integers(1, 40), rng.integers(1, 6)
    q = 1 if rng.random() < 0.5 else classes
    boxes = nms_mod.random_nms_boxes(batch, n, q, seed)
    scores = nms_mod.distinct_scores(batch, n, classes, seed) if n * classes <= 256 else rng.random((batch, n, classes))
    attrs = dict(per_class=int(rng.integers(1, 12)), total=int(rng.integers(1, 30)),
                 iou_threshold=float(rng.choice([0.0, 0.3, 0.5, 0.7, 1.0])),
                 score_threshold=float(rng.choice([-np.inf, -0.5, 0.0, 0.4, 100.0])),
                 pad_per_class=bool(rng.random() < 0.5), clip_boxes=bool(rng.random() < 0.5))
    return boxes.astype(np.float32), scores.astype(np.float32), attrs


def _ours(boxes, scores, a, sigma=0.0):
    return nms(boxes, scores, a["per_class"], a["total"], a["iou_threshold"], a["score_threshold"],
               a["pad_per_class"], a["clip_boxes"], soft_nms_sigma=sigma)


@pytest.mark.parametrize("seed", range(40))
def test_nms_matches_numpy_and_tensorflow_on_random_cases(seed):
    boxes, scores, a = _random_case(seed)
    ours = _ours(boxes, scores, a)
    reference = numpy_nms(boxes, scores, a["per_class"], a["total"], a["iou_threshold"], a["score_threshold"],
                          a["pad_per_class"], a["clip_boxes"])
    theirs = tf.image.combined_non_max_suppression(boxes, scores, a["per_class"], a["total"], a["iou_threshold"],
                                                   a["score_threshold"], a["pad_per_class"], a["clip_boxes"])
    for o, r, t in zip(ours, reference, theirs):
        assert bits_equal(o.numpy(), r), seed
        assert bits_equal(o.numpy(), t.numpy()), seed


@pytest.mark.parametrize("seed", range(40, 60))
def test_soft_nms_matches_numpy_and_per_class_tensorflow(seed):
    boxes, scores, a = _random_case(seed)
    sigma = float(np.random.default_rng(seed).choice([0.1, 0.5, 2.0]))
    ours = _ours(boxes, scores, a, sigma)
    reference = numpy_nms(boxes, scores, a["per_class"], a["total"], a["iou_threshold"], a["score_threshold"],
                          a["pad_per_class"], a["clip_boxes"], sigma)
    theirs = nms_mod.tf_reference(tf.constant(boxes), tf.constant(scores), a["per_class"], a["total"],
                                  a["iou_threshold"], a["score_threshold"], a["pad_per_class"], a["clip_boxes"],
                                  sigma)
    for o, r, t in zip(ours, reference, theirs):
        np.testing.assert_allclose(o.numpy(), r, rtol=2e-6, atol=1e-7, err_msg=str(seed))
        assert bits_equal(o.numpy(), t.numpy()), seed


def test_nms_ties_take_the_lower_box_then_the_lower_class():
    boxes = np.array([[[[0, 0, 1, 1]], [[0, 0, 1, 1]], [[2, 2, 3, 3]]]], np.float32)
    scores = np.array([[[0.9, 0.9], [0.9, 0.9], [0.5, 0.9]]], np.float32)
    out = nms(boxes, scores, 5, 5, 0.5, clip_boxes=False)
    assert out.valid_detections.numpy().tolist() == [4]
    assert out.nmsed_classes.numpy()[0, :4].tolist() == [0, 1, 1, 0]
    np.testing.assert_array_equal(out.nmsed_boxes.numpy()[0, :4],
                                  [[0, 0, 1, 1], [0, 0, 1, 1], [2, 2, 3, 3], [2, 2, 3, 3]])


def test_nms_empty_batch_boxes_and_classes():
    out = nms(tf.zeros([0, 5, 1, 4]), tf.zeros([0, 5, 3]), 2, 4)
    assert [o.shape.as_list() for o in out] == [[0, 4, 4], [0, 4], [0, 4], [0]]
    out = nms(tf.zeros([2, 0, 1, 4]), tf.zeros([2, 0, 3]), 2, 4)
    assert out.valid_detections.numpy().tolist() == [0, 0] and not out.nmsed_boxes.numpy().any()
    out = nms(tf.zeros([2, 5, 1, 4]), tf.zeros([2, 5, 0]), 2, 4, pad_per_class=True)
    assert out.nmsed_scores.shape == (2, 0)


def test_nms_shape_function_uses_constant_sizes():
    fn = tf.function(lambda b, s: nms(b, s, 10, 25), input_signature=[
        tf.TensorSpec([None, None, 1, 4]), tf.TensorSpec([None, None, 80])])
    out = fn.get_concrete_function().structured_outputs
    assert [o.shape.as_list() for o in out] == [[None, 25, 4], [None, 25], [None, 25], [None]]
    fn = tf.function(lambda b, s: nms(b, s, 10, 2000, pad_per_class=True), input_signature=[
        tf.TensorSpec([None, None, 1, 4]), tf.TensorSpec([None, None, 80])])
    assert fn.get_concrete_function().structured_outputs[0].shape.as_list() == [None, 800, 4]


# --- layers ---------------------------------------------------------------------------------------

TINY_ANCHORS = [[10, 14], [23, 27], [37, 58], [81, 82], [135, 169], [344, 319]]
TINY_MASKS = [[3, 4, 5], [0, 1, 2]]


def _tiny_detector(num_classes=3):
    """A small model ending in YoloPostprocess: a 64x64 input, heads at strides 32 and 16."""
    inputs = keras.Input((64, 64, 3))
    x = keras.layers.Conv2D(8, 3, strides=16, padding="same")(inputs)  # 4x4
    small = keras.layers.Conv2D(3 * (5 + num_classes), 1)(keras.layers.Conv2D(8, 3, strides=2, padding="same")(x))
    large = keras.layers.Conv2D(3 * (5 + num_classes), 1)(x)
    detections = opforge.layers.YoloPostprocess(TINY_ANCHORS, TINY_MASKS, num_classes, 64,
                                                max_detections=10, score_threshold=0.05)([small, large])
    return keras.Model(inputs, detections)


def test_yolo_postprocess_matches_decode_then_nms():
    model = _tiny_detector()
    images = tf.random.uniform((2, 64, 64, 3), seed=1)
    heads = keras.Model(model.input, [model.layers[-1].input[0], model.layers[-1].input[1]])(images)
    boxes, scores = [], []
    for features, mask in zip(heads, TINY_MASKS):
        out = yolo_decode(features, np.array(TINY_ANCHORS, np.float32)[mask], 3, 64, normalized=True)
        boxes.append(out.boxes)
        scores.append(out.class_scores)
    expected = tf.image.combined_non_max_suppression(tf.concat(boxes, 1)[:, :, None], tf.concat(scores, 1), 100, 10,
                                                     0.5, 0.05)
    for o, e in zip(model(images), expected):
        assert bits_equal(o.numpy(), e.numpy())


def test_yolo_layers_round_trip_through_keras_files(tmp_path):
    model = _tiny_detector()
    images = tf.random.uniform((1, 64, 64, 3), seed=2)
    path = tmp_path / "detector.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    for a, b in zip(model(images), loaded(images)):
        assert bits_equal(a.numpy(), b.numpy())
    layer = opforge.layers.YoloDecode(TINY_ANCHORS[:3], 3, 64, box_format="yxyx")
    again = opforge.layers.YoloDecode.from_config(layer.get_config())
    f = tf.random.normal((1, 4, 4, 24), seed=3)
    for a, b in zip(layer(f), again(f)):
        assert bits_equal(a.numpy(), b.numpy())


def test_detector_savedmodel_serves_any_batch_in_fresh_process(tmp_path):
    model = _tiny_detector()
    export = tmp_path / "served"
    model.export(str(export))
    images = [np.random.default_rng(i).random((b, 64, 64, 3)).astype(np.float32) for i, b in enumerate((1, 3))]
    expected = [[t.numpy() for t in model(x)] for x in images]
    np.savez(tmp_path / "io.npz", *images)
    proc = run_python(f"""
        import numpy as np, tensorflow as tf, opforge
        opforge.register_all()
        loaded = tf.saved_model.load(r"{export}")
        serve = loaded.signatures["serving_default"]
        io = np.load(r"{tmp_path}/io.npz")
        for i in range(2):
            out = serve(tf.constant(io["arr_%d" % i]))
            np.savez(r"{tmp_path}/out%d.npz" % i, *[out[k].numpy() for k in sorted(out)])
        print("OK")
        """)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stderr[-3000:]
    for i in range(2):
        got = np.load(tmp_path / f"out{i}.npz")
        values = [got[f"arr_{k}"] for k in range(4)]
        # serving_default's outputs come keyed output_0..output_3, in the model's order.
        for g, e in zip(values, expected[i]):
            assert bits_equal(g, e)


@pytest.mark.parametrize("kwargs,fragment", [
    (dict(num_classes=0), "num_classes"),
    (dict(iou_threshold=2.0), "iou_threshold"),
    (dict(max_detections=0), "max_total_size"),
    (dict(anchor_masks=[[0, 9]]), "anchor_masks"),
    (dict(anchors=[[10, -1]]), "anchors"),
])
def test_yolo_postprocess_rejects_bad_arguments(kwargs, fragment):
    args = dict(anchors=TINY_ANCHORS, anchor_masks=TINY_MASKS, num_classes=3, input_size=64)
    args.update(kwargs)
    with pytest.raises(ValueError, match=fragment):
        opforge.layers.YoloPostprocess(**args)


def test_decode_gradient_of_unused_outputs_is_skipped_not_changed():
    """A loss on the boxes alone sends the gradient op [0] for scores and class scores (their
    work is skipped); the result equals passing zeros for them."""
    from opforge.ops._common import lib

    f = tf.random.normal((2, 3, 3, 2 * 8), seed=9)
    anchors = tf.constant([[10.0, 14.0], [23.0, 27.0]])
    with tf.GradientTape() as tape:
        tape.watch(f)
        loss = tf.reduce_sum(yolo_decode(f, anchors, 3, 96).boxes ** 2)
    grad = tape.gradient(loss, f)
    boxes = yolo_decode(f, anchors, 3, 96).boxes
    attrs = dict(num_classes=3, input_size=[96, 96])
    explicit = lib().opforge_yolo_decode_grad(2 * boxes, tf.zeros([2, 18]), tf.zeros([2, 18, 3]), f, anchors, **attrs)
    assert bits_equal(grad.numpy(), explicit.numpy())
    with pytest.raises(tf.errors.InvalidArgumentError, match="grad_scores.*or \\[0\\]"):
        lib().opforge_yolo_decode_grad(2 * boxes, tf.zeros([3]), tf.zeros([0]), f, anchors, **attrs)

"""The YOLO layers: YoloPostprocess against decode + NMS, .keras round trips, a SavedModel
serving any batch in a fresh process, constructor checks."""
from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import opforge
from helpers import bits_equal, run_python

yolo_decode = opforge.ops.yolo_decode
yolo_targets = opforge.ops.yolo_targets


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
        # `import opforge` registers the ops, gradients and layers (no register_all())
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
    (dict(input_size=[64.5, 64]), "input_size"),
])
def test_yolo_postprocess_rejects_bad_arguments(kwargs, fragment):
    args = dict(anchors=TINY_ANCHORS, anchor_masks=TINY_MASKS, num_classes=3, input_size=64)
    args.update(kwargs)
    with pytest.raises(ValueError, match=fragment):
        opforge.layers.YoloPostprocess(**args)



def test_max_log_scale_round_trips_and_old_configs_load(tmp_path):
    """max_log_scale in both layers: in get_config, through from_config and a .keras file, with
    the op's boxes; a config saved before the argument existed (no key) loads as None (no
    clamp), the op's default."""
    bound = opforge.ops.YOLO_MAX_LOG_SCALE
    f = tf.constant(np.random.default_rng(5).normal(0, 4, (1, 4, 4, 24)), tf.float32)
    layer = opforge.layers.YoloDecode(TINY_ANCHORS[:3], 3, 64, box_format="center_xywh", max_log_scale=bound)
    config = layer.get_config()
    assert config["max_log_scale"] == bound
    again = opforge.layers.YoloDecode.from_config(config)
    want = yolo_decode(f, np.array(TINY_ANCHORS[:3], np.float32), 3, 64, box_format="center_xywh",
                       max_log_scale=bound)
    for a, b, c in zip(layer(f), again(f), want):
        assert bits_equal(a.numpy(), b.numpy()) and bits_equal(a.numpy(), c.numpy())
    assert layer(f)[0].numpy()[..., 2:].max() <= 62.5 * 58 * (1 + 1e-6)  # clamped at 62.5 anchors
    old = dict(config)
    del old["max_log_scale"]
    unclamped = opforge.layers.YoloDecode.from_config(old)
    assert unclamped.max_log_scale is None
    assert bits_equal(unclamped(f)[0].numpy(), yolo_decode(f, np.array(TINY_ANCHORS[:3], np.float32), 3, 64,
                                                           box_format="center_xywh").boxes.numpy())
    assert opforge.layers.YoloDecode(TINY_ANCHORS[:3], 3, 64, max_log_scale=float("inf")).get_config()[
        "max_log_scale"] is None
    features = keras.Input((4, 4, 24))
    decoder = keras.Model(features, layer(features))
    decoder.save(tmp_path / "decoder.keras")
    reloaded = keras.models.load_model(tmp_path / "decoder.keras")
    assert reloaded.layers[-1].max_log_scale == bound
    for a, b in zip(decoder(f), reloaded(f)):
        assert bits_equal(a.numpy(), b.numpy())

    post = opforge.layers.YoloPostprocess(TINY_ANCHORS, TINY_MASKS, 3, 64, score_threshold=0.05, max_log_scale=2.0)
    assert post.get_config()["max_log_scale"] == 2.0
    old = post.get_config()
    del old["max_log_scale"]
    assert opforge.layers.YoloPostprocess.from_config(old).max_log_scale is None
    inputs = keras.Input((4, 4, 24))
    small = keras.Input((2, 2, 24))
    model = keras.Model([small, inputs], post([small, inputs]))
    path = tmp_path / "clamped.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    assert loaded.layers[-1].max_log_scale == 2.0
    maps = [tf.random.normal((1, 2, 2, 24), seed=6) * 4, f]
    for a, b in zip(model(maps), loaded(maps)):
        assert bits_equal(a.numpy(), b.numpy())


@pytest.mark.parametrize("value,fragment", [(float("nan"), "got nan"), (float("-inf"), "got -inf"),
                                            ("big", "or a number")])
def test_yolo_layers_reject_a_bad_max_log_scale(value, fragment):
    with pytest.raises(ValueError, match=f"max_log_scale must be .*{fragment}"):
        opforge.layers.YoloDecode(TINY_ANCHORS[:3], 3, 64, max_log_scale=value)
    with pytest.raises(ValueError, match=f"max_log_scale must be .*{fragment}"):
        opforge.layers.YoloPostprocess(TINY_ANCHORS, TINY_MASKS, 3, 64, max_log_scale=value)

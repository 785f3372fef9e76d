"""opforge.ops.yolo_postprocess: the same bits as the unfused path (yolo_decode of every scale,
concatenated, combined_non_max_suppression), which its prefilter must not change, and TensorFlow's
own pipeline's detections. The generic checks (reference, bad inputs, determinism, shapes) come
from its spec in tests/test_specs.py."""
import numpy as np
import pytest
import tensorflow as tf

import opforge
from opforge.ops.combined_non_max_suppression import combined_non_max_suppression
from opforge.ops.yolo_decode import YOLO_MAX_LOG_SCALE, YOLOV3_SPEED_ANCHORS, YOLOV3_SPEED_MASKS, yolo_decode
from opforge.ops.yolo_postprocess import tf_yolo_postprocess, yolo_like_heads, yolo_postprocess
from opforge.ops.spec import bits_equal

ANCHORS = np.array([(10, 13), (16, 30), (33, 23), (30, 61), (62, 45), (59, 119)], np.float64)
MASKS = ((3, 4, 5), (0, 1, 2))


def unfused(maps, anchors, masks, num_classes, input_size, max_detections=100, max_detections_per_class=100,
            iou_threshold=0.5, score_threshold=0.5, soft_nms_sigma=0.0, clip_boxes=True, max_log_scale=None):
    boxes, scores = [], []
    for f, m in zip(maps, masks):
        out = yolo_decode(f, anchors[list(m)], num_classes, input_size, box_format="xyxy", normalized=True,
                          max_log_scale=max_log_scale)
        boxes.append(out.boxes)
        scores.append(out.class_scores)
    return combined_non_max_suppression(tf.concat(boxes, 1)[:, :, None, :], tf.concat(scores, 1),
                                        max_detections_per_class, max_detections, iou_threshold, score_threshold,
                                        clip_boxes=clip_boxes, soft_nms_sigma=soft_nms_sigma)


def heads(batch, c, seed, obj_mean, dtype=tf.float32, specials=False, box_scale=1.5):
    rng = np.random.default_rng(seed)
    maps = []
    for g in (5, 10):
        f = rng.normal(0, box_scale, (batch, g, g, 3, 5 + c))
        f[..., 4] = rng.normal(obj_mean, 3, (batch, g, g, 3))
        f[..., 5:] = rng.normal(-1, 2.5, (batch, g, g, 3, c))
        if specials:
            hit = rng.random(f.shape) < 0.01
            f[hit] = rng.choice([np.nan, np.inf, -np.inf], hit.sum())
        maps.append(tf.cast(f.reshape(batch, g, g, 3 * (5 + c)), dtype))
    return maps


def assert_same(a, b, where):
    for x, y, name in zip(a, b, ("boxes", "scores", "classes", "valid")):
        assert bits_equal(x.numpy(), y.numpy()), f"{where}: {name} differ"


@pytest.mark.parametrize("dtype", [tf.float32, tf.float16, tf.bfloat16])
@pytest.mark.parametrize("score_threshold", [0.5, 0.05, 1e-4, 0.0, -1.0, 0.999])
def test_same_bits_as_decode_then_nms(dtype, score_threshold):
    seen = 0
    for seed, obj_mean in ((1, -3.0), (2, 0.0)):
        maps = heads(3, 6, seed, obj_mean, dtype)
        kw = dict(max_detections=30, max_detections_per_class=10, score_threshold=score_threshold)
        got = yolo_postprocess(maps, ANCHORS, MASKS, 6, (160, 192), **kw)
        want = unfused(maps, ANCHORS, MASKS, 6, (160, 192), **kw)
        assert_same(got, want, f"{dtype.name} threshold {score_threshold} seed {seed}")
        seen += int(want.valid_detections.numpy().sum())
    assert score_threshold > 0.99 or seen > 0  # the comparison saw detections


@pytest.mark.parametrize("kw", [dict(soft_nms_sigma=0.5, score_threshold=0.2),
                                dict(iou_threshold=0.0, score_threshold=0.1),
                                dict(clip_boxes=False, score_threshold=0.1),
                                dict(max_detections=5, max_detections_per_class=50, score_threshold=0.01)],
                         ids=["soft", "iou0", "noclip", "total binds"])
def test_same_bits_nms_variants_and_special_values(kw):
    for specials in (False, True):
        maps = heads(2, 4, 7, -1.0, specials=specials)
        assert_same(yolo_postprocess(maps, ANCHORS, MASKS, 4, 128, **kw),
                    unfused(maps, ANCHORS, MASKS, 4, 128, **kw), f"{kw} specials {specials}")


def test_matches_tensorflow_pipeline_on_yolo_v3_heads():
    maps = yolo_like_heads(2)
    kw = dict(anchors=YOLOV3_SPEED_ANCHORS, anchor_masks=YOLOV3_SPEED_MASKS, num_classes=80, input_size=416)
    ours, theirs = yolo_postprocess(maps, **kw), tf_yolo_postprocess(maps, **kw)
    np.testing.assert_array_equal(ours.valid_detections, theirs.valid_detections)
    assert ours.valid_detections.numpy().min() == 100
    np.testing.assert_array_equal(ours.nmsed_classes, theirs.nmsed_classes)
    np.testing.assert_allclose(ours.nmsed_scores, theirs.nmsed_scores, rtol=1e-6)
    np.testing.assert_allclose(ours.nmsed_boxes, theirs.nmsed_boxes, atol=1e-6)


def test_float64_maps_are_decoded_in_float32():
    maps = heads(2, 3, 9, -1.0, tf.float64)
    got = yolo_postprocess(maps, ANCHORS, MASKS, 3, 96, score_threshold=0.2)
    assert got.nmsed_boxes.dtype == tf.float32
    assert_same(got, yolo_postprocess([tf.cast(m, tf.float32) for m in maps], ANCHORS, MASKS, 3, 96,
                                      score_threshold=0.2), "float64")


def test_unknown_shapes_and_tensor_thresholds_in_graph():
    maps = heads(2, 3, 11, -1.0)
    fn = tf.function(lambda a, b, t: yolo_postprocess([a, b], ANCHORS, MASKS, 3, 96, max_detections=7,
                                                      score_threshold=t),
                     input_signature=[tf.TensorSpec([None, None, None, 24])] * 2 + [tf.TensorSpec([])])
    out = fn(*maps, tf.constant(0.2))
    static = fn.get_concrete_function().structured_outputs
    assert static[0].shape.as_list() == [None, 7, 4] and static[3].shape.as_list() == [None]
    assert_same(out, yolo_postprocess(maps, ANCHORS, MASKS, 3, 96, max_detections=7, score_threshold=0.2),
                "graph")


def test_layer_uses_the_fused_op():
    layer = opforge.layers.YoloPostprocess(ANCHORS, MASKS, 4, 128, score_threshold=0.1)
    maps = heads(2, 4, 13, -1.0)
    graph = tf.function(lambda a, b: layer([a, b])).get_concrete_function(*maps).graph
    assert "Opforge>YoloPostprocess" in {op.type for op in graph.get_operations()}
    assert_same(layer(maps), unfused(maps, ANCHORS, MASKS, 4, 128, score_threshold=0.1), "layer")


@pytest.mark.parametrize("dtype", [tf.float32, tf.float16, tf.bfloat16])
@pytest.mark.parametrize("max_log_scale", [None, YOLO_MAX_LOG_SCALE, 1.0])
def test_max_log_scale_is_the_decode_s(dtype, max_log_scale):
    """tw, th ~ N(0, 4): boxes far past log(62.5), saturated ones in half, clamped ones where
    max_log_scale is given; the fused op gives the unfused path's bits, and the clamp changes
    the detections (it bites)."""
    maps = heads(2, 3, 21, 0.0, dtype, box_scale=4.0)
    kw = dict(max_detections=40, max_detections_per_class=40, score_threshold=0.05, clip_boxes=False)
    got = yolo_postprocess(maps, ANCHORS, MASKS, 3, (96, 128), max_log_scale=max_log_scale, **kw)
    assert_same(got, unfused(maps, ANCHORS, MASKS, 3, (96, 128), max_log_scale=max_log_scale, **kw),
                f"{dtype.name} max_log_scale {max_log_scale}")
    assert np.isfinite(np.asarray(tf.cast(got.nmsed_boxes, tf.float64))).all()
    if max_log_scale is not None:
        default = yolo_postprocess(maps, ANCHORS, MASKS, 3, (96, 128), **kw)
        assert not bits_equal(got.nmsed_boxes.numpy(), default.nmsed_boxes.numpy())


def test_bad_anchors_and_max_log_scale_name_the_argument():
    maps = heads(1, 2, 23, -1.0)
    bad = ANCHORS.copy()
    bad[4, 1] = np.nan
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"YoloPostprocess: anchors\[4\] must be a finite, positive \(width, height\), got \[62, nan\]"):
        yolo_postprocess(maps, bad, MASKS, 2, 96)
    bad[4, 1] = 0.0
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"anchors\[4\] must be .* got \[62, 0\]"):
        yolo_postprocess(maps, bad, MASKS, 2, 96)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"YoloPostprocess: max_log_scale must be .*got -inf"):
        yolo_postprocess(maps, ANCHORS, MASKS, 2, 96, max_log_scale=-np.inf)
    # The kernel's own check (anchors a graph tensor): the scale and the row, before any work.
    from opforge.ops._common import lib
    tables = [tf.constant(ANCHORS[list(m)], tf.float32) for m in MASKS]
    tables[1] = tf.tensor_scatter_nd_update(tables[1], [[2, 0]], [np.inf])
    scalars = [tf.constant(10), tf.constant(10), tf.constant(0.5), tf.constant(0.5), tf.constant(0.0)]
    for batch in (1, 0):
        with pytest.raises(tf.errors.InvalidArgumentError,
                           match=r"YoloPostprocess: anchors\[1\]\[2\] must be a finite, positive .*got \[inf, 23\]"):
            lib().opforge_yolo_postprocess([m[:batch] for m in maps], tables, *scalars, num_classes=2, input_size=[96, 96])

"""CombinedNonMaxSuppression against an independent NumPy NMS and against TensorFlow over many
random cases (hard and soft), ties, empty inputs, the shape function."""
from __future__ import annotations

import importlib

import numpy as np
import pytest
import tensorflow as tf

import opforge
from helpers import bits_equal

nms_mod = importlib.import_module("opforge.ops.combined_non_max_suppression")
yolo_decode = opforge.ops.yolo_decode
yolo_targets = opforge.ops.yolo_targets
nms = opforge.ops.combined_non_max_suppression


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



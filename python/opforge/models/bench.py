"""`opforge yolo bench`: the YOLO models with opforge's ops against the same networks from
TensorFlow built-ins (`ops="tf"`), timed interleaved in one process (`opforge.timing.interleaved`,
medians). ratio = tf / opforge: above 1 means opforge is faster.

Rows:
  - train: one optimizer step (tf.function: forward, YoloLoss, GradientTape, SGD) on a fixed
    synthetic batch (random images, targets from `opforge.ops.yolo_targets` of random boxes),
    batch 8, YoloV3Tiny and YoloV3, both twins starting from the same weights. The full model
    takes seconds per step on a small CPU, so it is timed with at most 3 rounds (1 warm-up).
  - post: decode + NMS of the three head maps of a 416 YOLO-v3 (80 classes, objectness logits
    mostly low as in a trained detector), `opforge.layers.YoloPostprocess` against
    `tf_yolo_decode` per scale + `tf.image.combined_non_max_suppression`, batch 1 and 8; then
    the decode alone and the NMS alone, to show where the time goes.
  - infer: the whole tiny detector (model + post-processing), batch 1 and 8.

`sizes`: the input sizes of the train and infer rows (default [416]; post-processing is always
at 416). `cases`: any of "train", "train_full", "post", "infer" (default all).
"""
from __future__ import annotations

import importlib
import json
from typing import Callable, Dict, List, Optional, Sequence

Row = Dict[str, object]

TRAIN_BATCH = 8
FULL_MAX_REPEATS = 3
NUM_CLASSES = 80
# Post-processing settings of yolov3-tf2's yolo_nms and of YoloPostprocess's defaults.
POST = dict(max_detections=100, max_detections_per_class=100, iou_threshold=0.5, score_threshold=0.5)


def _row(case: str, medians: Dict[str, float], note: str = "") -> Row:
    ours, theirs = medians["opforge"], medians["tf"]
    return {"case": case, "opforge_ms": ours * 1e3, "tf_ms": theirs * 1e3, "ratio": theirs / ours,
            "note": note}


def _format(rows: List[Row]) -> str:
    header = f"{'case':<58}{'opforge ms':>12}{'tf ms':>12}{'ratio':>8}  (ratio = tf / opforge, >1 = opforge faster)"
    lines = [header, "-" * len(header)]
    for r in rows:
        line = f"{r['case']:<58}{r['opforge_ms']:>12.2f}{r['tf_ms']:>12.2f}{r['ratio']:>7.2f}x"
        if r.get("note"):
            line += f"  {r['note']}"
        lines.append(line)
    return "\n".join(lines)


# --- training step -------------------------------------------------------------------------------


def synthetic_batch(model, size: int, batch: int, num_classes: int, seed: int = 3):
    """Random images in [0, 1] and the y_true of random boxes (6 per image, 2 of them padding)."""
    import tensorflow as tf

    import opforge
    from opforge.models.train import anchors_for

    targets_mod = importlib.import_module("opforge.ops.yolo_targets")
    anchors, masks = anchors_for(model, size)
    boxes, cls = targets_mod.random_boxes(batch, 6, seed=seed, padding=2, classes=num_classes)
    grids = [size // (32 >> k) for k in range(len(masks))]
    y = opforge.ops.yolo_targets(tf.constant(boxes, tf.float32), cls, anchors, masks, grids)
    x = tf.random.uniform((batch, size, size, 3), seed=seed)
    return x, tuple(y), anchors, masks


def twins(kind: str, size: int, num_classes: int = NUM_CLASSES, upsample: str = "transpose", seed: int = 7):
    """The opforge model and its ops="tf" twin with the same weights."""
    import keras

    import opforge.models as M

    keras.utils.set_random_seed(seed)
    fn = M.YoloV3Tiny if kind == "tiny" else M.YoloV3
    ours = fn(num_classes, size, upsample)
    twin = fn(num_classes, size, upsample, ops="tf")
    twin.set_weights(ours.get_weights())
    return ours, twin


def _train_step(model, loss, lr: float = 1e-5):
    import keras
    import tensorflow as tf

    optimizer = keras.optimizers.SGD(lr)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            value = tf.reduce_mean(loss(list(y), model(x, training=True)))
        optimizer.apply_gradients(zip(tape.gradient(value, model.trainable_variables), model.trainable_variables))
        return value

    return step


def train_rows(kind: str, size: int, repeats: int) -> List[Row]:
    import opforge.models as M

    ours, twin = twins(kind, size)
    x, y, anchors, masks = synthetic_batch(ours, size, TRAIN_BATCH, NUM_CLASSES)
    steps = {ops: _train_step(m, M.YoloLoss(anchors, masks, NUM_CLASSES, ops=ops))
             for ops, m in (("opforge", ours), ("tf", twin))}
    full = kind != "tiny"
    r = min(repeats, FULL_MAX_REPEATS) if full else repeats
    medians = _timed({ops: (lambda s=s: s(x, y)) for ops, s in steps.items()}, r, warmup=1 if full else 2)
    name = "YoloV3Tiny" if kind == "tiny" else "YoloV3"
    return [_row(f"train step {name} {size} B={TRAIN_BATCH} (SGD)", medians,
                 f"{r} rounds" if full else "")]


# --- post-processing -----------------------------------------------------------------------------


def yolo_like_heads(batch: int, size: int = 416, num_classes: int = NUM_CLASSES, seed: int = 0):
    """Raw head maps [B, g, g, 3*(5+C)] of a YOLO-v3 at `size` (g = size/32, /16, /8), logits
    shaped like a trained detector's: objectness mostly low, a few boxes above threshold (as
    `yolo_like_detections` of the NMS benchmark)."""
    import tensorflow as tf

    c = num_classes
    shift = tf.constant([0.0] * 4 + [-5.0] + [-3.0] * c)
    scale = tf.constant([1.0] * 4 + [3.0] + [2.0] * c)
    maps = []
    for s, grid in enumerate((size // 32, size // 16, size // 8)):
        f = tf.random.stateless_normal((batch, grid, grid, 3, 5 + c), seed=(seed, s)) * scale + shift
        maps.append(tf.reshape(f, (batch, grid, grid, 3 * (5 + c))))
    return maps


class TfPostprocess:
    """YoloPostprocess written with TensorFlow ops (yolov3-tf2's yolo_boxes + yolo_nms):
    `tf_yolo_decode` per scale, concatenated, `tf.image.combined_non_max_suppression`."""

    def __init__(self, anchors, anchor_masks, num_classes: int, input_size: int, max_detections: int = 100,
                 max_detections_per_class: int = 100, iou_threshold: float = 0.5, score_threshold: float = 0.5):
        import numpy as np

        self.anchors = np.asarray(anchors, np.float32)
        self.masks = [list(m) for m in anchor_masks]
        self.num_classes, self.input_size = num_classes, input_size
        self._decode = importlib.import_module("opforge.ops.yolo_decode").tf_yolo_decode
        self.kw = dict(max_output_size_per_class=max_detections_per_class, max_total_size=max_detections,
                       iou_threshold=iou_threshold, score_threshold=score_threshold, clip_boxes=True)

    def decode(self, maps):
        import tensorflow as tf

        boxes, scores = [], []
        for f, m in zip(maps, self.masks):
            out = self._decode(f, self.anchors[m], self.num_classes, self.input_size, box_format="xyxy",
                                 normalized=True)
            boxes.append(out.boxes)
            scores.append(out.class_scores)
        return tf.concat(boxes, 1)[:, :, None, :], tf.concat(scores, 1)

    def nms(self, boxes, scores):
        import tensorflow as tf

        r = tf.image.combined_non_max_suppression(boxes, scores, **self.kw)
        return r.nmsed_boxes, r.nmsed_scores, r.nmsed_classes, r.valid_detections

    def __call__(self, maps):
        return self.nms(*self.decode(maps))


def _opforge_decode(layer, maps):
    import tensorflow as tf

    from opforge.ops import yolo_decode

    boxes, scores = [], []
    for f, m in zip(maps, layer.anchor_masks):
        out = yolo_decode(f, tf.constant(layer.anchors[m], f.dtype), layer.num_classes, layer.input_size,
                          box_format="xyxy", normalized=True)
        boxes.append(out.boxes)
        scores.append(out.class_scores)
    return tf.concat(boxes, 1)[:, :, None, :], tf.concat(scores, 1)


def post_rows(repeats: int, batches: Sequence[int] = (1, 8)) -> List[Row]:
    import numpy as np
    import tensorflow as tf

    import opforge.models as M
    from opforge.layers import YoloPostprocess
    from opforge.ops import combined_non_max_suppression

    layer = YoloPostprocess(M.YOLOV3_ANCHORS, M.YOLOV3_MASKS, NUM_CLASSES, 416, **POST)
    theirs = TfPostprocess(M.YOLOV3_ANCHORS, M.YOLOV3_MASKS, NUM_CLASSES, 416, **POST)
    ours_post = tf.function(lambda maps: layer(maps))
    tf_post = tf.function(lambda maps: theirs(maps))
    ours_decode = tf.function(lambda maps: _opforge_decode(layer, maps))
    tf_decode = tf.function(lambda maps: theirs.decode(maps))
    ours_nms = tf.function(lambda b, s: tuple(combined_non_max_suppression(
        b, s, layer.max_detections_per_class, layer.max_detections, layer.iou_threshold, layer.score_threshold)))
    tf_nms = tf.function(lambda b, s: theirs.nms(b, s))
    rows = []
    for batch in batches:
        maps = yolo_like_heads(batch)
        a, b = ours_post(maps), tf_post(maps)
        valid_ours, valid_tf = a[3].numpy(), b[3].numpy()
        note = f"detections/image {valid_ours.mean():.1f} (tf {valid_tf.mean():.1f})"
        if not np.array_equal(valid_ours, valid_tf):
            note += " [COUNTS DIFFER]"
        rows.append(_row(f"post decode+NMS 3 scales 416 C=80 B={batch}", _timed(
            {"opforge": lambda: ours_post(maps), "tf": lambda: tf_post(maps)}, repeats), note))
        rows.append(_row(f"  of which: decode 3 scales + concat B={batch}", _timed(
            {"opforge": lambda: ours_decode(maps), "tf": lambda: tf_decode(maps)}, repeats)))
        boxes, scores = ours_decode(maps)
        candidates = int(tf.reduce_sum(tf.cast(scores > POST["score_threshold"], tf.int32)))
        rows.append(_row(f"  of which: NMS 10647 boxes x 80 B={batch}", _timed(
            {"opforge": lambda: ours_nms(boxes, scores), "tf": lambda: tf_nms(boxes, scores)}, repeats),
            f"{candidates / batch:.0f} (box, class) pairs above threshold/image"))
    return rows


def infer_rows(size: int, repeats: int, batches: Sequence[int] = (1, 8)) -> List[Row]:
    import tensorflow as tf

    import opforge.models as M

    ours, twin = twins("tiny", size)
    anchors = M.YOLOV3_TINY_ANCHORS * (size / 416)
    det = M.detector(ours, NUM_CLASSES, size, **POST)
    theirs = TfPostprocess(anchors, M.YOLOV3_TINY_MASKS, NUM_CLASSES, size, **POST)
    ours_fn = tf.function(lambda x: det(x, training=False))
    tf_fn = tf.function(lambda x: theirs(twin(x, training=False)))
    rows = []
    for batch in batches:
        x = tf.random.uniform((batch, size, size, 3), seed=batch)
        rows.append(_row(f"infer YoloV3Tiny {size} + post B={batch}", _timed(
            {"opforge": lambda: ours_fn(x), "tf": lambda: tf_fn(x)}, repeats)))
    return rows


def _timed(candidates: Dict[str, Callable[[], object]], repeats: int, warmup: int = 3) -> Dict[str, float]:
    from opforge.timing import interleaved

    return interleaved(candidates, repeats=repeats, warmup=warmup)


def run(repeats: int = 10, json_out: bool = False, sizes: Optional[Sequence[int]] = None,
        cases: Optional[Sequence[str]] = None) -> int:
    from opforge.bench import machine

    sizes = list(sizes or [416])
    cases = set(cases or ("train", "train_full", "post", "infer"))
    unknown = cases - {"train", "train_full", "post", "infer"}
    if unknown:
        print(f"opforge yolo bench: unknown case(s) {sorted(unknown)}; known: train, train_full, post, infer")
        return 2
    if not json_out:
        print(f"machine: {machine()}", flush=True)
    rows: List[Row] = []

    def emit(new: List[Row]) -> None:
        rows.extend(new)
        if not json_out:
            if len(rows) == len(new):
                print(_format(new), flush=True)
            else:
                print(_format(new).split("\n", 2)[2], flush=True)

    for size in sizes:
        if "train" in cases:
            emit(train_rows("tiny", size, repeats))
        if "train_full" in cases:
            emit(train_rows("full", size, repeats))
    if "post" in cases:
        emit(post_rows(repeats))
    if "infer" in cases:
        for size in sizes:
            emit(infer_rows(size, repeats))
    if json_out:
        print(json.dumps({"machine": machine(), "rows": rows}, indent=2))
    return 0

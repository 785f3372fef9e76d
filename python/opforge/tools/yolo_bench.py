"""`opforge yolo bench`: the YOLO models with opforge's ops against the same networks from
TensorFlow built-ins (`ops="tf"`), timed interleaved in one process (`opforge.tools.timing.interleaved`,
medians). ratio = tf / opforge: above 1 means opforge is faster.

Rows:
  - train: one optimizer step (tf.function: forward, YoloLoss, GradientTape, SGD) on a fixed
    synthetic batch (random images, targets from `opforge.ops.yolo_targets` of random boxes),
    batch 8, YoloV3Tiny and YoloV3, both twins starting from the same weights. The full model
    takes seconds per step on a small CPU, so it is timed with at most 3 rounds (1 warm-up).
  - post: decode + NMS of the three head maps of a 416 YOLO-v3 (80 classes, objectness logits
    mostly low as in a trained detector: `opforge.ops.yolo_postprocess.yolo_like_heads`),
    `opforge.layers.YoloPostprocess` (the fused `yolo_postprocess` op) against
    `tf_yolo_postprocess` (`tf_yolo_decode` per scale + `tf.image.combined_non_max_suppression`),
    batch 1 and 8; the same maths as separate opforge ops (what the fused op saves); and an
    untrained head, whose objectness lets half the boxes through the prefilter.
  - infer: the whole tiny detector (model + post-processing), batch 1 and 8.

  - block: one Darknet block, fused (`opforge.layers.ConvBNLeaky`) against Keras 3's unfused
    Conv2D + BatchNormalization + LeakyReLU, training step and inference; inference also against
    the graph grappler fuses.
  - fused: YOLO-v3-tiny training step with `fused=True` against the unfused model, and
    `fold_batch_norm(YoloV3)` inference against the unfused YOLO-v3.

  - train_xla: the YOLO-v3-tiny training step with and without `jit_compile=True`, opforge's
    model and its TensorFlow twin (four steps timed interleaved, three rows).

`sizes`: the input sizes of the train, infer and fused rows (default [416]; post-processing is
always at 416). `cases`: any of "train", "train_full", "post", "infer", "block", "fused"
(default the first four).

`policy` ("float32" or "mixed_bfloat16"): the Keras dtype policy every model and layer of the
run is built and called under, both opforge's and its TensorFlow twin (`keras.config.
set_dtype_policy`; the previous policy is restored afterwards). Under mixed_bfloat16 the layers
compute in bfloat16 with float32 variables; the inputs that are no model's (the post-processing's
head maps, the block's input) are made in bfloat16 too, and TensorFlow's NMS, which has no
bfloat16 kernel, runs in float32 between casts. The header prints `policy: ...` and each row
notes the compute dtype its models' layers report.
"""
from __future__ import annotations

import contextlib
import importlib
import json
from typing import Callable, Dict, List, Optional, Sequence

Row = Dict[str, object]

TRAIN_BATCH = 8
FULL_MAX_REPEATS = 3
NUM_CLASSES = 80
# Post-processing settings of yolov3-tf2's yolo_nms and of YoloPostprocess's defaults.
POST = dict(max_detections=100, max_detections_per_class=100, iou_threshold=0.5, score_threshold=0.5)
POLICIES = ("float32", "mixed_bfloat16")


@contextlib.contextmanager
def dtype_policy(name: str):
    """Keras's global dtype policy set to `name` for the block, the previous one restored after."""
    import keras

    before = keras.config.dtype_policy()
    keras.config.set_dtype_policy(name)
    try:
        yield keras.config.dtype_policy()
    finally:
        keras.config.set_dtype_policy(before)


def _compute_dtype() -> str:
    """The compute dtype of the global policy: what the inputs that are no model's are made in."""
    import keras

    return keras.config.dtype_policy().compute_dtype


def compute_dtypes(*models) -> str:
    """The compute dtypes of the layers with weights of `models` (the check that a policy took)."""
    names = set()
    for model in models:
        flatten = getattr(model, "_flatten_layers", None)  # Keras 3: every layer, nested ones too
        for layer in (flatten(include_self=False) if flatten else model.layers):
            if layer.weights:
                names.add(layer.compute_dtype)
    return "/".join(sorted(names)) or "-"


def _dtype_note(*models) -> str:
    return "" if _compute_dtype() == "float32" else f"layers compute in {compute_dtypes(*models)}"


def _join(*notes: str) -> str:
    return "; ".join(n for n in notes if n)


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


def _train_step(model, loss, lr: float = 1e-5, jit_compile: bool = False):
    import keras
    import tensorflow as tf

    optimizer = keras.optimizers.SGD(lr)

    @tf.function(jit_compile=jit_compile)
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
                 _join(f"{r} rounds" if full else "", _dtype_note(ours, twin)))]


def train_xla_rows(size: int, repeats: int) -> List[Row]:
    """The YOLO-v3-tiny training step under XLA (tf.function(jit_compile=True): opforge's ops as
    HLO lowerings and FFI custom calls, TensorFlow's compiled by XLA) and without, opforge's model
    and its TensorFlow twin, the four timed interleaved."""
    import opforge.models as M

    ours, twin = twins("tiny", size)
    x, y, anchors, masks = synthetic_batch(ours, size, TRAIN_BATCH, NUM_CLASSES)
    steps = {}
    for ops, model in (("opforge", ours), ("tf", twin)):
        loss = M.YoloLoss(anchors, masks, NUM_CLASSES, ops=ops)
        for jit in (False, True):
            steps[(ops, jit)] = _train_step(model, loss, jit_compile=jit)
    medians = _timed({f"{ops} {jit}": (lambda s=s: s(x, y)) for (ops, jit), s in steps.items()}, repeats,
                     warmup=2)
    m = {key: medians[f"{key[0]} {key[1]}"] for key in steps}
    base = f"train step YoloV3Tiny {size} B={TRAIN_BATCH} (SGD)"
    note = _dtype_note(ours, twin)
    return [
        _row(f"{base} jit_compile=True", {"opforge": m[("opforge", True)], "tf": m[("tf", True)]}, note),
        _row(f"{base} opforge: XLA vs not", {"opforge": m[("opforge", True)], "tf": m[("opforge", False)]},
             _join("tf column: opforge's model without jit_compile", note)),
        _row(f"{base} tf twin: XLA vs not", {"opforge": m[("tf", True)], "tf": m[("tf", False)]},
             _join("opforge column: the twin under XLA; tf column: the twin without", note)),
    ]


# --- post-processing -----------------------------------------------------------------------------


class TfPostprocess:
    """YoloPostprocess written with TensorFlow ops (yolov3-tf2's yolo_boxes + yolo_nms):
    `opforge.ops.yolo_postprocess.tf_yolo_postprocess` with the layer's settings."""

    def __init__(self, anchors, anchor_masks, num_classes: int, input_size: int, **post):
        self.kw = dict(anchors=anchors, anchor_masks=anchor_masks, num_classes=num_classes, input_size=input_size,
                       **post)

    def __call__(self, maps):
        from opforge.ops.yolo_postprocess import tf_yolo_postprocess

        return tuple(tf_yolo_postprocess(maps, **self.kw))


def _unfused(layer, maps):
    """The layer's maths as separate ops: yolo_decode per scale, concat, combined NMS."""
    import tensorflow as tf

    from opforge.ops import combined_non_max_suppression, yolo_decode

    boxes, scores = [], []
    for f, m in zip(maps, layer.anchor_masks):
        out = yolo_decode(f, tf.constant(layer.anchors[m], f.dtype), layer.num_classes, layer.input_size,
                          box_format="xyxy", normalized=True, max_log_scale=layer.max_log_scale)
        boxes.append(out.boxes)
        scores.append(out.class_scores)
    return tuple(combined_non_max_suppression(
        tf.concat(boxes, 1)[:, :, None, :], tf.concat(scores, 1), layer.max_detections_per_class,
        layer.max_detections, layer.iou_threshold, layer.score_threshold))


def post_rows(repeats: int, batches: Sequence[int] = (1, 8)) -> List[Row]:
    import numpy as np
    import tensorflow as tf

    import opforge.models as M
    from opforge.layers import YoloPostprocess
    from opforge.ops.yolo_postprocess import yolo_like_heads

    layer = YoloPostprocess(M.YOLOV3_ANCHORS, M.YOLOV3_MASKS, NUM_CLASSES, 416, **POST)
    theirs = TfPostprocess(M.YOLOV3_ANCHORS, M.YOLOV3_MASKS, NUM_CLASSES, 416, **POST)
    ours_post = tf.function(lambda maps: layer(maps))
    tf_post = tf.function(lambda maps: theirs(maps))
    unfused = tf.function(lambda maps: _unfused(layer, maps))
    rows = []

    dtype = _compute_dtype()
    for batch in batches:
        maps = [tf.cast(m, dtype) for m in yolo_like_heads(batch)]
        medians = _timed({"opforge": lambda: ours_post(maps), "tf": lambda: tf_post(maps),
                          "unfused": lambda: unfused(maps)}, repeats)
        a, b = ours_post(maps), tf_post(maps)
        note = f"detections/image {a[3].numpy().mean():.1f} (tf {b[3].numpy().mean():.1f})"
        if not np.array_equal(a[3].numpy(), b[3].numpy()):
            note += " [COUNTS DIFFER]"
        obj = tf.concat([tf.reshape(m, (batch, -1, 85))[..., 4] for m in maps], 1)
        share = float(tf.reduce_mean(tf.cast(obj > -0.0308, tf.float32)))
        rows.append(_row(f"post decode+NMS 3 scales 416 C=80 B={batch}", medians,
                         _join(note + f"; {share:.1%} of boxes decoded",
                               "" if dtype == "float32" else f"maps and layer in {layer.compute_dtype}")))
        rows.append(_row(f"  same maths as separate ops (yolo_decode + combined NMS) B={batch}",
                         {"opforge": medians["unfused"], "tf": medians["tf"]}))
    # An untrained head: objectness centred on 0, so half the boxes can reach the threshold.
    batch = batches[-1]
    maps = [tf.cast(m, dtype) for m in yolo_like_heads(batch, obj_mean=0.0)]
    medians = _timed({"opforge": lambda: ours_post(maps), "tf": lambda: tf_post(maps)}, repeats)
    rows.append(_row(f"post, untrained head (objectness ~ N(0, 3)) B={batch}", medians,
                     f"detections/image {ours_post(maps)[3].numpy().mean():.1f}"))
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
            {"opforge": lambda: ours_fn(x), "tf": lambda: tf_fn(x)}, repeats), _dtype_note(det, twin)))
    return rows


def _timed(candidates: Dict[str, Callable[[], object]], repeats: int, warmup: int = 3) -> Dict[str, float]:
    from opforge.tools.timing import interleaved

    return interleaved(candidates, repeats=repeats, warmup=warmup)


def run(repeats: int = 10, json_out: bool = False, sizes: Optional[Sequence[int]] = None,
        cases: Optional[Sequence[str]] = None, policy: str = "float32") -> int:
    sizes = list(sizes or [416])
    known = {"train", "train_full", "train_xla", "post", "infer", "block", "fused"}
    cases = set(cases or ("train", "train_full", "post", "infer"))
    unknown = cases - known
    if unknown:
        print(f"opforge yolo bench: unknown case(s) {sorted(unknown)}; known: {', '.join(sorted(known))}")
        return 2
    if policy not in POLICIES:
        print(f"opforge yolo bench: policy must be one of {', '.join(POLICIES)}, got {policy}")
        return 2
    with dtype_policy(policy):
        return _run(repeats, json_out, sizes, cases, policy)


def _run(repeats: int, json_out: bool, sizes: List[int], cases: set, policy: str) -> int:
    from opforge._machine import machine

    if not json_out:
        print(f"machine: {machine()}", flush=True)
        print(f"policy: {policy}", flush=True)
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
        if "train_xla" in cases:
            emit(train_xla_rows(size, repeats))
    if "post" in cases:
        emit(post_rows(repeats))
    if "infer" in cases:
        for size in sizes:
            emit(infer_rows(size, repeats))
    if "block" in cases:
        emit(block_rows(repeats))
    if "fused" in cases:
        for size in sizes:
            emit(fused_model_rows(size, repeats))
    if json_out:
        print(json.dumps({"machine": machine(), "policy": policy, "rows": rows}, indent=2))
    return 0


# --- the fused Darknet block (issue: fused Conv + BatchNorm + LeakyReLU) ---------------------------

BLOCK_SHAPES = (((8, 104, 104, 128), 3, 256), ((8, 52, 52, 256), 1, 128))


def _block_layers(filters: int, k: int):
    import keras

    return [keras.layers.Conv2D(filters, k, padding="same", use_bias=False), keras.layers.BatchNormalization(),
            keras.layers.LeakyReLU(0.1)]


def block_rows(repeats: int) -> List[Row]:
    """One Darknet block, fused (opforge.layers.ConvBNLeaky) against the unfused Keras 3 block
    (Conv2D + BatchNormalization + LeakyReLU): a training step's forward + gradient (input and
    variables), and inference; inference also against the graph grappler fuses (raw conv2d +
    fused_batch_norm + leaky_relu)."""
    import keras
    import numpy as np
    import tensorflow as tf

    from opforge.layers import ConvBNLeaky

    rows: List[Row] = []
    dtype = _compute_dtype()  # the input in the policy's compute dtype, as a model's layer would pass it
    for shape, k, filters in BLOCK_SHAPES:
        x = tf.cast(tf.random.normal(shape), dtype)
        chain = _block_layers(filters, k)
        fused = ConvBNLeaky(filters, k, alpha=0.1)
        y = x
        for layer in chain:
            y = layer(y)
        fused(x)
        weights = [w for layer in chain for w in layer.get_weights()]
        weights[3] = np.random.default_rng(0).normal(0, 0.1, filters).astype(np.float32)
        weights[4] = np.random.default_rng(1).uniform(0.5, 1.5, filters).astype(np.float32)
        chain[0].set_weights(weights[:1])
        chain[1].set_weights(weights[1:])
        fused.set_weights(weights)
        dy = tf.cast(tf.random.normal(fused.compute_output_shape(shape)), dtype)

        def unfused_call(training):
            y = x
            for layer in chain:
                y = layer(y, training=training) if isinstance(layer, keras.layers.BatchNormalization) else layer(y)
            return y

        def train(fn, variables):
            @tf.function
            def step():
                with tf.GradientTape() as tape:
                    tape.watch(x)
                    y = fn()
                return tape.gradient(y, [x] + variables, output_gradients=dy)
            return step

        unfused_vars = chain[0].trainable_variables + chain[1].trainable_variables
        label = f"{list(shape)} -> {k}x{k}x{filters}"
        in_dtype = "" if dtype == "float32" else f"in {fused.compute_dtype}"
        rows.append(_row(f"block train step {label}", _timed(
            {"opforge": train(lambda: fused(x, training=True), fused.trainable_variables),
             "tf": train(lambda: unfused_call(True), unfused_vars)}, repeats), _join("vs Keras 3 unfused", in_dtype)))
        ours_inf = tf.function(lambda: fused(x, training=False))
        keras_inf = tf.function(lambda: unfused_call(False))
        bn = chain[1]

        @tf.function
        def grappler_inf():
            z = tf.nn.conv2d(x, tf.cast(chain[0].kernel, dtype), 1, "SAME")
            z, _, _ = tf.compat.v1.nn.fused_batch_norm(z, bn.gamma, bn.beta, bn.moving_mean, bn.moving_variance,
                                                       epsilon=bn.epsilon, is_training=False)
            return tf.nn.leaky_relu(z, 0.1)

        med = _timed({"opforge": ours_inf, "tf": keras_inf, "grappler": grappler_inf}, repeats)
        rows.append(_row(f"block inference {label}", {"opforge": med["opforge"], "tf": med["tf"]},
                         _join("vs Keras 3 unfused", in_dtype)))
        rows.append(_row(f"block inference {label}", {"opforge": med["opforge"], "tf": med["grappler"]},
                         _join("vs conv2d + fused_batch_norm + leaky_relu (grappler-fused)", in_dtype)))
    return rows


def fused_model_rows(size: int, repeats: int) -> List[Row]:
    """YOLO-v3-tiny training step (batch 8) and YOLO-v3 inference (batch 1 and 8), fused=True
    against the unfused opforge model, the same weights."""
    import tensorflow as tf

    import opforge.models.fuse
    import opforge.models as M

    rows: List[Row] = []
    unfused = M.YoloV3Tiny(NUM_CLASSES, size)
    fused = M.YoloV3Tiny(NUM_CLASSES, size, fused=True)
    opforge.models.fuse.transfer_weights(unfused, fused)
    x, y, anchors, masks = synthetic_batch(unfused, size, TRAIN_BATCH, NUM_CLASSES)
    steps = {name: _train_step(m, M.YoloLoss(anchors, masks, NUM_CLASSES)) for name, m in
             (("opforge", fused), ("tf", unfused))}
    rows.append(_row(f"fused YoloV3Tiny train step {size} B={TRAIN_BATCH}", _timed(
        {k: (lambda s=s: s(x, y)) for k, s in steps.items()}, repeats, warmup=2),
        _join("vs unfused opforge model", _dtype_note(fused, unfused))))
    full = M.YoloV3(NUM_CLASSES, size)
    full_fused = opforge.models.fuse.fold_batch_norm(full)
    for batch in (1, 8):
        xb = tf.random.uniform((batch, size, size, 3), seed=batch)
        ours = tf.function(lambda v: full_fused(v, training=False))
        theirs = tf.function(lambda v: full(v, training=False))
        rows.append(_row(f"fold_batch_norm(YoloV3) inference {size} B={batch}", _timed(
            {"opforge": lambda: ours(xb), "tf": lambda: theirs(xb)}, min(repeats, 5), warmup=1),
            _join("vs the unfused model", _dtype_note(full_fused, full))))
    return rows

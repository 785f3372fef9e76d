"""The YOLO workflow behind `opforge yolo ...` and `make demo`: train (the synthetic shapes set or
a user's labelled folder), detect (draw boxes on images), evaluate (COCO mAP), export (a
SavedModel that takes a uint8 image batch of any size), and the demo."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import keras
import numpy as np
import tensorflow as tf

from opforge.data import DetectionSet, letterbox, load_coco, load_yolo_folder, shapes_dataset
from opforge.models.loss import YoloLoss
from opforge.models.train import YoloTrainer, anchors_for, evaluate_map, target_dataset
from opforge.models.yolov3 import YoloV3, YoloV3Tiny, detector

__all__ = ["load_data", "train", "make_detector", "detect", "draw_detections", "export", "ServingModule",
           "demo"]


def load_data(source: Optional[str], image_size: int, class_names: Sequence[str] = (), num_images: int = 800,
              seed: int = 0) -> DetectionSet:
    """`source`: None or "shapes" for the synthetic set; a folder of images with YOLO labels
    (needs class_names); or a COCO JSON (its images beside it, or in an `images` folder)."""
    if source in (None, "shapes"):
        return shapes_dataset(num_images, image_size, seed=seed, max_shapes=3, min_size=0.2, max_size=0.5)
    path = Path(source)
    if path.suffix == ".json":
        image_dir = path.parent / "images" if (path.parent / "images").is_dir() else path.parent
        return load_coco(path, image_dir, image_size)
    if not class_names:
        raise ValueError(f"opforge yolo: {source} holds YOLO labels: give the class names (--classes a,b,c)")
    return load_yolo_folder(path, image_size, class_names)


def _split(data: DetectionSet, fraction: float, seed: int):
    order = np.random.default_rng(seed).permutation(len(data))
    k = max(1, int(round(len(data) * fraction)))
    pick = lambda idx: DetectionSet(data.images[idx], data.boxes[idx], data.classes[idx], data.class_names)  # noqa: E731
    return pick(order[k:]), pick(order[:k])


def build_model(kind: str, num_classes: int, input_size: int, upsample: str = "transpose", ops: str = "opforge"):
    if kind not in ("tiny", "full"):
        raise ValueError(f"opforge yolo: model must be 'tiny' or 'full', got {kind!r}")
    return (YoloV3Tiny if kind == "tiny" else YoloV3)(num_classes, input_size, upsample, ops)


def make_detector(model: keras.Model, num_classes: int, input_size: int, **postprocess) -> keras.Model:
    """`opforge.models.detector` with the model's anchors (normalised anchors in pixels of this
    input size, as the model was trained with)."""
    anchors, masks = anchors_for(model, input_size)
    return detector(model, num_classes, input_size, anchors=anchors * input_size, anchor_masks=masks, **postprocess)


class Checkpoint(keras.callbacks.Callback):
    """The YOLO model's weights after every epoch (the trainer wraps the model; these are the
    model's own, loadable with `model.load_weights`)."""

    def __init__(self, model: keras.Model, pattern: str):
        super().__init__()
        self.yolo, self.pattern = model, pattern

    def on_epoch_end(self, epoch, logs=None):
        self.yolo.save_weights(self.pattern.format(epoch=epoch + 1))


class MapCallback(keras.callbacks.Callback):
    """Validation mAP@0.5 every `every` epochs (printed and put in the logs as `val_map50`)."""

    def __init__(self, model: keras.Model, data: DetectionSet, every: int = 5):
        super().__init__()
        self.yolo, self.data, self.every = model, data, every
        self.history: List[float] = []

    def on_epoch_end(self, epoch, logs=None):
        if (epoch + 1) % self.every:
            return
        size = self.data.images.shape[1]
        det = make_detector(self.yolo, len(self.data.class_names), size, score_threshold=0.05)
        value = evaluate_map(det, self.data.images, self.data.boxes, self.data.classes, self.data.class_names,
                             quiet=True)["map50"]
        self.history.append(value)
        if logs is not None:
            logs["val_map50"] = value
        print(f"\nepoch {epoch + 1}: validation mAP@0.5 = {value:.3f}")


def train(data: DetectionSet, out_dir: str, kind: str = "tiny", epochs: int = 30, steps_per_epoch: int = 50,
          batch_size: int = 16, learning_rate: float = 1e-3, seed: int = 0, map_every: int = 10,
          verbose: int = 2, val_fraction: float = 0.1) -> Dict[str, object]:
    """Trains a YOLO model with `model.fit` (progress, checkpoints in out_dir/checkpoints, a
    validation mAP callback), saves out_dir/model.keras and out_dir/history.json."""
    keras.utils.set_random_seed(seed)
    size = data.images.shape[1]
    train_set, val_set = _split(data, val_fraction, seed)
    model = build_model(kind, len(data.class_names), size)
    anchors, masks = anchors_for(model, size)
    ds = target_dataset(train_set.images, train_set.boxes, train_set.classes, anchors, masks, size, batch_size,
                        seed=seed, repeat=True)
    trainer = YoloTrainer(model, YoloLoss(anchors, masks, len(data.class_names)))
    trainer.compile(optimizer=keras.optimizers.Adam(learning_rate))
    out = Path(out_dir)
    (out / "checkpoints").mkdir(parents=True, exist_ok=True)
    callbacks = [Checkpoint(model, str(out / "checkpoints" / "epoch_{epoch:03d}.weights.h5"))]
    map_cb = MapCallback(model, val_set, every=map_every)
    if map_every:
        callbacks.append(map_cb)
    start = time.time()
    history = trainer.fit(ds, epochs=epochs, steps_per_epoch=steps_per_epoch, callbacks=callbacks, verbose=verbose,
                          shuffle=False)  # the dataset shuffles itself
    seconds = time.time() - start
    model.save(out / "model.keras")
    record = {"loss": [float(v) for v in history.history["loss"]], "val_map50": map_cb.history,
              "seconds": seconds, "class_names": list(data.class_names), "input_size": int(size), "kind": kind}
    (out / "history.json").write_text(json.dumps(record, indent=1))
    return {"model": model, "val": val_set, **record}


def load_model(path: str) -> keras.Model:
    import opforge  # noqa: F401  (registers the layers)

    return keras.models.load_model(path)


def detect(model: keras.Model, images: np.ndarray, num_classes: int, score_threshold: float = 0.3,
           max_detections: int = 20):
    """Detections on uint8 images `[B, S, S, 3]` of the model's input size: a list per image of
    (box xyxy normalised, score, class)."""
    size = images.shape[1]
    det = make_detector(model, num_classes, size, score_threshold=score_threshold, max_detections=max_detections)
    boxes, scores, classes, valid = (t.numpy() for t in det(tf.cast(images, tf.float32) / 255.0))
    return [[(boxes[i, j], float(scores[i, j]), int(classes[i, j])) for j in range(int(valid[i]))]
            for i in range(len(images))]


def draw_detections(images: np.ndarray, detections, class_names: Sequence[str], path: str, columns: int = 4) -> None:
    """A grid of the images with their boxes, class names and scores, as a PNG."""
    from PIL import Image, ImageDraw

    n = len(images)
    size = images.shape[1]
    rows = (n + columns - 1) // columns
    grid = Image.new("RGB", (columns * size, rows * size), (255, 255, 255))
    colours = [(230, 25, 75), (60, 180, 75), (0, 130, 200), (245, 130, 48), (145, 30, 180), (70, 240, 240)]
    for i in range(n):
        tile = Image.fromarray(images[i])
        draw = ImageDraw.Draw(tile)
        for box, score, cls in detections[i]:
            x1, y1, x2, y2 = (float(v) * size for v in box)
            colour = colours[cls % len(colours)]
            draw.rectangle([x1, y1, x2, y2], outline=colour, width=2)
            name = class_names[cls] if cls < len(class_names) else str(cls)
            draw.text((x1 + 2, max(0, y1 - 11)), f"{name} {score:.2f}", fill=colour)
        grid.paste(tile, ((i % columns) * size, (i // columns) * size))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    grid.save(path)


def plot_loss(losses: Sequence[float], path: str, width: int = 480, height: int = 240) -> None:
    """The training loss per epoch as a PNG line plot (log scale)."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (width, height), (255, 255, 255))
    draw = ImageDraw.Draw(image)
    values = np.log10(np.maximum(np.asarray(losses, np.float64), 1e-6))
    lo, hi = float(values.min()), float(values.max())
    span = hi - lo or 1.0
    pad = 30
    xs = [pad + (width - 2 * pad) * k / max(1, len(values) - 1) for k in range(len(values))]
    ys = [height - pad - (height - 2 * pad) * (v - lo) / span for v in values]
    draw.line([(pad, height - pad), (width - pad, height - pad)], fill=(0, 0, 0))
    draw.line([(pad, pad), (pad, height - pad)], fill=(0, 0, 0))
    draw.line(list(zip(xs, ys)), fill=(0, 90, 200), width=2)
    draw.text((pad, 5), f"training loss per epoch (log scale): {losses[0]:.3g} -> {losses[-1]:.3g}", fill=(0, 0, 0))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    image.save(path)


def _demo_onnx(model: keras.Model, size: int, shown: np.ndarray, expected, out_dir: str) -> bool:
    """The trained detector exported to ONNX and run in ONNX Runtime on the demo images: whether
    its detections are TensorFlow's."""
    import opforge.onnx

    path = os.path.join(out_dir, "detector.onnx")
    try:
        export_deployable(model, 3, size, path, "onnx", score_threshold=0.3)
        session = opforge.onnx.session(path, intra_op_num_threads=2)
    except Exception as exc:  # noqa: BLE001 -- the demo reports it and fails
        print(f"ONNX export / ONNX Runtime: FAILED: {type(exc).__name__}: {exc}")
        return False
    feed = {session.get_inputs()[0].name: shown.astype(np.float32) / 255.0}
    got = session.run(None, feed)
    same, text = compare_detections(got, expected)
    print(f"wrote {path}; in ONNX Runtime {opforge.onnx.ort_version()} on the {len(shown)} images: {text}: "
          f"{'equal to TensorFlow' if same else 'DIFFERENT from TensorFlow'}")
    return same


class ServingModule(tf.Module):
    """The detector for serving: uint8 images `[B, H, W, 3]` of any batch and size in;
    letterboxed in the graph to the model's input size, decoded, NMS; boxes out as normalised
    (x1, y1, x2, y2) of the original images."""

    def __init__(self, model: keras.Model, num_classes: int, input_size: int, **postprocess):
        super().__init__()
        self.detector = make_detector(model, num_classes, input_size, **postprocess)
        self.input_size = input_size

    @tf.function(input_signature=[tf.TensorSpec([None, None, None, 3], tf.uint8, name="images")])
    def serve(self, images):
        s = tf.cast(self.input_size, tf.float32)
        hw = tf.cast(tf.shape(images)[1:3], tf.float32)
        scale = tf.minimum(s / hw[1], s / hw[0])
        new_hw = tf.maximum(tf.round(hw * scale), 1.0)
        pad = tf.math.floordiv(s - new_hw, 2.0)  # (pad_y, pad_x)
        resized = tf.image.resize(tf.cast(images, tf.float32), tf.cast(new_hw, tf.int32), "bilinear")
        size = self.input_size
        boxed = tf.image.pad_to_bounding_box(resized - 128.0, tf.cast(pad[0], tf.int32), tf.cast(pad[1], tf.int32),
                                             size, size) + 128.0
        boxes, scores, classes, valid = self.detector(tf.round(boxed) / 255.0)
        # From the letterboxed input back to the original image, normalised.
        x = (boxes[..., 0::2] * s - pad[1]) / new_hw[1]
        y = (boxes[..., 1::2] * s - pad[0]) / new_hw[0]
        boxes = tf.clip_by_value(tf.stack([x[..., 0], y[..., 0], x[..., 1], y[..., 1]], axis=-1), 0.0, 1.0)
        mask = tf.sequence_mask(valid, tf.shape(boxes)[1], tf.float32)[..., None]
        return {"boxes": boxes * mask, "scores": scores, "classes": classes, "valid_detections": valid}


def export(model: keras.Model, num_classes: int, input_size: int, path: str, **postprocess) -> ServingModule:
    """Saves the detector (letterbox, model, decode, NMS) as a SavedModel with the serving
    signature `serving_default(images: uint8 [B, H, W, 3])`. Load it with
    `import opforge; tf.saved_model.load(path)`."""
    module = ServingModule(model, num_classes, input_size, **postprocess)
    tf.saved_model.save(module, path, signatures={"serving_default": module.serve})
    return module


EXPORT_FORMATS = ("savedmodel", "onnx", "tflite")


def export_deployable(model: keras.Model, num_classes: int, input_size: int, path: str, format: str = "onnx",
                      **postprocess):
    """The detector (model, decode, NMS) for another runtime: `format` "onnx" writes an ONNX file
    (`opforge.onnx.export`: the network as standard ONNX ops, the post-processing as the
    `opforge.YoloPostprocess` node that libopforge_ort.so runs; run it with
    `opforge.onnx.session(path)`), "tflite" a LiteRT flatbuffer (`opforge.lite.convert`; run it
    with `opforge.lite.interpreter(path)`), "savedmodel" `export`'s SavedModel. The ONNX and LiteRT
    files take float32 images `[B, S, S, 3]` in [0, 1] of the model's input size S (batch dynamic
    in ONNX) and give (boxes, scores, classes, valid_detections) as the Keras detector does."""
    if format == "savedmodel":
        return export(model, num_classes, input_size, path, **postprocess)
    det = make_detector(model, num_classes, input_size, **postprocess)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    if format == "onnx":
        import opforge.onnx

        return opforge.onnx.export(det, path)
    if format == "tflite":
        import opforge.lite

        content = opforge.lite.convert(det)
        Path(path).write_bytes(content)
        return content
    raise ValueError(f"format must be one of {', '.join(EXPORT_FORMATS)}, got {format!r}")


def compare_detections(got, expected, box_tolerance: float = 1e-5, score_tolerance: float = 1e-6):
    """(same, text): whether another runtime's (boxes, scores, classes, valid_detections) are
    TensorFlow's (counts and classes equal, boxes and scores within the tolerances), and a line
    saying how far apart they are."""
    got = [np.asarray(g) for g in got]
    expected = [np.asarray(e) for e in expected]
    counts = np.array_equal(got[3], expected[3])
    classes = np.array_equal(got[2], expected[2])
    box = float(np.abs(got[0] - expected[0]).max()) if got[0].size else 0.0
    score = float(np.abs(got[1] - expected[1]).max()) if got[1].size else 0.0
    same = counts and classes and box <= box_tolerance and score <= score_tolerance
    text = (f"{int(expected[3].sum())} detections; counts {'equal' if counts else 'DIFFERENT'}, classes "
            f"{'equal' if classes else 'DIFFERENT'}, boxes within {box:.1e}, scores within {score:.1e}")
    return same, text


def demo(out_dir: str = "demo_out", seconds_budget: float = 300.0, seed: int = 0) -> int:
    """`make demo`'s training: YOLO-tiny on the synthetic shapes (128 px), mAP@0.5 on a held-out
    set, demo_out/detections.png and loss.png, the model saved and reloaded in a fresh process
    with equal detections. Returns 0 if the mAP reaches 0.5 and the reload matches."""
    import subprocess
    import sys

    from opforge._machine import machine

    print(f"\nYOLO-tiny on the synthetic shapes set ({machine()})")
    size = 128
    data = shapes_dataset(800, size, seed=seed + 1, max_shapes=3, min_size=0.2, max_size=0.5)
    held_out = shapes_dataset(100, size, seed=seed + 2, max_shapes=3, min_size=0.2, max_size=0.5)
    # The epoch count comes from the time budget at a conservative 0.2 s per step of batch 16
    # (a 2-core machine runs a step in less), so the demo ends within its budget.
    steps = 50
    epochs = max(4, min(30, int(seconds_budget / (steps * 0.2))))
    result = train(data, out_dir, kind="tiny", epochs=epochs, steps_per_epoch=steps, batch_size=16,
                   seed=seed, map_every=0, val_fraction=0.05)
    model = result["model"]
    det = make_detector(model, 3, size, score_threshold=0.05)
    metrics = evaluate_map(det, held_out.images, held_out.boxes, held_out.classes, held_out.class_names, quiet=True)
    print(f"trained {epochs * steps} steps in {result['seconds']:.0f} s; held-out mAP@0.5 = {metrics['map50']:.3f}, "
          f"mAP@[.5:.95] = {metrics['map']:.3f}; per class AP@0.5: "
          + ", ".join(f"{k} {v:.2f}" for k, v in metrics["per_class_ap50"].items()))
    shown = held_out.images[:16]
    found = detect(model, shown, 3, score_threshold=0.3)
    draw_detections(shown, found, held_out.class_names, os.path.join(out_dir, "detections.png"))
    plot_loss(result["loss"], os.path.join(out_dir, "loss.png"))
    np.save(os.path.join(out_dir, "shown.npy"), shown)
    expected = [t.numpy() for t in make_detector(model, 3, size, score_threshold=0.3)(tf.cast(shown, tf.float32) / 255.0)]
    np.savez(os.path.join(out_dir, "expected.npz"), *expected)
    code = f"""
import numpy as np, tensorflow as tf, keras, opforge
from opforge.models.app import make_detector
model = keras.models.load_model({os.path.join(out_dir, 'model.keras')!r})
shown = np.load({os.path.join(out_dir, 'shown.npy')!r})
got = [t.numpy() for t in make_detector(model, 3, {size}, score_threshold=0.3)(tf.cast(shown, tf.float32) / 255.0)]
exp = np.load({os.path.join(out_dir, 'expected.npz')!r})
same = all(np.array_equal(g, exp['arr_%d' % i]) for i, g in enumerate(got))
print('RELOAD', same)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    reloaded = "RELOAD True" in proc.stdout
    print(f"wrote {out_dir}/detections.png, {out_dir}/loss.png, {out_dir}/model.keras; reloaded in a fresh "
          f"process: detections {'equal' if reloaded else 'DIFFERENT: ' + proc.stderr[-2000:]}")
    onnx_same = _demo_onnx(model, size, shown, expected, out_dir)
    ok = metrics["map50"] >= 0.5 and reloaded and onnx_same
    print("demo:", "ok" if ok else "FAIL (mAP@0.5 must reach 0.5, the reload and the ONNX detections must match)")
    return 0 if ok else 1

"""The child process of tests/test_keras_backends.py's YOLO test: YOLO-v3-tiny (opforge.models) on
one Keras 3 backend. Role "tensorflow" builds the model (seeded), saves it, and records its first
loss, 20 steps of YoloTrainer.fit and its detector's detections; role "jax" loads that `.keras`
file, checks the loss and the detections against TensorFlow's, trains 20 steps on the JAX backend
(the loss falls as on TensorFlow) and saves its trained model; role "tensorflow_check" loads the
JAX-trained file and checks its detections against the ones JAX computed."""
from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

import opforge
import opforge.models as M

targets_mod = importlib.import_module("opforge.ops.yolo_targets")
SIZE, CLASSES = 64, 3


def data():
    boxes, cls = targets_mod.random_boxes(8, 6, seed=3, padding=2, classes=CLASSES)
    anchors = (M.YOLOV3_TINY_ANCHORS / 416).astype(np.float32)
    y = opforge.ops.yolo_targets(tf.constant(boxes, tf.float32), cls, anchors, M.YOLOV3_TINY_MASKS,
                                 (SIZE // 32, SIZE // 16))
    x = np.random.default_rng(5).uniform(size=(8, SIZE, SIZE, 3)).astype(np.float32)
    return x, tuple(np.asarray(t) for t in y), anchors


def detections(model, x):
    det = M.detector(model, CLASSES, SIZE, score_threshold=0.05)
    return [np.asarray(v) for v in det(x[:2], training=False)]


def first_loss(model, loss, x, y):
    return float(np.mean(np.asarray(loss(list(y), list(model(x, training=True))))))


def train(model, loss, x, y):
    trainer = M.YoloTrainer(model, loss)
    trainer.compile(keras.optimizers.Adam(1e-3))
    history = trainer.fit(x, y, batch_size=4, epochs=10, shuffle=False, verbose=0).history["loss"]
    return [float(v) for v in history]


def main():
    folder, role = Path(sys.argv[1]), sys.argv[2]
    x, y, anchors = data()
    loss = M.YoloLoss(anchors, M.YOLOV3_TINY_MASKS, CLASSES)
    record = {"backend": keras.backend.backend()}
    if role == "tensorflow":
        keras.utils.set_random_seed(7)
        model = M.YoloV3Tiny(CLASSES, SIZE)
        model.save(folder / "tiny.keras")
        np.savez(folder / "tf_detections.npz", *detections(model, x))
        record["first_loss"] = first_loss(model, loss, x, y)
        record["losses"] = train(model, loss, x, y)
    elif role == "jax":
        model = keras.models.load_model(folder / "tiny.keras")
        theirs = list(np.load(folder / "tf_detections.npz").values())
        ours = detections(model, x)
        record["same_detections"] = bool(all(np.allclose(a, b, rtol=1e-4, atol=1e-4) for a, b in zip(ours, theirs))
                                         and np.array_equal(ours[3], theirs[3]) and np.array_equal(ours[2], theirs[2]))
        record["valid"] = ours[3].tolist()
        record["first_loss"] = first_loss(model, loss, x, y)
        record["losses"] = train(model, loss, x, y)
        model.save(folder / "tiny_jax.keras")
        np.savez(folder / "jax_detections.npz", *detections(model, x))
    else:
        model = keras.models.load_model(folder / "tiny_jax.keras")
        theirs = list(np.load(folder / "jax_detections.npz").values())
        ours = detections(model, x)
        record["same_detections"] = bool(all(np.allclose(a, b, rtol=1e-4, atol=1e-4) for a, b in zip(ours, theirs))
                                         and np.array_equal(ours[3], theirs[3]) and np.array_equal(ours[2], theirs[2]))
    print("RESULT", json.dumps(record))


if __name__ == "__main__":
    main()

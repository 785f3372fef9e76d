"""Training and evaluating the YOLO models: a tf.data pipeline of targets, a Keras training
wrapper for `model.fit`, a custom-loop step, and COCO mAP (pycocotools)."""
from __future__ import annotations

import contextlib
import io
from typing import Dict, Optional, Sequence

import keras
import numpy as np
import tensorflow as tf

from opforge.models.loss import YoloLoss
from opforge.models.yolov3 import YOLOV3_ANCHORS, YOLOV3_MASKS, YOLOV3_TINY_ANCHORS, YOLOV3_TINY_MASKS
from opforge.ops import yolo_targets

__all__ = ["anchors_for", "target_dataset", "YoloTrainer", "custom_train_step", "distributed_train_step",
           "evaluate_map"]


def anchors_for(model: keras.Model, input_size: int):
    """The anchors (normalised, for targets and loss) and masks of a YoloV3 (three heads) or
    YoloV3Tiny (two), scaled from a 416 input to `input_size` as pixels, then normalised."""
    three = len(model.outputs) == 3
    anchors = (YOLOV3_ANCHORS if three else YOLOV3_TINY_ANCHORS) / 416.0
    return anchors.astype(np.float32), (YOLOV3_MASKS if three else YOLOV3_TINY_MASKS)


def target_dataset(images, boxes, classes, anchors, masks, input_size: int, batch_size: int,
                   shuffle: bool = True, seed: int = 0, repeat: bool = False) -> tf.data.Dataset:
    """Batches of (images float32 in [0, 1], tuple of y_true per scale) from uint8 images and
    normalised boxes, the targets made by `opforge.ops.yolo_targets` in the pipeline."""
    grids = [input_size // (32 >> k) for k in range(len(masks))]
    ds = tf.data.Dataset.from_tensor_slices((images, boxes.astype(np.float32), classes.astype(np.int32)))
    if shuffle:
        ds = ds.shuffle(len(images), seed=seed, reshuffle_each_iteration=True)
    if repeat:
        ds = ds.repeat()
    ds = ds.batch(batch_size, drop_remainder=True)

    def to_targets(im, b, c):
        return tf.cast(im, tf.float32) / 255.0, tuple(yolo_targets(b, c, anchors, masks, grids))

    return ds.map(to_targets, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


class YoloTrainer(keras.Model):
    """`model.fit` for a YOLO model: wraps it and `YoloLoss` (which needs every scale's targets
    at once), so that fit's progress bar, callbacks and checkpoints work. Gradients are clipped
    to a global norm of `clip_norm`."""

    def __init__(self, model: keras.Model, loss: YoloLoss, clip_norm: Optional[float] = 10.0, **kwargs):
        super().__init__(**kwargs)
        self.model, self.yolo_loss, self.clip_norm = model, loss, clip_norm
        self.loss_tracker = keras.metrics.Mean(name="loss")

    def call(self, x, training=False):
        return self.model(x, training=training)

    @property
    def metrics(self):
        return [self.loss_tracker]

    def train_step(self, *args):
        if len(args) == 2:  # Keras's JAX backend: train_step(state, data), stateless
            return self._jax_train_step(*args)
        x, y = args[0]
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(self.yolo_loss(list(y), self.model(x, training=True)))
            loss += tf.add_n(self.model.losses) if self.model.losses else 0.0
        grads = tape.gradient(loss, self.model.trainable_variables)
        if self.clip_norm:
            grads, _ = tf.clip_by_global_norm(grads, self.clip_norm)
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
        self.loss_tracker.update_state(loss)
        return {"loss": self.loss_tracker.result()}

    def _jax_train_step(self, state, data):
        """The same step on Keras's JAX backend: jax.value_and_grad of the loss through
        `stateless_call`, gradients clipped to the global norm as tf.clip_by_global_norm does
        (`g * clip / max(norm, clip)`), the optimizer's and the metric's stateless updates."""
        import jax
        import jax.numpy as jnp

        trainable, non_trainable, optimizer_vars, metrics_vars = state
        x, y = data

        def compute(trainable, non_trainable):
            outputs, non_trainable, losses = self.stateless_call(trainable, non_trainable, x, training=True,
                                                                 return_losses=True)
            value = jnp.mean(self.yolo_loss(list(y), list(outputs)))
            if losses:
                value = value + sum(losses)
            return value, non_trainable

        (loss, non_trainable), grads = jax.value_and_grad(compute, has_aux=True)(trainable, non_trainable)
        if self.clip_norm:
            norm = jnp.sqrt(sum(jnp.sum(jnp.square(g.astype(jnp.float32))) for g in grads))
            scale = self.clip_norm / jnp.maximum(norm, self.clip_norm)
            grads = [(g * scale).astype(g.dtype) for g in grads]
        trainable, optimizer_vars = self.optimizer.stateless_apply(optimizer_vars, grads, trainable)
        metrics_vars = self.loss_tracker.stateless_update_state(metrics_vars, loss)
        logs = {"loss": self.loss_tracker.stateless_result(metrics_vars)}
        return logs, (trainable, non_trainable, optimizer_vars, metrics_vars)

    def test_step(self, *args):
        if len(args) == 2:  # Keras's JAX backend: test_step(state, data)
            state, (x, y) = args
            trainable, non_trainable, metrics_vars = state
            outputs, non_trainable = self.stateless_call(trainable, non_trainable, x, training=False)
            import jax.numpy as jnp

            loss = jnp.mean(self.yolo_loss(list(y), list(outputs)))
            metrics_vars = self.loss_tracker.stateless_update_state(metrics_vars, loss)
            return {"loss": self.loss_tracker.stateless_result(metrics_vars)}, (trainable, non_trainable,
                                                                                metrics_vars)
        x, y = args[0]
        loss = tf.reduce_mean(self.yolo_loss(list(y), self.model(x, training=False)))
        self.loss_tracker.update_state(loss)
        return {"loss": self.loss_tracker.result()}


def custom_train_step(model: keras.Model, loss: YoloLoss, optimizer, clip_norm: Optional[float] = 10.0):
    """The same step as YoloTrainer's, as a `tf.function` for a custom loop: `step(x, y)`
    returns the loss before the update."""

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            value = tf.reduce_mean(loss(list(y), model(x, training=True)))
            value += tf.add_n(model.losses) if model.losses else 0.0
        grads = tape.gradient(value, model.trainable_variables)
        if clip_norm:
            grads, _ = tf.clip_by_global_norm(grads, clip_norm)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return value

    return step


def distributed_train_step(strategy: tf.distribute.Strategy, model: keras.Model, loss: YoloLoss, optimizer,
                           global_batch_size: int, clip_norm: Optional[float] = 10.0):
    """`custom_train_step` under a `tf.distribute` strategy (MirroredStrategy,
    MultiWorkerMirroredStrategy...): `step(dist_inputs)` takes a distributed `(x, y)` (from
    `strategy.experimental_distribute_dataset` or `distribute_values_from_function`) and returns
    the loss of the global batch before the update, the same loss as `custom_train_step`'s: the
    mean of `YoloLoss` over the global batch plus the regularization losses.

    Build the model and the optimizer's variables under `strategy.scope()`. Each replica's loss
    is `tf.nn.compute_average_loss(per_image, global_batch_size)` plus its 1/replicas share of
    the regularization losses, so that the sum over the replicas is the global loss. Batch norm
    in training mode normalises with each replica's own batch statistics unless the model was
    built with `sync_batch_norm=True`, which is what gives the one-device step on the global batch.

    Clipping (to a global norm of `clip_norm`, as `custom_train_step`) needs the norm of the
    gradient of the global loss, the sum over the replicas. Keras 3's `apply_gradients` always
    sums the replicas' gradients itself (it has no switch to skip that), so each replica sums the
    gradients once (all-reduce) for the norm and hands its own gradients, scaled by
    `clip_norm / max(norm, clip_norm)`, to the optimizer, whose sum is then the clipped global
    gradient.
    """
    global_batch_size = int(global_batch_size)
    if global_batch_size < 1:
        raise ValueError(f"opforge.models.distributed_train_step: global_batch_size must be >= 1, got "
                         f"{global_batch_size}")

    def replica_step(x, y):
        with tf.GradientTape() as tape:
            per_image = loss(list(y), model(x, training=True))
            value = tf.nn.compute_average_loss(per_image, global_batch_size=global_batch_size)
            if model.losses:
                value += tf.nn.scale_regularization_loss(tf.add_n(model.losses))
        variables = model.trainable_variables
        grads = tape.gradient(value, variables)
        if clip_norm:
            ctx = tf.distribute.get_replica_context()
            summed = ctx.all_reduce(tf.distribute.ReduceOp.SUM, [g for g in grads if g is not None])
            norm = tf.linalg.global_norm(summed)
            scale = tf.cast(clip_norm, norm.dtype) / tf.maximum(norm, tf.cast(clip_norm, norm.dtype))
            grads = [None if g is None else g * tf.cast(scale, g.dtype) for g in grads]
        optimizer.apply_gradients(zip(grads, variables))
        return value

    @tf.function
    def step(dist_inputs):
        x, y = dist_inputs
        per_replica = strategy.run(replica_step, args=(x, y))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    return step


def evaluate_map(detector: keras.Model, images, boxes, classes, class_names: Sequence[str],
                 batch_size: int = 8, quiet: bool = False) -> Dict[str, object]:
    """COCO mAP of a detector (`opforge.models.detector`: images in, normalised xyxy boxes,
    scores, classes, valid counts out) on a labelled set, through pycocotools: mAP@0.5,
    mAP@[.5:.95] and AP@0.5 per class."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    size = images.shape[1]
    gt = {"images": [], "annotations": [], "categories": [{"id": k, "name": n} for k, n in enumerate(class_names)]}
    for i in range(len(images)):
        gt["images"].append({"id": i, "width": size, "height": size})
        for b, c in zip(boxes[i], classes[i]):
            if b.any():
                x1, y1, x2, y2 = (float(v) * size for v in b)
                gt["annotations"].append({"id": len(gt["annotations"]) + 1, "image_id": i, "category_id": int(c),
                                          "bbox": [x1, y1, x2 - x1, y2 - y1], "area": (x2 - x1) * (y2 - y1),
                                          "iscrowd": 0})
    results = []
    for start in range(0, len(images), batch_size):
        batch = tf.cast(images[start:start + batch_size], tf.float32) / 255.0
        db, ds, dc, dv = (t.numpy() for t in detector(batch))
        for k in range(len(db)):
            for j in range(int(dv[k])):
                x1, y1, x2, y2 = (float(v) * size for v in db[k, j])
                results.append({"image_id": start + k, "category_id": int(dc[k, j]),
                                "bbox": [x1, y1, x2 - x1, y2 - y1], "score": float(ds[k, j])})
    if not results or not gt["annotations"]:
        return {"map50": 0.0, "map": 0.0, "per_class_ap50": {n: 0.0 for n in class_names}}
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints its progress
        coco = COCO()
        coco.dataset = gt
        coco.createIndex()
        dets = coco.loadRes(results)
    ev = COCOeval(coco, dets, "bbox")
    with contextlib.redirect_stdout(io.StringIO()) if quiet else contextlib.nullcontext():
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    precision = ev.eval["precision"]  # [iou, recall, class, area, max dets]
    per_class = {}
    for k, name in enumerate(class_names):
        p = precision[0, :, k, 0, -1]
        per_class[name] = float(np.mean(p[p > -1])) if (p > -1).any() else 0.0
    return {"map50": float(ev.stats[1]), "map": float(ev.stats[0]), "per_class_ap50": per_class}

"""The YOLO-v3 loss (yolov3-tf2's terms) on `opforge.ops.yolo_decode`, or (`ops="tf"`) on the
same decode written with TensorFlow ops, for parity checks."""
from __future__ import annotations

import importlib
from typing import Dict, Optional, Sequence

import numpy as np
import tensorflow as tf

from opforge.layers._checks import check_with_op
from opforge.ops import yolo_decode

__all__ = ["YoloLoss"]

_decode_module = importlib.import_module("opforge.ops.yolo_decode")


class YoloLoss:
    """`loss(y_true_list, head_outputs)`: the YOLO-v3 loss per image, `[B]`, summed over scales.

    Per scale, with y_true `[B, gh, gw, A, 6]` from `opforge.ops.yolo_targets` (normalised
    x1, y1, x2, y2, objectness, class) and the raw head map `[B, gh, gw, A*(5+C)]`:
      - xy: squared error of the box centres, in cell units, weighted by `2 - w*h` (small boxes
        count more), where a box is assigned;
      - wh: squared error of `log(w / anchor_w)` and `log(h / anchor_h)`, same weight;
      - objectness: binary cross-entropy where a box is assigned, and where none is but the
        predicted box overlaps every true box of the image by IoU < ignore_thresh;
      - class: binary cross-entropy of each class against the one-hot class, where assigned.
    The boxes come from `yolo_decode` (its gradient trains through them); objectness and class
    cross-entropies are computed from the logits (stable). `anchors` are normalised (w, h), as
    `yolo_targets` takes them (the YOLOV3 constants divided by the input size).
    `max_log_scale` is the decode's (see `yolo_decode`), for both `ops`: None (the default)
    decodes exp(tw) * anchor_w as yolov3-tf2 does, so every term's gradient reaches tw and th; a
    number (`YOLO_MAX_LOG_SCALE`) clamps tw, th there first, as torchvision does, and a tw or th
    above it then gets no gradient from the boxes (the xy, wh and ignore terms all read them).
    """

    def __init__(self, anchors, anchor_masks: Sequence[Sequence[int]], num_classes: int,
                 ignore_thresh: float = 0.5, ops: str = "opforge", max_log_scale: Optional[float] = None) -> None:
        if ops not in ("opforge", "tf"):
            raise ValueError(f"opforge.models.YoloLoss: ops must be 'opforge' or 'tf', got {ops!r}")
        self.anchors = np.asarray(anchors, np.float64)  # cast to the features' dtype where used
        self.anchor_masks = [list(m) for m in anchor_masks]
        self.num_classes = int(num_classes)
        self.ignore_thresh = float(ignore_thresh)
        self.ops = ops
        # The core's check (NaN and -inf are errors), now rather than at the first step.
        check_with_op(f"opforge.models.YoloLoss(max_log_scale={max_log_scale!r})", lambda: yolo_decode(
            tf.zeros([0, 1, 1, 6]), [[1.0, 1.0]], 1, (1, 1), max_log_scale=max_log_scale))
        self.max_log_scale = max_log_scale
        self._decode = yolo_decode if ops == "opforge" else _decode_module.tf_yolo_decode

    def __call__(self, y_true_list, head_outputs) -> tf.Tensor:
        terms = self.terms(y_true_list, head_outputs)
        return terms["xy"] + terms["wh"] + terms["obj"] + terms["class"]

    def terms(self, y_true_list, head_outputs) -> Dict[str, tf.Tensor]:
        """The four terms per image, `[B]` each, summed over scales. On JAX arrays (Keras's JAX
        backend) the same terms in jax.numpy, on `opforge.jax.yolo_decode`."""
        if len(y_true_list) != len(self.anchor_masks) or len(head_outputs) != len(self.anchor_masks):
            raise ValueError(f"opforge.models.YoloLoss: expected {len(self.anchor_masks)} y_true and head "
                             f"maps (one per anchor mask), got {len(y_true_list)} and {len(head_outputs)}")
        on_jax = _is_jax(head_outputs[0])
        if on_jax and self.ops != "opforge":
            raise ValueError("opforge.models.YoloLoss: ops='tf' is the TensorFlow twin (TensorFlow ops); on "
                             "JAX arrays (Keras's JAX backend) use ops='opforge'")
        true_boxes = _true_boxes_jax(y_true_list) if on_jax else self._true_boxes(y_true_list)
        scale = self._scale_jax if on_jax else self._scale
        out = {"xy": 0.0, "wh": 0.0, "obj": 0.0, "class": 0.0}
        for y_true, features, mask in zip(y_true_list, head_outputs, self.anchor_masks):
            for name, value in scale(y_true, features, self.anchors[mask], true_boxes).items():
                out[name] = out[name] + value
        return out

    def _scale_jax(self, y_true, features, anchors, true_boxes):
        """_scale in jax.numpy (static shapes): the same terms, the decode `opforge.jax.yolo_decode`."""
        import jax.numpy as jnp

        from opforge.jax import yolo_decode as jax_yolo_decode

        dtype = features.dtype
        b, gh, gw = features.shape[:3]
        na = anchors.shape[0]
        f = features.reshape(b, gh, gw, na, 5 + self.num_classes)
        # The anchors rounded as tf.constant(anchors, dtype) rounds them (through float32).
        a = anchors.astype(np.float64 if dtype == np.float64 else np.float32).astype(dtype)
        decoded = jax_yolo_decode(features, a, self.num_classes, (1, 1), box_format="center_xywh",
                                  max_log_scale=self.max_log_scale)
        box = decoded.boxes.reshape(b, gh, gw, na, 4)
        pred_xy, pred_wh = box[..., 0:2], box[..., 2:4]
        y_true = y_true.astype(dtype)
        true_xy = (y_true[..., 0:2] + y_true[..., 2:4]) / 2
        true_wh = y_true[..., 2:4] - y_true[..., 0:2]
        obj_mask = y_true[..., 4]
        weight = 2 - true_wh[..., 0] * true_wh[..., 1]
        cells = jnp.asarray([gw, gh], dtype)
        xy_loss = obj_mask * weight * jnp.sum(jnp.square((true_xy - pred_xy) * cells), axis=-1)
        safe_true = jnp.where(true_wh > 0, true_wh, a)  # log(1) = 0 where nothing is assigned
        wh_err = jnp.log(safe_true / a) - jnp.log(pred_wh / a)
        wh_loss = obj_mask * weight * jnp.sum(jnp.square(wh_err), axis=-1)
        corners = jnp.concatenate([pred_xy - pred_wh / 2, pred_xy + pred_wh / 2], axis=-1)
        iou = _iou_jax(corners.reshape(b, -1, 4), true_boxes[0].astype(dtype))
        iou = iou * true_boxes[1].astype(dtype)[:, None, :]
        best = jnp.max(iou, axis=-1).reshape(obj_mask.shape)
        ignore = (best < self.ignore_thresh).astype(dtype)
        obj_bce = _sigmoid_bce_jax(obj_mask, f[..., 4])
        obj_loss = obj_mask * obj_bce + (1 - obj_mask) * ignore * obj_bce
        onehot = (y_true[..., 5:6].astype(np.int32) == jnp.arange(self.num_classes)).astype(dtype)
        class_loss = obj_mask * jnp.sum(_sigmoid_bce_jax(onehot, f[..., 5:]), -1)
        total = lambda t: jnp.sum(t, axis=(1, 2, 3))  # noqa: E731
        return {"xy": total(xy_loss), "wh": total(wh_loss), "obj": total(obj_loss), "class": total(class_loss)}

    @staticmethod
    def _true_boxes(y_true_list):
        """Every image's assigned boxes over all scales, `[B, K, 4]` xyxy and a mask `[B, K]`,
        K the most any image has (the ignore mask compares each prediction with them)."""
        flat = tf.concat([tf.reshape(y, [tf.shape(y)[0], -1, 6]) for y in y_true_list], axis=1)
        obj = flat[..., 4]
        k = tf.maximum(tf.cast(tf.reduce_max(tf.reduce_sum(obj, axis=1)), tf.int32), 1)
        top = tf.math.top_k(obj, k=k, sorted=False)
        return tf.gather(flat[..., 0:4], top.indices, batch_dims=1), top.values

    def _scale(self, y_true, features, anchors, true_boxes):
        dtype = features.dtype
        shape = tf.shape(features)
        b, gh, gw = shape[0], shape[1], shape[2]
        na = anchors.shape[0]
        f = tf.reshape(features, tf.stack([b, gh, gw, na, 5 + self.num_classes]))
        # Boxes normalised to [0, 1] (input_size 1 with normalised anchors), centre and size.
        decoded = self._decode(features, tf.constant(anchors, dtype), self.num_classes, (1, 1),
                               box_format="center_xywh", max_log_scale=self.max_log_scale)
        box = tf.reshape(decoded.boxes, tf.stack([b, gh, gw, na, 4]))
        pred_xy, pred_wh = box[..., 0:2], box[..., 2:4]
        y_true = tf.cast(y_true, dtype)
        true_xy = (y_true[..., 0:2] + y_true[..., 2:4]) / 2
        true_wh = y_true[..., 2:4] - y_true[..., 0:2]
        obj_mask = y_true[..., 4]
        weight = 2 - true_wh[..., 0] * true_wh[..., 1]
        cells = tf.cast(tf.stack([gw, gh]), dtype)
        xy_loss = obj_mask * weight * tf.reduce_sum(tf.square((true_xy - pred_xy) * cells), axis=-1)
        a = tf.constant(anchors, dtype)
        safe_true = tf.where(true_wh > 0, true_wh, a)  # log(1) = 0 where nothing is assigned
        wh_err = tf.math.log(safe_true / a) - tf.math.log(pred_wh / a)
        wh_loss = obj_mask * weight * tf.reduce_sum(tf.square(wh_err), axis=-1)
        # The ignore mask: the best IoU of each predicted box with any true box of the image.
        corners = tf.concat([pred_xy - pred_wh / 2, pred_xy + pred_wh / 2], axis=-1)
        iou = _iou(tf.reshape(corners, tf.stack([b, -1, 4])), tf.cast(true_boxes[0], dtype))
        iou = iou * tf.cast(true_boxes[1], dtype)[:, None, :]
        best = tf.reshape(tf.reduce_max(iou, axis=-1), tf.shape(obj_mask))
        ignore = tf.cast(best < self.ignore_thresh, dtype)
        obj_bce = tf.nn.sigmoid_cross_entropy_with_logits(labels=obj_mask, logits=f[..., 4])
        obj_loss = obj_mask * obj_bce + (1 - obj_mask) * ignore * obj_bce
        onehot = tf.one_hot(tf.cast(y_true[..., 5], tf.int32), self.num_classes, dtype=dtype)
        class_bce = tf.reduce_sum(tf.nn.sigmoid_cross_entropy_with_logits(labels=onehot, logits=f[..., 5:]), -1)
        class_loss = obj_mask * class_bce
        total = lambda t: tf.reduce_sum(t, axis=(1, 2, 3))  # noqa: E731
        return {"xy": total(xy_loss), "wh": total(wh_loss), "obj": total(obj_loss), "class": total(class_loss)}


def _iou(a, b):
    """IoU of every box of a `[B, N, 4]` with every box of b `[B, K, 4]` (xyxy): `[B, N, K]`."""
    a, b = a[:, :, None, :], b[:, None, :, :]
    inter_wh = tf.maximum(tf.minimum(a[..., 2:], b[..., 2:]) - tf.maximum(a[..., :2], b[..., :2]), 0)
    inter = inter_wh[..., 0] * inter_wh[..., 1]
    area_a = (a[..., 2] - a[..., 0]) * (a[..., 3] - a[..., 1])
    area_b = (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1])
    return inter / tf.maximum(area_a + area_b - inter, 1e-12)


def _is_jax(x) -> bool:
    """Whether x is a JAX array or tracer (Keras's JAX backend), not a TensorFlow tensor."""
    return type(x).__module__.split(".")[0] == "jax"


def _true_boxes_jax(y_true_list):
    """_true_boxes with a static K: every entry of every scale, its objectness the mask (an entry
    with none multiplies its IoU by 0, as the padding of _true_boxes' top-k does)."""
    import jax.numpy as jnp

    flat = jnp.concatenate([y.reshape(y.shape[0], -1, 6) for y in y_true_list], axis=1)
    return flat[..., 0:4], flat[..., 4]


def _iou_jax(a, b):
    """_iou in jax.numpy."""
    import jax.numpy as jnp

    a, b = a[:, :, None, :], b[:, None, :, :]
    inter_wh = jnp.maximum(jnp.minimum(a[..., 2:], b[..., 2:]) - jnp.maximum(a[..., :2], b[..., :2]), 0)
    inter = inter_wh[..., 0] * inter_wh[..., 1]
    area_a = (a[..., 2] - a[..., 0]) * (a[..., 3] - a[..., 1])
    area_b = (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1])
    return inter / jnp.maximum(area_a + area_b - inter, 1e-12)


def _sigmoid_bce_jax(labels, logits):
    """tf.nn.sigmoid_cross_entropy_with_logits' formula: max(x, 0) - x z + log(1 + exp(-|x|))."""
    import jax.numpy as jnp

    return jnp.maximum(logits, 0) - logits * labels + jnp.log1p(jnp.exp(-jnp.abs(logits)))

"""`opforge.layers.YoloDecode` and `opforge.layers.YoloPostprocess`: a YOLO-v3 head's raw maps
to detections, on the `Opforge>YoloDecode` and `Opforge>CombinedNonMaxSuppression` ops."""
from __future__ import annotations

import math
from typing import Any, Dict, Optional, Sequence

from opforge._keras import framework
import numpy as np
import tensorflow as tf

from opforge.layers import _backend
from opforge.layers._checks import check_with_op
from opforge.ops import _xla
from opforge.ops.combined_non_max_suppression import combined_non_max_suppression
from opforge.ops.yolo_decode import yolo_decode
from opforge.ops.yolo_postprocess import yolo_postprocess

keras = framework()  # Keras 3, or tf-keras under TF_USE_LEGACY_KERAS=1 (opforge._keras)
__all__ = ["YoloDecode", "YoloPostprocess"]


def _anchors(layer: str, anchors) -> np.ndarray:
    try:
        a = np.asarray(anchors, dtype=np.float64)
    except (TypeError, ValueError):
        a = np.zeros((0,))
    if a.ndim != 2 or a.shape[1] != 2 or a.shape[0] < 1 or not np.all(np.isfinite(a)) or np.any(a <= 0):
        raise ValueError(f"opforge.layers.{layer}: anchors must be [[width, height], ...] in input pixels, "
                         f"finite and positive, got {anchors!r}")
    return a


def _max_log_scale(value) -> Optional[float]:
    """The layer's max_log_scale (already accepted by the op): None for no clamp, +inf included,
    so that configs hold None or a finite number (JSON has no infinity)."""
    if value is None or float(value) == math.inf:
        return None
    return float(value)


def _input_size(layer: str, input_size):
    if isinstance(input_size, (int, np.integer)) and not isinstance(input_size, bool):
        return [int(input_size), int(input_size)]
    try:
        size = [int(v) for v in input_size
                if isinstance(v, (int, np.integer)) and not isinstance(v, bool)]
        if len(size) != len(input_size):
            size = []
    except TypeError:
        size = []
    if len(size) != 2:
        raise ValueError(f"opforge.layers.{layer}: input_size must be [height, width] or an int, got {input_size!r}")
    return size


@keras.saving.register_keras_serializable(package="opforge")
class YoloDecode(keras.layers.Layer):
    """Decodes one YOLO-v3 head map [B, H, W, A*(5+C)] with `opforge.ops.yolo_decode`.

    Returns the tuple (boxes [B, N, 4], scores [B, N], class_indices [B, N] int32,
    class_scores [B, N, C]), N = H*W*A. `anchors` are [A, 2] (width, height) in input pixels;
    the other arguments are those of `opforge.ops.yolo_decode`: by default (max_log_scale None)
    box sizes are exp(tw) * anchor_w as written; `max_log_scale=YOLO_MAX_LOG_SCALE` clamps tw, th
    as torchvision does. Gradients flow to the features (train through the boxes with an IoU
    loss). Under XLA the op runs as an FFI custom call (`supports_jit`; the anchors are the
    layer's constants, as XLA needs).
    """

    def __init__(self, anchors, num_classes: int, input_size, box_format: str = "xyxy",
                 normalized: bool = False, scale_x_y: float = 1.0, max_log_scale: Optional[float] = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        _backend.require("opforge.layers.YoloDecode")
        self.anchors = _anchors("YoloDecode", anchors)
        self.input_size = _input_size("YoloDecode", input_size)
        a = self.anchors.shape[0]
        check_with_op(
            f"opforge.layers.YoloDecode(num_classes={num_classes!r}, input_size={input_size!r}, "
            f"box_format={box_format!r}, normalized={normalized!r}, scale_x_y={scale_x_y!r}, "
            f"max_log_scale={max_log_scale!r})",
            lambda: yolo_decode(tf.zeros([0, 1, 1, a * (5 + max(int(num_classes), 0)) if isinstance(
                num_classes, (int, np.integer)) else 5]), self.anchors, num_classes, self.input_size,
                box_format, normalized, scale_x_y, max_log_scale))
        self.num_classes = int(num_classes)
        self.box_format = box_format
        self.normalized = bool(normalized)
        self.scale_x_y = float(scale_x_y)
        self.max_log_scale = _max_log_scale(max_log_scale)
        self.supports_jit = _xla.supports_jit("Opforge>YoloDecode", "Opforge>YoloDecodeGrad")

    def call(self, features):
        if _backend.is_jax():  # the anchors a NumPy constant, rounded as tf.constant rounds them
            dtype = np.dtype(features.dtype)
            anchors = self.anchors.astype(dtype if dtype == np.float64 else np.float32).astype(dtype)
            decode = _backend.ops().yolo_decode
        else:
            anchors, decode = tf.constant(self.anchors, features.dtype), yolo_decode
        out = decode(features, anchors, self.num_classes, self.input_size, self.box_format, self.normalized,
                     self.scale_x_y, self.max_log_scale)
        return tuple(out)

    def compute_output_spec(self, features):
        b, h, w = features.shape[:3]
        n = None if h is None or w is None else h * w * self.anchors.shape[0]
        dtype = features.dtype
        return (keras.KerasTensor((b, n, 4), dtype), keras.KerasTensor((b, n), dtype),
                keras.KerasTensor((b, n), "int32"), keras.KerasTensor((b, n, self.num_classes), dtype))

    def get_config(self) -> Dict[str, Any]:
        config = super().get_config()
        # Configs saved before max_log_scale existed lack the key: from_config gives them the
        # default (None: no clamp).
        config.update(anchors=self.anchors.tolist(), num_classes=self.num_classes,
                      input_size=list(self.input_size), box_format=self.box_format,
                      normalized=self.normalized, scale_x_y=self.scale_x_y,
                      max_log_scale=self.max_log_scale)
        return config


@keras.saving.register_keras_serializable(package="opforge")
class YoloPostprocess(keras.layers.Layer):
    """A YOLO-v3 head's raw maps (one per scale) to final detections: `opforge.ops.yolo_postprocess`,
    the same bits as every scale decoded with `opforge.ops.yolo_decode` (normalised xyxy boxes),
    merged, then `opforge.ops.combined_non_max_suppression` per class, decoding only the boxes
    whose objectness can reach score_threshold.

    Args:
      anchors: [K, 2] (width, height) in input pixels, e.g. the nine YOLO-v3 anchors.
      anchor_masks: one list of anchor indices per scale, in the order of the maps passed to
        call (YOLO-v3: [[6, 7, 8], [3, 4, 5], [0, 1, 2]] for the 13, 26, 52 grids).
      num_classes: C.
      input_size: [height, width] of the network input (or an int).
      max_detections: detections returned per image.
      max_detections_per_class: kept per class by NMS.
      iou_threshold, score_threshold, soft_nms_sigma: those of the NMS.
      max_log_scale: None (the default): box sizes exp(tw) * anchor_w as written; a number
        clamps tw, th there first (`opforge.ops.YOLO_MAX_LOG_SCALE`: torchvision's clamp).

    Returns the tuple (boxes [B, max_detections, 4] as normalised (x1, y1, x2, y2) clipped to
    [0, 1], scores [B, max_detections], classes [B, max_detections] (float32),
    valid_detections [B] int32), zero-padded, as yolov3-tf2's `yolo_nms`. The NMS runs on the
    CPU and has no gradient; put this layer at the end of an inference model.
    """

    def __init__(self, anchors, anchor_masks, num_classes: int, input_size, max_detections: int = 100,
                 max_detections_per_class: int = 100, iou_threshold: float = 0.5,
                 score_threshold: float = 0.5, soft_nms_sigma: float = 0.0,
                 max_log_scale: Optional[float] = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        _backend.require("opforge.layers.YoloPostprocess")
        self.anchors = _anchors("YoloPostprocess", anchors)
        self.input_size = _input_size("YoloPostprocess", input_size)
        try:
            masks = [[int(i) for i in m] for m in anchor_masks]
        except (TypeError, ValueError):
            masks = []
        k = self.anchors.shape[0]
        if not masks or any(not m or min(m) < 0 or max(m) >= k for m in masks):
            raise ValueError("opforge.layers.YoloPostprocess: anchor_masks must be one non-empty list of "
                             f"indices into the {k} anchors per scale, got {anchor_masks!r}")
        self.anchor_masks = masks
        desc = (f"opforge.layers.YoloPostprocess(num_classes={num_classes!r}, input_size={input_size!r}, "
                f"max_detections={max_detections!r}, max_detections_per_class={max_detections_per_class!r}, "
                f"iou_threshold={iou_threshold!r}, score_threshold={score_threshold!r}, "
                f"soft_nms_sigma={soft_nms_sigma!r}, max_log_scale={max_log_scale!r})")
        a = len(masks[0])
        check_with_op(desc, lambda: yolo_decode(
            tf.zeros([0, 1, 1, a * (5 + max(int(num_classes), 0)) if isinstance(num_classes, (int, np.integer))
                      else 5]), self.anchors[masks[0]], num_classes, self.input_size,
            max_log_scale=max_log_scale))
        check_with_op(desc, lambda: combined_non_max_suppression(
            tf.zeros([0, 1, 1, 4]), tf.zeros([0, 1, 1]), max_detections_per_class, max_detections,
            iou_threshold, score_threshold, soft_nms_sigma=soft_nms_sigma))
        self.num_classes = int(num_classes)
        self.max_detections = int(max_detections)
        self.max_detections_per_class = int(max_detections_per_class)
        self.iou_threshold = float(iou_threshold)
        self.score_threshold = float(score_threshold)
        self.soft_nms_sigma = float(soft_nms_sigma)
        self.max_log_scale = _max_log_scale(max_log_scale)
        self.supports_jit = _xla.supports_jit("Opforge>YoloPostprocess")

    def call(self, head_outputs):
        maps = list(head_outputs) if isinstance(head_outputs, (list, tuple)) else [head_outputs]
        if len(maps) != len(self.anchor_masks):
            raise ValueError(f"opforge.layers.YoloPostprocess: expected {len(self.anchor_masks)} head maps "
                             f"(one per anchor mask), got {len(maps)}")
        postprocess = _backend.ops().yolo_postprocess if _backend.is_jax() else yolo_postprocess
        return tuple(postprocess(
            maps, self.anchors, self.anchor_masks, self.num_classes, self.input_size,
            max_detections=self.max_detections, max_detections_per_class=self.max_detections_per_class,
            iou_threshold=self.iou_threshold, score_threshold=self.score_threshold,
            soft_nms_sigma=self.soft_nms_sigma, max_log_scale=self.max_log_scale))

    def compute_output_spec(self, head_outputs):
        maps = list(head_outputs) if isinstance(head_outputs, (list, tuple)) else [head_outputs]
        b = maps[0].shape[0]
        d = self.max_detections
        dtype = maps[0].dtype if maps[0].dtype != "float64" else "float32"
        return (keras.KerasTensor((b, d, 4), dtype), keras.KerasTensor((b, d), dtype),
                keras.KerasTensor((b, d), "float32"), keras.KerasTensor((b,), "int32"))

    def get_config(self) -> Dict[str, Any]:
        config = super().get_config()
        config.update(anchors=self.anchors.tolist(), anchor_masks=self.anchor_masks,
                      num_classes=self.num_classes, input_size=list(self.input_size),
                      max_detections=self.max_detections,
                      max_detections_per_class=self.max_detections_per_class,
                      iou_threshold=self.iou_threshold, score_threshold=self.score_threshold,
                      soft_nms_sigma=self.soft_nms_sigma, max_log_scale=self.max_log_scale)
        return config

"""Models built from opforge ops: YOLO-v3 and YOLO-v3-tiny (`opforge.models.YoloV3`,
`opforge.models.YoloV3Tiny`), their anchors, and the same networks from TensorFlow built-ins
(`ops="tf"`) for parity checks."""
from __future__ import annotations

from opforge._keras import require_keras3

require_keras3("opforge.models")

from opforge.models.yolov3 import (  # noqa: F401
    YOLOV3_ANCHORS,
    YOLOV3_MASKS,
    YOLOV3_TINY_ANCHORS,
    YOLOV3_TINY_MASKS,
    YoloV3,
    YoloV3Tiny,
    YoloV3TinySubclassed,
    detector,
)
from opforge.models.loss import YoloLoss  # noqa: F401
from opforge.models.train import (  # noqa: F401
    YoloTrainer,
    anchors_for,
    custom_train_step,
    distributed_train_step,
    evaluate_map,
    target_dataset,
)

__all__ = ["YOLOV3_ANCHORS", "YOLOV3_MASKS", "YOLOV3_TINY_ANCHORS", "YOLOV3_TINY_MASKS", "YoloV3",
           "YoloV3Tiny", "YoloV3TinySubclassed", "YoloLoss", "YoloTrainer", "anchors_for",
           "custom_train_step", "distributed_train_step", "detector", "evaluate_map", "target_dataset"]

"""Detection data for the YOLO models: a synthetic shapes set (no download) and loaders for a
user's own labelled images (YOLO `.txt` labels or COCO JSON), with letterbox resizing."""
from __future__ import annotations

from opforge.data.detection import (  # noqa: F401
    SHAPE_CLASSES,
    DetectionSet,
    LabelError,
    letterbox,
    load_coco,
    load_yolo_folder,
    shapes_dataset,
)

__all__ = ["SHAPE_CLASSES", "DetectionSet", "LabelError", "letterbox", "load_coco", "load_yolo_folder",
           "shapes_dataset"]

"""Detection sets as NumPy arrays: images `[N, S, S, 3]` uint8, boxes `[N, M, 4]` normalised
(x1, y1, x2, y2) padded with all-zero rows, classes `[N, M]` int32 (what
`opforge.ops.yolo_targets` takes)."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import List, Sequence, Tuple

import numpy as np

__all__ = ["SHAPE_CLASSES", "DetectionSet", "LabelError", "letterbox", "load_coco", "load_yolo_folder",
           "shapes_dataset"]

SHAPE_CLASSES = ("rectangle", "ellipse", "triangle")
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif")


class LabelError(ValueError):
    """A bad label file or box: the message names the file, the line and the value."""


@dataclass
class DetectionSet:
    images: np.ndarray  # [N, S, S, 3] uint8
    boxes: np.ndarray  # [N, M, 4] float32, normalised x1, y1, x2, y2; all-zero rows are padding
    classes: np.ndarray  # [N, M] int32
    class_names: Tuple[str, ...]

    def __len__(self) -> int:
        return len(self.images)


# --- the synthetic set --------------------------------------------------------------------------


def _shape_mask(kind: int, size: int, x0: int, y0: int, w: int, h: int, rng) -> np.ndarray:
    yy, xx = np.mgrid[0:size, 0:size]
    if kind == 0:
        return (xx >= x0) & (xx < x0 + w) & (yy >= y0) & (yy < y0 + h)
    if kind == 1:
        cx, cy = x0 + (w - 1) / 2, y0 + (h - 1) / 2
        return ((xx - cx) / (w / 2)) ** 2 + ((yy - cy) / (h / 2)) ** 2 <= 1.0
    # A triangle with a vertex on the top edge and two on the bottom edge of the box.
    apex = x0 + rng.integers(0, w)
    p = np.array([[apex, y0], [x0, y0 + h - 1], [x0 + w - 1, y0 + h - 1]], np.float64)

    def side(a, b):
        return (xx - a[0]) * (b[1] - a[1]) - (yy - a[1]) * (b[0] - a[0])

    s0, s1, s2 = side(p[0], p[1]), side(p[1], p[2]), side(p[2], p[0])
    return ((s0 >= 0) & (s1 >= 0) & (s2 >= 0)) | ((s0 <= 0) & (s1 <= 0) & (s2 <= 0))


def shapes_dataset(num_images: int, image_size: int = 416, seed: int = 0, max_shapes: int = 4,
                   min_size: float = 0.1, max_size: float = 0.45) -> DetectionSet:
    """Rectangles, ellipses and triangles of random size, colour and position on noisy
    backgrounds, with exact boxes (the tight bounds of each shape's pixels); shapes do not
    overlap. Deterministic per seed; no download.

    Returns a DetectionSet with `max_shapes` box rows per image (1 to max_shapes used) and class
    names SHAPE_CLASSES.
    """
    if num_images < 0 or image_size < 16 or max_shapes < 1 or not 0 < min_size <= max_size <= 1:
        raise ValueError("opforge.data.shapes_dataset: need num_images >= 0, image_size >= 16, max_shapes >= 1 "
                         f"and 0 < min_size <= max_size <= 1, got {num_images}, {image_size}, {max_shapes}, "
                         f"{min_size}, {max_size}")
    rng = np.random.default_rng(seed)
    s = image_size
    images = np.zeros((num_images, s, s, 3), np.uint8)
    boxes = np.zeros((num_images, max_shapes, 4), np.float32)
    classes = np.zeros((num_images, max_shapes), np.int32)
    for i in range(num_images):
        background = rng.uniform(40, 215, 3)
        image = background + rng.normal(0, 12, (s, s, 3))
        taken = np.zeros((s, s), bool)
        count = rng.integers(1, max_shapes + 1)
        placed = 0
        for _ in range(50 * count):
            if placed == count:
                break
            w = int(rng.uniform(min_size, max_size) * s)
            h = int(rng.uniform(min_size, max_size) * s)
            x0, y0 = int(rng.integers(0, s - w + 1)), int(rng.integers(0, s - h + 1))
            if taken[max(0, y0 - 2):y0 + h + 2, max(0, x0 - 2):x0 + w + 2].any():
                continue
            kind = int(rng.integers(0, len(SHAPE_CLASSES)))
            mask = _shape_mask(kind, s, x0, y0, w, h, rng)
            # A colour far from the background, so every shape is visible.
            colour = rng.uniform(0, 255, 3)
            while np.abs(colour - background).max() < 80:
                colour = rng.uniform(0, 255, 3)
            image[mask] = colour + rng.normal(0, 6, (int(mask.sum()), 3))
            taken |= mask
            ys, xs = np.nonzero(mask)
            boxes[i, placed] = (xs.min() / s, ys.min() / s, (xs.max() + 1) / s, (ys.max() + 1) / s)
            classes[i, placed] = kind
            placed += 1
        images[i] = np.clip(image, 0, 255).astype(np.uint8)
    return DetectionSet(images, boxes, classes, SHAPE_CLASSES)


# --- letterbox ------------------------------------------------------------------------------------


def letterbox(image: np.ndarray, boxes: np.ndarray, size: int, fill: int = 128):
    """Resizes an image `[H, W, 3]` to `size`x`size` keeping its aspect (bilinear), centred on a
    `fill` border; maps normalised xyxy `boxes` `[M, 4]` (all-zero rows stay zero). Returns
    (image uint8, boxes float32, (scale, pad_x, pad_y)) where a pixel x of the original lands at
    x * scale + pad_x."""
    import tensorflow as tf

    h, w = image.shape[:2]
    scale = min(size / w, size / h)
    nw, nh = max(1, round(w * scale)), max(1, round(h * scale))
    resized = tf.image.resize(image[None].astype(np.float32), (nh, nw), "bilinear")[0].numpy()
    out = np.full((size, size, 3), fill, np.float32)
    px, py = (size - nw) // 2, (size - nh) // 2
    out[py:py + nh, px:px + nw] = resized
    boxes = np.asarray(boxes, np.float32).reshape(-1, 4)
    padding = ~boxes.any(axis=1)
    mapped = np.empty_like(boxes)
    mapped[:, [0, 2]] = (boxes[:, [0, 2]] * w * (nw / w) + px) / size
    mapped[:, [1, 3]] = (boxes[:, [1, 3]] * h * (nh / h) + py) / size
    mapped[padding] = 0
    return np.clip(np.round(out), 0, 255).astype(np.uint8), mapped, (scale, px, py)


# --- a user's own data ----------------------------------------------------------------------------


def _read_image(path: Path) -> np.ndarray:
    import tensorflow as tf

    try:
        return tf.io.decode_image(tf.io.read_file(str(path)), channels=3, expand_animations=False).numpy()
    except Exception as exc:  # TensorFlow's decoders raise several kinds
        raise LabelError(f"{path}: not a readable image ({type(exc).__name__}: {exc})") from None


def _check_box(where: str, box: Sequence[float], cls: int, num_classes: int) -> None:
    x1, y1, x2, y2 = box
    if not all(np.isfinite(v) for v in box):
        raise LabelError(f"{where}: box {list(box)} is not finite")
    if not (-0.01 <= x1 < x2 <= 1.01 and -0.01 <= y1 < y2 <= 1.01):
        raise LabelError(f"{where}: box (x1, y1, x2, y2) = {[round(v, 6) for v in box]} is empty or outside "
                         "the image")
    if not 0 <= cls < num_classes:
        raise LabelError(f"{where}: class {cls} is not in [0, {num_classes})")


def _pack(images, box_lists, class_lists, names) -> DetectionSet:
    m = max([1] + [len(b) for b in box_lists])
    boxes = np.zeros((len(images), m, 4), np.float32)
    classes = np.zeros((len(images), m), np.int32)
    for i, (b, c) in enumerate(zip(box_lists, class_lists)):
        if b:
            boxes[i, :len(b)] = np.clip(np.asarray(b, np.float32), 0, 1)
            classes[i, :len(c)] = c
    return DetectionSet(np.stack(images) if images else np.zeros((0, 0, 0, 3), np.uint8), boxes, classes,
                        tuple(names))


def load_yolo_folder(folder, image_size: int, class_names: Sequence[str]) -> DetectionSet:
    """Images in `folder` (or `folder/images`) with YOLO labels: one `.txt` per image (beside it
    or in `folder/labels`), a line `class cx cy w h` per box, normalised; an image without a
    label file has no boxes. Images are letterboxed to `image_size`. A malformed line, a bad box
    or class, or an unreadable image is a LabelError naming the file, the line and the value."""
    folder = Path(folder)
    image_dir = folder / "images" if (folder / "images").is_dir() else folder
    label_dir = folder / "labels" if (folder / "labels").is_dir() else image_dir
    paths = sorted(p for p in image_dir.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    if not paths:
        raise LabelError(f"{image_dir}: no images ({', '.join(IMAGE_SUFFIXES)})")
    images, box_lists, class_lists = [], [], []
    for path in paths:
        label = label_dir / (path.stem + ".txt")
        boxes, classes = [], []
        if label.exists():
            for number, line in enumerate(label.read_text().splitlines(), start=1):
                if not line.strip():
                    continue
                where = f"{label}:{number}"
                fields = line.split()
                if len(fields) != 5:
                    raise LabelError(f"{where}: expected 'class cx cy w h', got {line.strip()!r}")
                try:
                    cls = int(fields[0])
                    cx, cy, w, h = (float(v) for v in fields[1:])
                except ValueError:
                    raise LabelError(f"{where}: expected numbers 'class cx cy w h', got {line.strip()!r}") from None
                box = (cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2)
                _check_box(where, box, cls, len(class_names))
                boxes.append(box)
                classes.append(cls)
        image, mapped, _ = letterbox(_read_image(path), np.asarray(boxes, np.float32).reshape(-1, 4), image_size)
        images.append(image)
        box_lists.append([tuple(b) for b in mapped])
        class_lists.append(classes)
    return _pack(images, box_lists, class_lists, class_names)


def load_coco(annotations, image_dir, image_size: int) -> DetectionSet:
    """A COCO-format JSON (`images`, `annotations` with `bbox` [x, y, w, h] in pixels,
    `categories`) and its image folder; categories are numbered in the order of their ids.
    Images are letterboxed to `image_size`. A missing field, a bad box, an unknown image or
    category is a LabelError naming the file, the annotation and the value."""
    annotations = Path(annotations)
    try:
        data = json.loads(annotations.read_text())
    except json.JSONDecodeError as exc:
        raise LabelError(f"{annotations}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    for key in ("images", "annotations", "categories"):
        if key not in data:
            raise LabelError(f"{annotations}: no '{key}' list")
    categories = sorted(data["categories"], key=lambda c: c["id"])
    index = {c["id"]: k for k, c in enumerate(categories)}
    names = [c.get("name", str(c["id"])) for c in categories]
    by_image = {img["id"]: img for img in data["images"]}
    boxes = {i: [] for i in by_image}
    classes = {i: [] for i in by_image}
    for n, ann in enumerate(data["annotations"]):
        where = f"{annotations}: annotations[{n}]"
        if ann.get("image_id") not in by_image:
            raise LabelError(f"{where}: image_id {ann.get('image_id')!r} is not in 'images'")
        if ann.get("category_id") not in index:
            raise LabelError(f"{where}: category_id {ann.get('category_id')!r} is not in 'categories'")
        img = by_image[ann["image_id"]]
        try:
            x, y, w, h = (float(v) for v in ann["bbox"])
            iw, ih = float(img["width"]), float(img["height"])
        except (KeyError, TypeError, ValueError):
            raise LabelError(f"{where}: bbox must be [x, y, w, h] and the image must have width and height, "
                             f"got {ann.get('bbox')!r}") from None
        box = (x / iw, y / ih, (x + w) / iw, (y + h) / ih)
        _check_box(f"{where} (bbox {ann['bbox']})", box, index[ann["category_id"]], len(names))
        boxes[img["id"]].append(box)
        classes[img["id"]].append(index[ann["category_id"]])
    images, box_lists, class_lists = [], [], []
    for image_id, img in by_image.items():
        path = Path(image_dir) / img.get("file_name", "")
        image, mapped, _ = letterbox(_read_image(path), np.asarray(boxes[image_id], np.float32).reshape(-1, 4),
                                     image_size)
        images.append(image)
        box_lists.append([tuple(b) for b in mapped])
        class_lists.append(classes[image_id])
    return _pack(images, box_lists, class_lists, names)

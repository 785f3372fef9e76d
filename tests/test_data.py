"""opforge.data: the synthetic shapes set (exact boxes, deterministic), letterboxing, and the
loaders of a user's YOLO-label folder and COCO JSON, with the errors they give for bad labels."""
from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf

from opforge.data import LabelError, letterbox, load_coco, load_yolo_folder, shapes_dataset


def test_shapes_are_deterministic_with_exact_boxes():
    a, b = shapes_dataset(6, 96, seed=3), shapes_dataset(6, 96, seed=3)
    assert np.array_equal(a.images, b.images) and np.array_equal(a.boxes, b.boxes)
    assert not np.array_equal(a.images, shapes_dataset(6, 96, seed=4).images)
    assert a.images.shape == (6, 96, 96, 3) and a.images.dtype == np.uint8
    used = a.boxes.any(-1)
    assert used.any(axis=1).all() and set(np.unique(a.classes[used])) <= {0, 1, 2}
    # Exact: every box edge touches a pixel that differs from the background just outside it.
    for i, j in zip(*np.nonzero(used)):
        x1, y1, x2, y2 = np.round(a.boxes[i, j] * 96).astype(int)
        inside = a.images[i, y1:y2, x1:x2].astype(float)
        assert x2 > x1 and y2 > y1 and inside.std() > 0


def test_letterbox_keeps_aspect_and_maps_boxes():
    image = np.zeros((50, 100, 3), np.uint8)
    image[10:30, 20:60] = 255
    boxes = np.array([[0.2, 0.2, 0.6, 0.6], [0, 0, 0, 0]], np.float32)
    out, mapped, (scale, px, py) = letterbox(image, boxes, 200)
    assert out.shape == (200, 200, 3) and scale == 2 and px == 0 and py == 50
    np.testing.assert_allclose(mapped[0], [0.2, (20 + 50) / 200, 0.6, (60 + 50) / 200], atol=1e-6)
    assert not mapped[1].any()
    assert out[0, 0, 0] == 128 and out[100, 80, 0] == 255


def _write_image(path, h=40, w=60):
    path.write_bytes(tf.io.encode_png(np.full((h, w, 3), 200, np.uint8)).numpy())


def test_yolo_folder_loads_and_letterboxes(tmp_path):
    (tmp_path / "images").mkdir()
    (tmp_path / "labels").mkdir()
    _write_image(tmp_path / "images" / "a.png")
    _write_image(tmp_path / "images" / "b.png")
    (tmp_path / "labels" / "a.txt").write_text("1 0.5 0.5 0.2 0.4\n\n0 0.25 0.25 0.1 0.1\n")
    data = load_yolo_folder(tmp_path, 64, ["cat", "dog"])
    assert data.images.shape == (2, 64, 64, 3) and data.boxes.shape == (2, 2, 4)
    assert data.classes[0].tolist() == [1, 0] and not data.boxes[1].any()
    # 60x40 -> 64x43 (scale 16/15), centred: y padding 10 (rounded).
    np.testing.assert_allclose(data.boxes[0, 0, [0, 2]], [0.4, 0.6], atol=1e-6)


@pytest.mark.parametrize("line,fragment", [
    ("1 0.5 0.5 0.2", "expected 'class cx cy w h'"),
    ("x 0.5 0.5 0.2 0.2", "expected numbers"),
    ("1 0.5 0.5 -0.2 0.2", "empty or outside"),
    ("1 1.5 0.5 0.2 0.2", "outside the image"),
    ("1 0.5 nan 0.2 0.2", "not finite"),
    ("7 0.5 0.5 0.2 0.2", "class 7 is not in [0, 2)"),
])
def test_yolo_folder_bad_labels_name_file_line_and_value(tmp_path, line, fragment):
    _write_image(tmp_path / "a.png")
    (tmp_path / "a.txt").write_text("0 0.5 0.5 0.1 0.1\n" + line + "\n")
    with pytest.raises(LabelError) as info:
        load_yolo_folder(tmp_path, 64, ["cat", "dog"])
    assert f"a.txt:2" in str(info.value) and fragment in str(info.value)


def test_yolo_folder_unreadable_image_and_empty_folder(tmp_path):
    with pytest.raises(LabelError, match="no images"):
        load_yolo_folder(tmp_path, 64, ["a"])
    (tmp_path / "broken.png").write_bytes(b"not a png")
    with pytest.raises(LabelError, match="broken.png: not a readable image"):
        load_yolo_folder(tmp_path, 64, ["a"])


def _coco(tmp_path, annotations):
    _write_image(tmp_path / "a.png")
    path = tmp_path / "coco.json"
    path.write_text(json.dumps({"images": [{"id": 7, "file_name": "a.png", "width": 60, "height": 40}],
                                "annotations": annotations,
                                "categories": [{"id": 3, "name": "cat"}, {"id": 1, "name": "dog"}]}))
    return path


def test_coco_loads_with_categories_in_id_order(tmp_path):
    path = _coco(tmp_path, [{"image_id": 7, "category_id": 3, "bbox": [6, 4, 12, 8]}])
    data = load_coco(path, tmp_path, 60)
    assert data.class_names == ("dog", "cat") and data.classes[0].tolist() == [1]
    np.testing.assert_allclose(data.boxes[0, 0], [0.1, (4 + 10) / 60, 0.3, (12 + 10) / 60], atol=1e-6)


@pytest.mark.parametrize("annotation,fragment", [
    ({"image_id": 8, "category_id": 3, "bbox": [1, 1, 2, 2]}, "image_id 8"),
    ({"image_id": 7, "category_id": 9, "bbox": [1, 1, 2, 2]}, "category_id 9"),
    ({"image_id": 7, "category_id": 3, "bbox": [1, 1, -2, 2]}, "empty or outside"),
    ({"image_id": 7, "category_id": 3, "bbox": "big"}, "bbox must be"),
])
def test_coco_bad_annotations_name_the_annotation(tmp_path, annotation, fragment):
    path = _coco(tmp_path, [{"image_id": 7, "category_id": 3, "bbox": [1, 1, 2, 2]}, annotation])
    with pytest.raises(LabelError) as info:
        load_coco(path, tmp_path, 60)
    assert "annotations[1]" in str(info.value) and fragment in str(info.value)


def test_coco_invalid_json_names_the_line(tmp_path):
    path = tmp_path / "coco.json"
    path.write_text('{"images": [\n  {"id": 1,}\n]}')
    with pytest.raises(LabelError, match="coco.json:2: not valid JSON"):
        load_coco(path, tmp_path, 60)

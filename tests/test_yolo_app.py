"""The YOLO workflow: the command line (train, detect, eval, export) on the synthetic set, the
exported detector serving uint8 batches of any size in a fresh process, the `.keras` round trip
of a trained model, and a short training that finds single obvious shapes."""
from __future__ import annotations

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from helpers import bits_equal, run_python
from opforge.tools import cli
from opforge.data import shapes_dataset
from opforge.models import app


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny model trained for a few steps through `opforge yolo train` (64 px, 3 classes)."""
    out = tmp_path_factory.mktemp("yolo") / "run"
    assert cli.main(["yolo", "train", "--size", "64", "--epochs", "2", "--steps", "4", "--batch", "8",
                     "--images", "40", "--out", str(out)]) == 0
    return out


def test_train_writes_model_history_and_checkpoints(trained):
    history = json.loads((trained / "history.json").read_text())
    assert history["class_names"] == ["rectangle", "ellipse", "triangle"] and history["input_size"] == 64
    assert len(history["loss"]) == 2 and all(np.isfinite(history["loss"]))
    assert sorted(p.name for p in (trained / "checkpoints").iterdir()) == ["epoch_001.weights.h5",
                                                                            "epoch_002.weights.h5"]


def test_keras_file_round_trip_of_the_trained_model(trained):
    model = app.load_model(str(trained / "model.keras"))
    again = keras.models.load_model(str(trained / "model.keras"))
    x = tf.random.uniform((2, 64, 64, 3), seed=1)
    for a, b in zip(model(x), again(x)):
        assert bits_equal(a.numpy(), b.numpy())


def test_detect_eval_and_export_commands(trained, tmp_path, capsys):
    images = shapes_dataset(2, 90, seed=9).images
    paths = []
    for i, image in enumerate(images):
        paths.append(str(tmp_path / f"img{i}.png"))
        tf.io.write_file(paths[-1], tf.io.encode_png(image))
    assert cli.main(["yolo", "detect", *paths, "--model", str(trained), "--out", str(tmp_path / "d.png"),
                     "--score", "0.0"]) == 0
    assert (tmp_path / "d.png").exists() and "img0.png:" in capsys.readouterr().out
    assert cli.main(["yolo", "eval", "--model", str(trained), "--images", "8"]) == 0
    assert "mAP@0.5 = " in capsys.readouterr().out
    assert cli.main(["yolo", "export", "--model", str(trained), "--out", str(tmp_path / "sm")]) == 0


def test_bad_label_folder_is_a_clear_cli_error(tmp_path, capsys):
    (tmp_path / "a.png").write_bytes(tf.io.encode_png(np.zeros((8, 8, 3), np.uint8)).numpy())
    (tmp_path / "a.txt").write_text("0 0.5 0.5 0.2\n")
    assert cli.main(["yolo", "train", "--data", str(tmp_path), "--classes", "cat", "--size", "64"]) == 1
    assert "a.txt:1" in capsys.readouterr().err


def test_exported_detector_serves_any_batch_and_size_in_fresh_process(trained, tmp_path):
    model = app.load_model(str(trained / "model.keras"))
    module = app.export(model, 3, 64, str(tmp_path / "sm"), score_threshold=0.0, max_detections=5)
    batches = [np.random.default_rng(0).integers(0, 255, (1, 50, 80, 3), dtype=np.uint8),
               np.random.default_rng(1).integers(0, 255, (3, 64, 64, 3), dtype=np.uint8)]
    expected = [{k: v.numpy() for k, v in module.serve(tf.constant(b)).items()} for b in batches]
    assert expected[0]["boxes"].shape == (1, 5, 4) and expected[1]["boxes"].shape == (3, 5, 4)
    np.savez(tmp_path / "in.npz", *batches)
    proc = run_python(f"""
        import numpy as np, tensorflow as tf, opforge
        # `import opforge` registers the ops, gradients and layers (no register_all())
        serve = tf.saved_model.load(r"{tmp_path / 'sm'}").signatures["serving_default"]
        batches = np.load(r"{tmp_path / 'in.npz'}")
        for i in range(2):
            out = serve(images=tf.constant(batches["arr_%d" % i]))
            np.savez(r"{tmp_path}/out%d.npz" % i, **{{k: v.numpy() for k, v in out.items()}})
        print("OK")
        """)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stderr[-3000:]
    for i in range(2):
        got = np.load(tmp_path / f"out{i}.npz")
        for key, value in expected[i].items():
            assert bits_equal(got[key], value), key


def test_letterboxed_serving_maps_boxes_back_to_the_original_image(trained):
    """A detection on the letterboxed input, mapped back, lands where the same detection on the
    un-padded image would: serve an image whose right half is the letterbox grey and compare."""
    model = app.load_model(str(trained / "model.keras"))
    module = app.ServingModule(model, 3, 64, score_threshold=0.0, max_detections=3)
    image = np.random.default_rng(3).integers(0, 255, (1, 32, 64, 3), dtype=np.uint8)
    out = {k: v.numpy() for k, v in module.serve(tf.constant(image)).items()}
    boxes = out["boxes"][0, :out["valid_detections"][0]]
    assert ((boxes >= 0) & (boxes <= 1)).all()
    # Letterboxed: the 32x64 image fills rows 16..48 of the 64x64 input.
    letterboxed = np.full((1, 64, 64, 3), 128, np.uint8)
    letterboxed[0, 16:48] = image[0]
    raw = app.make_detector(model, 3, 64, score_threshold=0.0, max_detections=3)(letterboxed / 255.0)
    raw_boxes = raw[0].numpy()[0, :out["valid_detections"][0]]
    mapped_y = (raw_boxes[:, 1::2] * 64 - 16) / 32
    np.testing.assert_allclose(boxes[:, 1::2], np.clip(mapped_y, 0, 1), atol=1e-6)
    np.testing.assert_allclose(boxes[:, 0::2], np.clip(raw_boxes[:, 0::2], 0, 1), atol=1e-6)


def test_short_training_finds_single_obvious_shapes(tmp_path):
    """300 steps at 64 px on images holding one large shape each (class-agnostic): the top
    detection overlaps the true box by IoU > 0.5 on most held-out images (11 of 20 measured)."""
    data = shapes_dataset(300, 64, seed=11, max_shapes=1, min_size=0.45, max_size=0.7)
    data.classes[:] = 0
    data.class_names = ("shape",)
    result = app.train(data, str(tmp_path / "run"), epochs=12, steps_per_epoch=25, batch_size=16, map_every=0,
                       verbose=0, seed=3)
    test = shapes_dataset(20, 64, seed=12, max_shapes=1, min_size=0.45, max_size=0.7)
    found = app.detect(result["model"], test.images, 1, score_threshold=0.3, max_detections=1)
    hits = 0
    for dets, truth in zip(found, test.boxes[:, 0]):
        if dets:
            b = dets[0][0]
            iw = max(0.0, min(b[2], truth[2]) - max(b[0], truth[0]))
            ih = max(0.0, min(b[3], truth[3]) - max(b[1], truth[1]))
            union = (b[2] - b[0]) * (b[3] - b[1]) + (truth[2] - truth[0]) * (truth[3] - truth[1]) - iw * ih
            hits += iw * ih / union > 0.5
    assert hits >= 6, hits


def test_train_on_a_users_label_folder(tmp_path):
    data = shapes_dataset(4, 80, seed=21, max_shapes=2)
    for i, image in enumerate(data.images):
        tf.io.write_file(str(tmp_path / f"im{i}.png"), tf.io.encode_png(image))
        lines = [f"{c} {(b[0] + b[2]) / 2} {(b[1] + b[3]) / 2} {b[2] - b[0]} {b[3] - b[1]}"
                 for b, c in zip(data.boxes[i], data.classes[i]) if b.any()]
        (tmp_path / f"im{i}.txt").write_text("\n".join(lines) + "\n")
    out = tmp_path / "run"
    assert cli.main(["yolo", "train", "--data", str(tmp_path), "--classes", "rectangle,ellipse,triangle",
                     "--size", "64", "--epochs", "1", "--steps", "2", "--batch", "2", "--out", str(out)]) == 0
    assert json.loads((out / "history.json").read_text())["class_names"] == ["rectangle", "ellipse", "triangle"]

"""The deployment apps: `opforge yolo export --format savedmodel|onnx|tflite` and `opforge audio
export --format onnx`, each checked against TensorFlow in the runtime it targets."""
from __future__ import annotations

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

import opforge.models as M
import opforge.lite as ol
import opforge.onnx as oo
from opforge.tools import audio_demo, cli
from opforge.models import app

needs_ort = pytest.mark.skipif(not oo.library_path(must_exist=False).exists(),
                               reason="libopforge_ort.so not built (opforge doctor says why)")
SIZE, CLASSES = 64, 3


@pytest.fixture(scope="module")
def trained_dir(tmp_path_factory):
    """A model folder as `opforge yolo train` writes it (model.keras, history.json), random weights
    with the objectness biased so that detections exist."""
    keras.utils.set_random_seed(3)
    model = M.YoloV3Tiny(CLASSES, SIZE)
    for layer in model.layers:
        if isinstance(layer, keras.layers.Conv2D) and layer.filters == 3 * (5 + CLASSES):
            kernel, bias = layer.get_weights()
            bias = bias.copy()
            bias[4::8] = 3.0
            layer.set_weights([kernel * 0.1, bias])
    d = tmp_path_factory.mktemp("yolo_model")
    model.save(d / "model.keras")
    (d / "history.json").write_text(json.dumps({"class_names": ["a", "b", "c"], "input_size": SIZE, "loss": [1.0]}))
    images = np.random.default_rng(0).uniform(0, 1, (4, SIZE, SIZE, 3)).astype(np.float32)
    return d, model, images


@needs_ort
def test_yolo_export_onnx_detects_as_tensorflow(trained_dir, tmp_path, capsys):
    d, model, images = trained_dir
    out = tmp_path / "det.onnx"
    assert cli.main(["yolo", "export", "--model", str(d), "--format", "onnx", "--out", str(out),
                     "--score", "0.05"]) == 0
    assert "opforge.onnx.session" in capsys.readouterr().out
    det = app.make_detector(model, CLASSES, SIZE, score_threshold=0.05)
    session = oo.session(out)
    for batch in (1, 4):  # the batch is dynamic
        x = images[:batch]
        expected = [t.numpy() for t in det(x, training=False)]
        assert expected[3].min() > 0
        same, text = app.compare_detections(session.run(None, {session.get_inputs()[0].name: x}), expected)
        assert same, text


def test_yolo_export_savedmodel_still_the_default(trained_dir, tmp_path):
    d, _, _ = trained_dir
    out = tmp_path / "sm"
    assert cli.main(["yolo", "export", "--model", str(d), "--out", str(out)]) == 0
    assert (out / "saved_model.pb").exists()


def test_compare_detections_says_what_differs():
    boxes = np.zeros((1, 2, 4), np.float32)
    ref = [boxes, np.ones((1, 2), np.float32), np.zeros((1, 2), np.float32), np.int32([2])]
    assert app.compare_detections(ref, ref)[0]
    moved = [boxes + 2e-5, *ref[1:]]
    same, text = app.compare_detections(moved, ref)
    assert not same and "boxes within 2.0e-05" in text
    assert "counts DIFFERENT" in app.compare_detections([*ref[:3], np.int32([1])], ref)[1]


@needs_ort
def test_audio_export_onnx_gives_tensorflows_audio(tmp_path, capsys):
    out = tmp_path / "a.onnx"
    assert audio_demo.export(str(out), sr=8000, n_mfcc=13, n_mels=32, n_fft=256, n_iter=4, seed=7,
                             seconds=0.5) == 0
    text = capsys.readouterr().out
    assert "equal within rounding" in text
    # The file's own check is independent of the app: mfcc_to_audio with the seed, in TensorFlow.
    from opforge.audio import mfcc_to_audio

    mfcc = np.random.default_rng(1).normal(0, 10, (13, 9)).astype(np.float32)
    expected = mfcc_to_audio(tf.constant(mfcc), n_mels=32, sr=8000, n_fft=256, n_iter=4, seed=7).numpy()
    session = oo.session(out)
    got = session.run(None, {"mfcc": mfcc})[0]
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6 * np.abs(expected).max())


needs_lite = pytest.mark.skipif(not ol.library_path(must_exist=False).exists(),
                                reason="libopforge_lite.so not built (opforge doctor says why)")


@needs_lite
def test_yolo_export_tflite_detects_as_tensorflow(trained_dir, tmp_path):
    d, model, images = trained_dir
    out = tmp_path / "det.tflite"
    assert cli.main(["yolo", "export", "--model", str(d), "--format", "tflite", "--out", str(out),
                     "--score", "0.05"]) == 0
    assert "Opforge>YoloPostprocess" in ol.custom_op_names(out.read_bytes())
    det = app.make_detector(model, CLASSES, SIZE, score_threshold=0.05)
    interp = ol.interpreter(out, num_threads=2)
    run = interp.get_signature_runner()
    for batch in (1, 4):
        x = images[:batch]
        expected = [t.numpy() for t in det(x, training=False)]
        assert expected[3].min() > 0
        outputs = run(**{next(iter(run.get_input_details())): x})
        ordered = [outputs[f"output_{i}"] for i in range(4)]  # the Keras detector's output order
        same, text = app.compare_detections(ordered, expected)
        assert same, text


"""The layers on every Keras a TensorFlow user runs: Keras 3's TensorFlow and JAX backends (the
same kernels: opforge.ops and opforge.jax) and Keras 2 (tf-keras, TF_USE_LEGACY_KERAS=1). Each
Keras runs in a child process (tests/keras_backend_child.py), since a process's Keras is fixed
when it is first imported: every layer builds, runs, trains, saves and loads; a `.keras` file
saved under one Keras 3 backend loads under the other with the same outputs; tf-keras files
(`.keras`, `.h5`, SavedModel) load in a fresh process with the same outputs."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from helpers import TESTS_DIR


def _child(tmp_path, role, env, *extra):
    environment = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(TESTS_DIR), **env)
    proc = subprocess.run([sys.executable, str(TESTS_DIR / "keras_backend_child.py"), str(tmp_path), role, *extra],
                          env=environment, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0 and "DONE" in proc.stdout, proc.stdout[-4000:] + proc.stderr[-4000:]
    return proc.stdout


def test_layers_on_tensorflow_and_jax_backends_and_their_files_move_between_them(tmp_path):
    pytest.importorskip("jax")
    out = _child(tmp_path, "tensorflow", {"KERAS_BACKEND": "tensorflow"})
    assert '"backend": "tensorflow"' in out
    out = _child(tmp_path, "jax", {"KERAS_BACKEND": "jax"}, "--compare", "tensorflow")
    assert '"backend": "jax"' in out and "of tensorflow gives its outputs here" in out
    out = _child(tmp_path, "tensorflow_again", {"KERAS_BACKEND": "tensorflow"}, "--compare", "jax")
    assert "of jax gives its outputs here" in out


def test_layers_on_tf_keras_and_saved_files_load_in_a_fresh_process(tmp_path):
    pytest.importorskip("tf_keras")
    env = {"TF_USE_LEGACY_KERAS": "1"}
    out = _child(tmp_path, "tf_keras", env)
    assert "(sequential) runs" in out and "(subclassed) runs" in out and "saved as .h5" in out
    code = f"""
import numpy as np, tensorflow as tf
import opforge.layers  # noqa: F401
from pathlib import Path
folder = Path({str(tmp_path / 'tf_keras')!r})
import keras_backend_child as child
for name, (kwargs, shape, exact) in child.CASES.items():
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    theirs = list(np.load(folder / f"{{name}}.npz").values())
    for suffix in (".keras", ".h5", "_savedmodel"):
        model = tf.keras.models.load_model(folder / f"{{name}}{{suffix}}")
        assert child.same(child.outputs(model, x), theirs, True), (name, suffix)
print("LOADED", type(tf.keras.layers.Layer).__module__)
"""
    environment = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(TESTS_DIR), **env)
    proc = subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and "LOADED" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_layers_refuse_other_backends_naming_the_supported_ones(backend):
    code = """
import keras
from opforge.layers import _backend
keras.backend.backend = lambda: %r   # the torch backend needs torch installed: its name is what counts
import opforge.layers as L
try:
    L.LeakyReLU(0.1)
except ValueError as error:
    print("REFUSED", error)
""" % backend
    environment = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(TESTS_DIR))
    if backend == "numpy":  # a real process on Keras's NumPy backend
        environment["KERAS_BACKEND"] = "numpy"
        code = code.replace("keras.backend.backend = lambda: 'numpy'", "")
    proc = subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True, text=True, timeout=300)
    assert "REFUSED opforge.layers.LeakyReLU runs on Keras's TensorFlow and JAX backends" in proc.stdout, \
        proc.stdout[-3000:] + proc.stderr[-3000:]
    assert repr(backend) in proc.stdout


def _yolo_child(tmp_path, role, backend):
    environment = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(TESTS_DIR), KERAS_BACKEND=backend)
    proc = subprocess.run([sys.executable, str(TESTS_DIR / "yolo_backend_child.py"), str(tmp_path), role],
                          env=environment, capture_output=True, text=True, timeout=900)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT "):])


def test_yolo_tiny_trains_on_jax_and_its_keras_file_moves_between_backends(tmp_path):
    """YOLO-v3-tiny (opforge.models) saved under TensorFlow loads under JAX with the same first
    loss and the same detections, trains 20 steps there as it does on TensorFlow (the loss falls;
    each of the 10 epochs' mean loss within 1% of TensorFlow's), and the JAX-trained file gives JAX's detections
    under TensorFlow."""
    pytest.importorskip("jax")
    tf_run = _yolo_child(tmp_path, "tensorflow", "tensorflow")
    jax_run = _yolo_child(tmp_path, "jax", "jax")
    assert jax_run["backend"] == "jax" and jax_run["same_detections"], jax_run
    assert abs(jax_run["first_loss"] - tf_run["first_loss"]) <= 1e-5 * abs(tf_run["first_loss"])
    ours, theirs = np.array(jax_run["losses"]), np.array(tf_run["losses"])
    assert len(ours) == 10 and ours[-1] < ours[0] / 4, ours  # 10 epochs of 2 steps
    np.testing.assert_allclose(ours, theirs, rtol=1e-2)
    back = _yolo_child(tmp_path, "tensorflow_check", "tensorflow")
    assert back["same_detections"], back

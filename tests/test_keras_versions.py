"""Which Keras opforge's parts need: the ops work with any Keras; the layers are Keras 3 layers,
or tf-keras layers under TF_USE_LEGACY_KERAS=1 where tf-keras is installed (and refuse at import
where it is not); the models and fuse need Keras 3 and refuse under Keras 2 with a message
naming it. Run in child processes, since the Keras a process uses is fixed when TensorFlow is
first imported."""
from __future__ import annotations

import pytest

from helpers import run_python

LEGACY = {"TF_USE_LEGACY_KERAS": "1"}


def _without_tf_keras(tmp_path):
    """A child environment where `import tf_keras` fails, as where tf-keras is not installed."""
    shadow = tmp_path / "tf_keras"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("raise ImportError('No module named tf_keras (hidden by the test)')\n")
    from helpers import TESTS_DIR

    return dict(LEGACY, PYTHONPATH=f"{tmp_path}:{TESTS_DIR}")


def test_keras3_check_passes_here():
    from opforge._keras import keras3_problem, layers_problem

    assert keras3_problem() is None and layers_problem() is None


@pytest.mark.parametrize("module, named", [("opforge.models", "opforge.models"),
                                           # fuse lives in opforge.models, which refuses first
                                           ("opforge.models.fuse", "opforge.models")])
def test_models_refuse_legacy_keras_at_import(module, named):
    proc = run_python(f"""
        import opforge
        try:
            import {module}
        except opforge.KerasVersionError as error:
            print("REFUSED", error)
        else:
            print("IMPORTED")
        """, env_extra=LEGACY)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "REFUSED" in out, out
    assert f"{named} needs Keras 3" in out and "TF_USE_LEGACY_KERAS=1" in out, out
    assert "opforge.ops" in out, out


def test_layers_refuse_legacy_keras_without_tf_keras(tmp_path):
    proc = run_python("""
        import opforge
        try:
            import opforge.layers
        except opforge.KerasVersionError as error:
            print("REFUSED", error)
        else:
            print("IMPORTED")
        """, env_extra=_without_tf_keras(tmp_path))
    out = proc.stdout
    assert "REFUSED opforge.layers needs Keras 3" in out, out + proc.stderr[-3000:]
    assert "tf-keras" in out and "TF_USE_LEGACY_KERAS=1" in out and "pip install tf-keras" in out, out


def test_ops_and_gradients_work_under_legacy_keras(tmp_path):
    """`import opforge` succeeds and the ops (with their gradients) run, with or without tf-keras;
    without it `opforge.layers` as an attribute raises the same KerasVersionError."""
    proc = run_python("""
        import tensorflow as tf
        import opforge
        x = tf.constant([-2.0, 3.0])
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = opforge.ops.leaky_relu(x, alpha=0.25)
        print("Y", y.numpy().tolist(), "G", tape.gradient(y, x).numpy().tolist())
        try:
            opforge.layers
        except opforge.KerasVersionError as error:
            print("ATTR REFUSED", error)
        """, env_extra=_without_tf_keras(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Y [-0.5, 3.0] G [0.25, 1.0]" in proc.stdout, proc.stdout
    assert "ATTR REFUSED opforge.layers needs Keras 3" in proc.stdout, proc.stdout

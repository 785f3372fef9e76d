"""The Keras layer: same results as keras.layers.LeakyReLU, config, training, and `.keras` and
SavedModel round trips that load in a fresh process."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
import keras

import opforge
import opforge.layers
from _models import build
from helpers import assert_round_trip_in_fresh_process, bits_equal, run_python


def test_layer_matches_keras_leaky_relu():
    x = tf.random.stateless_normal([4, 10], seed=[1, 1])
    for slope in (0.3, 0.0, 0.01):
        assert bits_equal(
            opforge.layers.LeakyReLU(negative_slope=slope)(x).numpy(),
            keras.layers.LeakyReLU(negative_slope=slope)(x).numpy(),
        )
    assert opforge.layers.LeakyReLU().negative_slope == keras.layers.LeakyReLU().negative_slope


def test_layer_config_and_flags():
    layer = opforge.layers.LeakyReLU(negative_slope=0.7, name="act")
    config = layer.get_config()
    assert config["negative_slope"] == 0.7 and config["name"] == "act"
    clone = opforge.layers.LeakyReLU.from_config(config)
    assert clone.negative_slope == 0.7
    assert layer.supports_jit is True  # the op lowers to XLA
    assert layer.compute_output_shape((None, 3, 5)) == (None, 3, 5)
    assert keras.saving.get_registered_name(opforge.layers.LeakyReLU) == "opforge>LeakyReLU"
    with pytest.raises(ValueError, match="negative_slope"):
        opforge.layers.LeakyReLU(negative_slope=float("nan"))

    @tf.function
    def build_in_graph():  # the check runs eagerly inside a graph too
        return opforge.layers.LeakyReLU(negative_slope=float("inf"))

    with pytest.raises(ValueError, match="finite"):
        build_in_graph()


def test_model_trains_with_jit_compile():
    keras.utils.set_random_seed(1)
    x = np.random.default_rng(0).standard_normal((256, 8)).astype(np.float32)
    y = (np.abs(x[:, :3]) - 0.5 * x[:, 3:6]).astype(np.float32)
    model = build("sequential")
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse", jit_compile=True)
    history = model.fit(x, y, epochs=15, batch_size=32, verbose=0)
    losses = history.history["loss"]
    assert losses[-1] < 0.5 * losses[0], losses
    assert model.jit_compile is True  # LeakyReLU's op lowers to XLA: Keras keeps jit_compile=True


def test_mixed_precision_layer_runs_in_half():
    layer = opforge.layers.LeakyReLU(dtype="mixed_float16")
    out = layer(tf.constant([[-2.0, 3.0]]))
    assert out.dtype == tf.float16
    np.testing.assert_array_equal(out.numpy(), np.float16([[-0.6, 3.0]]))


@pytest.mark.parametrize("kind", ["sequential", "functional", "subclassed"])
def test_keras_and_savedmodel_round_trip_in_fresh_process(kind, tmp_path):
    x = np.random.default_rng(3).standard_normal((5, 8)).astype(np.float32)
    assert_round_trip_in_fresh_process(
        build(kind), x, tmp_path, "Opforge>LeakyRelu",
        setup="import _models  # the subclassed model's class",
    )


def test_savedmodel_without_register_all_fails_clearly(tmp_path):
    model = build("sequential")
    model.export(str(tmp_path / "saved"), verbose=False)
    proc = run_python(
        f"""
        import tensorflow as tf
        try:
            tf.saved_model.load(r"{tmp_path}/saved")
            print("LOADED")
        except Exception as e:
            print("ERROR", type(e).__name__, str(e)[:300])
        """
    )
    # Without opforge.register_all() TensorFlow does not know the op: a clean error, no crash.
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "ERROR" in proc.stdout and "Opforge>LeakyRelu" in proc.stdout, proc.stdout

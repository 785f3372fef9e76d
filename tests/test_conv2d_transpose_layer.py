"""opforge.layers.Conv2DTranspose: same outputs as keras.layers.Conv2DTranspose with copied
weights, same output-size rules, config, training in model.fit, and `.keras` and SavedModel
round trips that load in a fresh process."""
from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import opforge
import opforge.layers
from opforge.ops import _xla
from helpers import assert_round_trip_in_fresh_process

CONFIGS = [
    dict(filters=4, kernel_size=4, strides=2, padding="same"),
    dict(filters=3, kernel_size=3, strides=2, padding="same"),
    dict(filters=3, kernel_size=3, strides=2, padding="valid"),
    dict(filters=2, kernel_size=(3, 2), strides=(3, 2), padding="valid", output_padding=(1, 0)),
    dict(filters=5, kernel_size=3, strides=2, padding="same", output_padding=1,
         activation="relu"),
    dict(filters=2, kernel_size=1, strides=1, padding="valid", use_bias=False),
    dict(filters=3, kernel_size=5, strides=3, padding="same", activation="tanh"),
]


def _pair(config, input_shape, seed=0):
    keras.utils.set_random_seed(seed)
    ours = opforge.layers.Conv2DTranspose(**config, bias_initializer="random_normal")
    ref = keras.layers.Conv2DTranspose(**config)
    ours.build(input_shape)
    ref.build(input_shape)
    ref.set_weights(ours.get_weights())  # the same layout: weights copy over as they are
    return ours, ref


@pytest.mark.parametrize("config", CONFIGS, ids=str)
def test_layer_matches_keras_with_copied_weights(config):
    x = tf.random.stateless_normal([2, 7, 6, 3], seed=[1, 2])
    ours, ref = _pair(config, x.shape)
    assert [w.shape for w in ours.weights] == [w.shape for w in ref.weights]
    y, r = ours(x), ref(x)
    assert y.shape == r.shape == tuple(ours.compute_output_shape(x.shape))
    np.testing.assert_allclose(y.numpy(), r.numpy(), rtol=1e-5, atol=1e-5)


def test_channels_first_and_dilation_run_on_cpu():
    # TensorFlow's CPU kernel has neither; compare with channels_last / the NumPy reference.
    from test_conv2d_transpose import ref_conv2d_transpose

    x = tf.random.stateless_normal([2, 5, 6, 3], seed=[3, 4])
    last = opforge.layers.Conv2DTranspose(4, 3, strides=2, padding="same")
    y = last(x)
    first = opforge.layers.Conv2DTranspose(4, 3, strides=2, padding="same",
                                           data_format="channels_first")
    first.build((None, 3, 5, 6))
    first.set_weights(last.get_weights())
    y2 = first(tf.transpose(x, [0, 3, 1, 2]))
    np.testing.assert_allclose(tf.transpose(y2, [0, 2, 3, 1]).numpy(), y.numpy(), rtol=1e-6,
                               atol=1e-6)

    dil = opforge.layers.Conv2DTranspose(2, 3, dilation_rate=2, padding="valid", use_bias=False)
    y = dil(x)
    assert y.shape == (2, 9, 10, 2)
    ref = ref_conv2d_transpose(x.numpy(), dil.kernel.numpy(), (9, 10), (1, 1), "VALID", (2, 2))
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-5, atol=1e-5)


def test_unknown_batch_and_spatial_dims():
    layer = opforge.layers.Conv2DTranspose(4, 3, strides=2, padding="valid", output_padding=1)

    @tf.function(input_signature=[tf.TensorSpec([None, None, 6, 3])])
    def f(x):
        y = layer(x)
        assert y.shape.as_list() == [None, None, 14, 4], y.shape
        return y

    y = f(tf.ones([2, 5, 6, 3]))
    assert y.shape == (2, 12, 14, 4)
    assert tuple(layer.compute_output_shape((None, 5, 6, 3))) == (None, 12, 14, 4)


def test_config_registration_and_flags():
    layer = opforge.layers.Conv2DTranspose(
        8, (3, 2), strides=2, padding="same", output_padding=(1, 0), activation="relu",
        use_bias=False, kernel_regularizer="l2", name="up")
    config = layer.get_config()
    assert config["filters"] == 8 and config["kernel_size"] == (3, 2)
    assert config["output_padding"] == (1, 0) and config["name"] == "up"
    clone = opforge.layers.Conv2DTranspose.from_config(config)
    assert clone.get_config() == config
    assert layer.supports_jit == (_xla.xla_path("Opforge>Conv2DTranspose") != "none"
                                  and not tf.config.list_physical_devices("GPU"))
    assert keras.saving.get_registered_name(opforge.layers.Conv2DTranspose) == \
        "opforge>Conv2DTranspose"
    with pytest.raises(ValueError, match="output_padding"):
        opforge.layers.Conv2DTranspose(2, 3, strides=2, output_padding=2)


def test_regularizer_and_mixed_precision():
    layer = opforge.layers.Conv2DTranspose(2, 3, strides=2, padding="same",
                                           kernel_regularizer="l2")
    layer(tf.ones([1, 4, 4, 3]))
    assert len(layer.losses) == 1
    half = opforge.layers.Conv2DTranspose(2, 3, strides=2, padding="same", dtype="mixed_float16")
    y = half(tf.ones([1, 4, 4, 3]))
    assert y.dtype == tf.float16 and half.kernel.dtype == "float32"


def test_trains_on_an_upsampling_task():
    # Learn 2x nearest-neighbour upsampling of a 3-channel image into 2 channels.
    keras.utils.set_random_seed(2)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((128, 8, 8, 3)).astype(np.float32)
    mix = np.array([[1.0, -0.5], [0.3, 0.8], [-0.2, 0.4]], np.float32)
    y = np.repeat(np.repeat(x @ mix, 2, axis=1), 2, axis=2)
    model = keras.Sequential([
        keras.Input((8, 8, 3)),
        opforge.layers.Conv2DTranspose(2, 4, strides=2, padding="same"),
    ])
    model.compile(optimizer=keras.optimizers.Adam(0.02), loss="mse", jit_compile="auto")
    losses = model.fit(x, y, epochs=12, batch_size=16, verbose=0).history["loss"]
    assert losses[-1] < 0.2 * losses[0], losses
    assert model.jit_compile is False


@keras.saving.register_keras_serializable(package="opforge_conv_tests")
class Upsampler(keras.Model):
    def __init__(self, filters: int = 3, **kwargs):
        super().__init__(**kwargs)
        self.filters = filters
        self.up = opforge.layers.Conv2DTranspose(filters, 4, strides=2, padding="same",
                                                 activation="relu")
        self.out = keras.layers.Conv2D(2, 1)

    def call(self, x):
        return self.out(self.up(x))

    def get_config(self):
        return {**super().get_config(), "filters": self.filters}


def _model(kind):
    keras.utils.set_random_seed(0)
    if kind == "sequential":
        return keras.Sequential([
            keras.Input((6, 5, 3)),
            opforge.layers.Conv2DTranspose(4, 3, strides=2, padding="valid", output_padding=1),
            keras.layers.Conv2D(2, 1),
        ])
    if kind == "functional":
        inputs = keras.Input((6, 5, 3))
        h = opforge.layers.Conv2DTranspose(4, 4, strides=2, padding="same")(inputs)
        return keras.Model(inputs, keras.layers.Conv2D(2, 1)(h))
    model = Upsampler()
    model(keras.ops.zeros((1, 6, 5, 3)))
    return model


@pytest.mark.parametrize("kind", ["sequential", "functional", "subclassed"])
def test_keras_and_savedmodel_round_trip_in_fresh_process(kind, tmp_path):
    x = np.random.default_rng(3).standard_normal((2, 6, 5, 3)).astype(np.float32)
    assert_round_trip_in_fresh_process(
        _model(kind), x, tmp_path, "Opforge>Conv2DTranspose",
        setup="from test_conv2d_transpose_layer import Upsampler  # the subclassed model's class",
    )

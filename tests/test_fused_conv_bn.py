"""The fused Darknet block (the ops themselves: tests/test_fused_conv2d_bias_leaky_relu.py and
tests/test_fused_batch_norm_leaky_relu.py): ConvBNLeaky against Conv2D + BatchNormalization +
LeakyReLU (same variables, training statistics, moving averages, inference), fold_batch_norm on
a trained small model and on YOLO-tiny, saving and loading. The generic op checks (references
over dtypes, float64 numerical gradients, bad inputs in a child process, determinism) come from
the ops' specs in tests/test_specs.py."""
import numpy as np
import pytest
import tensorflow as tf
import keras

import opforge
import opforge.models.fuse
from opforge.models.fuse import find_conv_bn_leaky_chains, fold_batch_norm
from opforge.layers import ConvBNLeaky


def unfused_block(filters, k, strides=1, padding="same", alpha=0.1, name="b"):
    return [keras.layers.Conv2D(filters, k, strides=strides, padding=padding, use_bias=False, name=f"{name}_conv"),
            keras.layers.BatchNormalization(name=f"{name}_bn"), keras.layers.LeakyReLU(alpha, name=f"{name}_leaky")]


def small_unfused_model():
    inputs = keras.Input((16, 16, 3))
    x = inputs
    for i, (f, k, s, p) in enumerate([(8, 3, 1, "same"), (16, 3, 2, "valid"), (8, 1, 1, "same")]):
        for layer in unfused_block(f, k, s, p, name=f"b{i}"):
            x = layer(x)
    skip = x
    x = keras.layers.Conv2D(8, 3, padding="same", use_bias=False)(x)
    x = keras.layers.BatchNormalization()(x)
    x = opforge.layers.LeakyReLU(0.2)(x)
    x = keras.layers.Add()([x, skip])
    outputs = keras.layers.Conv2D(4, 1)(x)  # a head: conv with bias, no batch norm
    return keras.Model(inputs, outputs)


def test_conv_bn_leaky_layer_equals_unfused_chain_in_training_and_inference():
    rng = np.random.default_rng(2)
    x = tf.constant(rng.normal(size=(4, 10, 10, 3)), tf.float32)
    fused = ConvBNLeaky(6, 3, strides=2, padding="same", alpha=0.1, momentum=0.9)
    chain = unfused_block(6, 3, 2, "same")
    chain[1].momentum = 0.9
    y = x
    for layer in chain:
        y = layer(y, training=False) if isinstance(layer, keras.layers.BatchNormalization) else layer(y)
    fused(x)
    assert [w.shape for w in fused.get_weights()] == [w.shape for layer in chain for w in layer.get_weights()]
    weights = [w for layer in chain for w in layer.get_weights()]
    weights[3] = rng.normal(size=6).astype(np.float32)  # moving mean
    weights[4] = rng.uniform(0.5, 2.0, 6).astype(np.float32)  # moving variance
    chain[0].set_weights(weights[:1])
    chain[1].set_weights(weights[1:])
    fused.set_weights(weights)

    def run_chain(training):
        y = x
        for layer in chain:
            y = layer(y, training=training) if isinstance(layer, keras.layers.BatchNormalization) else layer(y)
        return y

    np.testing.assert_allclose(fused(x, training=False), run_chain(False), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(fused(x, training=True), run_chain(True), rtol=1e-5, atol=1e-5)
    # One training call each: the moving statistics moved the same way.
    np.testing.assert_allclose(fused.moving_mean, chain[1].moving_mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(fused.moving_variance, chain[1].moving_variance, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("choice", ["auto", "opforge", "tf"])
def test_conv_bn_leaky_inference_follows_new_weights(monkeypatch, choice):
    # 3x3 stride 1 with 64 channels on 13x13: "auto" runs opforge's fused conv, whose kernel keeps
    # its transformed filter between calls (conv::FilterCache). The same tf.function is called,
    # the weights changed (in one filter element, then in the batch norm), and called again.
    import opforge.layers.conv_bn_leaky as cbl
    monkeypatch.setattr(cbl, "INFERENCE_CONV", choice)
    rng = np.random.default_rng(5)
    x = tf.constant(rng.normal(size=(1, 13, 13, 64)), tf.float32)
    fused = ConvBNLeaky(64, 3)
    chain = unfused_block(64, 3)
    y = x
    for layer in chain:
        y = layer(y)
    fused(x)
    weights = [w for layer in chain for w in layer.get_weights()]
    weights[3] = rng.normal(size=64).astype(np.float32)
    weights[4] = rng.uniform(0.5, 2.0, 64).astype(np.float32)

    def load(ws):
        fused.set_weights(ws)
        chain[0].set_weights(ws[:1])
        chain[1].set_weights(ws[1:])

    def run_chain():
        y = x
        for layer in chain:
            y = layer(y, training=False) if isinstance(layer, keras.layers.BatchNormalization) else layer(y)
        return y

    infer = tf.function(lambda: fused(x, training=False))
    for step in range(3):
        load(weights)
        np.testing.assert_allclose(infer(), run_chain(), rtol=1e-4, atol=1e-4, err_msg=f"step {step}")
        np.testing.assert_allclose(infer(), run_chain(), rtol=1e-4, atol=1e-4, err_msg=f"step {step} again")
        weights = [w.copy() for w in weights]
        if step == 0:
            weights[0][2, 2, 63, 63] += 1.0  # the filter's last element
        else:
            weights[1] *= 1.5  # gamma: every folded weight changes


def test_fold_batch_norm_on_a_trained_small_model_and_round_trips(tmp_path):
    keras.utils.set_random_seed(3)
    model = small_unfused_model()
    x = np.random.default_rng(4).normal(size=(32, 16, 16, 3)).astype(np.float32)
    y = np.random.default_rng(5).normal(size=(32, 7, 7, 4)).astype(np.float32)
    model.compile("adam", "mse")
    model.fit(x, y, epochs=2, batch_size=8, verbose=0)  # moving statistics away from 0 / 1
    assert len(find_conv_bn_leaky_chains(model)) == 4
    folded = fold_batch_norm(model)
    assert sum(isinstance(layer, ConvBNLeaky) for layer in folded.layers) == 4
    assert not any(isinstance(layer, keras.layers.BatchNormalization) for layer in folded.layers)
    want = model.predict(x, verbose=0)
    got = folded.predict(x, verbose=0)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    path = tmp_path / "folded.keras"
    folded.save(path)
    np.testing.assert_array_equal(keras.models.load_model(path).predict(x, verbose=0), got)
    folded.export(tmp_path / "saved", verbose=False)
    reloaded = tf.saved_model.load(str(tmp_path / "saved"))
    np.testing.assert_allclose(reloaded.serve(x).numpy(), got, rtol=1e-6, atol=1e-6)


def test_fold_batch_norm_on_yolo_tiny_and_fused_builder():
    import opforge.models as M

    keras.utils.set_random_seed(6)
    model = M.YoloV3Tiny(5, 64, upsample="nearest")
    # Non-trivial statistics, as after training.
    rng = np.random.default_rng(7)
    for layer in model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            layer.moving_mean.assign(rng.normal(0, 0.1, layer.moving_mean.shape))
            layer.moving_variance.assign(rng.uniform(0.5, 1.5, layer.moving_variance.shape))
    x = rng.uniform(size=(2, 64, 64, 3)).astype(np.float32)
    folded = fold_batch_norm(model)
    for a, b in zip(folded.predict(x, verbose=0), model.predict(x, verbose=0)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4 * np.abs(b).max())
    fused = M.YoloV3Tiny(5, 64, upsample="nearest", fused=True)
    assert len(fused.weights) == len(model.weights)
    opforge.models.fuse.transfer_weights(model, fused)
    for a, b in zip(fused(x, training=False), model(x, training=False)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4 * np.abs(b).max())
    for a, b in zip(fused(x, training=True), model(x, training=True)):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-3 * np.abs(b).max())
    # And back: the unfused model takes the fused one's (trained) statistics.
    back = M.YoloV3Tiny(5, 64, upsample="nearest")
    opforge.models.fuse.transfer_weights(fused, back)
    for a, b in zip(back(x, training=False), fused(x, training=False)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4 * np.abs(b).max())


def test_bad_layer_arguments():
    for kwargs, fragment in ((dict(filters=0, kernel_size=3), "filters"), (dict(filters=4, kernel_size=0), "kernel_size"),
                             (dict(filters=4, kernel_size=3, padding="full"), "padding"),
                             (dict(filters=4, kernel_size=3, alpha=-1.0), "alpha")):
        with pytest.raises(ValueError, match=fragment):
            ConvBNLeaky(**kwargs)
    import opforge.models as M

    with pytest.raises(ValueError, match="fused"):
        M.YoloV3Tiny(5, 64, ops="tf", fused=True)


@pytest.mark.parametrize("on_onednn", [False, True])
def test_conv_bn_leaky_bfloat16_convolution_follows_onednn(monkeypatch, on_onednn):
    # In bfloat16 opforge's convolutions run on oneDNN where the CPU multiplies bfloat16
    # (AVX512-BF16, AMX): then the layer takes opforge's convolution, in inference and in
    # training, at every geometry; without it (bfloat16 at the float32 rate) TensorFlow's.
    # float32 keeps opforge's where it measured faster either way.
    import opforge._loader as loader
    import opforge.layers.conv_bn_leaky as cbl
    monkeypatch.setattr(cbl, "INFERENCE_CONV", "auto")
    monkeypatch.setattr(loader, "onednn_bfloat16", lambda: on_onednn)
    layer = ConvBNLeaky(64, 3)
    shape = (1, 52, 52, 64)
    assert cbl._opforge_conv_pays(layer, shape, tf.float32)
    assert cbl._winograd_pays(shape, 64, tf.float32)
    assert cbl._opforge_conv_pays(layer, shape, tf.bfloat16) == on_onednn
    assert cbl._winograd_pays(shape, 64, tf.bfloat16) == on_onednn
    assert cbl._opforge_conv_pays(ConvBNLeaky(64, 1), shape, tf.bfloat16) == on_onednn
    assert not cbl._opforge_conv_pays(ConvBNLeaky(64, 1), shape, tf.float32)
    # A mixed_bfloat16 layer (bfloat16 compute, float32 variables): the chosen convolution op in
    # its graph, the float32 layer's values within bfloat16's rounding.
    rng = np.random.default_rng(2)
    x = tf.constant(rng.normal(size=shape).astype(np.float32))
    layer(x)
    mixed = ConvBNLeaky(64, 3, dtype="mixed_bfloat16")
    mixed(x)
    mixed.set_weights(layer.get_weights())
    for training in (False, True):
        graph = tf.function(lambda v: mixed(v, training=training)).get_concrete_function(
            tf.TensorSpec(shape, tf.float32)).graph
        types = {op.type for op in graph.get_operations()}
        assert ("Opforge>FusedConv2DBiasLeakyRelu" in types) == on_onednn, types
        assert ("Conv2D" in types) != on_onednn, types
    want = layer(x, training=False).numpy()
    got = mixed(x, training=False)
    assert got.dtype == tf.bfloat16
    np.testing.assert_allclose(tf.cast(got, tf.float32).numpy(), want, rtol=0.05, atol=0.05 * np.abs(want).max())

"""What Keras and TensorFlow users expect in their first hour: mixed precision, the drop-in
`opforge.ops.resize`, layer signatures and aliases, BilinearResize's Resizing / UpSampling2D
forms."""
from __future__ import annotations

import inspect
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import opforge
from helpers import run_python

F32 = np.float32


def bits_equal(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def images(shape, seed=0, dtype=np.float32):
    return (np.random.default_rng(seed).standard_normal(shape) * 10).astype(dtype)


# --- mixed precision ---------------------------------------------------------------------------

@pytest.fixture(params=["mixed_float16", "mixed_bfloat16"])
def policy(request):
    before = keras.config.dtype_policy()
    keras.config.set_dtype_policy(request.param)
    keras.utils.set_random_seed(1)
    try:
        yield keras.config.dtype_policy()
    finally:
        keras.config.set_dtype_policy(before)


def _down():
    return keras.layers.Conv2D(8, 3, strides=2, padding="same")


# Each layer in a subclassed model with a residual merge (`layer(x) + skip`, the FPN merge that
# failed with `cannot compute AddV2 ... expected to be a float tensor but is a half tensor`).
LAYER_MODELS = {
    "LeakyReLU": lambda: (None, opforge.layers.LeakyReLU(negative_slope=0.1)),
    "BilinearResize": lambda: (_down(), opforge.layers.BilinearResize(scale=2)),
    "BilinearResize fixed size": lambda: (_down(), opforge.layers.BilinearResize(8, 8)),
    "Conv2DTranspose": lambda: (_down(), opforge.layers.Conv2DTranspose(8, 4, strides=2, padding="same")),
    "ConvBNLeaky": lambda: (None, opforge.layers.ConvBNLeaky(8, 3)),
}


class Residual(keras.Model):
    def __init__(self, make):
        super().__init__()
        self.stem = keras.layers.Conv2D(8, 3, padding="same")
        self.down, self.layer = make()
        self.head = keras.layers.Conv2D(1, 1)

    def call(self, x):
        skip = self.stem(x)
        y = self.layer(skip if self.down is None else self.down(skip))
        return self.head(y + skip)


@pytest.mark.parametrize("name", sorted(LAYER_MODELS))
def test_each_layer_trains_under_mixed_precision_with_a_residual_merge(policy, name):
    x = images((8, 8, 8, 3), 2) / 10
    y = images((8, 8, 8, 1), 3) / 10
    # Subclassed: eager tensors meet in the merge.
    model = Residual(LAYER_MODELS[name])
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
    history = model.fit(x, y, batch_size=4, epochs=2, verbose=0)
    assert np.all(np.isfinite(history.history["loss"])), history.history
    # Functional: Keras's symbolic dtype is the dtype the layer returns.
    down, layer = LAYER_MODELS[name]()
    inputs = keras.Input((8, 8, 3))
    skip = keras.layers.Conv2D(8, 3, padding="same")(inputs)
    symbolic = layer(skip if down is None else down(skip))
    assert symbolic.dtype == policy.compute_dtype, (symbolic.dtype, policy.name)
    functional = keras.Model(inputs, keras.layers.Conv2D(1, 1)(symbolic + skip))
    eager = layer(tf.cast(tf.constant(x[:, :, :, :1].repeat(8, axis=3) if down is None else x[:, ::2, ::2, :1].repeat(8, axis=3)),
                          policy.compute_dtype))
    assert eager.dtype == policy.compute_dtype
    functional.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
    history = functional.fit(x, y, batch_size=4, epochs=1, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))


def test_yolo_layers_under_mixed_precision(policy):
    anchors = [[10, 13], [16, 30], [33, 23]]
    inputs = keras.Input((4, 4, 3 * 7))
    decode = opforge.layers.YoloDecode(anchors, 2, 64)
    boxes, scores, classes, class_scores = decode(inputs)
    assert boxes.dtype == policy.compute_dtype and classes.dtype == "int32"
    merged = boxes + keras.layers.Dense(4)(boxes)  # a residual merge on the boxes
    model = keras.Model(inputs, merged)
    x = images((4, 4, 4, 21), 5) / 10
    out = model(x)
    assert out.dtype == policy.compute_dtype
    model.compile(optimizer=keras.optimizers.SGD(1e-4), loss="mse")
    history = model.fit(x, np.zeros((4, 48, 4), F32), epochs=1, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    # Post-processing (no gradient: inference only): symbolic and eager dtypes agree.
    post = opforge.layers.YoloPostprocess(anchors, [[0, 1, 2]], 2, 64, score_threshold=0.0)
    symbolic = post([inputs])
    eager = post([tf.cast(x, policy.compute_dtype)])
    assert [t.dtype for t in symbolic] == [t.dtype.name for t in eager]


# --- opforge.ops.resize: the drop-in for tf.image.resize ---------------------------------------

def test_resize_signature_mirrors_tf_image_resize():
    ours = inspect.signature(opforge.ops.resize).parameters
    theirs = inspect.signature(tf.image.resize).parameters
    assert set(ours) == set(theirs)
    for name, parameter in theirs.items():
        assert ours[name].default == parameter.default, name
    # preserve_aspect_ratio comes fourth in tf.image.resize: keyword-only here, so a positional
    # call written for TensorFlow fails loudly instead of setting antialias.
    assert ours["preserve_aspect_ratio"].kind is inspect.Parameter.KEYWORD_ONLY
    with pytest.raises(TypeError):
        opforge.ops.resize(images((4, 4, 1)), [2, 2], "bilinear", True)


@pytest.mark.parametrize("dtype", [np.uint8, np.int32, np.float16, np.float32, np.float64])
def test_resize_3d_and_4d_equal_tf_image_resize(dtype):
    for shape, size, kwargs in [((7, 5, 3), [14, 9], {}), ((2, 7, 5, 3), [3, 11], {}),
                                ((7, 5, 3), [20, 20], dict(preserve_aspect_ratio=True))]:
        x = np.abs(images(shape, 7)).astype(dtype)
        ours, theirs = opforge.ops.resize(x, size, **kwargs), tf.image.resize(x, size, **kwargs)
        assert ours.dtype == theirs.dtype == tf.float32
        assert bits_equal(ours, theirs), (shape, size, kwargs)


def test_resize_other_methods_and_antialias_run_tensorflow_with_its_dtype_rules():
    x = np.abs(images((9, 13, 2), 8)).astype(np.uint8)
    for method in ("nearest", "bicubic", "area", "lanczos3", "gaussian"):
        ours, theirs = opforge.ops.resize(x, [5, 4], method), tf.image.resize(x, [5, 4], method)
        assert ours.dtype == theirs.dtype and bits_equal(ours, theirs), method
    assert opforge.ops.resize(x, [5, 4], "nearest").dtype == tf.uint8
    ours = opforge.ops.resize(x, [5, 4], antialias=True, preserve_aspect_ratio=True)
    assert bits_equal(ours, tf.image.resize(x, [5, 4], antialias=True, preserve_aspect_ratio=True))


def test_resize_in_a_per_image_dataset_map_and_in_graph_mode():
    data = tf.data.Dataset.from_tensor_slices(np.abs(images((3, 10, 12, 3), 9)).astype(np.uint8))
    ours = list(data.map(lambda image: opforge.ops.resize(image, [20, 24])))
    theirs = list(data.map(lambda image: tf.image.resize(image, [20, 24])))
    assert all(bits_equal(a, b) for a, b in zip(ours, theirs))

    @tf.function(input_signature=[tf.TensorSpec([None, None, 3], tf.float32)])
    def per_image(image):
        out = opforge.ops.resize(image, [8, 6])
        assert out.shape.as_list() == [8, 6, 3], out.shape  # the static shape, as tf.image.resize
        return out

    x = images((5, 4, 3), 10)
    assert bits_equal(per_image(x), tf.image.resize(x, [8, 6]))


def test_resize_gradient_equals_tf_image_resize_gradient():
    x = tf.constant(images((2, 5, 7, 3), 11))
    for kwargs in ({}, dict(preserve_aspect_ratio=True)):
        grads = []
        for fn in (opforge.ops.resize, tf.image.resize):
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = fn(x, [9, 9], **kwargs)
                loss = tf.reduce_sum(y * y)
            grads.append(tape.gradient(loss, x).numpy())
        assert bits_equal(grads[0], grads[1]), kwargs


# --- layer signatures and aliases ----------------------------------------------------------------

def _assert_mirrors(ours, theirs, extra=(), optional=()):
    ours_p = inspect.signature(ours.__init__).parameters
    theirs_p = inspect.signature(theirs.__init__).parameters
    assert list(ours_p)[:len(theirs_p) - 1] == list(theirs_p)[:-1]  # the same order, **kwargs last
    for name, parameter in theirs_p.items():
        assert name in ours_p, (ours.__name__, name)
        if name in optional:  # required there, optional here
            assert parameter.default is inspect.Parameter.empty and ours_p[name].default is None
        else:
            assert ours_p[name].default == parameter.default, (ours.__name__, name)
    assert set(ours_p) - set(theirs_p) <= set(extra), set(ours_p) - set(theirs_p)


def test_layer_signatures_spell_out_the_keras_arguments():
    _assert_mirrors(opforge.layers.Conv2DTranspose, keras.layers.Conv2DTranspose)
    _assert_mirrors(opforge.layers.LeakyReLU, keras.layers.LeakyReLU)
    _assert_mirrors(opforge.layers.BilinearResize, keras.layers.Resizing,
                    extra=("target_size", "scale", "align_corners", "half_pixel_centers"),
                    optional=("height", "width"))
    # Resizing's height and width are required there and optional here (target_size, scale).
    layer = opforge.layers.Conv2DTranspose(4, 3, 2, "same", use_bias=False)
    assert layer.strides == (2, 2) and layer.padding == "same" and not layer.use_bias


def test_leaky_relu_accepts_alpha_with_keras_warning():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ours = opforge.layers.LeakyReLU(alpha=0.1)
        keras.layers.LeakyReLU(alpha=0.1)
    messages = [str(w.message) for w in caught if "alpha" in str(w.message)]
    assert len(messages) == 2 and messages[0] == messages[1], messages
    assert ours.negative_slope == 0.1 and ours.get_config()["negative_slope"] == 0.1
    x = images((3, 4), 12)
    assert bits_equal(ours(x), keras.layers.LeakyReLU(negative_slope=0.1)(x))


# --- BilinearResize: the forms of Resizing and UpSampling2D --------------------------------------

def test_bilinear_resize_height_width_equals_resizing():
    x = images((2, 9, 13, 3), 13)
    ours = opforge.layers.BilinearResize(6, 17)
    assert bits_equal(ours(x), keras.layers.Resizing(6, 17)(x))
    assert ours.target_size == (6, 17)


@pytest.mark.parametrize("option", ["crop_to_aspect_ratio", "pad_to_aspect_ratio"])
@pytest.mark.parametrize("shape", [(2, 9, 13, 3), (2, 13, 9, 3), (11, 6, 2)])
def test_bilinear_resize_crop_and_pad_equal_resizing(option, shape):
    x = images(shape, 14)
    for size in ((6, 17), (10, 10), (4, 3)):
        ours = opforge.layers.BilinearResize(*size, **{option: True}, fill_value=1.5)
        theirs = keras.layers.Resizing(*size, **{option: True}, fill_value=1.5)
        assert bits_equal(ours(x), theirs(x)), (size, option, shape)


def test_bilinear_resize_channels_first_and_unbatched():
    x = images((2, 3, 9, 13), 15)
    ours = opforge.layers.BilinearResize(5, 7, data_format="channels_first")
    theirs = keras.layers.Resizing(5, 7, data_format="channels_first")
    assert bits_equal(ours(x), theirs(x))
    assert ours.compute_output_shape((2, 3, 9, 13)) == (2, 3, 5, 7)
    assert bits_equal(ours(x[0]), theirs(x[0]))  # 3-D: one image
    hwc = images((9, 13, 3), 16)
    assert bits_equal(opforge.layers.BilinearResize(5, 7)(hwc), keras.layers.Resizing(5, 7)(hwc))


def test_bilinear_resize_scale_equals_upsampling2d_on_unknown_sizes():
    inputs = keras.Input((None, None, 4))
    ours = keras.Model(inputs, opforge.layers.BilinearResize(scale=2)(inputs))
    theirs = keras.Model(inputs, keras.layers.UpSampling2D(2, interpolation="bilinear")(inputs))
    for shape in ((2, 13, 13, 4), (1, 5, 8, 4)):
        x = images(shape, 17)
        assert bits_equal(ours(x), theirs(x)), shape
    non_uniform = opforge.layers.BilinearResize(scale=(2, 0.5))
    x = images((1, 6, 9, 2), 18)
    assert non_uniform(x).shape == (1, 12, 4, 2)
    assert bits_equal(non_uniform(x), tf.image.resize(x, [12, 4]))
    assert non_uniform.compute_output_shape((None, 6, None, 2)) == (None, 12, None, 2)

    @tf.function(input_signature=[tf.TensorSpec([None, None, None, 2], tf.float32)])
    def dynamic(t):
        return non_uniform(t)

    assert bits_equal(dynamic(x), tf.image.resize(x, [12, 4]))


def test_bilinear_resize_configs_old_and_new_round_trip():
    old = {"name": "up", "trainable": True, "dtype": "float32", "target_size": [8, 6],
           "align_corners": True, "half_pixel_centers": False}
    layer = opforge.layers.BilinearResize.from_config(old)  # a config saved by opforge <= 0.1
    assert layer.target_size == (8, 6) and layer.align_corners
    for made in (layer, opforge.layers.BilinearResize(scale=2), opforge.layers.BilinearResize(4, 5, crop_to_aspect_ratio=True),
                 opforge.layers.BilinearResize((3, 9))):
        clone = opforge.layers.BilinearResize.from_config(made.get_config())
        assert clone.get_config() == made.get_config()


@pytest.mark.parametrize("kwargs, message", [
    (dict(), "exactly one of height and width, target_size or scale"),
    (dict(height=4, width=4, scale=2), "exactly one"),
    (dict(height=4), "height and width must both be given"),
    (dict(scale=0), "scale must be a positive number"),
    (dict(scale=(2, -1)), "scale must be a positive number"),
    (dict(height=4, width=4, interpolation="nearest"), "interpolation must be 'bilinear'"),
    (dict(height=4, width=4, fill_mode="reflect"), "fill_mode must be 'constant'"),
    (dict(height=4, width=4, crop_to_aspect_ratio=True, pad_to_aspect_ratio=True), "only one of"),
    (dict(scale=2, crop_to_aspect_ratio=True), "need a target size"),
    (dict(height=4, width=4, data_format="NHWC"), "data_format must be"),
    (dict(height=4, width=4, antialias=True, half_pixel_centers=False), "antialias=True"),
    (dict(scale=2, align_corners=True), "cannot both be True"),
])
def test_bilinear_resize_argument_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        opforge.layers.BilinearResize(**kwargs)


def test_yolo_with_bilinear_upsampling_builds_without_an_input_size():
    from opforge.models import YoloV3Tiny, YoloV3TinySubclassed

    model = YoloV3Tiny(num_classes=2, input_size=None, upsample="bilinear")
    outputs = model(np.zeros((1, 64, 96, 3), F32))
    assert [tuple(o.shape) for o in outputs] == [(1, 2, 3, 21), (1, 4, 6, 21)]
    subclassed = YoloV3TinySubclassed(num_classes=2, upsample="bilinear")
    assert [tuple(o.shape) for o in subclassed(np.zeros((1, 64, 64, 3), F32))] == [(1, 2, 2, 21), (1, 4, 4, 21)]


def test_layers_load_in_a_fresh_process_after_only_import_opforge(tmp_path):
    inputs = keras.Input((None, None, 3))
    h = opforge.layers.LeakyReLU(alpha=0.2)(inputs)
    h = opforge.layers.BilinearResize(scale=2)(h)
    h = opforge.layers.BilinearResize(12, 10, crop_to_aspect_ratio=True)(h)
    model = keras.Model(inputs, h)
    x = images((1, 5, 7, 3), 19)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", model(x).numpy())
    model.save(tmp_path / "m.keras")
    proc = run_python(f"""
        import numpy as np, keras, opforge
        x, y = np.load(r"{tmp_path}/x.npy"), np.load(r"{tmp_path}/y.npy")
        print("EQUAL", np.array_equal(keras.models.load_model(r"{tmp_path}/m.keras")(x).numpy(), y))
        """)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "EQUAL True" in proc.stdout, proc.stdout


# --- integer inputs of the fused chains, as TensorFlow's chain takes them ------------------------

@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"])
def test_bias_leaky_relu_integer_inputs_equal_the_tensorflow_chain(dtype):
    info = np.iinfo(dtype)
    rng = np.random.default_rng(20)
    x = rng.integers(info.min, info.max, (3, 5, 4), dtype=dtype, endpoint=True)
    b = np.array([info.max, info.min, 1, 0], dtype=dtype)  # sums that wrap
    ours = opforge.ops.bias_leaky_relu(x, b, alpha=0.1)
    theirs = tf.nn.leaky_relu(tf.nn.bias_add(x, b), alpha=0.1)
    assert ours.dtype == theirs.dtype == tf.float32 and bits_equal(ours, theirs)
    one_d = opforge.ops.bias_leaky_relu(x[0, 0], b, alpha=0.1)
    assert bits_equal(one_d, theirs[0, 0])
    with pytest.raises(tf.errors.InvalidArgumentError, match="BiasLeakyRelu: bias must be \\[4\\]"):
        opforge.ops.bias_leaky_relu(x, b[:3])


def test_fused_conv_int32_equals_the_tensorflow_chain():
    rng = np.random.default_rng(21)
    x = rng.integers(-2**31, 2**31 - 1, (2, 7, 6, 3), dtype=np.int32)  # products and sums wrap
    w = rng.integers(-2**31, 2**31 - 1, (3, 3, 3, 5), dtype=np.int32)
    b = rng.integers(-2**31, 2**31 - 1, (5,), dtype=np.int32)
    for strides, padding in ((1, "SAME"), (2, "VALID"), (1, [[0, 0], [1, 0], [2, 1], [0, 0]])):
        ours = opforge.ops.fused_conv2d_bias_leaky_relu(x, w, b, strides, padding, alpha=0.1)
        theirs = tf.nn.leaky_relu(tf.nn.bias_add(tf.nn.conv2d(x, w, strides, padding), b), alpha=0.1)
        assert ours.dtype == tf.float32 and bits_equal(ours, theirs), (strides, padding)
    with pytest.raises(tf.errors.InvalidArgumentError, match="FusedConv2DBiasLeakyRelu: .*filter"):
        opforge.ops.fused_conv2d_bias_leaky_relu(x, w[:, :, :2], b, 1, "SAME")


# --- XLA: models of lowering layers compile with jit_compile=True --------------------------------

@pytest.mark.parametrize("form", ["scale", "fixed", "crop", "channels_first"])
def test_models_of_lowering_layers_train_with_jit_compile(form):
    if tf.config.list_physical_devices("GPU"):
        pytest.skip("resize_bilinear runs under XLA as an FFI custom call, XLA:CPU only")
    layers = {
        "scale": lambda: opforge.layers.BilinearResize(scale=2),
        "fixed": lambda: opforge.layers.BilinearResize(16, 16),
        "crop": lambda: opforge.layers.BilinearResize(16, 12, crop_to_aspect_ratio=True),
        "channels_first": lambda: opforge.layers.BilinearResize(16, 16, data_format="channels_first"),
    }
    results = []
    for jit in (False, True):
        keras.utils.set_random_seed(4)
        inputs = keras.Input((None, None, 3))
        h = keras.layers.Conv2D(4, 3, padding="same")(inputs)
        h = opforge.layers.LeakyReLU(negative_slope=0.1)(h)
        h = layers[form]()(h)
        model = keras.Model(inputs, keras.layers.Conv2D(1, 1)(h))
        assert all(layer.supports_jit for layer in model.layers)
        model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse", jit_compile=jit)
        x = images((4, 8, 8, 3), 22) / 10
        y = np.zeros((4, *model(x).shape[1:]), F32)
        history = model.fit(x, y, batch_size=2, epochs=1, verbose=0, shuffle=False)
        results.append((history.history["loss"][0], model.predict(x, verbose=0)))
    # The resize is the same bits under XLA; XLA's convolutions round otherwise.
    np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-4)
    np.testing.assert_allclose(results[0][1], results[1][1], rtol=1e-3, atol=1e-5)


def test_jit_compile_of_an_op_without_hlo_lowering_runs_its_kernel():
    """bias_leaky_relu has no HLO lowering: under XLA it is a custom call to the same kernel
    (tests/test_xla_ffi.py; in a build without XLA's FFI, opforge's error, tests/test_xla.py)."""
    from opforge.ops import _xla

    if _xla.xla_path("Opforge>BiasLeakyRelu") == "none":
        pytest.skip("this build has no XLA FFI custom calls")

    @tf.function(jit_compile=True)
    def f(x, b):
        return opforge.ops.bias_leaky_relu(x, b)

    x = tf.constant(np.linspace(-2, 2, 6, dtype=F32).reshape(2, 3))
    np.testing.assert_array_equal(f(x, tf.ones([3])).numpy(),
                                  opforge.ops.bias_leaky_relu(x, tf.ones([3])).numpy())

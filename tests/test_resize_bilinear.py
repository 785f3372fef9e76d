"""ResizeBilinear: forward and gradient bit for bit against an independent NumPy reference of
the three coordinate conventions (and against tf.raw_ops); the exact Jacobian; shapes; the Keras
layer. The spec's generic checks (test_specs.py) cover TensorFlow agreement over every dtype,
numerical gradients, bad inputs, threads and saving."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
import keras

import opforge
import opforge.layers
from helpers import assert_round_trip_in_fresh_process, bits_equal
from opforge.ops.resize_bilinear import GEOMETRIES, MODES

F32 = np.float32
IMAGE_DTYPES = [
    tf.int8, tf.uint8, tf.int16, tf.uint16, tf.int32, tf.int64,
    tf.bfloat16, tf.float16, tf.float32, tf.float64,
]
GRAD_DTYPES = [tf.float32, tf.float64, tf.float16, tf.bfloat16]


# --- the reference: TensorFlow's definition in NumPy float32 arithmetic -----------------------

def ref_taps(out_size: int, in_size: int, align_corners: bool, half_pixel_centers: bool):
    if align_corners and in_size > 1 and out_size > 1:
        scale = F32(in_size - 1) / F32(out_size - 1)
    else:
        scale = F32(in_size) / F32(out_size)
    i = np.arange(out_size).astype(F32)
    src = (i + F32(0.5)) * scale - F32(0.5) if half_pixel_centers else i * scale
    floor = np.floor(src)
    lower = np.maximum(floor.astype(np.int64), 0)
    upper = np.minimum(np.ceil(src).astype(np.int64), in_size - 1)
    return lower, upper, (src - floor).astype(F32)


def ref_resize(images: np.ndarray, size, align_corners=False, half_pixel_centers=False) -> np.ndarray:
    x = images.astype(F32)
    _, h, w, _ = x.shape
    oh, ow = size
    if (oh, ow) == (h, w):
        return x
    with np.errstate(invalid="ignore", over="ignore"):
        return _interpolate(x, oh, ow, h, w, align_corners, half_pixel_centers)


def _interpolate(x, oh, ow, h, w, align_corners, half_pixel_centers):
    yl, yu, ylerp = ref_taps(oh, h, align_corners, half_pixel_centers)
    xl, xu, xlerp = ref_taps(ow, w, align_corners, half_pixel_centers)
    ylerp = ylerp[None, :, None, None]
    xlerp = xlerp[None, None, :, None]
    tl = x[:, yl][:, :, xl]
    tr = x[:, yl][:, :, xu]
    bl = x[:, yu][:, :, xl]
    br = x[:, yu][:, :, xu]
    top = tl + (tr - tl) * xlerp
    bottom = bl + (br - bl) * xlerp
    return top + (bottom - top) * ylerp


def ref_resize_grad(grads: np.ndarray, image_shape, out_dtype, align_corners=False,
                    half_pixel_centers=False) -> np.ndarray:
    """TensorFlow's sequential scatter: for y, x, c the four corners in order, each product
    (g * wy) * wx in float32, summed in float32 (float64 for float64 images); np.add.at adds
    repeated indices one at a time, in order."""
    g = grads.astype(F32)
    n, oh, ow, c = g.shape
    _, h, w, _ = image_shape
    yl, yu, ylerp = ref_taps(oh, h, align_corners, half_pixel_centers)
    xl, xu, xlerp = ref_taps(ow, w, align_corners, half_pixel_centers)
    iy = F32(1) - ylerp
    ix = F32(1) - xlerp
    acc_dtype = np.float64 if out_dtype == np.float64 else F32
    acc = np.zeros((n, h, w, c), acc_dtype)
    b_idx, y_idx, x_idx, c_idx = np.meshgrid(
        np.arange(n), np.arange(oh), np.arange(ow), np.arange(c), indexing="ij")
    corners = [
        (yl, xl, iy, ix), (yl, xu, iy, xlerp), (yu, xl, ylerp, ix), (yu, xu, ylerp, xlerp),
    ]
    rows, cols, values = [], [], []
    for ys, xs, wy, wx in corners:
        rows.append(ys[y_idx])
        cols.append(xs[x_idx])
        values.append((g * wy[y_idx]) * wx[x_idx])
    # Interleave the corners per element: index order (b, y, x, c, corner).
    stack = lambda parts: np.stack(parts, axis=-1).reshape(-1)  # noqa: E731
    np.add.at(
        acc,
        (stack([b_idx] * 4), stack(rows), stack(cols), stack([c_idx] * 4)),
        stack(values).astype(acc_dtype),
    )
    return acc


def random_images(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    if dtype.is_integer:
        info = np.iinfo(dtype.as_numpy_dtype)
        return tf.constant(rng.integers(info.min, info.max, size=shape, endpoint=True), dtype)
    return tf.cast(rng.standard_normal(shape) * 10, dtype)


def random_cases(count: int, seed: int):
    rng = np.random.default_rng(seed)
    cases = []
    for i in range(count):
        h, w, oh, ow = (int(v) for v in rng.choice([1, 2, 3, 4, 5, 7, 8, 13, 16, 31], size=4))
        cases.append(((int(rng.integers(1, 3)), h, w, int(rng.choice([1, 2, 3, 4, 8, 17]))),
                      (oh, ow), list(MODES)[i % 3]))
    return cases


CASES = list(GEOMETRIES) + random_cases(24, 7)


# --- forward ----------------------------------------------------------------------------------

@pytest.mark.parametrize("shape,size,mode", CASES, ids=str)
def test_forward_bit_exact_against_reference_and_tensorflow(shape, size, mode):
    for i, dtype in enumerate(IMAGE_DTYPES):
        images = random_images(shape, dtype, seed=i)
        out = opforge.ops.resize_bilinear(images, size, **MODES[mode])
        assert out.dtype == tf.float32 and out.shape == (shape[0], *size, shape[3])
        theirs = tf.raw_ops.ResizeBilinear(images=images, size=size, **MODES[mode])
        assert bits_equal(out.numpy(), theirs.numpy()), dtype.name
        assert bits_equal(out.numpy(), ref_resize(images.numpy(), size, **MODES[mode])), dtype.name


def test_forward_special_values_like_tensorflow():
    x = np.random.default_rng(1).standard_normal((2, 5, 6, 3)).astype(F32)
    # (No subnormals: TensorFlow runs kernels with flush-to-zero, NumPy does not.)
    x.reshape(-1)[:8] = [np.inf, -np.inf, np.nan, 0.0, -0.0, 3e38, -3e38, 1e-30]
    for mode, attrs in MODES.items():
        for size in [(9, 11), (2, 3), (5, 6)]:
            ours = opforge.ops.resize_bilinear(x, size, **attrs).numpy()
            assert bits_equal(ours, tf.raw_ops.ResizeBilinear(images=x, size=size, **attrs).numpy())
            assert bits_equal(ours, ref_resize(x, size, **attrs)), (mode, size)


def test_forward_batch_zero_and_default_attrs():
    out = opforge.ops.resize_bilinear(tf.zeros([0, 4, 4, 2]), [2, 3])
    assert out.shape == (0, 2, 3, 2)
    x = random_images((2, 5, 7, 3), tf.float32, 3)
    assert bits_equal(opforge.ops.resize_bilinear(x, [9, 4]).numpy(),
                      tf.compat.v1.image.resize_bilinear(x, [9, 4]).numpy())
    assert bits_equal(opforge.ops.resize_bilinear(x, tf.constant([9, 4]), half_pixel_centers=True).numpy(),
                      tf.image.resize(x, [9, 4], method="bilinear").numpy())


def test_large_image_uses_many_threads_and_stays_exact():
    x = random_images((3, 150, 170, 32), tf.float32, 4)
    for size in [(300, 340), (75, 85), (151, 169)]:
        for attrs in MODES.values():
            assert bits_equal(opforge.ops.resize_bilinear(x, size, **attrs).numpy(),
                              tf.raw_ops.ResizeBilinear(images=x, size=size, **attrs).numpy())


# --- gradient ---------------------------------------------------------------------------------

@pytest.mark.parametrize("shape,size,mode", CASES, ids=str)
def test_gradient_bit_exact_against_reference_and_tensorflow(shape, size, mode):
    grads = tf.constant(np.random.default_rng(5).standard_normal((shape[0], *size, shape[3])), tf.float32)
    for dtype in GRAD_DTYPES:
        image = tf.zeros(shape, dtype)
        ours = opforge.ops.resize_bilinear_grad(grads, image, **MODES[mode])
        assert ours.dtype == dtype and ours.shape == shape
        theirs = tf.raw_ops.ResizeBilinearGrad(grads=grads, original_image=image, **MODES[mode])
        assert bits_equal(ours.numpy(), theirs.numpy()), dtype.name
        ref = ref_resize_grad(grads.numpy(), shape, dtype.as_numpy_dtype, **MODES[mode])
        assert bits_equal(ours.numpy(), tf.cast(ref, dtype).numpy()), dtype.name


def test_gradient_through_tape_matches_tensorflow():
    x = random_images((2, 11, 7, 5), tf.float32, 6)
    for attrs in MODES.values():
        def grad(fn):
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = fn(x)
                loss = tf.reduce_sum(tf.sin(y))
            return tape.gradient(loss, x)

        ours = grad(lambda t: opforge.ops.resize_bilinear(t, [17, 4], **attrs))
        theirs = grad(lambda t: tf.raw_ops.ResizeBilinear(images=t, size=[17, 4], **attrs))
        assert bits_equal(ours.numpy(), theirs.numpy())


def test_gradient_conserves_mass():
    rng = np.random.default_rng(8)
    for attrs in MODES.values():
        for shape, size in [((2, 7, 5, 3), (20, 13)), ((2, 20, 13, 3), (7, 5)), ((1, 1, 1, 4), (6, 6))]:
            g = rng.standard_normal((shape[0], *size, shape[3]))
            out = opforge.ops.resize_bilinear_grad(tf.constant(g, tf.float32), tf.zeros(shape, tf.float64), **attrs)
            np.testing.assert_allclose(out.numpy().sum(axis=(1, 2)), g.astype(F32).sum(axis=(1, 2)), rtol=1e-5, atol=1e-5)


def interpolation_matrix(in_size, out_size, attrs):
    """The exact float64 linear map of one axis (rows: outputs, columns: inputs)."""
    lower, upper, lerp = ref_taps(out_size, in_size, **attrs)
    m = np.zeros((out_size, in_size))
    for o in range(out_size):
        m[o, lower[o]] += 1 - float(lerp[o])
        m[o, upper[o]] += float(lerp[o])
    return m


@pytest.mark.parametrize("mode", list(MODES))
def test_numerical_gradient_float64(mode):
    attrs = MODES[mode]
    shape, size = (1, 4, 3, 2), (7, 5)
    x = tf.constant(np.random.default_rng(9).standard_normal(shape))  # float64 images
    fn = lambda t: opforge.ops.resize_bilinear(t, size, **attrs)  # noqa: E731
    # The map is linear, so a large step gives an exact difference quotient; the float32
    # output limits the numerical Jacobian to ~1e-7.
    theoretical, numerical = tf.test.compute_gradient(fn, [x], delta=0.5)
    my = interpolation_matrix(shape[1], size[0], attrs)
    mx = interpolation_matrix(shape[2], size[1], attrs)
    exact = np.einsum("ai,bj,ck->abcijk", my, mx, np.eye(shape[3])).reshape(-1, int(np.prod(shape[1:])))
    np.testing.assert_allclose(theoretical[0], exact, atol=1e-6)
    np.testing.assert_allclose(numerical[0], exact, atol=1e-5)


def test_second_order_gradient_is_the_forward():
    g = tf.constant(np.random.default_rng(10).standard_normal((1, 6, 5, 2)), tf.float32)
    image = tf.zeros((1, 3, 4, 2), tf.float64)
    for attrs in MODES.values():
        fn = lambda t: opforge.ops.resize_bilinear_grad(t, image, **attrs)  # noqa: E731
        theoretical, numerical = tf.test.compute_gradient(fn, [g], delta=0.5)
        np.testing.assert_allclose(theoretical[0], numerical[0], atol=1e-5)


def test_integer_images_have_no_gradient():
    x = tf.constant(np.arange(2 * 3 * 3 * 1).reshape(2, 3, 3, 1), tf.uint8)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = opforge.ops.resize_bilinear(x, [5, 5])
    assert tape.gradient(y, x) is None


# --- shapes, graphs, threads ------------------------------------------------------------------

def test_shape_function():
    seen = {}

    @tf.function(input_signature=[tf.TensorSpec([None, 13, None, 3]), tf.TensorSpec([2], tf.int32),
                                  tf.TensorSpec([], tf.int32)])
    def f(x, size, h):
        seen["const"] = opforge.ops.resize_bilinear(x, [26, 27]).shape
        seen["dynamic"] = opforge.ops.resize_bilinear(x, size).shape
        seen["partial"] = opforge.ops.resize_bilinear(x, tf.stack([h, 40])).shape
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = opforge.ops.resize_bilinear(x, size, half_pixel_centers=True)
        seen["grad"] = tape.gradient(y, x).shape
        return y

    f.get_concrete_function()
    assert seen["const"].as_list() == [None, 26, 27, 3]
    assert seen["dynamic"].as_list() == [None, None, None, 3]
    assert seen["partial"].as_list() == [None, None, 40, 3]
    assert seen["grad"].as_list() == [None, 13, None, 3]


def test_shape_function_rejects_bad_static_shapes_at_graph_build():
    @tf.function(input_signature=[tf.TensorSpec([4, 4, 3])])
    def rank3(x):
        return opforge.ops.resize_bilinear(x, [2, 2])

    with pytest.raises(ValueError, match=r"ResizeBilinear: images must be a 4-D tensor .*, got rank 3"):
        rank3.get_concrete_function()

    @tf.function(input_signature=[tf.TensorSpec([1, 4, 4, 3]), tf.TensorSpec([3], tf.int32)])
    def size3(x, s):
        return opforge.ops.resize_bilinear(x, s)

    with pytest.raises(ValueError, match=r"ResizeBilinear: size must be a 1-D tensor of two elements .*, got \[3\]"):
        size3.get_concrete_function()


# --- the Keras layer --------------------------------------------------------------------------

def test_layer_matches_keras_resizing_and_accepts_unknown_sizes():
    x = random_images((2, 13, 13, 4), tf.float32, 12)
    ours = opforge.layers.BilinearResize((26, 20))
    theirs = keras.layers.Resizing(26, 20, interpolation="bilinear")
    assert bits_equal(ours(x).numpy(), theirs(x).numpy())
    inputs = keras.Input((None, None, 4))
    out = ours(inputs)
    assert tuple(out.shape) == (None, 26, 20, 4)
    assert ours.compute_output_shape((None, None, None, 4)) == (None, 26, 20, 4)
    model = keras.Model(inputs, out)
    assert bits_equal(model(x).numpy(), theirs(x).numpy())
    assert model(random_images((1, 7, 9, 4), tf.float32, 13)).shape == (1, 26, 20, 4)


def test_layer_config_and_errors():
    layer = opforge.layers.BilinearResize([8, 6], align_corners=True, half_pixel_centers=False, name="up")
    config = layer.get_config()
    assert (config["height"], config["width"]) == (8, 6) and config["align_corners"] is True
    clone = opforge.layers.BilinearResize.from_config(config)
    assert clone.target_size == (8, 6) and clone.align_corners and not clone.half_pixel_centers
    assert keras.saving.get_registered_name(opforge.layers.BilinearResize) == "opforge>BilinearResize"
    x = random_images((1, 3, 4, 2), tf.float32, 14)
    assert bits_equal(layer(x).numpy(), tf.compat.v1.image.resize_bilinear(x, [8, 6], align_corners=True).numpy())
    with pytest.raises(ValueError, match=r"height=0, .*ResizeBilinear: size must be positive \[new_height, new_width\], got \[0, 3\]$"):
        opforge.layers.BilinearResize((0, 3))
    with pytest.raises(ValueError, match="height and width must both be given"):
        opforge.layers.BilinearResize(5)
    with pytest.raises(ValueError, match="align_corners"):
        opforge.layers.BilinearResize((4, 4), align_corners=True)


def _upsampler():
    keras.utils.set_random_seed(2)
    inputs = keras.Input((None, None, 3))
    h = keras.layers.Conv2D(8, 3, padding="same")(inputs)
    h = opforge.layers.BilinearResize((16, 16))(h)
    outputs = keras.layers.Conv2D(1, 3, padding="same")(h)
    return keras.Model(inputs, outputs)


def test_model_with_the_layer_trains():
    rng = np.random.default_rng(15)
    x = rng.standard_normal((64, 8, 8, 3)).astype(F32)
    # Target: a smooth function of the upsampled input, learnable through the resize.
    y = tf.image.resize(x[..., :1] * 0.5 - x[..., 1:2], (16, 16)).numpy()
    model = _upsampler()
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    history = model.fit(x, y, epochs=12, batch_size=16, verbose=0)
    losses = history.history["loss"]
    assert losses[-1] < 0.3 * losses[0], losses


def test_keras_and_savedmodel_round_trip_in_fresh_process(tmp_path):
    x = np.random.default_rng(16).standard_normal((2, 11, 9, 3)).astype(F32)
    assert_round_trip_in_fresh_process(_upsampler(), x, tmp_path, "Opforge>ResizeBilinear")

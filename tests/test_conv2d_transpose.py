"""opforge.ops.conv2d_transpose against an independent NumPy scatter-add reference and against
tf.nn.conv2d_transpose; both C++ gradients against TensorFlow's gradients and float64 numerical
gradients; shapes. The spec's generic checks (test_specs.py) cover bad inputs, threads and
saving."""
from __future__ import annotations


import numpy as np
import pytest
import tensorflow as tf

import opforge

FLOATS = [tf.float32, tf.float64, tf.float16, tf.bfloat16]


# --- the reference: the definition, written out in float64 --------------------------------------


def ref_pads(padding, in_size, out_size, filt, stride, dilation, explicit=(0, 0)):
    """Top (left) pad of the convolution from the output (size out_size) to the input."""
    eff = (filt - 1) * dilation + 1
    if padding == "SAME":
        return max(0, (in_size - 1) * stride + eff - out_size) // 2
    if padding == "VALID":
        return 0
    return explicit[0]


def ref_conv2d_transpose(x, f, out_hw, strides, padding, dilations=(1, 1), explicit=None, dtype=np.float64):
    """Every input pixel scatters x[b, ih, iw, :] @ f[fh, fw].T into
    out[b, ih*sh - pad_top + fh*dh, iw*sw - pad_left + fw*dw, :] (NHWC, in `dtype`)."""
    x = np.asarray(x, dtype)
    f = np.asarray(f, dtype)
    n, ih_, iw_, _ = x.shape
    fh_, fw_, co, _ = f.shape
    oh, ow = out_hw
    explicit = explicit or [(0, 0), (0, 0)]
    pt = ref_pads(padding, ih_, oh, fh_, strides[0], dilations[0], explicit[0])
    pl = ref_pads(padding, iw_, ow, fw_, strides[1], dilations[1], explicit[1])
    out = np.zeros((n, oh, ow, co), dtype)
    for ih in range(ih_):
        for iw in range(iw_):
            for fh in range(fh_):
                for fw in range(fw_):
                    h = ih * strides[0] - pt + fh * dilations[0]
                    w = iw * strides[1] - pl + fw * dilations[1]
                    if 0 <= h < oh and 0 <= w < ow:
                        out[:, h, w, :] += x[:, ih, iw, :] @ f[fh, fw].T
    return out


# (input NHWC, (FH, FW, CO), strides, padding, dilations, output (H, W)); explicit pads as
# [(top, bottom), (left, right)] where padding is a list.
CASES = {
    "4x4 s2 SAME": ([2, 5, 6, 3], (4, 4, 5), (2, 2), "SAME", (1, 1), (10, 12)),
    "SAME odd total pad": ([1, 4, 5, 2], (3, 2, 3), (2, 2), "SAME", (1, 1), (7, 10)),
    "VALID remainder s3": ([2, 3, 4, 3], (2, 3, 2), (3, 3), "VALID", (1, 1), (8, 13)),
    "5x5 d2 SAME": ([1, 6, 5, 4], (5, 5, 3), (1, 1), "SAME", (2, 2), (6, 5)),
    "1x3 d2 s2 VALID": ([2, 3, 3, 2], (1, 3, 2), (2, 2), "VALID", (2, 2), (5, 9)),
    "explicit": ([1, 4, 4, 3], (3, 3, 2), (2, 2), [(1, 0), (0, 1)], (1, 1), (8, 9)),
    "1x1 s1": ([3, 2, 3, 5], (1, 1, 4), (1, 1), "VALID", (1, 1), (2, 3)),
    "5x5 s3 SAME odd": ([1, 7, 7, 2], (5, 5, 3), (3, 3), "SAME", (1, 1), (19, 21)),
    "2x2 s(1,2) VALID": ([2, 5, 5, 3], (2, 2, 4), (1, 2), "VALID", (1, 1), (6, 11)),
    "1x1 input 3x3 SAME": ([1, 1, 1, 2], (3, 3, 2), (2, 2), "SAME", (1, 1), (2, 1)),
}


def make_case(name, dtype=tf.float64, seed=0, integers=False):
    shape, (fh, fw, co), strides, padding, dilations, out_hw = CASES[name]
    rng = np.random.default_rng(seed)
    if integers:
        x = rng.integers(-3, 4, shape).astype(np.float64)
        f = rng.integers(-3, 4, (fh, fw, co, shape[3])).astype(np.float64)
    else:
        x = rng.standard_normal(shape)
        f = rng.standard_normal((fh, fw, co, shape[3]))
    output_shape = [shape[0], out_hw[0], out_hw[1], co]
    explicit = None
    tf_padding = padding
    if isinstance(padding, list):
        explicit = padding
        tf_padding = [(0, 0), padding[0], padding[1], (0, 0)]
    ref = ref_conv2d_transpose(x, f, out_hw, strides, "EXPLICIT" if explicit else padding,
                               dilations, explicit)
    return dict(x=tf.cast(x, dtype), f=tf.cast(f, dtype), x64=x, f64=f, output_shape=output_shape,
                strides=list(strides), padding=tf_padding, dilations=list(dilations), ref=ref)


def run(c, fn=opforge.ops.conv2d_transpose, x=None, f=None, **kw):
    return fn(c["x"] if x is None else x, c["f"] if f is None else f, c["output_shape"],
              c["strides"], c["padding"], dilations=c["dilations"], **kw)


def tf_can_run(c):
    return c["dilations"] == [1, 1]  # TensorFlow's CPU kernel refuses dilation > 1


# --- forward ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(CASES))
def test_forward_matches_numpy_reference_float64(name):
    c = make_case(name)
    y = run(c).numpy()
    assert y.shape == c["ref"].shape
    np.testing.assert_allclose(y, c["ref"], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name)
@pytest.mark.parametrize("name", list(CASES))
def test_integer_valued_data_exact_in_every_dtype(name, dtype):
    # Small integers: every product and sum is exact, in half too (|sums| < 2048).
    c = make_case(name, dtype, seed=1, integers=True)
    y = run(c)
    assert y.dtype == dtype
    np.testing.assert_array_equal(tf.cast(y, tf.float64).numpy(), c["ref"])
    if tf_can_run(c):
        t = tf.nn.conv2d_transpose(c["x"], c["f"], c["output_shape"], c["strides"], c["padding"])
        np.testing.assert_array_equal(tf.cast(y, tf.float64).numpy(),
                                      tf.cast(t, tf.float64).numpy())


@pytest.mark.parametrize("name", [n for n in CASES if "d2" not in n])
def test_float32_agrees_with_tensorflow(name):
    c = make_case(name, tf.float32, seed=2)
    y = run(c).numpy()
    t = tf.nn.conv2d_transpose(c["x"], c["f"], c["output_shape"], c["strides"], c["padding"])
    np.testing.assert_allclose(y, t.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16], ids=lambda d: d.name)
def test_half_types_accumulate_in_float(dtype):
    # Accumulated in float and rounded once: within one rounding of the float64 result of the
    # same (already rounded) inputs.
    c = make_case("4x4 s2 SAME", dtype, seed=3)
    x64 = tf.cast(c["x"], tf.float64).numpy()
    f64 = tf.cast(c["f"], tf.float64).numpy()
    ref = ref_conv2d_transpose(x64, f64, c["output_shape"][1:3], c["strides"], "SAME")
    y = tf.cast(run(c), tf.float64).numpy()
    eps = 2.0 ** -8 if dtype == tf.bfloat16 else 2.0 ** -11
    assert np.all(np.abs(y - ref) <= eps * np.abs(ref) + 1e-6)


def test_nchw_is_nhwc_transposed():
    for name in ["4x4 s2 SAME", "VALID remainder s3", "5x5 d2 SAME", "explicit"]:
        c = make_case(name, tf.float64, seed=4)
        x_nchw = tf.transpose(c["x"], [0, 3, 1, 2])
        n, h, w, co = c["output_shape"]
        s, d = c["strides"], c["dilations"]
        padding = c["padding"]
        if isinstance(padding, list):
            padding = [padding[0], padding[3], padding[1], padding[2]]
        y = opforge.ops.conv2d_transpose(x_nchw, c["f"], [n, co, h, w], [1, 1] + s, padding,
                                         data_format="NCHW", dilations=[1, 1] + d)
        np.testing.assert_allclose(tf.transpose(y, [0, 2, 3, 1]).numpy(), c["ref"], rtol=1e-12,
                                   atol=1e-12)
        # output_shape of length 2 and int strides in NCHW too.
        y2 = opforge.ops.conv2d_transpose(x_nchw, c["f"], [h, w], s, padding, data_format="NCHW",
                                          dilations=d)
        np.testing.assert_array_equal(y2.numpy(), y.numpy())


def test_output_shape_of_length_two_int64_and_int_strides():
    c = make_case("4x4 s2 SAME", tf.float32, seed=5)
    full = run(c)
    two = opforge.ops.conv2d_transpose(c["x"], c["f"], [10, 12], 2)
    as64 = opforge.ops.conv2d_transpose(c["x"], c["f"], tf.constant([2, 10, 12, 5], tf.int64), [2])
    np.testing.assert_array_equal(two.numpy(), full.numpy())
    np.testing.assert_array_equal(as64.numpy(), full.numpy())


def test_empty_tensors():
    f = tf.ones([3, 3, 4, 2])
    y = opforge.ops.conv2d_transpose(tf.ones([0, 5, 5, 2]), f, [0, 10, 10, 4], 2)
    assert y.shape == (0, 10, 10, 4)
    # VALID with an input of height 0: an output of height 2 fits a 5-high window (truncation).
    y = opforge.ops.conv2d_transpose(tf.ones([1, 0, 3, 2]), tf.ones([5, 1, 4, 2]), [1, 2, 5, 4],
                                     2, "VALID")
    assert y.shape == (1, 2, 5, 4) and not np.any(y.numpy())
    t = tf.nn.conv2d_transpose(tf.ones([1, 0, 3, 2]), tf.ones([5, 1, 4, 2]), [1, 2, 5, 4], 2,
                               "VALID")
    assert t.shape == y.shape
    x = tf.ones([0, 5, 5, 2])
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([x, f])
        y = opforge.ops.conv2d_transpose(x, f, [0, 10, 10, 4], 2)
    dx, df = tape.gradient(y, [x, f])
    assert dx.shape == x.shape and df.shape == f.shape and not np.any(df.numpy())


# --- int32: TensorFlow's CPU kernel takes it; sums wrap modulo 2^32 ------------------------------


def ref_conv2d_transpose_int32(x, f, out_hw, strides, padding, dilations=(1, 1), explicit=None):
    """The definition in int64 (NumPy's integer products and sums wrap modulo 2^64, silently),
    then modulo 2^32: the int32 answer whatever the summation order."""
    with np.errstate(over="ignore"):
        out = ref_conv2d_transpose(x, f, out_hw, strides, padding, dilations, explicit, dtype=np.int64)
    return out.astype(np.int32)  # keeps the low 32 bits


def int32_case(name, seed, low=-(2**31), high=2**31 - 1):
    c = make_case(name)
    rng = np.random.default_rng(seed)
    x = rng.integers(low, high, c["x64"].shape, endpoint=True)
    f = rng.integers(low, high, c["f64"].shape, endpoint=True)
    c.update(x=tf.constant(x, tf.int32), f=tf.constant(f, tf.int32), x64=x, f64=f)
    shape, _, strides, padding, dilations, out_hw = CASES[name]
    explicit = padding if isinstance(padding, list) else None
    c["ref"] = ref_conv2d_transpose_int32(x, f, out_hw, strides, "EXPLICIT" if explicit else padding,
                                          dilations, explicit)
    return c


@pytest.mark.parametrize("name", list(CASES))
def test_int32_wraps_exactly_as_tensorflow(name):
    # Values over int32's whole range: almost every product and sum overflows.
    c = int32_case(name, seed=11)
    y = run(c)
    assert y.dtype == tf.int32
    np.testing.assert_array_equal(y.numpy(), c["ref"])
    if tf_can_run(c):
        t = tf.nn.conv2d_transpose(c["x"], c["f"], c["output_shape"], c["strides"], c["padding"])
        assert t.dtype == tf.int32
        np.testing.assert_array_equal(y.numpy(), t.numpy())


def test_int32_overflow_of_the_sum_alone():
    # Every product fits in int32; their sum (9 taps x 4 channels of 2^26) does not.
    x = tf.fill([1, 3, 3, 4], 1 << 13)
    f = tf.fill([3, 3, 2, 4], 1 << 13)
    y = opforge.ops.conv2d_transpose(x, f, [1, 3, 3, 2], 1, "SAME")
    t = tf.nn.conv2d_transpose(x, f, [1, 3, 3, 2], 1, "SAME")
    np.testing.assert_array_equal(y.numpy(), t.numpy())
    center = 9 * 4 * (1 << 26)  # 1.125 x 2^31: beyond int32
    assert y.numpy()[0, 1, 1, 0] == np.int64(center).astype(np.int32) != center
    # And the extremes: INT32_MIN * -1 and INT32_MAX * INT32_MAX, alone in a 1x1 convolution.
    x = tf.constant([[[[-(2**31), 2**31 - 1]]]], tf.int32)
    f = tf.constant([[[[-1, 0], [0, 2**31 - 1], [-(2**31), -(2**31)]]]], tf.int32)
    y = opforge.ops.conv2d_transpose(x, f, [1, 1, 1, 3], 1, "VALID")
    t = tf.nn.conv2d_transpose(x, f, [1, 1, 1, 3], 1, "VALID")
    np.testing.assert_array_equal(y.numpy(), t.numpy())
    np.testing.assert_array_equal(y.numpy().ravel(), [-(2**31), 1, -(2**31)])


@pytest.mark.parametrize("name", ["4x4 s2 SAME", "explicit", "5x5 d2 SAME"])
def test_int32_nchw_is_nhwc_transposed(name):
    # TensorFlow's CPU kernel refuses NCHW; opforge takes it in every dtype.
    c = int32_case(name, seed=12)
    nhwc = run(c).numpy()
    explicit = c["padding"] if isinstance(c["padding"], list) else None
    padding = [explicit[0], explicit[3], explicit[1], explicit[2]] if explicit else c["padding"]
    n, h, w, co = c["output_shape"]
    nchw = opforge.ops.conv2d_transpose(tf.transpose(c["x"], [0, 3, 1, 2]), c["f"], [n, co, h, w],
                                        c["strides"], padding, data_format="NCHW",
                                        dilations=c["dilations"])
    assert nchw.dtype == tf.int32
    np.testing.assert_array_equal(np.transpose(nchw.numpy(), [0, 2, 3, 1]), nhwc)
    np.testing.assert_array_equal(nhwc, c["ref"])


def test_int32_has_no_gradient_and_gradient_ops_refuse_it():
    # As TensorFlow: a tape does not differentiate integers.
    c = int32_case("4x4 s2 SAME", seed=13, low=-5, high=5)
    with tf.GradientTape() as tape:
        tape.watch([c["x"], c["f"]])
        y = run(c)
    assert tape.gradient(y, [c["x"], c["f"]]) == [None, None]
    lib = opforge.ops._common.lib()
    attrs = dict(strides=[1, 2, 2, 1], padding="SAME")
    with pytest.raises((tf.errors.InvalidArgumentError, TypeError), match="int32"):
        lib.opforge_conv2d_transpose_input_grad(tf.zeros([2, 10, 12, 5], tf.int32), c["f"], **attrs)
    with pytest.raises((tf.errors.InvalidArgumentError, TypeError), match="int32"):
        lib.opforge_conv2d_transpose_filter_grad(c["x"], c["f"], tf.zeros([2, 10, 12, 5], tf.int32), **attrs)


def test_int32_empty_input_gives_zeros():
    # An input of height 0 reaches no output pixel (VALID truncation); a batch of 0 is empty.
    y = opforge.ops.conv2d_transpose(tf.ones([1, 0, 3, 2], tf.int32), tf.ones([5, 1, 4, 2], tf.int32),
                                     [1, 2, 5, 4], 2, "VALID")
    assert y.dtype == tf.int32 and y.shape == (1, 2, 5, 4) and not np.any(y.numpy())
    y = opforge.ops.conv2d_transpose(tf.ones([0, 5, 5, 2], tf.int32), tf.ones([3, 3, 4, 2], tf.int32),
                                     [0, 10, 10, 4], 2)
    assert y.shape == (0, 10, 10, 4)


def test_int32_in_tf_function_agrees():
    c = int32_case("5x5 s3 SAME odd", seed=14)
    eager = run(c).numpy()
    graph = tf.function(lambda x, f: run(c, x=x, f=f))(c["x"], c["f"]).numpy()
    np.testing.assert_array_equal(eager, graph)
    np.testing.assert_array_equal(eager, c["ref"])


# --- gradients ----------------------------------------------------------------------------------


def grads(fn, c, dtype=tf.float64, seed=6):
    x = tf.cast(c["x"], dtype)
    f = tf.cast(c["f"], dtype)
    g = tf.cast(np.random.default_rng(seed).standard_normal(c["output_shape"]), dtype)
    with tf.GradientTape() as tape:
        tape.watch([x, f])
        y = fn(x, f, c["output_shape"], c["strides"], c["padding"], dilations=c["dilations"])
    return tape.gradient(y, [x, f], output_gradients=g)


@pytest.mark.parametrize("dtype", [tf.float32, tf.float64], ids=lambda d: d.name)
@pytest.mark.parametrize("name", [n for n in CASES if "d2" not in n])
def test_gradients_agree_with_tensorflow(name, dtype):
    c = make_case(name)
    ours = grads(opforge.ops.conv2d_transpose, c, dtype)
    theirs = grads(tf.nn.conv2d_transpose, c, dtype)
    tol = 1e-12 if dtype == tf.float64 else 1e-4
    for a, b in zip(ours, theirs):
        assert a.dtype == dtype
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16], ids=lambda d: d.name)
def test_half_type_gradients_accumulate_in_float(dtype):
    # The same (rounded) values in float64 through TensorFlow's gradient: ours may differ only
    # by the final rounding to the half type (plus float accumulation, far smaller).
    c = make_case("4x4 s2 SAME")
    rng = np.random.default_rng(12)
    x = tf.cast(c["x"], dtype)
    f = tf.cast(c["f"], dtype)
    g = tf.cast(rng.standard_normal(c["output_shape"]), dtype)

    def both(fn, x, f, g):
        with tf.GradientTape() as tape:
            tape.watch([x, f])
            y = fn(x, f, c["output_shape"], 2)
        return tape.gradient(y, [x, f], output_gradients=g)

    ours = both(opforge.ops.conv2d_transpose, x, f, g)
    ref = both(tf.nn.conv2d_transpose, *(tf.cast(t, tf.float64) for t in (x, f, g)))
    eps = 2.0 ** -8 if dtype == tf.bfloat16 else 2.0 ** -11
    for a, r in zip(ours, ref):
        assert a.dtype == dtype
        a64 = tf.cast(a, tf.float64).numpy()
        r = r.numpy()
        assert np.all(np.abs(a64 - r) <= eps * np.abs(r) + 1e-4 * np.abs(r).max())


@pytest.mark.parametrize("name", ["4x4 s2 SAME", "VALID remainder s3", "5x5 d2 SAME",
                                  "1x3 d2 s2 VALID", "explicit", "2x2 s(1,2) VALID"])
def test_gradients_match_float64_numerical(name):
    c = make_case(name)

    def fn(x, f):
        return run(c, x=x, f=f)

    theoretical, numerical = tf.test.compute_gradient(fn, [c["x"], c["f"]], delta=1e-6)
    for t, n in zip(theoretical, numerical):
        np.testing.assert_allclose(t, n, rtol=1e-6, atol=1e-6)


def test_dilated_input_gradient_is_tensorflows_conv2d():
    # The input gradient is a convolution: with dilation 2 compare it with tf.nn.conv2d.
    c = make_case("5x5 d2 SAME")
    g = tf.constant(np.random.default_rng(7).standard_normal(c["output_shape"]))
    lib = opforge.ops._common.lib()
    ours = lib.opforge_conv2d_transpose_input_grad(
        g, c["f"], strides=[1, 1, 1, 1], padding="SAME", dilations=[1, 2, 2, 1])
    theirs = tf.nn.conv2d(g, c["f"], 1, "SAME", dilations=2)
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-12, atol=1e-12)


def test_nchw_gradients_match_nhwc():
    c = make_case("4x4 s2 SAME")
    dx, df = grads(opforge.ops.conv2d_transpose, c)
    x = tf.transpose(c["x"], [0, 3, 1, 2])
    g = tf.transpose(tf.constant(np.random.default_rng(6).standard_normal(c["output_shape"])),
                     [0, 3, 1, 2])
    with tf.GradientTape() as tape:
        tape.watch([x, c["f"]])
        y = opforge.ops.conv2d_transpose(x, c["f"], [2, 5, 10, 12], 2, data_format="NCHW")
    dx2, df2 = tape.gradient(y, [x, c["f"]], output_gradients=g)
    np.testing.assert_allclose(tf.transpose(dx2, [0, 2, 3, 1]).numpy(), dx.numpy(), rtol=1e-12)
    np.testing.assert_allclose(df2.numpy(), df.numpy(), rtol=1e-12)


def test_second_order_gradient_matches_tensorflow():
    c = make_case("4x4 s2 SAME")

    def second(fn):
        x, f = c["x"], c["f"]
        with tf.GradientTape(persistent=True) as outer:
            outer.watch([x, f])
            with tf.GradientTape() as inner:
                inner.watch([x, f])
                y = fn(x, f, c["output_shape"], c["strides"], c["padding"])
                loss = tf.reduce_sum(tf.sin(y))
            dx, df = inner.gradient(loss, [x, f])
            s = tf.reduce_sum(dx * dx) + tf.reduce_sum(tf.cos(df))
        return outer.gradient(s, [x, f])

    for a, b in zip(second(opforge.ops.conv2d_transpose), second(tf.nn.conv2d_transpose)):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-10, atol=1e-10)


def test_no_gradient_for_output_shape_and_frozen_filter_skips_its_work():
    c = make_case("4x4 s2 SAME", tf.float32)
    shape = tf.constant(c["output_shape"])

    @tf.function
    def f(x, w):
        with tf.GradientTape(persistent=True) as t:
            t.watch([x, shape])
            y = opforge.ops.conv2d_transpose(x, w, shape, 2)
        return t.gradient(y, x), t.gradient(y, shape)

    graph = f.get_concrete_function(c["x"], c["f"]).graph
    types = {o.type for o in graph.get_operations()}
    assert "Opforge>Conv2DTransposeInputGrad" in types
    assert "Opforge>Conv2DTransposeFilterGrad" not in types
    assert f(c["x"], c["f"])[1] is None


# --- shapes, eager vs tf.function --------------------------------------------------------------


def test_static_shapes_keep_what_is_known():
    f = tf.ones([4, 4, 6, 8])
    seen = {}

    @tf.function(input_signature=[tf.TensorSpec([None, 13, 13, 8])])
    def constant_shape(x):
        y = opforge.ops.conv2d_transpose(x, f, [3, 26, 26, 6], 2)
        seen["constant"] = y.shape.as_list()
        y2 = opforge.ops.conv2d_transpose(x, f, [26, 26], 2)
        seen["two"] = y2.shape.as_list()
        y3 = opforge.ops.conv2d_transpose(x, f, tf.stack([tf.shape(x)[0], 26, 26, 6]), 2)
        seen["stacked"] = y3.shape.as_list()
        return y3

    constant_shape.get_concrete_function()
    assert seen == {"constant": [None, 26, 26, 6], "two": [None, 26, 26, 6],
                    "stacked": [None, 26, 26, 6]}

    @tf.function(input_signature=[tf.TensorSpec([2, None, None, 8]), tf.TensorSpec([4], tf.int32)])
    def dynamic_shape(x, s):
        y = opforge.ops.conv2d_transpose(x, f, s, 2)
        seen["dynamic"] = y.shape.as_list()
        y_nchw = opforge.ops.conv2d_transpose(tf.transpose(x, [0, 3, 1, 2]), f, s, 2,
                                              data_format="NCHW")
        seen["dynamic nchw"] = y_nchw.shape.as_list()
        with tf.GradientTape(persistent=True) as tape:
            tape.watch([x])
            z = opforge.ops.conv2d_transpose(x, f, [2, 26, 26, 6], 2)
        seen["grad"] = tape.gradient(z, x).shape.as_list()
        return y

    dynamic_shape.get_concrete_function()
    assert seen["dynamic"] == [2, None, None, 6]
    assert seen["dynamic nchw"] == [2, 6, None, None]
    assert seen["grad"] == [2, 13, 13, 8]  # the input gradient's shape function infers 13


def test_graph_build_rejects_wrong_ranks_and_channels():
    @tf.function
    def bad_rank(x):
        return opforge.ops.conv2d_transpose(x, tf.ones([3, 3, 2, 4]), [1, 8, 8, 2], 2)

    with pytest.raises(ValueError, match=r"Conv2DTranspose: input must be a 4-D tensor, got rank 3, shape \[4, 4, 4\]"):
        bad_rank.get_concrete_function(tf.TensorSpec([4, 4, 4]))

    @tf.function
    def bad_channels(x):
        return opforge.ops.conv2d_transpose(x, tf.ones([3, 3, 2, 5]), [1, 8, 8, 2], 2)

    with pytest.raises(ValueError, match=r"filter's last dimension \(in_channels\) must be the input's channels \(4, "
                                         r"dimension 3 of input \[1, 4, 4, 4\]\), got 5 in filter \[3, 3, 2, 5\]"):
        bad_channels.get_concrete_function(tf.TensorSpec([1, 4, 4, 4]))
    # The same with unknown sizes: what is known is checked, with the kernel's wording.
    with pytest.raises(ValueError, match=r"input's channels \(4, dimension 3 of input \[\?, \?, \?, 4\]\)"):
        bad_channels.get_concrete_function(tf.TensorSpec([None, None, None, 4]))


@pytest.mark.parametrize("shape,filter_shape,strides", [
    ((1, 1, 1, 1), (3, 3, 1, 1), 1),        # the 8 outer taps reach only padding
    ((2, 9, 8, 16), (4, 4, 17, 16), 2),     # the phase-Winograd paths hand the call over
    ((2, 17, 15, 20), (3, 3, 18, 20), 1),   # the Winograd filter gradient hands it over
])
def test_inf_and_nan_give_tensorflows_exact_gradients(shape, filter_shape, strides):
    # Padding contributes nothing (never 0 x inf): with inf in the input the filter gradient, and
    # with inf in the filter the input gradient, equal TensorFlow's float32 answers, NaN where
    # they are NaN.
    rng = np.random.default_rng(4)
    n, h, w, _ = shape
    out = [n, h * strides, w * strides, filter_shape[2]]
    x = rng.uniform(-2, 2, shape).astype(np.float32)
    f = rng.uniform(-2, 2, filter_shape).astype(np.float32)
    dy = tf.constant(rng.uniform(-2, 2, out).astype(np.float32))
    x_inf = x.copy()
    x_inf.flat[x.size // 3] = np.inf
    f_inf = f.copy()
    f_inf.flat[f.size // 2] = -np.inf
    for xv, fv in ((x_inf, f), (x, f_inf), (x_inf, f_inf)):
        grads = []
        for fn in (opforge.ops.conv2d_transpose, tf.nn.conv2d_transpose):
            xt, ft = tf.constant(xv), tf.constant(fv)
            with tf.GradientTape() as tape:
                tape.watch([xt, ft])
                y = fn(xt, ft, out, strides, "SAME")
            grads.append([y] + tape.gradient(y, [xt, ft], output_gradients=dy))
        for ours, theirs, what in zip(grads[0], grads[1], ("forward", "input gradient", "filter gradient")):
            ours, theirs = ours.numpy(), theirs.numpy()
            np.testing.assert_array_equal(np.isnan(ours), np.isnan(theirs), err_msg=what)
            np.testing.assert_array_equal(np.isinf(ours), np.isinf(theirs), err_msg=what)
            finite = np.isfinite(theirs)
            np.testing.assert_allclose(ours[finite], theirs[finite], rtol=1e-4, atol=1e-3, err_msg=what)
            np.testing.assert_array_equal(ours[~finite], theirs[~finite], err_msg=what)

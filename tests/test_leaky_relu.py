"""LeakyReLU beyond its spec (forward, numerical gradient, bad inputs and the rest run in
test_specs.py): NaN/inf, integer inputs, gradients bit for bit against TensorFlow's, second
order, the mask, shape functions."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import opforge
from helpers import bits_equal, special_values

DTYPES = [tf.float16, tf.bfloat16, tf.float32, tf.float64]
ALPHAS = [0.0, 0.2, 1.5, -0.3]


def test_nan_and_inf_pass_through_as_in_tensorflow():
    x = tf.constant([np.nan, np.inf, -np.inf, 0.0, -0.0], tf.float32)
    for alpha in ALPHAS:
        y = opforge.ops.leaky_relu(x, alpha).numpy()
        assert np.isnan(y[0]) and y[1] == np.inf
        # -inf * 0 is NaN in TensorFlow too.
        assert bits_equal(y, tf.nn.leaky_relu(x, alpha).numpy())


def test_default_alpha_and_integer_inputs_like_tensorflow():
    ints = tf.constant([-3, -1, 0, 2, 5], tf.int32)
    y = opforge.ops.leaky_relu(ints)
    expected = tf.nn.leaky_relu(ints)
    assert y.dtype == expected.dtype == tf.float32
    assert bits_equal(y.numpy(), expected.numpy())
    assert bits_equal(opforge.ops.leaky_relu([-1.0, 2.0]).numpy(), tf.nn.leaky_relu([-1.0, 2.0]).numpy())
    assert bits_equal(
        opforge.ops.leaky_relu(np.float64([-2.0, 3.0]), np.array(0.5)).numpy(),
        tf.nn.leaky_relu(np.float64([-2.0, 3.0]), 0.5).numpy(),
    )


def _grads(fn, x, upstream):
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = fn(x)
    return tape.gradient(y, x, output_gradients=upstream)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("alpha", ALPHAS)
def test_gradient_bit_exact_against_tensorflow(dtype, alpha):
    x = special_values([4, 33], dtype, seed=3)
    g = tf.cast(tf.random.stateless_normal([4, 33], seed=[1, 2]), dtype)
    ours = _grads(lambda t: opforge.ops.leaky_relu(t, alpha), x, g)
    theirs = _grads(lambda t: tf.nn.leaky_relu(t, alpha), x, g)
    assert bits_equal(ours.numpy(), theirs.numpy())


def test_gradient_at_zero_is_alpha_times_g():
    x = tf.zeros([5], tf.float32)
    g = tf.constant([1.0, -2.0, 3.0, 0.5, 10.0])
    for alpha in ALPHAS:
        grad = _grads(lambda t: opforge.ops.leaky_relu(t, alpha), x, g)
        np.testing.assert_array_equal(grad.numpy(), (g * np.float32(alpha)).numpy())


def test_second_order_gradient_matches_tensorflow():
    x = tf.constant(np.random.default_rng(2).standard_normal([20]))
    def second(fn):
        with tf.GradientTape() as outer:
            outer.watch(x)
            with tf.GradientTape() as inner:
                inner.watch(x)
                y = tf.reduce_sum(fn(x) ** 2)
            dx = inner.gradient(y, x)
            z = tf.reduce_sum(dx * dx)
        return outer.gradient(z, x)
    np.testing.assert_allclose(
        second(lambda t: opforge.ops.leaky_relu(t, 0.3)).numpy(),
        second(lambda t: tf.nn.leaky_relu(t, 0.3)).numpy(),
        rtol=1e-12,
    )


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("alpha", ALPHAS)
def test_with_mask(dtype, alpha):
    x = special_values([6, 11], dtype, seed=7)
    y, mask = opforge.ops.leaky_relu_with_mask(x, alpha)
    assert bits_equal(y.numpy(), tf.nn.leaky_relu(x, alpha).numpy())
    expected_mask = tf.where(x > 0, tf.ones_like(x), tf.cast(alpha, dtype))
    assert bits_equal(mask.numpy(), expected_mask.numpy())
    g = tf.cast(tf.random.stateless_normal([6, 11], seed=[3, 4]), dtype)
    grad = _grads(lambda t: opforge.ops.leaky_relu_with_mask(t, alpha)[0], x, g)
    assert bits_equal(grad.numpy(), (mask * g).numpy())


def test_static_shapes_keep_known_dims():
    seen = {}

    @tf.function(input_signature=[tf.TensorSpec([None, 5, None], tf.float32)])
    def partial(t):
        y = opforge.ops.leaky_relu(t)
        y2, m = opforge.ops.leaky_relu_with_mask(t)
        with tf.GradientTape() as tape:
            tape.watch(t)
            z = opforge.ops.leaky_relu(t)
        seen["y"], seen["y2"], seen["m"] = y.shape, y2.shape, m.shape
        seen["g"] = tape.gradient(z, t).shape
        return y

    partial.get_concrete_function()
    for key in ("y", "y2", "m", "g"):
        assert seen[key].as_list() == [None, 5, None], key

    @tf.function(input_signature=[tf.TensorSpec(None, tf.float32)])
    def unknown_rank(t):
        seen["u"] = opforge.ops.leaky_relu(t).shape
        return t

    unknown_rank.get_concrete_function()
    assert seen["u"].rank is None


def test_grad_shape_function_rejects_mismatch_at_graph_build():
    lib = opforge.ops._common.lib()

    @tf.function(input_signature=[tf.TensorSpec([2, 3]), tf.TensorSpec([3, 2])])
    def f(g, x):
        return lib.opforge_leaky_relu_grad(g, x, alpha=0.2)

    with pytest.raises((ValueError, tf.errors.InvalidArgumentError)):
        f.get_concrete_function()


def test_bfloat16_every_bit_pattern_matches_tensorflow():
    # All 65,536 bfloat16 values (zeros, subnormals, infinities, NaNs) through the forward and
    # the gradient: TensorFlow's bits wherever its answer is a number, NaN where it is NaN.
    bits = np.arange(65536, dtype=np.uint16)
    x = tf.bitcast(tf.constant(bits), tf.bfloat16)
    g = tf.bitcast(tf.constant(bits[::-1].copy()), tf.bfloat16)
    for alpha in (0.2, 0.1, 3.0):
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(x)
            ours, theirs = opforge.ops.leaky_relu(x, alpha=alpha), tf.nn.leaky_relu(x, alpha=alpha)
        pairs = [(ours, theirs), (tape.gradient(ours, x, output_gradients=g),
                                  tape.gradient(theirs, x, output_gradients=g))]
        for a, b in pairs:
            a_bits = tf.bitcast(a, tf.uint16).numpy()
            b_bits = tf.bitcast(b, tf.uint16).numpy()
            a_nan = np.isnan(tf.cast(a, tf.float32).numpy())
            b_nan = np.isnan(tf.cast(b, tf.float32).numpy())
            assert (a_nan == b_nan).all(), alpha
            assert (a_bits[~a_nan] == b_bits[~b_nan]).all(), alpha

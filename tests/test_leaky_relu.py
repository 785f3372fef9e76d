"""LeakyReLU: forward and gradient against tf.nn.leaky_relu, bit for bit; shapes; bad input."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import opforge
from conftest import bits_equal, check_bad_input, run_cases_in_child, special_values

DTYPES = [tf.float16, tf.bfloat16, tf.float32, tf.float64]
ALPHAS = [0.0, 0.2, 1.5, -0.3]
SHAPES = [[], [0], [1], [7], [3, 5, 2], [2, 0, 4], [1000]]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("alpha", ALPHAS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_forward_bit_exact(dtype, alpha, shape):
    x = special_values(shape, dtype, seed=len(shape))
    y = opforge.ops.leaky_relu(x, alpha=alpha)
    assert y.dtype == dtype and y.shape == x.shape
    # Exact for every dtype: opforge rounds alpha to the element type and rounds each product
    # once, as TensorFlow does, so half and bfloat16 need no tolerance either.
    assert bits_equal(y.numpy(), tf.nn.leaky_relu(x, alpha=alpha).numpy())


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


@pytest.mark.parametrize("alpha", ALPHAS)
def test_numerical_gradient_float64(alpha):
    rng = np.random.default_rng(5)
    x = rng.standard_normal([3, 7])
    x = np.where(np.abs(x) < 0.05, 0.3, x)  # keep finite differences away from the kink
    theoretical, numerical = tf.test.compute_gradient(
        lambda t: opforge.ops.leaky_relu(t, alpha), [tf.constant(x)]
    )
    np.testing.assert_allclose(theoretical[0], numerical[0], atol=1e-7)


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


def test_with_mask_numerical_gradient():
    x = np.random.default_rng(8).standard_normal([10]) + 0.0
    x = np.where(np.abs(x) < 0.05, -0.4, x)
    theoretical, numerical = tf.test.compute_gradient(
        lambda t: opforge.ops.leaky_relu_with_mask(t, -0.3)[0], [tf.constant(x)]
    )
    np.testing.assert_allclose(theoretical[0], numerical[0], atol=1e-7)


def test_eager_and_tf_function_agree_and_static_shapes():
    x = special_values([8, 5], tf.float32, seed=1)
    f = tf.function(lambda t: opforge.ops.leaky_relu(t, 0.1))
    assert bits_equal(f(x).numpy(), opforge.ops.leaky_relu(x, 0.1).numpy())

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


BAD_INPUTS = {
    "string features": "opforge.ops.leaky_relu(tf.constant(['a', 'b']))",
    "complex features": "opforge.ops.leaky_relu(tf.constant([1+2j]))",
    "bool features": "opforge.ops.leaky_relu(tf.constant([True]))",
    "nan alpha": "opforge.ops.leaky_relu(tf.ones([3]), alpha=float('nan'))",
    "inf alpha": "opforge.ops.leaky_relu(tf.ones([3]), alpha=float('inf'))",
    "text alpha": "opforge.ops.leaky_relu(tf.ones([3]), alpha='big')",
    "tensor alpha": "opforge.ops.leaky_relu(tf.ones([3]), alpha=tf.constant(0.2))",
    "mask nan alpha": "opforge.ops.leaky_relu_with_mask(tf.ones([3]), alpha=float('nan'))",
    "grad shape mismatch": "opforge.ops.leaky_relu_grad(tf.ones([2, 3]), tf.ones([3, 2]))",
    "grad dtype mismatch": "opforge.ops.leaky_relu_grad(tf.ones([3], tf.float64), tf.ones([3]))",
    "raw op nan alpha": "lib().opforge_leaky_relu(tf.ones([3]), alpha=float('nan'))",
    "raw grad shape mismatch": "lib().opforge_leaky_relu_grad(tf.ones([4]), tf.ones([5]), alpha=0.2)",
    "raw op int dtype": "lib().opforge_leaky_relu(tf.ones([3], tf.int32))",
}

EXPECTED = {
    "string features": ("InvalidArgumentError", ["features", "string"]),
    "complex features": ("InvalidArgumentError", ["features", "complex128"]),
    "bool features": ("InvalidArgumentError", ["features", "bool"]),
    "nan alpha": ("InvalidArgumentError", ["alpha", "finite", "nan"]),
    "inf alpha": ("InvalidArgumentError", ["alpha", "finite", "inf"]),
    "text alpha": ("InvalidArgumentError", ["alpha", "big"]),
    "tensor alpha": ("InvalidArgumentError", ["alpha", "tensor"]),
    "mask nan alpha": ("InvalidArgumentError", ["alpha", "finite"]),
    "grad shape mismatch": ("InvalidArgumentError", ["gradients", "[2, 3]", "[3, 2]"]),
    "grad dtype mismatch": ("InvalidArgumentError", ["gradients", "float64", "float32"]),
    "raw op nan alpha": ("InvalidArgumentError", ["alpha", "finite"]),
    "raw grad shape mismatch": ("InvalidArgumentError", ["gradients", "[4]", "[5]"]),
    "raw op int dtype": ("InvalidArgumentError", ["T", "int32"]),
}


@pytest.fixture(scope="module")
def bad_input_results():
    return run_cases_in_child(BAD_INPUTS)


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_raises_clear_error(bad_input_results, case):
    check_bad_input(bad_input_results, case, *EXPECTED[case])

"""bias_leaky_relu against tf.nn.bias_add -> tf.nn.leaky_relu: the same bits in every dtype
(inf, NaN and -0 included), and the gradients TensorFlow's composition gives. The generic op
checks come from its spec in tests/test_specs.py."""
import numpy as np
import pytest
import tensorflow as tf

import opforge


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16, tf.float32, tf.float64])
@pytest.mark.parametrize("alpha", [0.1, 0.0])
def test_same_bits_as_bias_add_then_leaky_relu(dtype, alpha):
    rng = np.random.default_rng(3)
    x = rng.normal(size=(2, 5, 4, 6)) * 3
    x.flat[:4] = [np.inf, -np.inf, np.nan, -0.0]
    b = rng.normal(size=6)
    xt, bt = tf.cast(tf.constant(x), dtype), tf.cast(tf.constant(b), dtype)
    ours = opforge.ops.bias_leaky_relu(xt, bt, alpha=alpha)
    # TensorFlow's composition, in float for half and bfloat16 and rounded once (what the op
    # documents; TensorFlow's own half kernels round after each op).
    work = tf.float64 if dtype == tf.float64 else tf.float32
    theirs = tf.cast(tf.nn.leaky_relu(tf.nn.bias_add(tf.cast(xt, work), tf.cast(bt, work)), alpha), dtype)
    a = tf.bitcast(ours, tf.uint16 if dtype.size == 2 else tf.uint32 if dtype.size == 4 else tf.uint64).numpy()
    b_ = tf.bitcast(theirs, tf.uint16 if dtype.size == 2 else tf.uint32 if dtype.size == 4 else tf.uint64).numpy()
    nan = np.isnan(tf.cast(theirs, tf.float64).numpy())
    np.testing.assert_array_equal(a[~nan], b_[~nan])
    assert np.isnan(tf.cast(ours, tf.float64).numpy()[nan]).all()


def test_gradients_equal_tensorflows():
    rng = np.random.default_rng(5)
    x = tf.constant(rng.normal(size=(3, 7, 8)), tf.float32)
    b = tf.constant(rng.normal(size=8), tf.float32)
    dy = tf.constant(rng.normal(size=(3, 7, 8)), tf.float32)
    grads = []
    for fn in (lambda x, b: opforge.ops.bias_leaky_relu(x, b, alpha=0.2),
               lambda x, b: tf.nn.leaky_relu(tf.nn.bias_add(x, b), 0.2)):
        with tf.GradientTape() as tape:
            tape.watch([x, b])
            y = fn(x, b)
        grads.append(tape.gradient(y, [x, b], output_gradients=dy))
    np.testing.assert_array_equal(grads[0][0], grads[1][0])
    np.testing.assert_allclose(grads[0][1], grads[1][1], rtol=1e-5, atol=1e-5)

"""fused_conv2d_bias_leaky_relu against TensorFlow's conv2d -> bias_add -> leaky_relu, forward and
gradients. The generic op checks (dtypes, float64 numerical gradients, bad inputs in a child
process, determinism) come from its spec in tests/test_specs.py; the convolution core's paths
(im2col, Winograd, the filter cache, inf and NaN) from its GoogleTests."""
import numpy as np
import pytest
import tensorflow as tf

import opforge


@pytest.mark.parametrize("strides,padding,k", [(1, "same", 3), (2, "valid", 3), (1, "valid", 1), (2, "same", 4)])
@pytest.mark.parametrize("alpha", [0.1, 0.0])
def test_fused_conv_matches_conv_bias_leaky(strides, padding, k, alpha):
    rng = np.random.default_rng(k + strides)
    x = tf.constant(rng.normal(size=(2, 13, 11, 6)), tf.float32)
    w = tf.constant(rng.normal(size=(k, k, 6, 8)) * 0.3, tf.float32)
    b = tf.constant(rng.normal(size=8), tf.float32)
    ours = opforge.ops.fused_conv2d_bias_leaky_relu(x, w, b, strides, padding.upper(), alpha=alpha)
    theirs = tf.nn.leaky_relu(tf.nn.bias_add(tf.nn.conv2d(x, w, strides, padding.upper()), b), alpha)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)


def test_fused_conv_gradients_match_tensorflow():
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=(2, 9, 9, 4)), tf.float32)
    w = tf.constant(rng.normal(size=(3, 3, 4, 5)) * 0.3, tf.float32)
    b = tf.constant(rng.normal(size=5), tf.float32)
    dy = tf.constant(rng.normal(size=(2, 5, 5, 5)), tf.float32)

    def grads(fn):
        with tf.GradientTape() as tape:
            tape.watch([x, w, b])
            y = fn()
        return tape.gradient(y, [x, w, b], output_gradients=dy)

    ours = grads(lambda: opforge.ops.fused_conv2d_bias_leaky_relu(x, w, b, 2, "SAME", alpha=0.1))
    theirs = grads(lambda: tf.nn.leaky_relu(tf.nn.bias_add(tf.nn.conv2d(x, w, 2, "SAME"), b), 0.1))
    for o, t in zip(ours, theirs):
        np.testing.assert_allclose(o, t, rtol=1e-5, atol=1e-5)

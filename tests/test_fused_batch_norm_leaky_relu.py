"""fused_batch_norm_leaky_relu against Keras 3's BatchNormalization(training=True) followed by
tf.nn.leaky_relu: outputs, batch statistics and gradients. The generic op checks come from its spec
in tests/test_specs.py."""
import numpy as np
import tensorflow as tf
import keras

import opforge


def test_fused_batch_norm_matches_keras_forward_and_gradients():
    rng = np.random.default_rng(1)
    x = tf.constant(rng.normal(0.5, 2.0, size=(4, 6, 6, 7)), tf.float32)
    gamma = tf.constant(rng.uniform(0.5, 1.5, 7), tf.float32)
    beta = tf.constant(rng.normal(size=7), tf.float32)
    dy = tf.constant(rng.normal(size=x.shape), tf.float32)
    bn = keras.layers.BatchNormalization()
    bn.build(x.shape)
    bn.gamma.assign(gamma)
    bn.beta.assign(beta)
    with tf.GradientTape() as tape:
        tape.watch(x)
        theirs = tf.nn.leaky_relu(bn(x, training=True), 0.1)
    t_grads = tape.gradient(theirs, [x, bn.gamma, bn.beta], output_gradients=dy)
    with tf.GradientTape() as tape:
        tape.watch([x, gamma, beta])
        ours, mean, var = opforge.ops.fused_batch_norm_leaky_relu(x, gamma, beta, alpha=0.1)
    o_grads = tape.gradient(ours, [x, gamma, beta], output_gradients=dy)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)
    m, v = tf.nn.moments(x, [0, 1, 2])
    np.testing.assert_allclose(mean, m, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(var, v, rtol=1e-5)
    for o, t in zip(o_grads, t_grads):
        np.testing.assert_allclose(o, t, rtol=1e-4, atol=1e-4)

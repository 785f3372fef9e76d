"""What the swish spec cannot say: bit-exactness with tf.nn.silu at every size around the
kernel's packet boundaries (packets, then a scalar tail, as TensorFlow's Sigmoid kernel), and the
second-order gradient."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import opforge
from helpers import bits_equal


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16, tf.float32, tf.float64], ids=lambda d: d.name)
def test_every_size_around_the_packet_boundaries_gives_tf_nn_silu_bits(dtype):
    rng = np.random.default_rng(7)
    for n in list(range(1, 70)) + [1023, 1024, 1025, 4099]:
        x = tf.cast(tf.constant(rng.standard_normal(n) * 6), dtype)
        assert bits_equal(opforge.ops.swish(x).numpy(), tf.nn.silu(x).numpy()), (dtype.name, n)
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(x)
            ours, theirs = opforge.ops.swish(x), tf.nn.silu(x)
        assert bits_equal(tape.gradient(ours, x).numpy(), tape.gradient(theirs, x).numpy()), (dtype.name, n)


def test_swish_second_order_gradient_matches_tensorflow():
    x = tf.constant(np.random.default_rng(3).standard_normal(50) * 4, tf.float64)
    hessians = []
    for fn in (opforge.ops.swish, tf.nn.silu):
        with tf.GradientTape() as outer:
            outer.watch(x)
            with tf.GradientTape() as inner:
                inner.watch(x)
                y = tf.reduce_sum(fn(x) * x)
            g = inner.gradient(y, x)
            loss = tf.reduce_sum(g * g)
        hessians.append(outer.gradient(loss, x).numpy())
    np.testing.assert_allclose(hessians[0], hessians[1], rtol=1e-10, atol=1e-12)


def test_every_bfloat16_value_gives_tf_nn_silus_bits_forward_and_gradient():
    """bfloat16 runs on tables of y and of the gradient's slope built over every bit pattern:
    each of the 65,536 values (inf, NaN, -0 and subnormals included) against tf.nn.silu, the
    gradient with random upstream gradients (NaN and inf among them)."""
    bits = np.arange(65536, dtype=np.uint32) << 16
    x = tf.cast(tf.constant(bits.view(np.float32)), tf.bfloat16)
    rng = np.random.default_rng(11)
    g = rng.standard_normal(65536).astype(np.float32) * 4
    g[::997] = np.inf
    g[::1009] = np.nan
    g = tf.cast(tf.constant(g), tf.bfloat16)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        ours, theirs = opforge.ops.swish(x), tf.nn.silu(x)
    assert bits_equal(ours.numpy(), theirs.numpy())
    assert bits_equal(tape.gradient(ours, x, output_gradients=g).numpy(),
                      tape.gradient(theirs, x, output_gradients=g).numpy())

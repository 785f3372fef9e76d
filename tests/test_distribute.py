"""MirroredStrategy over two logical CPUs: each replica runs the ops on its own device and gets
what a single device gets. (Thread-count determinism is a generic check in test_specs.py.)"""
from __future__ import annotations

import numpy as np
import tensorflow as tf

import opforge
from helpers import bits_equal


def _step(x, w, b):
    with tf.GradientTape() as tape:
        tape.watch([x, w, b])
        h = opforge.ops.leaky_relu(opforge.ops.element_mul(x, w), alpha=0.1)
        y, mask = opforge.ops.leaky_relu_with_mask(opforge.ops.element_mul(h, b), alpha=-0.2)
        loss = tf.reduce_sum(y * y) + tf.reduce_sum(mask)
    return [loss] + tape.gradient(loss, [x, w, b])


def _reference(x, w, b):
    with tf.GradientTape() as tape:
        tape.watch([x, w, b])
        h = tf.nn.leaky_relu(x * w, alpha=0.1)
        y = tf.nn.leaky_relu(h * b, alpha=-0.2)
        loss = tf.reduce_sum(y * y) + tf.reduce_sum(tf.where(h * b > 0, 1.0, -0.2))
    return [loss] + tape.gradient(loss, [x, w, b])


def test_mirrored_strategy_over_two_logical_cpus(logical_cpus):
    assert len(logical_cpus) >= 2
    strategy = tf.distribute.MirroredStrategy([d.name for d in logical_cpus[:2]])
    rng = np.random.default_rng(0)
    x = tf.constant(rng.standard_normal((2, 16, 8)).astype(np.float32))  # one slice per replica
    w = tf.constant(rng.standard_normal((1, 8)).astype(np.float32))
    b = tf.constant(rng.standard_normal((8,)).astype(np.float32))

    def replica_fn():
        ctx = tf.distribute.get_replica_context()
        xi = tf.gather(x, ctx.replica_id_in_sync_group)
        out = _step(xi, w, b)
        return out + [tf.constant(opforge.ops.element_mul(xi, w).device)]

    eager = strategy.run(replica_fn)  # each replica's ops run eagerly on its own device
    graph = strategy.run(tf.function(replica_fn))
    for r in range(2):
        assert eager[-1].values[r].numpy().decode().endswith(f"CPU:{r}")
        want = _reference(x[r], w, b)
        single = _step(x[r], w, b)
        for e, g, s, ref in zip(eager[:-1], graph[:-1], single, want):
            assert bits_equal(e.values[r].numpy(), s.numpy())  # same as outside the strategy
            assert bits_equal(g.values[r].numpy(), s.numpy())
            np.testing.assert_allclose(s.numpy(), ref.numpy(), rtol=1e-5, atol=1e-4)

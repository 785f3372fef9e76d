"""MirroredStrategy over two logical CPUs, and identical results for any thread count."""
from __future__ import annotations

import json

import numpy as np
import tensorflow as tf

import opforge
from conftest import bits_equal, run_python


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


THREAD_SCRIPT = """
import hashlib, json, sys
import tensorflow as tf
tf.config.threading.set_intra_op_parallelism_threads({threads})
import numpy as np
import opforge
rng = np.random.default_rng(42)
x = tf.constant(rng.standard_normal((1 << 20) + 17).astype(np.float32))
a = tf.constant(rng.standard_normal((513, 1, 1031)).astype(np.float32))
b = tf.constant(rng.standard_normal((1, 257, 1)).astype(np.float32))
img = tf.constant(rng.standard_normal((3, 61, 47, 5)).astype(np.float32))
hashes = {{}}
with tf.GradientTape(persistent=True) as tape:
    tape.watch([x, a, b, img])
    y = opforge.ops.leaky_relu(x, alpha=0.3)
    z = opforge.ops.element_mul(a, b)
    m = opforge.ops.leaky_relu_with_mask(x, alpha=-0.1)[1]
    r = opforge.ops.resize_bilinear(img, [97, 131], half_pixel_centers=True)
outs = {{"y": y, "z": z, "mask": m, "dx": tape.gradient(y, x, output_gradients=x),
        "da_db": tf.concat([tf.reshape(t, [-1]) for t in tape.gradient(z, [a, b], output_gradients=z)], 0),
        "resized": r, "dimg": tape.gradient(r, img, output_gradients=r * r)}}
for k, v in outs.items():
    hashes[k] = hashlib.sha256(v.numpy().tobytes()).hexdigest()
print("HASHES " + json.dumps(hashes))
"""


def test_identical_results_with_one_and_two_threads():
    results = []
    for threads in (1, 2):
        proc = run_python(THREAD_SCRIPT.format(threads=threads))
        assert proc.returncode == 0, proc.stderr[-2000:]
        line = next(l for l in proc.stdout.splitlines() if l.startswith("HASHES "))
        results.append(json.loads(line[7:]))
    assert results[0] == results[1]
    assert len(results[0]) == 7


def test_repeated_runs_are_identical():
    rng = np.random.default_rng(1)
    a = tf.constant(rng.standard_normal((300, 1, 700)).astype(np.float32))
    b = tf.constant(rng.standard_normal((1, 90, 1)).astype(np.float32))
    g = tf.constant(rng.standard_normal((300, 90, 700)).astype(np.float32))
    lib = opforge.ops._common.lib()
    first = [t.numpy() for t in lib.opforge_element_mul_grad(g, a, b)]
    for _ in range(3):
        again = [t.numpy() for t in lib.opforge_element_mul_grad(g, a, b)]
        assert all(bits_equal(u, v) for u, v in zip(first, again))

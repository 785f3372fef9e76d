"""A YOLO training step under tf.distribute gives what one device gives on the same global batch:
MirroredStrategy over the two logical CPUs (conftest.py) and MultiWorkerMirroredStrategy with two
worker processes on 127.0.0.1.

Batch norm in training mode normalises with batch statistics; with one replica per half batch
those are the half batch's, so the models here are built with `sync_batch_norm=True`
(`keras.layers.BatchNormalization(synchronized=True)`: the statistics of the global batch,
summed over the replicas), which is what makes the multi-replica step the one-device step. The
reference model is built the same way, outside any strategy (there the all-reduce is the
identity, so it computes the same E[x^2] - E[x]^2 as the replicas). Without it, the distributed
step is the one-device step of each half batch on its own, which is checked as well."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

import opforge.models as M
from helpers import TESTS_DIR
from opforge.data import shapes_dataset

GLOBAL_BATCH, SIZE, CLASSES, DATA_SEED, WEIGHT_SEED, LR = 8, 64, 3, 21, 9, 1e-3


def _batch(model):
    data = shapes_dataset(GLOBAL_BATCH, SIZE, seed=DATA_SEED)
    anchors, masks = M.anchors_for(model, SIZE)
    ds = M.target_dataset(data.images, data.boxes, data.classes, anchors, masks, SIZE, GLOBAL_BATCH,
                          shuffle=False)
    return ds, M.YoloLoss(anchors, masks, CLASSES)


def _single_step(weights, x, y, sync_batch_norm=True):
    """One custom_train_step on one device: (loss, weights after the step)."""
    model = M.YoloV3Tiny(CLASSES, SIZE, sync_batch_norm=sync_batch_norm)
    model.set_weights(weights)
    _, loss = _batch(model)
    value = float(M.custom_train_step(model, loss, keras.optimizers.SGD(LR))(x, y))
    return value, model.get_weights()


def _update_errors(got, want, before):
    """Per tensor, |update - want's update| / |want's update| (L2), where want's update is not 0."""
    return np.array([np.linalg.norm((g - b) - (w - b)) / np.linalg.norm(w - b)
                     for g, w, b in zip(got, want, before) if np.any(w != b)])


def _assert_weights_agree(got, want, before, x, y):
    """The weights after the step agree with the one-device step's (rel 1e-4), and so does the
    update itself (after - before, tiny next to the weights), tensor by tensor, up to the
    rounding that one device shows on its own when the global batch comes in the reverse order
    (float32 sums in another order; the BN scales near 1.0 move by a few ulps)."""
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6)
    reverse = tf.range(GLOBAL_BATCH - 1, -1, -1)
    _, reordered = _single_step(before, tf.gather(x, reverse), tuple(tf.gather(t, reverse) for t in y))
    err, baseline = _update_errors(got, want, before), _update_errors(reordered, want, before)
    print(f"update error: largest {err.max():.2e}, median {np.median(err):.2e}; one device with the batch "
          f"reversed: largest {baseline.max():.2e}, median {np.median(baseline):.2e}")
    assert np.all(err <= np.maximum(3 * baseline, 1e-3)), np.stack([err, baseline], 1)


def _relative(a, b):
    return abs(a - b) / abs(b)


def test_mirrored_strategy_step_gives_the_single_device_step(logical_cpus):
    assert len(logical_cpus) >= 2
    strategy = tf.distribute.MirroredStrategy([d.name for d in logical_cpus[:2]])
    keras.utils.set_random_seed(WEIGHT_SEED)
    with strategy.scope():
        model = M.YoloV3Tiny(CLASSES, SIZE, sync_batch_norm=True)
        optimizer = keras.optimizers.SGD(LR)
    before = model.get_weights()
    ds, loss = _batch(model)
    x, y = next(iter(ds))
    want_loss, want_weights = _single_step(before, x, y)

    step = M.distributed_train_step(strategy, model, loss, optimizer, GLOBAL_BATCH)
    dist_loss = float(step(next(iter(strategy.experimental_distribute_dataset(ds)))))
    print(f"mirrored loss {dist_loss!r}, single device {want_loss!r}, "
          f"relative difference {_relative(dist_loss, want_loss):.2e}")
    assert dist_loss == pytest.approx(want_loss, rel=1e-5)
    _assert_weights_agree(model.get_weights(), want_weights, before, x, y)
    for v in model.weights:  # both replicas hold the same values
        copies = [c.numpy() for c in v.value.values]
        assert len(copies) == 2 and np.array_equal(copies[0], copies[1]), v.path

    # Without synchronised batch norm, each replica normalises its own half batch: the step's
    # loss is then the mean of the one-device losses of the two halves, not the global one.
    with strategy.scope():
        local = M.YoloV3Tiny(CLASSES, SIZE)
        local.set_weights(before)
        local_step = M.distributed_train_step(strategy, local, loss, keras.optimizers.SGD(LR), GLOBAL_BATCH)
    local_loss = float(local_step(next(iter(strategy.experimental_distribute_dataset(ds)))))
    halves = []
    for k in range(2):
        part = slice(k * GLOBAL_BATCH // 2, (k + 1) * GLOBAL_BATCH // 2)
        halves.append(_single_step(before, x[part], tuple(t[part] for t in y), sync_batch_norm=False)[0])
    print(f"per-replica batch norm: loss {local_loss!r}, mean of the halves {np.mean(halves)!r}")
    assert local_loss == pytest.approx(float(np.mean(halves)), rel=1e-5)
    assert _relative(local_loss, want_loss) > 1e-4  # the statistics do matter


WORKER = """
import json, sys
import numpy as np
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()  # before anything else touches TF
import keras
import opforge.models as M
from test_yolo_distribute import GLOBAL_BATCH, SIZE, CLASSES, LR, _batch

args = json.loads(sys.argv[1])
with strategy.scope():
    model = M.YoloV3Tiny(CLASSES, SIZE, sync_batch_norm=True)
    optimizer = keras.optimizers.SGD(LR)
with np.load(args["weights"]) as f:
    model.set_weights([f[f"arr_{i}"] for i in range(len(f.files))])
ds, loss = _batch(model)
x, y = next(iter(ds))
half = GLOBAL_BATCH // strategy.num_replicas_in_sync


def this_replicas_half(ctx):  # worker k's replica takes images [k*half, (k+1)*half)
    part = slice(ctx.replica_id_in_sync_group * half, (ctx.replica_id_in_sync_group + 1) * half)
    print("REPLICA", ctx.replica_id_in_sync_group, "OF", ctx.num_replicas_in_sync, flush=True)
    return x[part], tuple(t[part] for t in y)


step = M.distributed_train_step(strategy, model, loss, optimizer, GLOBAL_BATCH)
value = float(step(strategy.experimental_distribute_values_from_function(this_replicas_half)))
np.savez(args["out"], *model.get_weights())
print("LOSS", repr(value), flush=True)
"""


def _free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _run_workers(tmp_path, weights_file, timeout=90.0):
    """Starts the two workers at once and waits for both (killing both on a timeout or when one
    fails, so that the other cannot wait for it forever): [(returncode, stdout, stderr)]."""
    cluster = {"worker": [f"127.0.0.1:{p}" for p in _free_ports(2)]}
    procs = []
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}  # gRPC honours proxies
    env.update(TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(TESTS_DIR), CUDA_VISIBLE_DEVICES="")
    try:
        for k in range(2):
            env_k = dict(env, TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": k}}))
            args = json.dumps({"weights": str(weights_file), "out": str(tmp_path / f"worker{k}.npz")})
            procs.append(subprocess.Popen([sys.executable, "-c", textwrap.dedent(WORKER), args], cwd=TESTS_DIR,
                                          env=env_k, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        deadline = time.monotonic() + timeout
        while any(p.poll() is None for p in procs):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the workers ran past {timeout} s")
            if any(p.poll() not in (None, 0) for p in procs):
                time.sleep(5)  # the other one will wait for its peer forever: give it a moment, then stop it
                break
            time.sleep(0.2)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return [(p.returncode,) + p.communicate() for p in procs]


def test_multi_worker_mirrored_strategy_step_gives_the_single_process_step(tmp_path):
    keras.utils.set_random_seed(WEIGHT_SEED)
    before = M.YoloV3Tiny(CLASSES, SIZE, sync_batch_norm=True).get_weights()
    np.savez(tmp_path / "weights.npz", *before)
    results = _run_workers(tmp_path, tmp_path / "weights.npz")
    for k, (rc, out, err) in enumerate(results):
        assert rc == 0, f"worker {k} exited with {rc}\nstdout:\n{out[-2000:]}\nstderr:\n{err[-4000:]}"
    losses = [float(next(line for line in out.splitlines() if line.startswith("LOSS ")).split()[1])
              for _, out, _ in results]
    assert [f"REPLICA {k} OF 2" in out for k, (_, out, _) in enumerate(results)] == [True, True]

    model = M.YoloV3Tiny(CLASSES, SIZE, sync_batch_norm=True)
    ds, _ = _batch(model)
    x, y = next(iter(ds))
    want_loss, want_weights = _single_step(before, x, y)
    print(f"multi-worker losses {losses!r}, single process {want_loss!r}, "
          f"relative difference {_relative(losses[0], want_loss):.2e}")
    assert losses[0] == losses[1]  # the reduced loss is the same on both workers
    assert losses[0] == pytest.approx(want_loss, rel=1e-5)
    for k in range(2):
        with np.load(tmp_path / f"worker{k}.npz") as f:
            got = [f[f"arr_{i}"] for i in range(len(f.files))]
        _assert_weights_agree(got, want_weights, before, x, y)

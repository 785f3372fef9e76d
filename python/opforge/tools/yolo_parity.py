"""`opforge yolo parity`: the YOLO network with opforge's ops (`ops="opforge"`) against the same
network from TensorFlow built-ins (`ops="tf"`), at full size: same initial weights, same batch.

  - first-step loss: relative difference <= 1e-5;
  - gradients: per variable max|g_opforge - g_tf| / max|g_tf|, the worst variable <= 1e-4;
  - the losses of `steps` Adam steps: relative difference <= 1e-3 at every step.

Beside the two twins, more runs (the tf twin from weights jittered by one ulp) measure what
round-off alone does to the same training: their drift from the tf run is the noise floor of the
comparison. In float64 (`dtype="float64"`) that floor is ~1e-12 and the three tolerances are
checked as they are. In float32 the YOLO loss amplifies round-off (a predicted box's IoU crossing
the ignore threshold switches its objectness term; Adam turns gradients at round-off scale into
full-size steps), and at 416 with Adam(1e-3) the tf twin drifts from itself by ~1e-2 within 20
steps; there the steps pass when within 1e-3 or within the largest of three draws of the twin's
own round-off drift, and the
verdict says which.

Prints the figures; returns 0 when all hold, 1 otherwise.
"""
from __future__ import annotations

import time

LOSS_RTOL = 1e-5
GRAD_RTOL = 1e-4
STEPS_RTOL = 1e-3


def run(size: int = 416, steps: int = 20, model: str = "tiny", batch: int = 4, num_classes: int = 80,
        upsample: str = "transpose", seed: int = 7, learning_rate: float = 1e-3,
        sensitivity: bool = True, dtype: str = "float32") -> int:
    import keras

    if dtype not in ("float32", "float64"):
        print(f"opforge yolo parity: dtype must be 'float32' or 'float64', got {dtype!r}")
        return 2
    floatx = keras.config.floatx()
    keras.config.set_floatx(dtype)
    try:
        return _run(size, steps, model, batch, num_classes, upsample, seed, learning_rate, sensitivity, dtype)
    finally:
        keras.config.set_floatx(floatx)


def _run(size, steps, model, batch, num_classes, upsample, seed, learning_rate, sensitivity, dtype) -> int:
    import keras
    import numpy as np
    import tensorflow as tf

    import opforge.models as M
    from opforge.tools.yolo_bench import synthetic_batch, twins

    if model not in ("tiny", "full"):
        print(f"opforge yolo parity: model must be 'tiny' or 'full', got {model!r}")
        return 2
    start = time.perf_counter()
    ours, twin = twins(model, size, num_classes, upsample, seed=seed)
    x, y, anchors, masks = synthetic_batch(ours, size, batch, num_classes, seed=seed)
    x, y = tf.cast(x, dtype), tuple(tf.cast(t, dtype) for t in y)
    name = "YoloV3Tiny" if model == "tiny" else "YoloV3"
    print(f"parity ({dtype}): {name}({num_classes}, {size}, {upsample!r}) ops='opforge' vs ops='tf', batch {batch}, "
          f"{len(ours.trainable_variables)} trainable variables, {ours.count_params():,} parameters", flush=True)

    runs = [("opforge", ours, "opforge"), ("tf", twin, "tf")]
    if sensitivity:
        # The floating-point baseline: the tf twin again from weights rounded differently (each
        # weight times 1 + eps * noise, about one ulp of the dtype). How far its losses drift from the
        # tf run's over the steps is what round-off alone does to this training.
        # float32's drift is a matter of chance (which boxes cross the ignore threshold when), so
        # it is sampled three times; float64's is far below every tolerance, once is enough.
        eps = float(np.finfo(np.dtype(dtype)).eps)
        for j in range(3 if dtype == "float32" else 1):
            _, jitter = twins(model, size, num_classes, upsample, seed=seed)
            rng = np.random.default_rng(j)
            jitter.set_weights([w * (1 + eps * rng.standard_normal(w.shape)).astype(w.dtype)
                                if w.dtype.kind == "f" else w for w in twin.get_weights()])
            runs.append((f"tf_ulp{j}", jitter, "tf"))
    results = {}
    for label, m, ops in runs:
        loss = M.YoloLoss(anchors, masks, num_classes, ops=ops)
        optimizer = keras.optimizers.Adam(learning_rate)

        @tf.function
        def gradients(m=m, loss=loss):
            with tf.GradientTape() as tape:
                value = tf.reduce_mean(loss(list(y), m(x, training=True)))
            return value, tape.gradient(value, m.trainable_variables)

        @tf.function
        def step(m=m, loss=loss, optimizer=optimizer):
            with tf.GradientTape() as tape:
                value = tf.reduce_mean(loss(list(y), m(x, training=True)))
            optimizer.apply_gradients(zip(tape.gradient(value, m.trainable_variables), m.trainable_variables))
            return value

        first, grads = gradients()
        losses = np.array([float(step()) for _ in range(steps)])
        results[label] = (float(first), [g.numpy() for g in grads], losses)

    (l0, g0, s0), (l1, g1, s1) = results["opforge"], results["tf"]
    loss_rel = abs(l0 - l1) / abs(l1)
    per_var = [float(np.max(np.abs(a - b)) / (np.max(np.abs(b)) + 1e-30)) for a, b in zip(g0, g1)]
    worst = int(np.argmax(per_var))
    steps_rel = np.abs(s0 - s1) / np.abs(s1)
    ok_loss, ok_grad, ok_steps = loss_rel <= LOSS_RTOL, per_var[worst] <= GRAD_RTOL, bool(np.all(steps_rel <= STEPS_RTOL))
    jitters = [k for k in results if k.startswith("tf_ulp")]
    drifts = [np.abs(results[k][2] - s1) / np.abs(s1) for k in jitters]
    drift = max(drifts, key=lambda d: float(np.max(d))) if drifts else None
    steps_verdict = "ok" if ok_steps else "FAIL"
    if not ok_steps and drift is not None and dtype == "float32" and np.max(steps_rel) <= np.max(drift):
        ok_steps = True
        steps_verdict = f"ok: within the tf twin's own round-off drift, {float(np.max(drift)):.3g}"

    def mark(ok):
        return "ok" if ok else "FAIL"

    print(f"first-step loss: opforge {l0:.8g}, tf {l1:.8g}, relative difference {loss_rel:.3g} "
          f"(<= {LOSS_RTOL:g}: {mark(ok_loss)})")
    print(f"gradients: worst variable {ours.trainable_variables[worst].path} relative difference "
          f"{per_var[worst]:.3g} (<= {GRAD_RTOL:g}: {mark(ok_grad)}); median over variables "
          f"{float(np.median(per_var)):.3g}")
    scale = [float(np.max(np.abs(b))) for b in g1]
    print(f"  worst variable: max|g_tf| {scale[worst]:.3g}, max|g_opforge| {float(np.max(np.abs(g0[worst]))):.3g}; "
          f"largest max|g| of any variable {max(scale):.3g}")
    if sensitivity:
        base = [float(np.max(np.abs(a - b)) / (np.max(np.abs(b)) + 1e-30))
                for a, b in zip(results[jitters[0]][1], g1)]
        print(f"  round-off baseline (tf twin, weights jittered by ~1 ulp): worst variable "
              f"{ours.trainable_variables[int(np.argmax(base))].path} {max(base):.3g}, on "
              f"{ours.trainable_variables[worst].path} {base[worst]:.3g}; median {float(np.median(base)):.3g}")
    tiny = [i for i, v in enumerate(scale) if v <= 1e-6 * max(scale)]
    if tiny:
        rest = max(v for i, v in enumerate(per_var) if i not in tiny)
        print(f"  {len(tiny)} variable(s) with gradients at round-off scale (max|g| <= 1e-6 of the largest; "
              f"a bias followed by batch norm): {', '.join(ours.trainable_variables[i].path for i in tiny)}; "
              f"worst of the others {rest:.3g}")
    print(f"{steps} Adam({learning_rate:g}) steps: loss {s0[0]:.6g} -> {s0[-1]:.6g} (tf {s1[0]:.6g} -> {s1[-1]:.6g}); "
          f"max relative difference {float(np.max(steps_rel)):.3g} at step {int(np.argmax(steps_rel)) + 1} "
          f"(<= {STEPS_RTOL:g}: {steps_verdict})")
    print("relative loss difference per step: " + " ".join(f"{v:.1e}" for v in steps_rel))
    if sensitivity:
        print(f"round-off baseline (tf twin, weights jittered by ~1 ulp, {len(drifts)} draws: max relative "
              f"differences {', '.join(f'{float(np.max(d)):.3g}' for d in drifts)}); the largest "
              f"{float(np.max(drift)):.3g} at step {int(np.argmax(drift)) + 1}; per step: "
              + " ".join(f"{v:.1e}" for v in drift))
    print(f"parity {'passed' if ok_loss and ok_grad and ok_steps else 'FAILED'} in "
          f"{time.perf_counter() - start:.0f} s")
    return 0 if ok_loss and ok_grad and ok_steps else 1

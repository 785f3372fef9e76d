"""The four paths to a custom activation in TensorFlow, side by side and measured.

Two functions, each written four ways:

- Swish (SiLU), `x * sigmoid(x)`, gradient `s * (1 + x * (1 - s))` with `s = sigmoid(x)`;
- the clipped identity, `clip(x, -1, 1)` forward with a "leaky straight-through" gradient: 1
  inside [-1, 1] (bounds included, NaN counted as inside), `leak` = 0.01 outside.

The paths:

1. `composite`: TensorFlow ops in a `keras.layers.Lambda`; autodiff gives the gradient. Swish is
   `x * tf.sigmoid(x)`. The clipped identity cannot be `tf.clip_by_value` (whose gradient is 0
   outside the range), so it is written with `stop_gradient`:
   `tf.where(outside, stop_gradient(clip(x)) + leak * (xf - stop_gradient(xf)), x)` with
   `xf = x` where finite, else 0. The forward is `clip(x)` exactly (the leak term is +-0; `xf`
   keeps `inf - inf` out of it), the gradient is 1 inside and `leak` outside, except at
   x = +-inf, where it is 0 (`xf` does not depend on x there).
2. `py_function`: NumPy inside `tf.py_function`, with the gradient (NumPy too) attached by
   `tf.custom_gradient`.
3. `custom_gradient`: `tf.custom_gradient` over TensorFlow ops (the forward keeps what the
   gradient needs; the gradient is the closed form).
4. `opforge`: the C++ ops with C++ gradients, `opforge.ops.swish` and
   `opforge.ops.clipped_identity`, and the layers `opforge.layers.Swish` and
   `opforge.layers.ClippedIdentity`.

Paths 1-3 go into Keras models through `keras.layers.Lambda` around a named function that is
registered as Keras-serializable here, so `.keras` files that use them load after
`import opforge.tools.paths` (a Python lambda would need `safe_mode=False`).

`opforge bench paths` (:func:`main`) times each path (forward, and a training step of a small
Dense -> activation -> Dense model) in eager mode, in `tf.function` and in `model.fit`, timed
interleaved (opforge.tools.timing), and prints a feature matrix (gradient, tf.function, SavedModel,
.keras, GPU, XLA) whose every entry comes from running that capability here.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import keras
import numpy as np
import tensorflow as tf

import opforge
from opforge.tools.timing import interleaved

__all__ = ["FUNCTIONS", "PATHS", "Function", "feature_matrix", "layer", "main", "timings"]

PATHS = ("composite", "py_function", "custom_gradient", "opforge")
# The leak is 0.01 rounded to float32, so that every path uses the same number in every dtype
# (the C++ op's attrs are 32-bit floats, and tf.cast(0.01, tf.float64) goes through float32).
CLIP_MIN, CLIP_MAX, LEAK = -1.0, 1.0, float(np.float32(0.01))

_serializable = keras.saving.register_keras_serializable(package="opforge_paths")


# --- Swish ---------------------------------------------------------------------------------------


@_serializable
def swish_composite(x):
    """Path 1: TensorFlow ops; autodiff differentiates through tf.sigmoid and the product."""
    return x * tf.sigmoid(x)


def _np_swish(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        s = 1.0 / (1.0 + np.exp(-x))
        return (x * s).astype(x.dtype)


def _np_swish_grad(x: np.ndarray, dy: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        s = 1.0 / (1.0 + np.exp(-x))
        return (dy * (s * (1.0 + x * (1.0 - s)))).astype(x.dtype)


def _with_numpy(x, forward: Callable, backward: Callable):
    """tf.py_function over NumPy for the forward and, through tf.custom_gradient, the gradient."""

    @tf.custom_gradient
    def f(x):
        y = tf.py_function(lambda v: forward(v.numpy()), [x], x.dtype)
        y.set_shape(x.shape)  # py_function loses the static shape

        def grad(dy):
            dx = tf.py_function(lambda v, d: backward(v.numpy(), d.numpy()), [x, dy], x.dtype)
            dx.set_shape(x.shape)
            return dx

        return y, grad

    return f(x)


@_serializable
def swish_py_function(x):
    """Path 2: NumPy in tf.py_function, gradient attached by tf.custom_gradient."""
    return _with_numpy(x, _np_swish, _np_swish_grad)


@tf.custom_gradient
def _swish_custom(x):
    s = tf.sigmoid(x)

    def grad(dy):
        return dy * (s * (1.0 + x * (1.0 - s)))

    return x * s, grad


@_serializable
def swish_custom_gradient(x):
    """Path 3: tf.custom_gradient over TensorFlow ops (sigmoid kept for the gradient)."""
    return _swish_custom(x)


def swish_opforge(x):
    """Path 4: the C++ op and its C++ gradient."""
    return opforge.ops.swish(x)


# --- the clipped identity ---------------------------------------------------------------------------


def _outside(x, clip_min: float, clip_max: float):
    return tf.logical_or(x < tf.cast(clip_min, x.dtype), x > tf.cast(clip_max, x.dtype))


@_serializable
def clipped_identity_composite(x, clip_min: float = CLIP_MIN, clip_max: float = CLIP_MAX, leak: float = LEAK):
    """Path 1: clip forward, 1 / leak gradient, from stop_gradient (see the module docstring)."""
    finite = tf.where(tf.math.is_finite(x), x, tf.zeros_like(x))
    clipped = tf.stop_gradient(tf.clip_by_value(x, clip_min, clip_max))
    leaked = clipped + tf.cast(leak, x.dtype) * (finite - tf.stop_gradient(finite))
    return tf.where(_outside(x, clip_min, clip_max), leaked, x)


def _np_clip(x: np.ndarray, clip_min=CLIP_MIN, clip_max=CLIP_MAX) -> np.ndarray:
    return np.clip(x, x.dtype.type(clip_min), x.dtype.type(clip_max))


def _np_clip_grad(x: np.ndarray, dy: np.ndarray, clip_min=CLIP_MIN, clip_max=CLIP_MAX, leak=LEAK) -> np.ndarray:
    outside = (x < x.dtype.type(clip_min)) | (x > x.dtype.type(clip_max))
    return np.where(outside, dy * dy.dtype.type(leak), dy).astype(dy.dtype)


@_serializable
def clipped_identity_py_function(x):
    """Path 2: np.clip in tf.py_function, np.where gradient attached by tf.custom_gradient."""
    return _with_numpy(x, _np_clip, _np_clip_grad)


@tf.custom_gradient
def _clipped_custom(x):
    def grad(dy):
        return tf.where(_outside(x, CLIP_MIN, CLIP_MAX), dy * tf.cast(LEAK, dy.dtype), dy)

    return tf.clip_by_value(x, CLIP_MIN, CLIP_MAX), grad


@_serializable
def clipped_identity_custom_gradient(x):
    """Path 3: tf.clip_by_value forward, tf.where gradient, through tf.custom_gradient."""
    return _clipped_custom(x)


def clipped_identity_opforge(x):
    """Path 4: the C++ op and its C++ gradient."""
    return opforge.ops.clipped_identity(x, CLIP_MIN, CLIP_MAX, LEAK)


# --- the two functions, their paths and exact answers -------------------------------------------


@dataclass(frozen=True)
class Function:
    """One function: its four paths (x -> y), a Keras layer for each, and the exact forward and
    gradient in float64 NumPy (the answer every path is checked against)."""

    name: str
    paths: Dict[str, Callable]
    opforge_layer: Callable[[], keras.layers.Layer]
    exact: Callable[[np.ndarray], np.ndarray]
    exact_grad: Callable[[np.ndarray, np.ndarray], np.ndarray]
    sample_scale: float


def _exact_clip_grad(x, dy):
    # The leaky straight-through gradient; at +-inf the composite path gives 0 (module docstring)
    # and the samples here are finite.
    return _np_clip_grad(x, dy)


FUNCTIONS: Dict[str, Function] = {
    "swish": Function(
        "swish",
        {"composite": swish_composite, "py_function": swish_py_function,
         "custom_gradient": swish_custom_gradient, "opforge": swish_opforge},
        lambda: opforge.layers.Swish(),
        _np_swish, _np_swish_grad, sample_scale=4.0),
    "clipped_identity": Function(
        "clipped_identity",
        {"composite": clipped_identity_composite, "py_function": clipped_identity_py_function,
         "custom_gradient": clipped_identity_custom_gradient, "opforge": clipped_identity_opforge},
        lambda: opforge.layers.ClippedIdentity(CLIP_MIN, CLIP_MAX, LEAK),
        _np_clip, _exact_clip_grad, sample_scale=2.0),
}


def layer(function: str, path: str) -> keras.layers.Layer:
    """The Keras layer of one path: opforge's own layer, or a Lambda around the path function."""
    f = FUNCTIONS[function]
    if path == "opforge":
        return f.opforge_layer()
    return keras.layers.Lambda(f.paths[path], name=f"{function}_{path}")


def sample(function: str, shape=(16, 37), seed: int = 0, dtype=np.float32) -> np.ndarray:
    """Inputs for the checks: normal values, kept 1e-3 away from the clipped identity's bounds
    (where its gradient jumps), so every path sees the same side of every kink."""
    f = FUNCTIONS[function]
    x = np.random.default_rng(seed).standard_normal(shape) * f.sample_scale
    if function == "clipped_identity":
        for bound in (CLIP_MIN, CLIP_MAX):
            x = np.where(np.abs(x - bound) < 1e-3, bound + 2e-3, x)
    return x.astype(dtype)


def forward_and_gradient(fn: Callable, x, w):
    """f(x) and the gradient of sum(w * f(x)) with respect to x (so d/dx = w * f'(x))."""
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = fn(x)
        loss = tf.reduce_sum(w * y)
    return y, tape.gradient(loss, x)


# --- the feature matrix ----------------------------------------------------------------------------

FEATURES = ("gradient", "tf.function", "SavedModel", ".keras", "GPU", "XLA")


@dataclass
class Entry:
    """One cell: whether it worked, and what was seen (a short reason when it did not)."""

    ok: bool
    note: str = ""

    def text(self) -> str:
        return ("yes" if self.ok else "no") + (f" ({self.note})" if self.note else "")


_BOILERPLATE = re.compile(r"^(Graph execution error:|Detected at node|<stack traces unavailable>|Traceback|"
                         r"File |\s|The op is created at|$)")


def _error_text(exc: BaseException) -> str:
    """The informative line of an error: TensorFlow's messages open with boilerplate ("Graph
    execution error:", stack traces) and carry long function names."""
    message = getattr(exc, "message", None) or str(exc)
    lines = [line for line in message.splitlines() if not _BOILERPLATE.match(line)] or [message.strip()]
    text = re.sub(r"__inference_\S*|\[_XlaMustCompile[^\]]*\]|\{\{node [^}]*\}\}|\s+on XLA_CPU_JIT", "", lines[0])
    text = re.sub(r"\s+", " ", text).replace("graph :", "graph:").strip()
    return f"{type(exc).__name__}: {text}"[:160]


def _compare(name: str, got, want, rtol: float, atol: float) -> Entry:
    got = np.asarray(got, np.float64)
    want = np.asarray(want, np.float64)
    if got.shape != want.shape:
        return Entry(False, f"{name}: shape {got.shape}, expected {want.shape}")
    err = np.abs(got - want)
    bound = atol + rtol * np.abs(want)
    if not np.all(err <= bound):
        return Entry(False, f"{name} off by up to {float(np.nanmax(err)):.3g}")
    return Entry(True)


def _check(run: Callable[[], Entry]) -> Entry:
    try:
        return run()
    except Exception as exc:  # noqa: BLE001 - the failure is the finding
        return Entry(False, _error_text(exc))


# Tolerances of a path against the exact float64 answer, in float32: the sigmoid of each path
# (Eigen's, NumPy's, XLA's) is within a few ulps; the products add a few more.
RTOL, ATOL = 1e-5, 1e-6


def _against_exact(f: Function, y, g, x, w) -> Entry:
    x64 = np.asarray(x, np.float64)
    forward = _compare("forward", y, f.exact(x64), RTOL, ATOL)
    if not forward.ok:
        return forward
    return _compare("gradient", g, f.exact_grad(x64, np.asarray(w, np.float64)), RTOL, ATOL)


_CHILD = """
import json, sys
import numpy as np
import tensorflow as tf
import keras
import opforge, opforge.tools.paths
folder = sys.argv[1]
data = np.load(folder + "/data.npz")
x, w = tf.constant(data["x"]), tf.constant(data["w"])
out = {}
from opforge.tools.paths import _error_text as first_line
for key in json.loads(open(folder + "/keys.json").read()):
    try:
        loaded = tf.saved_model.load(f"{folder}/{key}.savedmodel")
        y, g = loaded.forward_and_gradient(x, w)
        out["saved/" + key] = {"y": y.numpy().tolist(), "g": g.numpy().tolist()}
    except Exception as exc:
        out["saved/" + key] = {"error": first_line(exc)}
    try:
        model = keras.saving.load_model(f"{folder}/{key}.keras")
        out["keras/" + key] = {"y": np.asarray(model(x)).tolist()}
    except Exception as exc:
        out["keras/" + key] = {"error": first_line(exc)}
        try:
            model = keras.saving.load_model(f"{folder}/{key}.keras", safe_mode=False)
            np.asarray(model(x))
            out["keras/" + key]["unsafe_ok"] = True
        except Exception:
            pass
print("RESULT " + json.dumps(out))
"""


def _module(fn: Callable, width: int) -> tf.Module:
    """A module whose one signature returns f(x) and the gradient of sum(w * f(x))."""

    class Module(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, width], tf.float32)] * 2)
        def forward_and_gradient(self, x, w):
            return forward_and_gradient(fn, x, w)

    return Module()


def _saving_checks(functions: List[str], x: np.ndarray, w: np.ndarray) -> Dict[Tuple[str, str, str], Entry]:
    """SavedModel and .keras: saved here, loaded and run in a fresh Python process (a loader
    in this process would still find py_function's Python callables, which a real consumer of
    the file does not have)."""
    results: Dict[Tuple[str, str, str], Entry] = {}
    with tempfile.TemporaryDirectory(prefix="opforge_paths_") as folder:
        keys = []
        np.savez(f"{folder}/data.npz", x=x, w=w)
        for name in functions:
            f = FUNCTIONS[name]
            for path, fn in f.paths.items():
                key = f"{name}.{path}"
                keys.append(key)

                try:
                    tf.saved_model.save(_module(fn, x.shape[1]), f"{folder}/{key}.savedmodel")
                except Exception as exc:  # noqa: BLE001
                    results[(name, path, "SavedModel")] = Entry(False, "save: " + _error_text(exc))
                try:
                    model = keras.Sequential([keras.Input((x.shape[1],)), layer(name, path)])
                    model.save(f"{folder}/{key}.keras")
                except Exception as exc:  # noqa: BLE001
                    results[(name, path, ".keras")] = Entry(False, "save: " + _error_text(exc))
        Path(folder, "keys.json").write_text(json.dumps(keys))
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
        proc = subprocess.run([sys.executable, "-c", _CHILD, folder], capture_output=True, text=True,
                              timeout=600, env=env)
        lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
        if not lines:
            reason = (proc.stderr.strip().splitlines() or ["no output"])[-1][:140]
            for name in functions:
                for path in PATHS:
                    for feature in ("SavedModel", ".keras"):
                        results.setdefault((name, path, feature), Entry(False, f"loader process failed: {reason}"))
            return results
        loaded = json.loads(lines[-1][len("RESULT "):])
    for name in functions:
        f = FUNCTIONS[name]
        for path in PATHS:
            key = f"{name}.{path}"
            if (name, path, "SavedModel") not in results:
                r = loaded.get("saved/" + key, {"error": "not run"})
                results[(name, path, "SavedModel")] = (
                    Entry(False, "load in a fresh process: " + r["error"]) if "error" in r
                    else _against_exact(f, r["y"], r["g"], x, w))
            if (name, path, ".keras") not in results:
                r = loaded.get("keras/" + key, {"error": "not run"})
                if "error" in r:
                    note = "load: " + r["error"]
                    if r.get("unsafe_ok"):
                        note = "loads only with safe_mode=False"
                    results[(name, path, ".keras")] = Entry(False, note)
                else:
                    results[(name, path, ".keras")] = _compare("forward", r["y"], f.exact(np.float64(x)), RTOL, ATOL)
    return results


def _gpu_check(f: Function, fn: Callable, path: str, x, w) -> Entry:
    if not tf.config.list_physical_devices("GPU"):
        return Entry(False, "no GPU")
    if path == "opforge":
        from tensorflow.python.framework import kernels

        op = "Opforge>Swish" if f.name == "swish" else "Opforge>ClippedIdentity"
        if not any(k.device_type == "GPU" for k in kernels.get_registered_kernels_for_op(op).kernel):
            return Entry(False, "no GPU kernel in this build")
    with tf.device("/GPU:0"):
        xg, wg = tf.identity(x), tf.identity(w)
        y, g = forward_and_gradient(fn, xg, wg)
    entry = _against_exact(f, y, g, x, w)
    if entry.ok and path == "py_function":
        entry.note = "NumPy runs on the CPU, with copies"
    return entry


def feature_matrix(functions=tuple(FUNCTIONS)) -> Dict[Tuple[str, str, str], Entry]:
    """{(function, path, feature): Entry}, every entry from running that capability here."""
    results: Dict[Tuple[str, str, str], Entry] = {}
    for name in functions:
        f = FUNCTIONS[name]
        x_np = sample(name)
        w_np = np.random.default_rng(1).standard_normal(x_np.shape).astype(np.float32)
        x, w = tf.constant(x_np), tf.constant(w_np)
        for path, fn in f.paths.items():
            def eager(fn=fn):
                y, g = forward_and_gradient(fn, x, w)
                if g is None:
                    return Entry(False, "no gradient")
                return _against_exact(f, y, g, x_np, w_np)

            def graph(fn=fn):
                y, g = tf.function(lambda a, b: forward_and_gradient(fn, a, b))(x, w)
                return _against_exact(f, y, g, x_np, w_np)

            def xla(fn=fn):
                y, g = tf.function(lambda a, b: forward_and_gradient(fn, a, b), jit_compile=True)(x, w)
                return _against_exact(f, y, g, x_np, w_np)

            results[(name, path, "gradient")] = _check(eager)
            results[(name, path, "tf.function")] = _check(graph)
            results[(name, path, "GPU")] = _check(lambda fn=fn, path=path: _gpu_check(f, fn, path, x, w))
            results[(name, path, "XLA")] = _check(xla)
    # One input for the saved files of both functions: normal values off the clip bounds.
    x_np = sample("clipped_identity", (4, 37), seed=3)
    w_np = np.random.default_rng(4).standard_normal(x_np.shape).astype(np.float32)
    results.update(_saving_checks(list(functions), x_np, w_np))
    return results


def format_matrix(matrix: Dict[Tuple[str, str, str], Entry], functions=tuple(FUNCTIONS)) -> str:
    """The matrix as a table; entries with a note get a numbered footnote."""
    notes: List[str] = []
    rows = []
    for name in functions:
        for path in PATHS:
            cells = []
            for feature in FEATURES:
                entry = matrix[(name, path, feature)]
                cell = "yes" if entry.ok else ("no GPU" if entry.note == "no GPU" else "NO")
                if entry.note and entry.note != "no GPU":
                    notes.append(entry.note)
                    cell += f" [{len(notes)}]"
                cells.append(cell)
            rows.append([f"{name} {path}"] + cells)
    widths = [max(len(r[i]) for r in rows + [["function path", *FEATURES]]) + 2 for i in range(len(FEATURES) + 1)]
    lines = ["".join(h.ljust(wd) for h, wd in zip(["function path", *FEATURES], widths)).rstrip()]
    lines.append("-" * len(lines[0]))
    lines += ["".join(c.ljust(wd) for c, wd in zip(r, widths)).rstrip() for r in rows]
    lines += [f"  [{i}] {n}" for i, n in enumerate(notes, 1)]
    return "\n".join(lines)


# --- timings -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sizes:
    """Forward: an activation over [forward_rows, width] (large enough that the op, not the
    call, dominates); training step: Dense(inputs -> width) -> activation -> Dense(1) on a
    batch, mean squared error, SGD; model.fit: `fit_steps` steps per call."""

    forward_rows: int
    batch: int
    width: int
    inputs: int
    repeats: int
    fit_steps: int
    fit_rounds: int


FULL = Sizes(forward_rows=1024, batch=256, width=1024, inputs=32, repeats=50, fit_steps=30, fit_rounds=6)
QUICK = Sizes(forward_rows=32, batch=32, width=64, inputs=8, repeats=2, fit_steps=3, fit_rounds=1)
MODES = ("forward eager", "forward tf.function", "step eager", "step tf.function", "model.fit step")


def _model(function: str, path: str, sizes: Sizes) -> keras.Model:
    keras.utils.set_random_seed(0)  # the same weights for every path
    model = keras.Sequential([
        keras.Input((sizes.inputs,)),
        keras.layers.Dense(sizes.width),
        layer(function, path),
        keras.layers.Dense(1),
    ])
    # jit_compile=False: on a GPU Keras's "auto" would compile with XLA, which py_function cannot.
    model.compile(optimizer=keras.optimizers.SGD(1e-3), loss="mse", jit_compile=False)
    return model


def _step(model: keras.Model):
    optimizer = keras.optimizers.SGD(1e-3)
    optimizer.build(model.trainable_variables)
    loss_fn = keras.losses.MeanSquaredError()

    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return step


class _StepTimes(keras.callbacks.Callback):
    """The time between the ends of consecutive training batches (steady-state steps of fit)."""

    def __init__(self):
        super().__init__()
        self.times: List[float] = []
        self._last: Optional[float] = None

    def on_train_begin(self, logs=None):
        self._last = None

    def on_train_batch_end(self, batch, logs=None):
        now = time.perf_counter()
        if self._last is not None:
            self.times.append(now - self._last)
        self._last = now


def timings(function: str, sizes: Sizes = FULL) -> Dict[str, Dict[str, float]]:
    """{mode: {path: median seconds}} for one function, each mode timed interleaved over paths."""
    f = FUNCTIONS[function]
    rng = np.random.default_rng(5)
    x = tf.constant(rng.standard_normal((sizes.forward_rows, sizes.width)).astype(np.float32) * f.sample_scale)
    out: Dict[str, Dict[str, float]] = {}
    out["forward eager"] = interleaved({p: (lambda fn=fn: fn(x)) for p, fn in f.paths.items()}, sizes.repeats)
    graphs = {p: tf.function(fn) for p, fn in f.paths.items()}
    out["forward tf.function"] = interleaved({p: (lambda g=g: g(x)) for p, g in graphs.items()}, sizes.repeats)

    xs = tf.constant(rng.standard_normal((sizes.batch, sizes.inputs)).astype(np.float32))
    ys = tf.constant(rng.standard_normal((sizes.batch, 1)).astype(np.float32))
    models = {p: _model(function, p, sizes) for p in PATHS}
    eager_steps = {p: _step(m) for p, m in models.items()}
    out["step eager"] = interleaved({p: (lambda s=s: s(xs, ys)) for p, s in eager_steps.items()}, sizes.repeats)
    graph_steps = {p: tf.function(_step(m)) for p, m in models.items()}
    out["step tf.function"] = interleaved({p: (lambda s=s: s(xs, ys)) for p, s in graph_steps.items()},
                                          sizes.repeats)

    n = sizes.batch * (sizes.fit_steps + 1)
    fx = rng.standard_normal((n, sizes.inputs)).astype(np.float32)
    fy = rng.standard_normal((n, 1)).astype(np.float32)
    times: Dict[str, List[float]] = {p: [] for p in PATHS}
    for m in models.values():  # warm-up: trace the train function
        m.fit(fx[: 2 * sizes.batch], fy[: 2 * sizes.batch], batch_size=sizes.batch, epochs=1, verbose=0)
    for r in range(sizes.fit_rounds):
        k = r % len(PATHS)
        for p in PATHS[k:] + PATHS[:k]:
            cb = _StepTimes()
            models[p].fit(fx, fy, batch_size=sizes.batch, epochs=1, verbose=0, shuffle=False, callbacks=[cb])
            times[p] += cb.times
    out["model.fit step"] = {p: statistics.median(t) for p, t in times.items()}
    return out


def format_timings(function: str, result: Dict[str, Dict[str, float]], sizes: Sizes) -> str:
    lines = [f"{function}: forward over [{sizes.forward_rows}, {sizes.width}] float32; training step of "
             f"Dense({sizes.inputs} -> {sizes.width}) -> {function} -> Dense(1), batch {sizes.batch} "
             "(ms, median, interleaved; in brackets: x the opforge path's time)"]
    head = f"{'path':<17}" + "".join(f"{m:>24}" for m in MODES)
    lines += [head, "-" * len(head)]
    for p in PATHS:
        cells = []
        for m in MODES:
            t, base = result[m][p], result[m]["opforge"]
            cells.append(f"{t * 1e3:.3f}" + ("" if p == "opforge" else f" ({t / base:.1f}x)"))
        lines.append(f"{p:<17}" + "".join(f"{c:>24}" for c in cells))
    return "\n".join(lines)


def run(quick: bool = False, as_json: bool = False, functions=tuple(FUNCTIONS), repeats: Optional[int] = None) -> int:
    """`opforge bench paths`: the timings of every path, then the feature matrix."""
    from opforge._machine import machine

    sizes = QUICK if quick else FULL
    # The matrix retraces on purpose (one tf.function per path and capability).
    tf.get_logger().setLevel("ERROR")
    if repeats is not None:
        sizes = Sizes(**{**sizes.__dict__, "repeats": repeats})
    start = time.perf_counter()
    results = {name: timings(name, sizes) for name in functions}
    matrix = feature_matrix(tuple(functions))
    if as_json:
        print(json.dumps({
            "machine": machine(),
            "sizes": sizes.__dict__,
            "timings_ms": {n: {m: {p: t * 1e3 for p, t in r.items()} for m, r in res.items()}
                           for n, res in results.items()},
            "features": {f"{n} {p}": {feat: {"ok": matrix[(n, p, feat)].ok, "note": matrix[(n, p, feat)].note}
                                      for feat in FEATURES}
                         for n in functions for p in PATHS},
        }, indent=2))
        return 0
    print(f"machine: {machine()}")
    print(f"TensorFlow {tf.__version__}, Keras {keras.__version__}; intra-op threads: "
          f"{tf.config.threading.get_intra_op_parallelism_threads() or 'default'}")
    for name in functions:
        print()
        print(format_timings(name, results[name], sizes))
    print()
    print("feature matrix (each entry from running it here; SavedModel and .keras loaded in a fresh process)")
    print(format_matrix(matrix, tuple(functions)))
    print(f"\n{time.perf_counter() - start:.0f} s")
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    """`opforge bench paths [--quick] [--json] [--repeats N] [FUNCTION ...]`."""
    parser = argparse.ArgumentParser(
        prog="opforge bench paths",
        description="The four paths to a custom activation (composite in a Lambda, tf.py_function with a "
                    "gradient, tf.custom_gradient, opforge's C++ op), for Swish and the clipped identity: "
                    "forward and training-step times in eager, tf.function and model.fit, and a feature "
                    "matrix checked by running each.")
    parser.add_argument("functions", nargs="*", help="swish, clipped_identity (default: both)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes and two rounds (a smoke run, seconds)")
    parser.add_argument("--json", action="store_true", help="machine-readable output: the timings and the feature matrix")
    parser.add_argument("--repeats", type=int, default=None, help="rounds of the interleaved timings")
    args = parser.parse_args(argv)
    unknown = [f for f in args.functions if f not in FUNCTIONS]
    if unknown:
        parser.error(f"unknown function(s) {', '.join(unknown)}; known: {', '.join(FUNCTIONS)}")
    from opforge._loader import LoadError

    try:
        return run(args.quick, args.json, tuple(args.functions or FUNCTIONS), args.repeats)
    except LoadError as exc:
        print(f"opforge bench paths: {exc}", file=sys.stderr)
        return 1

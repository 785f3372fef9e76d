"""The child process of tests/test_keras_backends.py: every opforge layer in one Keras (the one
KERAS_BACKEND or TF_USE_LEGACY_KERAS chose), built, run on fixed weights and inputs, trained a few
steps where it has weights, saved and loaded. Writes its outputs to <dir>/<role>/<layer>.npz and
its `.keras` files beside them; with `--compare ROLE` it also loads that role's `.keras` files and
checks their outputs here against the ones that role wrote. Prints one line per check; exits 1 on
the first failure."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np

import opforge  # noqa: F401  (registers the layers)
from opforge._keras import framework

keras = framework()
import opforge.layers as L  # noqa: E402

# name -> (constructor arguments, input shape, exact across backends)
CASES = {
    "LeakyReLU": (dict(negative_slope=0.1), (2, 5, 5, 3), True),
    "Swish": ({}, (2, 5, 5, 3), True),
    "ClippedIdentity": (dict(clip_min=-0.5, clip_max=0.5, leak=0.1), (2, 5, 5, 3), True),
    "Conv2DTranspose": (dict(filters=4, kernel_size=3, strides=2, padding="same"), (2, 5, 5, 3), True),
    "ConvBNLeaky": (dict(filters=4, kernel_size=3), (2, 6, 6, 3), False),
    "BilinearResize": (dict(height=7, width=9), (2, 5, 5, 3), True),
    "InverseMfcc": (dict(n_mels=16, n_fft=64, n_iter=4, seed=0), (1, 8, 5), True),
    "YoloDecode": (dict(anchors=[[10, 13], [16, 30]], num_classes=2, input_size=32), (1, 4, 4, 14), True),
}


def weights_for(model):
    rng = np.random.default_rng(1)
    out = []
    for w in model.weights:
        shape = tuple(w.shape)
        value = rng.standard_normal(shape) * 0.2
        if "variance" in w.name or "gamma" in w.name:
            value = np.abs(value) + 0.5
        out.append(value.astype(np.dtype(w.dtype.name if hasattr(w.dtype, "name") else w.dtype)))
    return out


def build(name, style="functional"):
    kwargs, shape, _ = CASES[name]
    if style == "sequential":
        return keras.Sequential([keras.Input(shape[1:]), getattr(L, name)(**kwargs)])
    if style == "subclassed":
        class Wrapped(keras.Model):
            def __init__(self):
                super().__init__()
                self.inner = getattr(L, name)(**kwargs)

            def call(self, x):
                return self.inner(x)

        model = Wrapped()
        model(np.zeros(shape, np.float32))
        return model
    inputs = keras.Input(shape[1:])
    return keras.Model(inputs, getattr(L, name)(**kwargs)(inputs))


def outputs(model, x):
    y = model(x, training=False)
    y = list(y) if isinstance(y, (list, tuple)) else [y]
    return [np.asarray(v) for v in y]


def check(condition, what):
    print(("ok   " if condition else "FAIL ") + what, flush=True)
    if not condition:
        sys.exit(1)


def same(a, b, exact):
    if len(a) != len(b):
        return False
    for u, v in zip(a, b):
        if u.shape != v.shape:
            return False
        if exact and not np.array_equal(u, v, equal_nan=True):
            return False
        if not exact and not np.allclose(u, v, rtol=1e-5, atol=1e-5):
            return False
    return True


def train(name):
    """A few steps of a small network around the layer: the loss falls."""
    kwargs, shape, _ = CASES[name]
    inputs = keras.Input(shape[1:])
    x = keras.layers.Conv2D(3, 1)(inputs) if len(shape) == 4 else inputs
    x = getattr(L, name)(**kwargs)(x)
    x = keras.layers.Flatten()(x)
    model = keras.Model(inputs, keras.layers.Dense(1)(x))
    model.compile(keras.optimizers.Adam(0.01), "mse")
    rng = np.random.default_rng(2)
    x = rng.standard_normal((16,) + shape[1:]).astype(np.float32)
    y = rng.standard_normal((16, 1)).astype(np.float32)
    history = model.fit(x, y, epochs=8, batch_size=8, verbose=0).history["loss"]
    check(np.isfinite(history).all() and history[-1] < history[0], f"{name} trains: loss {history[0]:.4f} -> {history[-1]:.4f}")


def main():
    folder, role = Path(sys.argv[1]), sys.argv[2]
    compare = sys.argv[sys.argv.index("--compare") + 1] if "--compare" in sys.argv else None
    styles = ("functional", "sequential", "subclassed") if role == "tf_keras" else ("functional",)
    mine = folder / role
    mine.mkdir(parents=True, exist_ok=True)
    for name, (kwargs, shape, exact) in CASES.items():
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        for style in styles:
            if style == "sequential" and name == "YoloDecode":  # four outputs: Sequential takes one
                continue
            model = build(name, style)
            model.set_weights(weights_for(model))
            y = outputs(model, x)
            check(all(np.isfinite(v).all() for v in y), f"{name} ({style}) runs")
            if style != "functional":
                continue
            np.savez(mine / f"{name}.npz", *y)
            formats = [".keras", ".h5"] if role == "tf_keras" else [".keras"]
            for suffix in formats:
                path = mine / f"{name}{suffix}"
                model.save(path)
                loaded = keras.models.load_model(path)
                check(same(outputs(loaded, x), y, True), f"{name} saved as {suffix} and loaded: the same outputs")
            if role == "tf_keras":
                path = mine / f"{name}_savedmodel"
                model.save(path, save_format="tf")
        if name in ("LeakyReLU", "Swish", "ClippedIdentity", "Conv2DTranspose", "ConvBNLeaky", "BilinearResize"):
            train(name)
        if compare:
            other = folder / compare
            loaded = keras.models.load_model(other / f"{name}.keras")
            theirs = list(np.load(other / f"{name}.npz").values())
            check(same(outputs(loaded, x), theirs, exact),
                  f"{name}: the .keras file of {compare} gives its outputs here" + ("" if exact else " (to 1e-5)"))
    print("DONE", json.dumps({"backend": keras.backend.backend(), "role": role}))


if __name__ == "__main__":
    main()

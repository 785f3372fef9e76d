"""The four paths to an activation (opforge.tools.paths): they agree numerically, the feature matrix is
what running each capability gives, `opforge bench paths --quick` runs; and what the specs of
swish and clipped_identity cannot say about both (XLA, the Keras layers); the rest is in
test_swish.py and test_clipped_identity.py."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

import opforge
from opforge.tools import paths
from helpers import bits_equal

CLI = str(Path(sys.executable).parent / "opforge")
FUNCTIONS = tuple(paths.FUNCTIONS)


def _grads(fn, x, w):
    y, g = paths.forward_and_gradient(fn, x, w)
    return y.numpy(), g.numpy()


# --- the four paths agree ----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [tf.float32, tf.float64])
@pytest.mark.parametrize("function", FUNCTIONS)
def test_the_four_paths_agree_forward_and_gradient(function, dtype):
    f = paths.FUNCTIONS[function]
    x_np = paths.sample(function, (64, 33), seed=1, dtype=dtype.as_numpy_dtype)
    w_np = np.random.default_rng(2).standard_normal(x_np.shape).astype(dtype.as_numpy_dtype)
    x, w = tf.constant(x_np), tf.constant(w_np)
    exact_y = f.exact(x_np.astype(np.float64))
    exact_g = f.exact_grad(x_np.astype(np.float64), w_np.astype(np.float64))
    rtol = 1e-5 if dtype == tf.float32 else 1e-12
    results = {}
    for path, fn in f.paths.items():
        for mode, run in (("eager", fn), ("tf.function", tf.function(fn))):
            y, g = _grads(run, x, w)
            assert y.dtype == g.dtype == dtype.as_numpy_dtype, (path, mode)
            np.testing.assert_allclose(y, exact_y, rtol=rtol, atol=rtol / 10, err_msg=f"{path} {mode} forward")
            np.testing.assert_allclose(g, exact_g, rtol=rtol, atol=rtol / 10, err_msg=f"{path} {mode} gradient")
            results[path, mode] = (y, g)
    # The C++ op computes TensorFlow's formulas in TensorFlow's order: the same bits as the
    # tf.custom_gradient path (and, for the clipped identity, as the composite: a clip, a select
    # and one product).
    same = ["custom_gradient"] + (["composite"] if function == "clipped_identity" else [])
    for path in same:
        for mode in ("eager", "tf.function"):
            for ours, theirs in zip(results["opforge", mode], results[path, mode]):
                assert bits_equal(ours, theirs), (path, mode)


@pytest.mark.parametrize("function", FUNCTIONS)
def test_the_paths_agree_on_special_values(function):
    """NaN, infinities, signed zeros and huge values: every path gives the opforge op's forward;
    the gradients agree where they are defined the same way (see opforge.tools.paths: the composite
    clipped identity's gradient is 0 at +-inf, and TensorFlow's swish gradient is NaN there)."""
    f = paths.FUNCTIONS[function]
    x = tf.constant([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, -1e-30, 3e38, -3e38, 1.0, -1.0, 20.0, -20.0],
                    tf.float32)
    w = tf.ones_like(x)
    y_ref, g_ref = _grads(f.paths["opforge"], x, w)
    finite = np.isfinite(x.numpy())
    for path, fn in f.paths.items():
        y, g = _grads(fn, x, w)
        np.testing.assert_allclose(y, y_ref, rtol=1e-6, err_msg=path)  # NaN where NaN
        assert np.array_equal(np.signbit(y[:2]), np.signbit(y_ref[:2])), path
        np.testing.assert_allclose(g[finite], g_ref[finite], rtol=1e-6, err_msg=path)
    if function == "swish":
        assert np.isnan(g_ref[2]) and np.isnan(g_ref[3])  # as tf.nn.silu's gradient
    else:
        assert g_ref[2] == g_ref[3] == np.float32(paths.LEAK) and g_ref[4] == 1.0


def test_clipped_identity_composite_is_exact_forward_and_leaks_outside():
    x = tf.constant([-3.0, -1.0, -0.5, 0.0, 1.0, 2.5, np.inf, -np.inf, np.nan])
    y, g = _grads(paths.clipped_identity_composite, x, tf.ones_like(x))
    assert bits_equal(y, tf.clip_by_value(x, -1.0, 1.0).numpy())
    np.testing.assert_array_equal(g[:6], np.float32([0.01, 1, 1, 1, 1, 0.01]))
    assert list(g[6:8]) == [0.0, 0.0]  # the documented difference at +-inf
    # tf.clip_by_value alone gives no gradient outside: why the composite needs stop_gradient.
    _, g_clip = _grads(lambda v: tf.clip_by_value(v, -1.0, 1.0), x[:6], tf.ones([6]))
    np.testing.assert_array_equal(g_clip, np.float32([0, 1, 1, 1, 1, 0]))


# --- the ops beyond their specs ----------------------------------------------------------------


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16, tf.float32, tf.float64])
def test_xla_lowerings_match_the_cpu_kernels(dtype):
    x = tf.cast(tf.constant(np.random.default_rng(4).standard_normal(1000) * 4), dtype)
    w = tf.cast(tf.constant(np.random.default_rng(5).standard_normal(1000)), dtype)
    # clipped_identity: an HLO lowering with the kernel's formulas; swish: an FFI custom call to
    # its kernel. Both the same bits.
    for fn, exact in ((lambda v: opforge.ops.clipped_identity(v, -1.5, 2.0, -0.3), True),
                      (opforge.ops.swish, True)):
        eager = paths.forward_and_gradient(fn, x, w)
        jit = tf.function(lambda a, b: paths.forward_and_gradient(fn, a, b), jit_compile=True)(x, w)
        for e, j in zip(eager, jit):
            if exact:
                assert bits_equal(e.numpy(), j.numpy()), dtype
            else:  # XLA's logistic is not Eigen's: a few ulps
                eps = float(np.finfo(np.float32).eps) if dtype in (tf.float32,) else (
                    1e-15 if dtype == tf.float64 else (2**-7 if dtype == tf.bfloat16 else 2**-10))
                e64, j64 = (tf.cast(t, tf.float64).numpy() for t in (e, j))
                assert np.all(np.abs(e64 - j64) <= 8 * eps * (np.abs(e64) + 1)), dtype


def test_layers_serialize_and_train_with_jit_compile(tmp_path):
    x = np.random.default_rng(6).standard_normal((64, 8)).astype(np.float32)
    y = np.random.default_rng(7).standard_normal((64, 1)).astype(np.float32)
    if tf.config.list_physical_devices("GPU"):
        pytest.skip("swish runs under XLA as an FFI custom call, XLA:CPU only (tests/test_xla_ffi.py)")
    for layer in (opforge.layers.Swish(name="act"), opforge.layers.ClippedIdentity(-0.5, 2.0, 0.1, name="act")):
        assert layer.supports_jit
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16), layer, keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse", jit_compile=True)
        history = model.fit(x, y, epochs=2, batch_size=16, verbose=0)
        assert np.all(np.isfinite(history.history["loss"]))
        path = tmp_path / f"{type(layer).__name__}.keras"
        model.save(path)
        loaded = keras.saving.load_model(path)
        assert loaded.get_layer("act").get_config() == layer.get_config()
        assert bits_equal(np.asarray(loaded(x)), np.asarray(model(x)))
    config = opforge.layers.ClippedIdentity(-0.5, 2.0, 0.1).get_config()
    assert (config["clip_min"], config["clip_max"], config["leak"]) == (-0.5, 2.0, 0.1)
    assert keras.saving.get_registered_name(opforge.layers.Swish) == "opforge>Swish"


def test_layers_output_the_compute_dtype_under_mixed_precision():
    before = keras.config.dtype_policy()
    try:
        for policy, dtype in (("mixed_float16", "float16"), ("mixed_bfloat16", "bfloat16")):
            keras.config.set_dtype_policy(policy)
            x = tf.constant(np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4))
            for layer in (opforge.layers.Swish(), opforge.layers.ClippedIdentity()):
                out = layer(x)
                assert out.dtype == dtype, (policy, layer)
            np.testing.assert_allclose(np.float32(opforge.layers.Swish()(x)), tf.nn.silu(x), rtol=1e-2, atol=1e-2)
    finally:
        keras.config.set_dtype_policy(before)


# --- the feature matrix comes from running -------------------------------------------------------


@pytest.fixture(scope="module")
def matrix():
    return paths.feature_matrix()


def test_feature_matrix_entries(matrix):
    gpu = bool(tf.config.list_physical_devices("GPU"))
    for function in FUNCTIONS:
        for path in paths.PATHS:
            for feature in paths.FEATURES:
                entry = matrix[function, path, feature]
                where = (function, path, feature, entry.note)
                if feature == "GPU" and not gpu:
                    assert not entry.ok and entry.note == "no GPU", where
                elif path == "py_function" and feature in ("SavedModel", "XLA"):
                    # No Python in a SavedModel loaded elsewhere; XLA cannot compile a Python call.
                    assert not entry.ok and entry.note, where
                elif feature == "GPU" and path == "opforge" and not tf.test.is_built_with_cuda():
                    assert not entry.ok, where
                else:
                    assert entry.ok, where
    assert "fresh process" in matrix["swish", "py_function", "SavedModel"].note
    text = paths.format_matrix(matrix)
    assert "swish opforge" in text and "clipped_identity composite" in text


def test_feature_matrix_finds_a_path_that_breaks(monkeypatch):
    """A path with no gradient, and one that cannot be traced: the matrix says so, because it
    runs them (nothing in it is typed in)."""
    f = paths.FUNCTIONS["swish"]

    def no_gradient(x):
        return tf.stop_gradient(x * tf.sigmoid(x))

    def eager_only(x):
        return tf.constant(x.numpy()) * tf.sigmoid(x)  # .numpy() fails in a graph

    broken = paths.Function("broken", {"composite": no_gradient, "py_function": f.paths["py_function"],
                                       "custom_gradient": eager_only, "opforge": f.paths["opforge"]},
                            f.opforge_layer, f.exact, f.exact_grad, f.sample_scale)
    monkeypatch.setitem(paths.FUNCTIONS, "broken", broken)
    found = paths.feature_matrix(("broken",))
    assert not found["broken", "composite", "gradient"].ok
    assert not found["broken", "custom_gradient", "tf.function"].ok
    assert not found["broken", "custom_gradient", "XLA"].ok
    # A Lambda around an unregistered function does not load from .keras (registered ones do).
    assert not found["broken", "composite", ".keras"].ok
    assert found["broken", "opforge", "gradient"].ok and found["broken", "opforge", ".keras"].ok


# --- the command ------------------------------------------------------------------------------


def test_bench_paths_quick_runs():
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run([CLI, "bench", "paths", "--quick"], capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert out.startswith("machine: ") and "cores" in out.splitlines()[0]
    for function in FUNCTIONS:
        assert f"{function}: forward over" in out
        for path in paths.PATHS:
            assert f"{function} {path}" in out  # a matrix row
    for mode in paths.MODES:
        assert mode in out
    for feature in paths.FEATURES:
        assert feature in out
    proc = subprocess.run([CLI, "bench", "paths", "nonsense"], capture_output=True, text=True, env=env)
    assert proc.returncode == 2 and "unknown function" in proc.stderr

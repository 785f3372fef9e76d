"""XLA: tf.function(jit_compile=True) over opforge ops.

LeakyReLU, ElementMul and ClippedIdentity (and their gradient ops) lower to XLA as HLO
(cc/ops/<op>/<op>_xla.cc); ResizeBilinear, Swish and their gradients run as FFI custom calls to
their own kernels (tests/test_xla_ffi.py covers every such op). The results under jit_compile=True equal
the CPU kernels':
- bit for bit: leaky_relu (forward, mask, gradient), element_mul (forward, and the gradient of an
  operand that was not broadcast), resize_bilinear (forward and gradient);
- within a few float32 ulps where XLA's CPU backend computes differently from the CPU kernel:
  the gradient of a broadcast element_mul operand (XLA sums in its own order, with FMAs).
The other ops run as XLA FFI custom calls (tests/test_xla_ffi.py); in a build without XLA's FFI
they raise opforge's error naming the op and jit_compile=False. The kernels work also when the
library is loaded after a first XLA compilation (fresh process).
"""
from __future__ import annotations

import types
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import opforge
from opforge.ops import _xla
from opforge.ops._common import lib

from helpers import run_python

LOWERED = _xla.lowered_ops()
needs_xla = pytest.mark.skipif(not LOWERED, reason="opforge was built without XLA kernels")
FLOATS = (tf.float32, tf.float64, tf.float16, tf.bfloat16)


def jit(fn):
    return tf.function(fn, jit_compile=True)


def assert_bits_equal(expected, actual):
    expected, actual = np.asarray(expected), np.asarray(actual)
    assert expected.shape == actual.shape and expected.dtype == actual.dtype
    width = expected.dtype.itemsize
    as_bits = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64, 16: np.uint64}[width]
    e = expected.reshape(-1).view(as_bits) if expected.size else expected
    a = actual.reshape(-1).view(as_bits) if actual.size else actual
    assert np.array_equal(e, a), f"{np.sum(e != a)} of {expected.size} elements differ"


def assert_complex_close(expected, actual, magnitude):
    """Within 2 float32 ulps of |x| |y| per part (a complex product, with or without FMAs)."""
    bound = 2 * np.finfo(np.float32).eps * np.asarray(magnitude, np.float64)
    err = np.abs(expected.astype(np.complex128) - actual.astype(np.complex128))
    assert np.all(err <= bound), f"max error {err.max()}"


def samples(shape, dtype, seed=0, scale=4.0, specials=False):
    rng = np.random.default_rng(seed)
    values = rng.standard_normal(shape) * scale
    if specials and values.size >= 6:
        flat = values.reshape(-1)
        flat[:6] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40]
    if dtype.is_complex:
        values = values + 1j * rng.standard_normal(shape) * scale
    return tf.cast(tf.constant(values), dtype)


def test_lowered_ops_reported():
    if not LOWERED:
        pytest.skip("opforge was built without XLA kernels")
    for op in ("Opforge>LeakyRelu", "Opforge>LeakyReluWithMask", "Opforge>LeakyReluGrad",
               "Opforge>ElementMul", "Opforge>ElementMulGrad", "Opforge>ResizeBilinear",
               "Opforge>ResizeBilinearGrad"):
        assert op in LOWERED


# --- LeakyReLU: bit-exact -------------------------------------------------------------------


@needs_xla
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name)
@pytest.mark.parametrize("alpha", (0.2, -0.3, 1.5, 0.0))
def test_leaky_relu_equals_cpu(dtype, alpha):
    x = samples((7, 33), dtype, specials=True)
    assert_bits_equal(opforge.ops.leaky_relu(x, alpha).numpy(),
                      jit(lambda v: opforge.ops.leaky_relu(v, alpha))(x).numpy())
    eager = opforge.ops.leaky_relu_with_mask(x, alpha)
    compiled = jit(lambda v: opforge.ops.leaky_relu_with_mask(v, alpha))(x)
    for e, c in zip(eager, compiled):
        assert_bits_equal(e.numpy(), c.numpy())
    g = samples((7, 33), dtype, seed=1)
    assert_bits_equal(opforge.ops.leaky_relu_grad(g, x, alpha).numpy(),
                      jit(lambda u, v: opforge.ops.leaky_relu_grad(u, v, alpha))(g, x).numpy())


@needs_xla
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name)
def test_leaky_relu_tape_gradient_equals_cpu(dtype):
    x = samples((5, 9), dtype, seed=3)

    def grad(v):
        with tf.GradientTape() as tape:
            tape.watch(v)
            y = opforge.ops.leaky_relu(v, 0.3) * tf.cast(tf.range(45.0) / 7, dtype)[None, :9]
        return tape.gradient(y, v)

    assert_bits_equal(grad(x).numpy(), jit(grad)(x).numpy())


# --- ElementMul -----------------------------------------------------------------------------

SHAPES = (((5, 7), (5, 7)), ((3, 1, 4), (5, 1)), ((8, 1), (1, 9)), ((2, 3, 4, 5), (3, 1, 5)),
          ((6,), ()), ((1,), (3,)), ((4, 1), (4, 0)), ((2, 1, 3), (1, 3)), ((40, 30, 16), (16,)))


def _reduction_bound(g, other, target_shape, acc_eps):
    """|XLA - CPU| bound for a sum over the broadcast dims: both are sums of the same products in
    different orders (XLA's a tree, with fused multiply-adds), each within n * eps * sum|terms|
    of the exact sum."""
    terms = np.abs(np.asarray(g, np.complex128) * np.asarray(other, np.complex128))
    out_shape = terms.shape
    target = (1,) * (len(out_shape) - len(target_shape)) + tuple(target_shape)
    axes = tuple(d for d in range(len(out_shape)) if target[d] == 1 and out_shape[d] != 1)
    n = max(1, int(np.prod([out_shape[d] for d in axes])))
    return 2 * n * acc_eps * terms.sum(axis=axes).reshape(target_shape)


@needs_xla
@pytest.mark.parametrize("dtype", (tf.float32, tf.float64, tf.float16, tf.bfloat16, tf.int32,
                                   tf.complex64), ids=lambda d: d.name)
@pytest.mark.parametrize("shapes", SHAPES, ids=lambda s: f"{list(s[0])}x{list(s[1])}")
def test_element_mul_equals_cpu(dtype, shapes):
    sa, sb = shapes
    a, b = samples(sa, dtype, seed=1), samples(sb, dtype, seed=2)
    out_shape = np.broadcast_shapes(sa, sb)
    # Forward: one multiply per element, bit-exact for real types. A complex product is
    # (ac - bd) + (ad + bc)i, which XLA contracts into fused multiply-adds: within 2 ulps.
    cpu_product = opforge.ops.element_mul(a, b).numpy()
    xla_product = jit(lambda u, v: opforge.ops.element_mul(u, v))(a, b).numpy()
    if dtype.is_complex:
        assert_complex_close(cpu_product, xla_product, np.abs(a.numpy()) * np.abs(b.numpy()))
    else:
        assert_bits_equal(cpu_product, xla_product)
    if dtype in (tf.int32,):
        return
    g = samples(out_shape, dtype, seed=3)
    cpu = lib().opforge_element_mul_grad(g, a, b)
    xla = jit(lambda *t: lib().opforge_element_mul_grad(*t))(g, a, b)
    acc_eps = np.finfo(np.float64 if dtype in (tf.float64,) else np.float32).eps
    for shape, operand, other, c, x in ((sa, "a", b, cpu[0], xla[0]), (sb, "b", a, cpu[1], xla[1])):
        c, x = c.numpy(), x.numpy()
        assert c.shape == x.shape == tuple(shape), operand
        broadcast = tuple(np.broadcast_shapes(shape, out_shape)) != tuple(shape) or (
            int(np.prod(shape)) != int(np.prod(out_shape)))
        if not broadcast:  # one product per element
            if dtype.is_complex:
                assert_complex_close(c, x, np.abs(g.numpy()) * np.abs(np.broadcast_to(other.numpy(), out_shape)))
            else:
                assert_bits_equal(c, x)
            continue
        other_full = np.broadcast_to(tf.math.conj(other).numpy(), out_shape)
        bound = _reduction_bound(g.numpy(), other_full, shape, acc_eps)
        if dtype in (tf.float16, tf.bfloat16):  # one rounding to the element type
            eps = {tf.float16: 2.0**-10, tf.bfloat16: 2.0**-7}[dtype]
            bound = bound + np.abs(c.astype(np.float64)) * eps + 1e-30
        err = np.abs(c.astype(np.complex128) - x.astype(np.complex128))
        assert np.all(err <= bound), f"grad_{operand}: max error {err.max()}, bound {bound.min()}"


@needs_xla
@pytest.mark.parametrize("need", ((True, False), (False, True)))
def test_element_mul_grad_skipped_output(need):
    a, b, g = samples((3, 4), tf.float32), samples((4,), tf.float32), samples((3, 4), tf.float32)
    out = jit(lambda *t: lib().opforge_element_mul_grad(*t, need_grad_a=need[0],
                                                        need_grad_b=need[1]))(g, a, b)
    assert out[0].shape == ((3, 4) if need[0] else (0,))
    assert out[1].shape == ((4,) if need[1] else (0,))


@needs_xla
def test_element_mul_tape_gradient_under_jit():
    a, b = samples((6, 1, 5), tf.float32, seed=4), samples((7, 1), tf.float32, seed=5)

    def grads(u, v):
        with tf.GradientTape() as tape:
            tape.watch([u, v])
            y = opforge.ops.element_mul(u, v)
        return tape.gradient(y, [u, v])

    for e, c in zip(grads(a, b), jit(grads)(a, b)):
        np.testing.assert_allclose(e.numpy(), c.numpy(), rtol=1e-6, atol=1e-5)


# --- ResizeBilinear -------------------------------------------------------------------------

CONVENTIONS = {"legacy": (False, False), "align_corners": (True, False), "half_pixel": (False, True)}
SIZES = (((5, 7), (11, 13)), ((16, 12), (7, 5)), ((1, 1), (3, 4)), ((6, 6), (6, 6)), ((9, 4), (1, 1)),
         ((20, 20), (41, 39)))


@needs_xla
@pytest.mark.parametrize("convention", CONVENTIONS)
@pytest.mark.parametrize("sizes", SIZES, ids=lambda s: f"{s[0][0]}x{s[0][1]}-{s[1][0]}x{s[1][1]}")
@pytest.mark.parametrize("dtype", (tf.float32, tf.float64, tf.float16, tf.uint8), ids=lambda d: d.name)
def test_resize_bilinear_equals_cpu(convention, sizes, dtype):
    ac, hp = CONVENTIONS[convention]
    (h, w), size = sizes
    x = samples((2, h, w, 3), tf.float64, seed=h * w, scale=40.0)
    x = tf.cast(tf.abs(x) if dtype == tf.uint8 else x, dtype)
    kwargs = dict(align_corners=ac, half_pixel_centers=hp)
    cpu = lib().opforge_resize_bilinear(x, list(size), **kwargs).numpy()
    xla = jit(lambda v: lib().opforge_resize_bilinear(v, list(size), **kwargs))(x).numpy()
    assert cpu.shape == xla.shape == (2, *size, 3) and xla.dtype == np.float32
    assert_bits_equal(cpu, xla)  # an FFI custom call to the same kernel
    if not x.dtype.is_floating:
        return
    g = samples((2, *size, 3), tf.float32, seed=7)
    cpu_grad = lib().opforge_resize_bilinear_grad(g, x, **kwargs)
    xla_grad = jit(lambda u, v: lib().opforge_resize_bilinear_grad(u, v, **kwargs))(g, x)
    assert_bits_equal(cpu_grad.numpy(), xla_grad.numpy())


@needs_xla
@pytest.mark.parametrize("convention", CONVENTIONS)
def test_resize_bilinear_tape_gradient_under_jit(convention):
    ac, hp = CONVENTIONS[convention]
    x = samples((1, 6, 5, 2), tf.float32, seed=9)

    def grad(v):
        with tf.GradientTape() as tape:
            tape.watch(v)
            y = opforge.ops.resize_bilinear(v, [9, 11], align_corners=ac, half_pixel_centers=hp)
            loss = tf.reduce_sum(y * tf.reshape(tf.range(198.0) / 50, y.shape))
        return tape.gradient(loss, v)

    np.testing.assert_allclose(grad(x).numpy(), jit(grad)(x).numpy(), rtol=1e-5, atol=1e-5)


@needs_xla
def test_resize_bilinear_size_must_be_compile_time_constant():
    x = samples((1, 4, 4, 1), tf.float32)
    # A size derived from shapes is known when XLA compiles: fine.
    out = jit(lambda v: lib().opforge_resize_bilinear(v, tf.shape(v)[1:3] * 2))(x)
    assert out.shape == (1, 8, 8, 1)
    # A size argument of the function too (TensorFlow compiles for its value).
    assert jit(lambda v, s: lib().opforge_resize_bilinear(v, s))(x, tf.constant([6, 5])).shape == (1, 6, 5, 1)
    # (Even one computed from an argument's values: TensorFlow then compiles for those values.)
    # A size drawn at run time is not.
    with pytest.raises(tf.errors.InvalidArgumentError, match="compile-time constant"):
        jit(lambda v: lib().opforge_resize_bilinear(v, tf.random.uniform([2], 2, 5, tf.int32)))(x)


# --- ops without XLA kernels: opforge's error -----------------------------------------------


def test_op_without_xla_kernel_names_op_and_fix(monkeypatch):
    """Built against a TensorFlow whose wheel lacks XLA's FFI, the ops without an HLO lowering have
    no XLA kernel: adding one to a graph traced for XLA raises opforge's error. Here every op has
    one, so the guard is put on a module holding the real op functions as such a build would."""
    module = types.ModuleType("library_without_xla_kernels")
    for attr in ("Opforge_BiasLeakyRelu", "opforge_bias_leaky_relu"):
        setattr(module, attr, getattr(lib(), attr))
    for state in ("_lowered", "_late", "_ffi"):
        monkeypatch.setattr(_xla, state, getattr(_xla, state))
    _xla.guard_ops(module, Path("/no/library/without/xla"))
    x = tf.ones([1, 4, 4, 8])
    bias = tf.ones([8])
    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        jit(lambda v: module.opforge_bias_leaky_relu(v, bias))(x)
    message = str(info.value)
    assert "opforge" in message and "Opforge>BiasLeakyRelu" in message
    assert "bias_leaky_relu" in message and "jit_compile=False" in message
    assert "XLA_CPU_JIT" not in message
    # The same op outside XLA, and inside a function called from a jit-compiled one.
    assert tf.function(lambda v: module.opforge_bias_leaky_relu(v, bias))(x).shape == x.shape
    inner = tf.function(lambda v: module.opforge_bias_leaky_relu(v, bias))
    with pytest.raises(tf.errors.InvalidArgumentError, match="jit_compile=False"):
        jit(lambda v: inner(v) * 2)(x)
    # Raw op functions too.
    with pytest.raises(tf.errors.InvalidArgumentError, match="Opforge>BiasLeakyRelu"):
        jit(lambda v: module.Opforge_BiasLeakyRelu(features=v, bias=bias, alpha=0.2))(x)


def test_every_op_lowers_or_raises_opforge_error():
    """Each op either has an XLA kernel or its library functions carry opforge's guard."""
    module = lib()
    for attr in dir(module):
        if not attr.startswith("Opforge_"):
            continue
        op = "Opforge>" + attr[len("Opforge_"):]
        function = getattr(module, attr)
        snake = getattr(module, function.__name__)
        guarded = getattr(function, "_opforge_xla_guard", False) and getattr(snake, "_opforge_xla_guard", False)
        assert (op in LOWERED) != guarded, op


# --- load order: XLA compiled before opforge was loaded --------------------------------------


@needs_xla
def test_library_loaded_after_first_xla_compilation():
    result = run_python("""
        import numpy as np
        import tensorflow as tf
        # TensorFlow registers its XLA JIT kernels once, at the first compilation.
        print(tf.function(lambda v: v * 2, jit_compile=True)(tf.ones([3])).numpy())
        import opforge
        from opforge.ops import _xla
        assert _xla.registered_late(), "expected the late registration path"
        x = tf.constant(np.linspace(-3, 3, 50, dtype=np.float32))
        f = tf.function(lambda v: opforge.ops.leaky_relu(v, 0.3), jit_compile=True)
        assert np.array_equal(f(x).numpy(), opforge.ops.leaky_relu(x, 0.3).numpy())
        y = tf.function(lambda v: opforge.ops.resize_bilinear(v, [5, 7]), jit_compile=True)(
            tf.ones([1, 3, 3, 1]))
        assert y.shape == (1, 5, 7, 1)
        print("OK")
    """, timeout=240)
    assert result.returncode == 0 and "OK" in result.stdout, result.stdout + result.stderr

"""ElementMul beyond its spec (forward, numerical gradient, bad inputs and the rest run in
test_specs.py): overflow, conversions, gradients against TensorFlow's, second order, shape
functions, skipped operands."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import opforge
from helpers import bits_equal, special_values
from opforge.ops.element_mul import SHAPE_PAIRS

def make(shape, dtype, seed):
    if dtype.is_integer:
        rng = np.random.default_rng(seed)
        return tf.constant(rng.integers(-1000, 1000, size=shape), dtype)
    return special_values(shape, dtype, seed)


def second_order(fn, a, b, loss_of_gradients):
    """The gradient, with respect to a and b, of loss_of_gradients(d/da, d/db of sum(sin(fn(a, b))))."""
    with tf.GradientTape() as outer:
        outer.watch([a, b])
        with tf.GradientTape() as inner:
            inner.watch([a, b])
            y = tf.reduce_sum(tf.sin(fn(a, b)))
        ga, gb = inner.gradient(y, [a, b])
        z = loss_of_gradients(ga, gb)
    return outer.gradient(z, [a, b])


@pytest.mark.parametrize("dtype", [tf.int32, tf.int64], ids=lambda d: d.name)
def test_integer_overflow_wraps_like_tensorflow(dtype):
    big = np.iinfo(dtype.as_numpy_dtype).max
    a = tf.constant([big, big, -big, 3], dtype)
    b = tf.constant([2, big, 3, -1], dtype)
    assert bits_equal(opforge.ops.element_mul(a, b).numpy(), tf.multiply(a, b).numpy())


INTEGERS = [tf.int8, tf.uint8, tf.int16, tf.uint16, tf.int32, tf.uint32, tf.int64, tf.uint64]
COMPLEX = [tf.complex64, tf.complex128]


@pytest.mark.parametrize("dtype", INTEGERS, ids=lambda d: d.name)
def test_every_integer_width_wraps_like_tensorflow(dtype):
    info = np.iinfo(dtype.as_numpy_dtype)
    np_dtype = dtype.as_numpy_dtype
    a = np.array([info.max, info.max, info.min, info.min, 3, info.max // 2 + 1, 0, 1], np_dtype)
    b = np.array([2, info.max, info.max, info.min, info.max, 3, info.min, info.min], np_dtype)
    a, b = tf.constant(a), tf.constant(b)
    out = opforge.ops.element_mul(a, b)
    assert out.dtype == dtype
    assert bits_equal(out.numpy(), tf.multiply(a, b).numpy())
    # Broadcast, over the whole range.
    rng = np.random.default_rng(4)
    x = tf.constant(rng.integers(info.min, info.max, (3, 1, 5), endpoint=True, dtype=np_dtype))
    y = tf.constant(rng.integers(info.min, info.max, (4, 1), endpoint=True, dtype=np_dtype))
    assert bits_equal(opforge.ops.element_mul(x, y).numpy(), tf.multiply(x, y).numpy())


def complex_values(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    return tf.constant(rng.standard_normal(shape) + 1j * rng.standard_normal(shape), dtype)


@pytest.mark.parametrize("dtype", COMPLEX, ids=lambda d: d.name)
def test_complex_forward_is_tensorflows_bit_for_bit(dtype):
    for i, (sa, sb) in enumerate(SHAPE_PAIRS):
        a, b = complex_values(sa, dtype, 2 * i), complex_values(sb, dtype, 2 * i + 1)
        out = opforge.ops.element_mul(a, b)
        assert out.dtype == dtype
        assert bits_equal(out.numpy(), tf.multiply(a, b).numpy()), (sa, sb)


@pytest.mark.parametrize("dtype", COMPLEX, ids=lambda d: d.name)
def test_complex_non_finite_is_the_plain_formula(dtype):
    # (ac - bd) + (ad + bc)i without C99 Annex G's recovery: what TensorFlow's vectorised kernel
    # gives (its scalar tail recovers infinities, so TensorFlow's answer depends on the position).
    parts = [0.0, -0.0, 1.5, np.inf, -np.inf, np.nan]
    values = np.array([complex(r, i) for r in parts for i in parts])
    a = tf.constant(np.repeat(values, values.size), dtype)
    b = tf.constant(np.tile(values, values.size), dtype)
    out = opforge.ops.element_mul(a, b).numpy()
    real = dtype.real_dtype.as_numpy_dtype
    ar, ai = a.numpy().real.astype(real), a.numpy().imag.astype(real)
    br, bi = b.numpy().real.astype(real), b.numpy().imag.astype(real)
    with np.errstate(invalid="ignore"):
        assert bits_equal(out.real, ar * br - ai * bi)
        assert bits_equal(out.imag, ar * bi + ai * br)


@pytest.mark.parametrize("dtype", COMPLEX, ids=lambda d: d.name)
@pytest.mark.parametrize("shapes", SHAPE_PAIRS, ids=str)
def test_complex_gradient_is_tensorflows(dtype, shapes):
    # TensorFlow's _MulGrad: grad * conj(b) and conj(a) * grad, summed over broadcast dims.
    a, b = complex_values(shapes[0], dtype, 1), complex_values(shapes[1], dtype, 2)
    shape = tf.broadcast_static_shape(a.shape, b.shape)
    g = complex_values(shape, dtype, 3)
    ours = _grads(opforge.ops.element_mul, a, b, g)
    theirs = _grads(tf.multiply, a, b, g)
    for x, o, t in zip((a, b), ours, theirs):
        assert o.shape == x.shape and o.dtype == dtype
        if x.shape == shape:
            assert bits_equal(o.numpy(), t.numpy())  # one product per element
        else:  # a sum in another order
            tol = 1e-5 if dtype == tf.complex64 else 1e-13
            np.testing.assert_allclose(o.numpy(), t.numpy(), rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", COMPLEX, ids=lambda d: d.name)
def test_complex_gradient_of_one_operand_and_second_order(dtype):
    a, b = complex_values([3, 1, 4], dtype, 4), complex_values([5, 1], dtype, 5)
    for fn in (opforge.ops.element_mul, tf.multiply):
        with tf.GradientTape() as tape:
            tape.watch(a)
            y = fn(a, b)
        grad = tape.gradient(y, a)
        if fn is tf.multiply:
            np.testing.assert_allclose(ours_one.numpy(), grad.numpy(), rtol=1e-5)
        ours_one = grad

    def second(fn):
        return second_order(fn, a, b, lambda ga, gb: tf.reduce_sum(tf.math.real(ga * tf.math.conj(ga)))
                            + tf.reduce_sum(tf.math.real(tf.cos(gb))))

    tol = 1e-4 if dtype == tf.complex64 else 1e-11
    for o, t in zip(second(opforge.ops.element_mul), second(tf.multiply)):
        np.testing.assert_allclose(o.numpy(), t.numpy(), rtol=tol, atol=tol)


def test_python_numbers_and_numpy_convert_like_tf_multiply():
    x = tf.constant([1.5, -2.0], tf.float16)
    for a, b in [(x, 2), (3, x), (x, np.float32(0.5)), ([1.0, 2.0], [3.0, 4.0])]:
        out = opforge.ops.element_mul(a, b)
        expected = tf.multiply(a, b)
        assert out.dtype == expected.dtype
        assert bits_equal(out.numpy(), expected.numpy())


def _grads(fn, a, b, g):
    with tf.GradientTape() as tape:
        tape.watch([a, b])
        y = fn(a, b)
    return tape.gradient(y, [a, b], output_gradients=g)


@pytest.mark.parametrize("dtype", [tf.float32, tf.float64, tf.float16, tf.bfloat16], ids=lambda d: d.name)
@pytest.mark.parametrize("shapes", SHAPE_PAIRS, ids=str)
def test_gradient_against_tensorflow(dtype, shapes):
    rng = np.random.default_rng(3)
    a = tf.cast(rng.standard_normal(shapes[0]), dtype)
    b = tf.cast(rng.standard_normal(shapes[1]), dtype)
    shape = tf.broadcast_static_shape(a.shape, b.shape)
    g = tf.cast(tf.random.stateless_normal(shape, seed=[5, 6]), dtype)
    ours = _grads(opforge.ops.element_mul, a, b, g)
    theirs = _grads(tf.multiply, a, b, g)
    for x, o, t in zip((a, b), ours, theirs):
        assert o.shape == x.shape and o.dtype == dtype
        if x.shape == shape:
            # Not broadcast: one product per element, bit-exact.
            assert bits_equal(o.numpy(), t.numpy())
        else:
            # A sum over the broadcast dimensions: same terms, another summation order.
            # (opforge accumulates half and bfloat16 in float, so it is the more accurate one.)
            exact = np.sum(
                np.broadcast_to(g.numpy().astype(np.float64), shape)
                * np.broadcast_to((b if x is a else a).numpy().astype(np.float64), shape),
                axis=tuple(i for i in range(len(shape)) if i < len(shape) - len(x.shape) or x.shape[i - len(shape) + len(x.shape)] == 1 and shape[i] != 1),
            ).reshape(x.shape)
            tol = {tf.float32: 1e-5, tf.float64: 1e-12, tf.float16: 2e-3, tf.bfloat16: 1e-2}[dtype]
            scale = 1 + np.abs(exact)
            np.testing.assert_array_less(np.abs(o.numpy().astype(np.float64) - exact) / scale, tol)
            np.testing.assert_array_less(np.abs(t.numpy().astype(np.float64) - exact) / scale, 10 * tol)


@pytest.mark.parametrize("dtype", [tf.float32, tf.float64, tf.float16, tf.bfloat16], ids=lambda d: d.name)
@pytest.mark.parametrize("shapes", [((), ()), ((1,), ()), ((), (1, 1)), ((1, 1), (1,)), ((2, 1, 3), (2, 1, 3))], ids=str)
def test_gradient_with_nothing_to_sum_keeps_negative_zero(dtype, shapes):
    # Every dimension either operand was broadcast along has size 1: TensorFlow's gradient is
    # the product itself (g * b, a * g), so g = 1 and b = -0 give -0, which a sum 0 + x would
    # turn into +0. The signs of zero must be TensorFlow's exactly. (The -0 come from NumPy:
    # eager TensorFlow caches Python scalars by value, and -0.0 == 0.0 finds a cached +0.)
    def full(shape, value):
        return tf.constant(np.full(shape, value, np.float64).astype(dtype.as_numpy_dtype), dtype)

    a, b = full(shapes[0], -1.0), full(shapes[1], -0.0)
    assert np.signbit(b.numpy().astype(np.float64)).all()
    shape = tf.broadcast_static_shape(a.shape, b.shape)
    for g in (full(shape, 1.0), full(shape, -0.0)):
        ours = _grads(opforge.ops.element_mul, a, b, g)
        theirs = _grads(tf.multiply, a, b, g)
        for o, t in zip(ours, theirs):
            assert o.shape == t.shape
            assert bits_equal(o.numpy(), t.numpy())
    # The case of the issue: g = 1, b = -0 gives grad_a = -0 (and grad_b = a * g = -1).
    ga, gb = _grads(opforge.ops.element_mul, a, b, full(shape, 1.0))
    assert np.signbit(ga.numpy().astype(np.float64)).all()
    assert (gb.numpy().astype(np.float64) == -1.0).all()


@pytest.mark.parametrize("dtype", [tf.int32, tf.int64], ids=lambda d: d.name)
def test_integer_gradient_op_exact(dtype):
    # Tapes do not differentiate integers; the gradient op is checked against TensorFlow's own
    # formula for Mul's gradient (products reduced over BroadcastGradientArgs' axes).
    lib = opforge.ops._common.lib()
    a = make([3, 1, 4], dtype, 5)
    b = make([5, 1], dtype, 6)
    g = make([3, 5, 4], dtype, 7)
    ga, gb = lib.opforge_element_mul_grad(g, a, b)
    ra, rb = tf.raw_ops.BroadcastGradientArgs(s0=tf.shape(a), s1=tf.shape(b))
    assert bits_equal(ga.numpy(), tf.reshape(tf.reduce_sum(g * b, ra), a.shape).numpy())
    assert bits_equal(gb.numpy(), tf.reshape(tf.reduce_sum(a * g, rb), b.shape).numpy())


def test_second_order_gradient_matches_tensorflow():
    rng = np.random.default_rng(10)
    a = tf.constant(rng.standard_normal([3, 1, 4]))
    b = tf.constant(rng.standard_normal([5, 1]))

    def second(fn):
        return second_order(fn, a, b, lambda ga, gb: tf.reduce_sum(ga * ga) + tf.reduce_sum(tf.cos(gb)))

    for o, t in zip(second(opforge.ops.element_mul), second(tf.multiply)):
        np.testing.assert_allclose(o.numpy(), t.numpy(), rtol=1e-10, atol=1e-12)


def test_shape_function_broadcasts_known_dims_and_keeps_unknown():
    seen = {}

    @tf.function(input_signature=[tf.TensorSpec([None, 1, 3]), tf.TensorSpec([4, 1])])
    def f(a, b):
        y = opforge.ops.element_mul(a, b)
        with tf.GradientTape() as tape:
            tape.watch([a, b])
            z = opforge.ops.element_mul(a, b)
        ga, gb = tape.gradient(z, [a, b])
        seen.update(y=y.shape, ga=ga.shape, gb=gb.shape)
        return y

    f.get_concrete_function()
    assert seen["y"].as_list() == [None, 4, 3]
    assert seen["ga"].as_list() == [None, 1, 3]
    assert seen["gb"].as_list() == [4, 1]

    @tf.function(input_signature=[tf.TensorSpec(None), tf.TensorSpec([2])])
    def g(a, b):
        seen["u"] = opforge.ops.element_mul(a, b).shape
        return a

    g.get_concrete_function()
    assert seen["u"].rank is None


def test_shape_function_rejects_incompatible_known_dims_at_graph_build():
    @tf.function(input_signature=[tf.TensorSpec([2, 3]), tf.TensorSpec([4, 3])])
    def f(a, b):
        return opforge.ops.element_mul(a, b)

    with pytest.raises(ValueError, match=r"ElementMul: a and b must have broadcast-compatible shapes, got \[2, 3\] "
                                         r"and \[4, 3\] \(dimension -2 is 2 vs 4\)"):
        f.get_concrete_function()


def test_inputs_are_not_modified_in_place():
    a = tf.constant([1.0, 2.0, 3.0])
    b = tf.constant([4.0, 5.0, 6.0])
    before = a.numpy().copy(), b.numpy().copy()
    opforge.ops.element_mul(a, b)
    _grads(opforge.ops.element_mul, a, b, tf.ones([3]))
    assert bits_equal(a.numpy(), before[0]) and bits_equal(b.numpy(), before[1])


def test_gradient_skips_operands_that_need_none():
    rng = np.random.default_rng(11)
    a = tf.constant(rng.standard_normal([4, 1, 6]).astype(np.float32))
    b = tf.constant(rng.standard_normal([5, 1]).astype(np.float32))
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(a)  # b is a constant: its gradient is not computed
        y = opforge.ops.element_mul(a, b)
    only_a = tape.gradient(y, a)
    full_a, _ = _grads(opforge.ops.element_mul, a, b, tf.ones_like(y))
    assert bits_equal(only_a.numpy(), full_a.numpy())

    lib = opforge.ops._common.lib()
    g = tf.ones([4, 5, 6])
    ga, gb = lib.opforge_element_mul_grad(g, a, b, need_grad_b=False)
    assert ga.shape == a.shape and gb.shape == [0]
    ga2, gb2 = lib.opforge_element_mul_grad(g, a, b, need_grad_a=False)
    assert ga2.shape == [0] and gb2.shape == b.shape

    @tf.function
    def f(x, c):
        with tf.GradientTape() as t:
            t.watch(x)
            z = opforge.ops.element_mul(x, c)
        return t.gradient(z, x)

    graph = f.get_concrete_function(a, b).graph
    grad_ops = [o for o in graph.get_operations() if o.type == "Opforge>ElementMulGrad"]
    assert grad_ops and all(not o.get_attr("need_grad_b") for o in grad_ops)
    assert grad_ops[0].outputs[1].shape.as_list() == [0]
    assert bits_equal(f(a, b).numpy(), full_a.numpy())


def test_bfloat16_every_bit_pattern_matches_tensorflow():
    # All 65,536 bfloat16 values against all of them in reverse order (and a broadcast row):
    # TensorFlow's bits wherever its product is a number, NaN where it is NaN.
    bits = np.arange(65536, dtype=np.uint16)
    a = tf.bitcast(tf.constant(bits), tf.bfloat16)
    b = tf.bitcast(tf.constant(bits[::-1].copy()), tf.bfloat16)
    for x, y in ((a, b), (tf.reshape(a, [256, 256]), tf.reshape(b, [256, 256])[:1])):
        ours, theirs = opforge.ops.element_mul(x, y), tf.multiply(x, y)
        o_nan = np.isnan(tf.cast(ours, tf.float32).numpy())
        t_nan = np.isnan(tf.cast(theirs, tf.float32).numpy())
        assert (o_nan == t_nan).all()
        o_bits, t_bits = tf.bitcast(ours, tf.uint16).numpy(), tf.bitcast(theirs, tf.uint16).numpy()
        assert (o_bits[~o_nan] == t_bits[~t_nan]).all()

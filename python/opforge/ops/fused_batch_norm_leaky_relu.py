"""Batch normalisation (training mode, batch statistics) and LeakyReLU fused:
`opforge.ops.fused_batch_norm_leaky_relu`, Keras's BatchNormalization(training=True) followed by
`tf.nn.leaky_relu` in two passes over the data, and its gradient in two more; C++ ops
`Opforge>FusedBatchNormLeakyRelu` and `Opforge>FusedBatchNormLeakyReluGrad`."""
from __future__ import annotations

import collections
from typing import Optional

import numpy as np
import tensorflow as tf

from opforge.ops._common import FLOAT_DTYPES, check_dtype, invalid_argument, lib, python_number, to_tensor
from opforge.ops.spec import BadInput, Case, OpSpec, Sample, SpeedCase, SpeedRun, scaled_batch, speed_normal

__all__ = ["fused_batch_norm_leaky_relu", "FusedBatchNormLeakyReluResult"]
OP_NAMES = ("Opforge>FusedBatchNormLeakyRelu", "Opforge>FusedBatchNormLeakyReluGrad")

_OP = "FusedBatchNormLeakyRelu"

FusedBatchNormLeakyReluResult = collections.namedtuple(
    "FusedBatchNormLeakyReluResult", ["y", "batch_mean", "batch_variance"])
FusedBatchNormLeakyReluResult.__doc__ = """What `fused_batch_norm_leaky_relu` returns: y (the
shape and dtype of x), batch_mean and batch_variance [C] (float32, or float64 for float64 x)."""


def _number(name: str, value, minimum_exclusive: bool) -> float:
    v = python_number(_OP, name, value)
    ok = np.isfinite(v) and abs(v) <= 3.4e38 and (v > 0 if minimum_exclusive else v >= 0)
    if not ok:
        raise invalid_argument(_OP, name, "finite and > 0" if minimum_exclusive else "finite and >= 0", repr(value))
    return v


def fused_batch_norm_leaky_relu(x, scale, offset, epsilon: float = 1e-3, alpha: float = 0.2,
                                name: Optional[str] = None) -> FusedBatchNormLeakyReluResult:
    """`leaky_relu(batch_norm(x))` with the batch's statistics, as Keras's
    `BatchNormalization(...)(x, training=True)` followed by `tf.nn.leaky_relu(·, alpha)`.

    Per channel (the last axis) over every other position: mean, biased variance (Keras updates
    its moving variance with it), `y = leaky_relu(x * s + (offset - mean * s))` with
    `s = rsqrt(variance + epsilon) * scale` (tf.nn.batch_normalization's formula). Two passes over
    x where Keras 3 runs a chain of separate ops; the gradient (to x, scale and offset) takes two
    more. half and bfloat16 x compute in float with float32 scale and offset (Keras runs batch
    norm of half inputs in float32); float64 x takes float64 scale and offset.

    Args:
      x: [..., C] float16, bfloat16, float32 or float64.
      scale, offset: [C] (gamma and beta), any float dtype, cast to float32 (float64 for
        float64 x).
      epsilon: > 0. alpha: LeakyReLU's slope, >= 0.

    Returns:
      FusedBatchNormLeakyReluResult(y, batch_mean, batch_variance). The statistics carry no
      gradient (they feed the moving averages, as TensorFlow's FusedBatchNorm's do).
    """
    x = to_tensor(_OP, "x", x)
    check_dtype(_OP, "x", x, FLOAT_DTYPES)
    u = tf.float64 if x.dtype == tf.float64 else tf.float32
    scale = to_tensor(_OP, "scale", scale, dtype_hint=u)
    offset = to_tensor(_OP, "offset", offset, dtype_hint=u)
    for arg, t in (("scale", scale), ("offset", offset)):
        if not t.dtype.is_floating:
            raise invalid_argument(_OP, arg, f"a float tensor (computed as {u.name} for {x.dtype.name} x)",
                                   t.dtype.name)
    scale, offset = tf.cast(scale, u), tf.cast(offset, u)
    out = lib().opforge_fused_batch_norm_leaky_relu(
        x, scale, offset, epsilon=_number("epsilon", epsilon, True), alpha=_number("alpha", alpha, False),
        name=name)
    return FusedBatchNormLeakyReluResult(*out)


@tf.RegisterGradient("Opforge>FusedBatchNormLeakyRelu")
def _gradient(op, grad_y, grad_mean, grad_variance):
    del grad_mean, grad_variance  # the statistics feed the moving averages: no gradient
    x, scale, offset = op.inputs
    _, mean, variance = op.outputs
    return tuple(lib().opforge_fused_batch_norm_leaky_relu_grad(
        grad_y, x, scale, offset, mean, variance, epsilon=op.get_attr("epsilon"), alpha=op.get_attr("alpha")))


tf.no_gradient("Opforge>FusedBatchNormLeakyReluGrad")


# --- the reference: Keras's BatchNormalization + tf.nn.leaky_relu ----------------------------------


def keras_reference(x, scale, offset, epsilon=1e-3, alpha=0.2):
    """What Keras computes, in float64: `keras.layers.BatchNormalization(epsilon=epsilon)` in
    training mode with gamma = scale and beta = offset, then `tf.nn.leaky_relu`; the batch mean
    and (biased) variance from `tf.nn.moments`; rounded to the op's output dtypes. (Keras's own
    float32 moments lose up to ~1e-3 of the spread when the mean is 1e4 times the spread; the op
    sums in double. tests/test_fused_conv_bn.py compares with Keras in float32 as it runs.)"""
    import keras

    out_u = tf.float64 if x.dtype == tf.float64 else tf.float32
    work = tf.float64
    xw = tf.cast(x, work)
    bn = keras.layers.BatchNormalization(epsilon=epsilon, dtype=work.name)
    bn.build(xw.shape)
    bn.gamma.assign(tf.cast(scale, work))
    bn.beta.assign(tf.cast(offset, work))
    y = tf.cast(tf.nn.leaky_relu(bn(xw, training=True), alpha), x.dtype)
    axes = list(range(len(x.shape) - 1))
    mean, variance = tf.nn.moments(xw, axes)
    return y, tf.cast(mean, out_u), tf.cast(variance, out_u)


def exact_reference(x, scale, offset, epsilon=1e-3, alpha=0.2):
    """The batch norm's textbook forward and gradient in float64 TensorFlow ops, term by term:
    the answer for inputs holding inf and NaN. Autodiff through Keras's graph adds infinite
    partial terms that cancel in the exact gradient (inf - inf = NaN where the answer is +-inf:
    with scale = inf, dx = inf x a finite sum), so the gradient is written out:
    dx = scale * inv * (g - mean(g) - xhat * mean(g * xhat)), dscale = sum(g * xhat),
    doffset = sum(g), with g the upstream through the leaky ReLU (batch statistics are outputs,
    their upstream gradients are not propagated, as TensorFlow's fused batch norm)."""
    out_u = tf.float64 if x.dtype == tf.float64 else tf.float32
    work = tf.float64
    axes = list(range(len(x.shape) - 1))
    # epsilon and alpha are float attrs (float32), as in TensorFlow's own batch norm and LeakyRelu.
    epsilon, alpha = float(np.float32(epsilon)), float(np.float32(alpha))

    @tf.custom_gradient
    def fn(xw, gamma, beta):
        mean = tf.reduce_mean(xw, axes)
        variance = tf.reduce_mean(tf.square(xw - mean), axes)
        inv = 1 / tf.sqrt(variance + epsilon)  # tf.math.rsqrt is not correctly rounded in float64
        xhat = (xw - mean) * inv
        z = xhat * gamma + beta
        y = tf.where(z > 0, z, z * alpha)

        def gradient(dy, dmean, dvariance):
            del dmean, dvariance
            g = tf.where(z > 0, dy, dy * alpha)
            dx = gamma * inv * (g - tf.reduce_mean(g, axes) - xhat * tf.reduce_mean(g * xhat, axes))
            return dx, tf.reduce_sum(g * xhat, axes), tf.reduce_sum(g, axes)

        return (y, mean, variance), gradient

    y, mean, variance = fn(tf.cast(x, work), tf.cast(scale, work), tf.cast(offset, work))
    return tf.cast(y, x.dtype), tf.cast(mean, out_u), tf.cast(variance, out_u)


def _case(name, shape, seed, epsilon=1e-3, alpha=0.1, mean=0.0, spread=1.0):
    c = shape[-1]
    rng = np.random.default_rng(seed)
    x = rng.normal(mean, spread, shape)
    return Case(name, (Sample(shape, values=x),
                       Sample((c,), values=rng.uniform(0.5, 1.5, c), dtype=tf.float32),
                       Sample((c,), values=rng.normal(0, 0.5, c), dtype=tf.float32)),
                dict(epsilon=epsilon, alpha=alpha))


def _gcase(name, shape, seed, alpha=0.1):
    c = shape[-1]
    rng = np.random.default_rng(seed)
    return Case(name, (Sample(shape, values=rng.normal(0, 1, shape)),
                       Sample((c,), values=rng.uniform(0.5, 1.5, c)),
                       Sample((c,), values=rng.normal(0, 0.5, c))),
                dict(epsilon=1e-3, alpha=alpha))


def _speed(shape, label, gradient):
    def setup(size, dtype):
        s = scaled_batch(shape, size)
        x = speed_normal(s, dtype)
        gamma, beta = tf.ones(s[-1]), tf.zeros(s[-1])  # float32 for half and bfloat16 x, as Keras's
        import keras

        # In half or bfloat16, Keras's mixed policy of that dtype: float32 variables and
        # statistics, the input and output in x's dtype (what the op does).
        bn = keras.layers.BatchNormalization(dtype=None if dtype == tf.float32 else f"mixed_{dtype.name}")
        bn.build(s)
        dy = speed_normal(s, dtype)

        def ours_fn():
            return fused_batch_norm_leaky_relu(x, gamma, beta, alpha=0.1).y

        def theirs_fn():
            return tf.nn.leaky_relu(bn(x, training=True), 0.1)

        def with_grad(fn, variables):
            @tf.function
            def f():
                with tf.GradientTape() as tape:
                    tape.watch(x)
                    y = fn()
                return tape.gradient(y, [x] + variables, output_gradients=dy)
            return f

        if gradient:
            cands = {"opforge": with_grad(ours_fn, []), "tf": with_grad(theirs_fn, [])}
        else:
            cands = {"opforge": tf.function(ours_fn), "tf": tf.function(theirs_fn)}
        what = "forward+gradient" if gradient else "forward"
        return SpeedRun(f"{label} {list(s)} {what}, training mode "
                        "(rival: Keras 3 BatchNormalization + tf.nn.leaky_relu in tf.function)", cands)

    return SpeedCase(setup, max_repeats=30)


_CALL = "opforge.ops.fused_batch_norm_leaky_relu"

SPECS = (
    OpSpec(
        name="fused_batch_norm_leaky_relu",
        op=fused_batch_norm_leaky_relu,
        reference=keras_reference,
        exact_reference=exact_reference,
        reference_name="Keras BatchNormalization(training=True) + tf.nn.leaky_relu, float64",
        dtypes=FLOAT_DTYPES,
        cases=(
            _case("NHWC", (4, 5, 6, 8), 1),
            _case("2-D, alpha 0, epsilon 1e-5", (64, 3), 2, epsilon=1e-5, alpha=0.0),
            _case("mean away from 0", (3, 7, 7, 4), 3, mean=3.0, spread=0.5),
            _case("one row", (1, 5), 4, alpha=0.3),
            _case("rows past one chunk", (2, 30, 30, 3), 5),
        ),
        # float64: epsilon is a float32 attr (as FusedBatchNorm's), 1e-3 + 4.7e-11 in float64.
        forward_tolerance={"float64": 1e-9, "float32": 2e-5, "float16": 4e-3, "bfloat16": 3e-2},
        gradient_cases=(_gcase("grad NHWC", (2, 3, 3, 3), 7), _gcase("grad 2-D alpha 0.3", (9, 2), 8, alpha=0.3)),
        gradient_tolerance=1e-6,
        determinism_case=_case("yolo-sized", (4, 52, 52, 32), 9),
        speed=(_speed((8, 104, 104, 128), "Darknet BN", True), _speed((8, 104, 104, 128), "Darknet BN", False),
               _speed((8, 52, 52, 256), "Darknet BN", True)),
        bad_inputs={
            "scalar x": BadInput(f"{_CALL}(tf.ones([]), tf.ones([1]), tf.ones([1]))", ("x", "at least 1-D")),
            "scale shape": BadInput(f"{_CALL}(tf.ones([2, 3]), tf.ones([2]), tf.ones([3]))",
                                    ("FusedBatchNormLeakyRelu", "scale", "[3]", "[2]")),
            "graph offset shape": BadInput(
                f"tf.function(lambda x: {_CALL}(x, tf.ones([3]), tf.ones([4])), "
                "input_signature=[tf.TensorSpec([None, 3], tf.float32)]).get_concrete_function()",
                ("FusedBatchNormLeakyRelu", "offset", "[4]"), "ValueError"),
            "epsilon zero": BadInput(f"{_CALL}(tf.ones([2, 3]), tf.ones([3]), tf.ones([3]), epsilon=0.0)",
                                     ("epsilon", "> 0", "0.0")),
            "alpha negative": BadInput(f"{_CALL}(tf.ones([2, 3]), tf.ones([3]), tf.ones([3]), alpha=-1)",
                                       ("alpha", ">= 0", "-1")),
            "scale dtype": BadInput(f"{_CALL}(tf.ones([2, 3], tf.float16), tf.ones([3], tf.int32), tf.ones([3]))",
                                    ("scale", "a float tensor", "int32")),
            "int x": BadInput(f"{_CALL}(tf.ones([2, 3], tf.int32), tf.ones([3]), tf.ones([3]))", ("x", "int32")),
            "grad shape": BadInput(
                "lib().opforge_fused_batch_norm_leaky_relu_grad(tf.ones([2, 4]), tf.ones([2, 3]), tf.ones([3]), "
                "tf.ones([3]), tf.ones([3]), tf.ones([3]))",
                ("FusedBatchNormLeakyReluGrad", "grad")),
        },
    ),
)

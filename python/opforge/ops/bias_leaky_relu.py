"""A bias and LeakyReLU in one pass: `opforge.ops.bias_leaky_relu`, `tf.nn.leaky_relu(
tf.nn.bias_add(features, bias), alpha)` as one op with CPU and CUDA kernels (the epilogue of a
convolution TensorFlow ran, cuDNN on a GPU); C++ op `Opforge>BiasLeakyRelu`."""
from __future__ import annotations

from typing import Optional

import numpy as np
import tensorflow as tf

from opforge._export import STATE as _EXPORT
from opforge.ops._common import FLOAT_DTYPES, check_dtype, invalid_argument, lib, python_number, to_tensor
from opforge.ops.spec import BadInput, Case, OpSpec, Sample, SpeedCase, SpeedRun, scaled_batch, speed_normal

__all__ = ["bias_leaky_relu"]
OP_NAMES = ("Opforge>BiasLeakyRelu",)

_OP = "BiasLeakyRelu"
# The integer dtypes tf.nn.bias_add takes on the CPU; tf.nn.leaky_relu then casts to float32.
INT_DTYPES = (tf.int8, tf.uint8, tf.int16, tf.uint16, tf.int32, tf.uint32, tf.int64, tf.uint64)


def bias_leaky_relu(features, bias, alpha: float = 0.2, name: Optional[str] = None) -> tf.Tensor:
    """`tf.nn.leaky_relu(tf.nn.bias_add(features, bias), alpha)` in one pass (the same roundings:
    the sum, then the slope; half and bfloat16 computed in float and rounded once).

    Args:
      features: [..., C] float16, bfloat16, float32 or float64; or an integer dtype, as the
        TensorFlow chain takes: the sum then wraps in that dtype (TensorFlow's integer bias_add)
        and the activation is opforge's leaky_relu in float32 (the chain's output dtype).
      bias: [C], the dtype of features.
      alpha: the negative slope, >= 0.

    Gradients flow to features and bias (LeakyReluGrad on the output, and its sum over all but the
    last axis).
    """
    features = to_tensor(_OP, "features", features)
    check_dtype(_OP, "features", features, FLOAT_DTYPES + INT_DTYPES)
    bias = to_tensor(_OP, "bias", bias, dtype_hint=features.dtype)
    if bias.dtype != features.dtype:
        raise invalid_argument(_OP, "bias", f"the dtype of features ({features.dtype.name})", bias.dtype.name)
    value = python_number(_OP, "alpha", alpha, "a number >= 0")
    if not np.isfinite(value) or value < 0 or abs(value) > 3.4e38:
        raise invalid_argument(_OP, "alpha", "finite and >= 0", repr(alpha))
    if features.dtype in INT_DTYPES:
        return integer_bias_leaky_relu(_OP, features, bias, value)
    if _EXPORT.standard:  # tracing for export (opforge._export): TensorFlow's chain, the same roundings
        z = tf.nn.bias_add(features, bias) if features.shape.rank != 1 else tf.add(features, bias)
        return tf.nn.leaky_relu(z, alpha=value, name=name)
    return lib().opforge_bias_leaky_relu(features, bias, alpha=value, name=name)


def integer_bias_leaky_relu(op: str, features: tf.Tensor, bias: tf.Tensor, alpha: float) -> tf.Tensor:
    """The chain on integers: TensorFlow's bias_add (wrapping in the dtype), then opforge's
    leaky_relu, which casts to float32 as tf.nn.leaky_relu does. The shapes are checked as the
    C++ op checks them."""
    from opforge.ops.leaky_relu import leaky_relu

    def shape_error(argument, expected, given):
        # As the C++ op's shape function reports: ValueError while a graph is built.
        error = invalid_argument(op, argument, expected, given)
        return error if tf.executing_eagerly() else ValueError(error.message)

    rank = features.shape.rank
    if rank is not None and rank < 1:
        raise shape_error("features", "at least 1-D", f"shape {features.shape}")
    if bias.shape.rank is not None and bias.shape.rank != 1:
        raise shape_error("bias", "a 1-D tensor [channels]", f"shape {bias.shape}")
    channels, given = features.shape[-1], bias.shape[0]
    if channels is not None and given is not None and channels != given:
        raise shape_error("bias", f"[{channels}] (the last dimension of features)", f"[{given}]")
    z = tf.nn.bias_add(features[None], bias)[0] if rank == 1 else tf.nn.bias_add(features, bias)
    return leaky_relu(z, alpha=alpha)


@tf.RegisterGradient("Opforge>BiasLeakyRelu")
def _gradient(op, grad):
    # alpha >= 0: the output's sign is the pre-activation's, so the output tells the slope.
    gz = lib().opforge_leaky_relu_grad(grad, op.outputs[0], alpha=op.get_attr("alpha"))
    rank = tf.rank(gz)
    return gz, tf.reduce_sum(gz, axis=tf.range(rank - 1))


def tf_reference(features, bias, alpha=0.2):
    """tf.nn.bias_add then tf.nn.leaky_relu (in float32 for half and bfloat16, rounded once)."""
    work = tf.float64 if features.dtype == tf.float64 else tf.float32
    # tf.nn.bias_add wants 2-D or more; a 1-D input is one row.
    z = tf.nn.bias_add(tf.cast(features, work)[None] if features.shape.rank == 1 else tf.cast(features, work),
                       tf.cast(bias, work))
    if features.shape.rank == 1:
        z = z[0]
    return tf.cast(tf.nn.leaky_relu(z, alpha), features.dtype)


def _speed():
    def setup(size, dtype):
        shape = scaled_batch((8, 52, 52, 256), size)
        x, b = speed_normal(shape, dtype), speed_normal(shape[-1:], dtype)
        return SpeedRun(f"{list(shape)} + [{shape[-1]}] (rival: tf.nn.bias_add + tf.nn.leaky_relu)", {
            "opforge": tf.function(lambda: bias_leaky_relu(x, b, 0.1)),
            "tf": tf.function(lambda: tf.nn.leaky_relu(tf.nn.bias_add(x, b), 0.1))})

    return SpeedCase(setup, max_repeats=30)


_CALL = "opforge.ops.bias_leaky_relu"

SPECS = (
    OpSpec(
        name="bias_leaky_relu",
        op=bias_leaky_relu,
        reference=tf_reference,
        reference_name="tf.nn.bias_add + tf.nn.leaky_relu",
        dtypes=FLOAT_DTYPES,
        cases=(
            Case("NHWC with special values", (Sample((2, 5, 6, 7), specials=True), Sample((7,), seed=1)),
                 dict(alpha=0.1)),
            Case("2-D alpha 0", (Sample((33, 4), seed=2), Sample((4,), seed=3)), dict(alpha=0.0)),
            Case("1-D", (Sample((9,), seed=4), Sample((9,), seed=5)), dict(alpha=0.3)),
            Case("empty", (Sample((0, 3), seed=6), Sample((3,), seed=7)), dict(alpha=0.2)),
        ),
        forward_tolerance=0.0,
        gradient_cases=(Case("grad", (Sample((3, 4, 5), seed=8, away_from_zero=0.05), Sample((5,), seed=9)),
                             dict(alpha=0.2)),),
        speed=(_speed(),),
        bad_inputs={
            "bias shape": BadInput(f"{_CALL}(tf.ones([2, 3]), tf.ones([2]))", ("BiasLeakyRelu", "bias", "[3]", "[2]")),
            "graph bias shape": BadInput(
                f"tf.function(lambda x: {_CALL}(x, tf.ones([2])), "
                "input_signature=[tf.TensorSpec([None, 3], tf.float32)]).get_concrete_function()",
                ("BiasLeakyRelu", "bias", "[2]"), "ValueError"),
            "scalar features": BadInput(f"{_CALL}(tf.ones([]), tf.ones([1]))", ("features", "at least 1-D")),
            "negative alpha": BadInput(f"{_CALL}(tf.ones([2, 3]), tf.ones([3]), alpha=-1.0)", ("alpha", ">= 0", "-1.0")),
            "bias dtype": BadInput(f"{_CALL}(tf.ones([2, 3]), tf.ones([3], tf.float64))", ("bias", "float32", "float64")),
            "complex features": BadInput(f"{_CALL}(tf.complex(tf.ones([2, 3]), 0.0), tf.complex(tf.ones([3]), 0.0))",
                                         ("features", "complex64")),
            "int bias shape": BadInput(f"{_CALL}(tf.ones([2, 3], tf.int32), tf.ones([2], tf.int32))",
                                       ("bias", "[3]", "[2]")),
        },
    ),
)

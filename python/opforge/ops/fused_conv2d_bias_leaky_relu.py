"""A convolution with its bias and LeakyReLU fused: `opforge.ops.fused_conv2d_bias_leaky_relu`,
`tf.nn.leaky_relu(tf.nn.bias_add(tf.nn.conv2d(...), bias), alpha)` in one op (the inference
form of a Darknet Conv + BatchNorm + LeakyReLU block, batch norm folded into filter and bias);
C++ op `Opforge>FusedConv2DBiasLeakyRelu` (CPU)."""
from __future__ import annotations

import os
from typing import Optional

import numpy as np
import tensorflow as tf

from opforge._export import STATE as _EXPORT
from opforge.ops.bias_leaky_relu import integer_bias_leaky_relu
from opforge.ops._common import FLOAT_DTYPES, check_dtype, invalid_argument, lib, python_number, to_tensor
from opforge.ops._direct_conv import direct_conv2d, explicit_or_string
from opforge.ops.conv2d_transpose import _convert_padding, _get_sequence
from opforge.ops.spec import (BadInput, Case, OpSpec, Sample, SpeedCase, SpeedRun, scaled_batch, speed_normal,
                          tf_bfloat16_matmul_aborts)

__all__ = ["fused_conv2d_bias_leaky_relu"]
OP_NAMES = ("Opforge>FusedConv2DBiasLeakyRelu",)
# A CPU kernel only: on a GPU the layers run TensorFlow's convolution (cuDNN) instead.
CPU_ONLY = ("Opforge>FusedConv2DBiasLeakyRelu",)

_OP = "FusedConv2DBiasLeakyRelu"


def _alpha(alpha) -> float:
    value = python_number(_OP, "alpha", alpha, "a number >= 0")
    if not np.isfinite(value) or value < 0 or abs(value) > 3.4e38:
        raise invalid_argument(_OP, "alpha", "finite and >= 0", repr(alpha))
    return value


def fused_conv2d_bias_leaky_relu(input, filters, bias, strides, padding, alpha: float = 0.2,  # noqa: A002
                                 data_format: str = "NHWC", dilations=None,
                                 name: Optional[str] = None) -> tf.Tensor:
    """`leaky_relu(conv2d(input, filters, strides, padding, dilations) + bias, alpha)` in one op.

    The arguments are `tf.nn.conv2d`'s (NHWC only), plus `bias` [out_channels] and `alpha`
    (>= 0, as Keras's LeakyReLU). Where it runs:

    - 3x3 stride-1 convolutions with 16+ channels on each side, in float32 and float64:
      opforge's Winograd F(2x2, 3x3), the transformed filter kept between calls;
    - bfloat16, and the other float32 convolutions, where oneDNN is installed (PyPI's
      `onednn-cpu-gomp`, a dependency on x86-64 Linux; `opforge doctor` says whether it runs):
      oneDNN's convolution with the bias and the activation fused into it, the kernels
      TensorFlow's own convolutions run; bfloat16 at the CPU's bfloat16 rate (AVX512-BF16, AMX);
    - otherwise tiles of im2col and a matrix product (Eigen, the widest build the CPU has:
      AVX-512, AVX2+FMA or AVX).

    Either way each output gets its bias and activation before it is stored, where TensorFlow's
    unfused chain writes the convolution output and reads it back twice. half and bfloat16
    accumulate in float and round once.

    Gradients flow to input, filters and bias. For 3x3 stride-1 convolutions with 16 channels or
    more on each side the input gradient is this op again on the rotated filter (Winograd), and
    the filter gradient opforge's transposed-convolution filter gradient (Winograd's transposed
    transforms); otherwise opforge's transposed-convolution ops compute both.

    Raises:
      InvalidArgumentError: wrong ranks, channels that do not match, a bias that is not
        [out_channels], bad strides, dilations, paddings or alpha, data_format other than NHWC.
    """
    if data_format != "NHWC":
        raise invalid_argument(_OP, "data_format", '"NHWC" (the CPU layout)', repr(data_format))
    strides4 = _get_sequence(strides, 3, "strides", _OP)
    dilations4 = _get_sequence(dilations, 3, "dilations", _OP)
    padding, explicit = _convert_padding(padding, _OP)
    input = to_tensor(_OP, "input", input)  # noqa: A001
    check_dtype(_OP, "input", input, FLOAT_DTYPES + (tf.int32,))
    filters = to_tensor(_OP, "filters", filters, dtype_hint=input.dtype)
    bias = to_tensor(_OP, "bias", bias, dtype_hint=input.dtype)
    for arg, t in (("filters", filters), ("bias", bias)):
        if t.dtype != input.dtype:
            raise invalid_argument(_OP, arg, f"the dtype of input ({input.dtype.name})", t.dtype.name)
    if _EXPORT.standard:  # tracing for export (opforge._export): TensorFlow's chain, the same values
        pads = padding if not explicit else [explicit[i:i + 2] for i in range(0, 8, 2)]
        z = tf.nn.conv2d(input, filters, strides4, pads, dilations=dilations4)
        if input.dtype == tf.int32:
            return integer_bias_leaky_relu(_OP, z, bias, _alpha(alpha))
        return tf.nn.leaky_relu(tf.nn.bias_add(z, bias), alpha=_alpha(alpha), name=name)
    if input.dtype == tf.int32:
        # As the TensorFlow chain takes int32: its integer convolution and bias_add (wrapping),
        # then opforge's leaky_relu in float32 (the chain's output dtype). The float kernels'
        # checks run first, on an empty float call of the same shapes and attributes.
        lib().opforge_fused_conv2d_bias_leaky_relu(
            tf.zeros(tf.concat([[0], tf.shape(input)[1:]], 0)), tf.zeros(tf.shape(filters)),
            tf.zeros(tf.shape(bias)), strides=strides4, padding=padding, explicit_paddings=explicit,
            dilations=dilations4, alpha=_alpha(alpha))
        pads = padding if not explicit else [explicit[i:i + 2] for i in range(0, 8, 2)]
        z = tf.nn.conv2d(input, filters, strides4, pads, dilations=dilations4)
        return integer_bias_leaky_relu(_OP, z, bias, _alpha(alpha))
    return lib().opforge_fused_conv2d_bias_leaky_relu(
        input, filters, bias, strides=strides4, padding=padding, explicit_paddings=explicit,
        dilations=dilations4, alpha=_alpha(alpha), name=name)


def _stride1_input_grad_pads(x, w, padding, explicit):
    """For a 3x3, stride-1, dilation-1 convolution: the explicit pads with which the convolution
    of the output gradient with the rotated filter is the input gradient, or None."""
    kh, kw = w.shape[0], w.shape[1]
    if kh != 3 or kw != 3 or (w.shape[2] or 0) < 16 or (w.shape[3] or 0) < 16:
        return None  # Winograd needs 16 channels or more on each side
    if padding == "VALID":
        pt = pb = pl = pr = 0
    elif padding == "SAME":
        pt = pl = 1
        pb = pr = 1
    else:
        pt, pb, pl, pr = explicit[2], explicit[3], explicit[4], explicit[5]
    pads = (kh - 1 - pt, kh - 1 - pb, kw - 1 - pl, kw - 1 - pr)
    return pads if min(pads) >= 0 else None


@tf.RegisterGradient("Opforge>FusedConv2DBiasLeakyRelu")
def _fused_conv_gradient(op, grad):
    x, w, _ = op.inputs
    padding = op.get_attr("padding")
    padding = padding.decode() if isinstance(padding, bytes) else padding
    strides, dilations = list(op.get_attr("strides")), list(op.get_attr("dilations"))
    explicit = list(op.get_attr("explicit_paddings"))
    attrs = dict(strides=strides, padding=padding, explicit_paddings=explicit, data_format="NHWC",
                 dilations=dilations)
    m = lib()
    # alpha >= 0: the output's sign is the pre-activation's, so the output tells the slope.
    alpha = op.get_attr("alpha")
    # alpha 1 is the identity (ConvBNLeaky's training forward): no pass over the gradient.
    gz = grad if alpha == 1.0 else m.opforge_leaky_relu_grad(grad, op.outputs[0], alpha=alpha)
    skip = getattr(op, "skip_input_indices", None) or ()
    d_b = None if 2 in skip else tf.reduce_sum(gz, axis=[0, 1, 2])
    pads = (_stride1_input_grad_pads(x, w, padding, explicit)
            if strides == [1, 1, 1, 1] and dilations == [1, 1, 1, 1] else None)
    if pads is not None:
        # 3x3, stride 1: the input gradient is the convolution of gz with the filter rotated by
        # 180 degrees and its channels swapped, which the convolution core runs as Winograd; the
        # filter gradient is the transposed convolution's, which runs Winograd's transposed
        # transforms there: faster than TensorFlow's Conv2DBackpropFilter at the Darknet shapes
        # (`opforge bench fused_conv2d_bias_leaky_relu` times it).
        d_x = None
        if 0 not in skip:
            rotated = tf.transpose(tf.reverse(w, [0, 1]), [0, 1, 3, 2])
            d_x = m.opforge_fused_conv2d_bias_leaky_relu(
                gz, rotated, tf.zeros(tf.shape(x)[3:], gz.dtype), strides=[1, 1, 1, 1], padding="EXPLICIT",
                explicit_paddings=[0, 0, pads[0], pads[1], pads[2], pads[3], 0, 0], dilations=[1, 1, 1, 1],
                alpha=1.0)
        d_w = None if 1 in skip else m.opforge_conv2d_transpose_filter_grad(gz, w, x, **attrs)
        return d_x, d_w, d_b
    # Otherwise: the convolution's input gradient is a transposed convolution of gz with the same
    # filter; its filter gradient is the transposed convolution's filter gradient with gz as its
    # input.
    d_x = None if 0 in skip else m.opforge_conv2d_transpose(gz, w, tf.shape(x), **attrs)
    d_w = None if 1 in skip else m.opforge_conv2d_transpose_filter_grad(gz, w, x, **attrs)
    return d_x, d_w, d_b


def fold_batch_norm_into_conv(kernel, gamma, beta, moving_mean, moving_variance, epsilon: float = 1e-3,
                              conv_bias=None):
    """The filter and bias of a convolution with an inference-mode batch norm folded in:
    `W' = W * gamma / sqrt(var + eps)` (per output channel), `b' = beta + (b - mean) * gamma /
    sqrt(var + eps)` (b = 0 without a convolution bias). Computed in float64, returned in the
    kernel's dtype."""
    dtype = tf.as_dtype(getattr(kernel, "dtype", tf.float32))
    k = np.asarray(kernel, np.float64)
    scale = np.asarray(gamma, np.float64) / np.sqrt(np.asarray(moving_variance, np.float64) + epsilon)
    b = np.zeros(k.shape[-1]) if conv_bias is None else np.asarray(conv_bias, np.float64)
    folded_b = np.asarray(beta, np.float64) + (b - np.asarray(moving_mean, np.float64)) * scale
    return tf.constant(k * scale, dtype), tf.constant(folded_b, dtype)


# --- the reference: TensorFlow's unfused graph ---------------------------------------------------


def tf_reference(input, filters, bias, strides, padding, alpha=0.2, dilations=None):  # noqa: A002
    """tf.nn.conv2d -> tf.nn.bias_add -> tf.nn.leaky_relu (in float32 for half and bfloat16,
    rounded once at the end, as the op computes; float64 in float64)."""
    dtype = input.dtype
    work = tf.float64 if dtype == tf.float64 else tf.float32
    if input.shape[0] == 0:
        # TensorFlow's conv2d returns an empty batch in the input's shape, not the output's.
        out = tf.nn.conv2d(tf.zeros([1, *input.shape[1:]], work), tf.cast(filters, work), strides, padding,
                           dilations=dilations)
        return tf.zeros([0, *out.shape[1:]], dtype)
    z = tf.nn.conv2d(tf.cast(input, work), tf.cast(filters, work), strides, padding, dilations=dilations)
    return tf.cast(tf.nn.leaky_relu(tf.nn.bias_add(z, tf.cast(bias, work)), alpha), dtype)


def exact_reference(input, filters, bias, strides, padding, alpha=0.2, dilations=None):  # noqa: A002
    """The same maths with the convolution as direct sums over the taps that exist (padding adds
    nothing, never 0 x inf): exact for inputs holding inf and NaN, with exact gradients."""
    dtype = input.dtype
    work = tf.float64 if dtype == tf.float64 else tf.float32
    z = direct_conv2d(tf.cast(input, work), tf.cast(filters, work), strides, explicit_or_string(padding),
                      dilations if dilations is not None else 1)
    return tf.cast(tf.nn.leaky_relu(tf.nn.bias_add(z, tf.cast(bias, work)), alpha), dtype)


def _case(name, x, k, strides, padding, alpha=0.1, dilations=None, integer=False, seed=0):
    return Case(name, (Sample(x, seed=seed, integer_valued=integer, scale=2 if integer else 1.0),
                       Sample(k, seed=seed + 1, integer_valued=integer, scale=1 if integer else 0.3),
                       Sample((k[3],), seed=seed + 2, integer_valued=integer)),
                dict(strides=strides, padding=padding, alpha=alpha, dilations=dilations))


def _speed(x_shape, k, co, stride, label):
    def setup(size, dtype):
        shape = scaled_batch(x_shape, size)
        x = speed_normal(shape, dtype)
        w = speed_normal((k, k, shape[3], co), dtype, stddev=0.05)
        b = speed_normal((co,), dtype)
        ours = tf.function(lambda: fused_conv2d_bias_leaky_relu(x, w, b, stride, "SAME", alpha=0.1))
        theirs = tf.function(lambda: tf.nn.leaky_relu(tf.nn.bias_add(tf.nn.conv2d(x, w, stride, "SAME"), b), 0.1))
        return SpeedRun(f"{label} {list(shape)} -> {k}x{k}x{co} s{stride}, inference "
                        "(rival: conv2d + bias_add + leaky_relu in tf.function, grappler-fused)",
                        {"opforge": ours, "tf": theirs})

    return SpeedCase(setup, max_repeats=15)


def _matmul_speed():
    """The convolution core's matrix product against TensorFlow's matmul: a 1x1 convolution of
    [1, 64, 64, K] to N channels is the product [4096, K] x [K, N] (plus a bias and an identity
    activation, alpha = 1), against tf.linalg.matmul of the same operands."""
    def setup(size, dtype):
        if size is not None:
            return None
        k = n = 1024
        x = speed_normal((1, 64, 64, k), dtype)
        w = speed_normal((1, 1, k, n), dtype, stddev=0.03)
        b = tf.zeros((n,), dtype)
        a2, w2 = tf.reshape(x, (4096, k)), tf.reshape(w, (k, n))
        ours = tf.function(lambda: fused_conv2d_bias_leaky_relu(x, w, b, 1, "VALID", alpha=1.0))
        theirs = tf.function(lambda: tf.linalg.matmul(a2, w2))
        if dtype == tf.bfloat16 and tf_bfloat16_matmul_aborts():
            def theirs():  # named and left out by opforge bench, instead of aborting the process
                raise tf.errors.UnimplementedError(
                    None, None, "TensorFlow's bfloat16 matmul aborts the process under "
                    f"ONEDNN_MAX_CPU_ISA={os.environ.get('ONEDNN_MAX_CPU_ISA')} (no bfloat16 kernel)")
        return SpeedRun(f"GEMM [4096, {k}] x [{k}, {n}] as a 1x1 convolution (8.6 GFLOP) "
                        "(rival: tf.linalg.matmul)", {"opforge": ours, "tf": theirs})

    return SpeedCase(setup, max_repeats=20)


_CALL = "opforge.ops.fused_conv2d_bias_leaky_relu"


def _bad(args: str, *fragments: str, error: str = "InvalidArgumentError") -> BadInput:
    return BadInput(f"{_CALL}({args})", tuple(fragments), error)


SPECS = (
    OpSpec(
        name="fused_conv2d_bias_leaky_relu",
        op=fused_conv2d_bias_leaky_relu,
        reference=tf_reference,
        reference_name="tf.nn.conv2d + bias_add + leaky_relu",
        exact_reference=exact_reference,
        dtypes=FLOAT_DTYPES,
        cases=(
            _case("3x3 same integer-valued", (2, 7, 6, 5), (3, 3, 5, 4), 1, "SAME", integer=True),
            _case("3x3 stride 2 same", (2, 9, 8, 6), (3, 3, 6, 7), 2, "SAME", alpha=0.1, seed=3),
            _case("1x1 pointwise", (2, 5, 5, 8), (1, 1, 8, 6), 1, "VALID", alpha=0.0, seed=6),
            _case("5x3 valid dilated", (1, 11, 9, 3), (5, 3, 3, 4), 1, "VALID", alpha=0.3, dilations=2, seed=9),
            _case("explicit pads stride 2x1", (2, 6, 7, 2), (2, 3, 2, 3), (2, 1),
                  [[0, 0], [1, 2], [0, 1], [0, 0]], alpha=0.2, seed=12),
            _case("empty batch", (0, 4, 4, 3), (3, 3, 3, 2), 1, "SAME", seed=15),
            _case("tile-spanning 40x40", (1, 40, 40, 4), (3, 3, 4, 5), 1, "SAME", seed=18),
        ),
        forward_tolerance={"float64": 1e-12, "float32": 2e-5, "float16": 4e-3, "bfloat16": 3e-2},
        gradient_cases=(
            _case("grad 3x3 same", (1, 5, 4, 2), (3, 3, 2, 3), 1, "SAME", alpha=0.1, seed=21),
            _case("grad 3x3 valid, Winograd-sized", (1, 6, 6, 16), (3, 3, 16, 16), 1, "VALID", alpha=0.1, seed=30),
            _case("grad 3x3 explicit, Winograd-sized", (1, 5, 6, 16), (3, 3, 16, 16), 1,
                  [[0, 0], [2, 0], [1, 1], [0, 0]], alpha=0.2, seed=33),
            _case("grad stride 2 valid dilated", (2, 7, 7, 2), (2, 2, 2, 2), 2, "VALID", alpha=0.3, seed=24),
        ),
        gradient_tolerance=1e-6,
        determinism_case=_case("yolo-sized", (2, 26, 26, 32), (3, 3, 32, 64), 1, "SAME", seed=27),
        speed=(_speed((8, 52, 52, 128), 3, 256, 1, "Darknet 3x3"), _matmul_speed(), _speed((8, 52, 52, 256), 1, 128, 1, "Darknet 1x1"),
               _speed((8, 104, 104, 64), 3, 128, 2, "Darknet 3x3 stride 2")),
        bad_inputs={
            "input rank": _bad("tf.ones([2, 5, 5]), tf.ones([3, 3, 5, 2]), tf.ones([2]), 1, 'SAME'",
                               "FusedConv2DBiasLeakyRelu", "input", "4-D", "[2, 5, 5]"),
            "graph input rank": BadInput(
                f"tf.function(lambda x: {_CALL}(x, tf.ones([3, 3, 5, 2]), tf.ones([2]), 1, 'SAME'), "
                "input_signature=[tf.TensorSpec([None, None, None], tf.float32)]).get_concrete_function()",
                ("FusedConv2DBiasLeakyRelu", "input", "rank 3"), "ValueError"),
            "channels": _bad("tf.ones([1, 5, 5, 4]), tf.ones([3, 3, 5, 2]), tf.ones([2]), 1, 'SAME'",
                             "filter", "in_channels = the input's 4 channels", "[3, 3, 5, 2]"),
            "bias shape": _bad("tf.ones([1, 5, 5, 5]), tf.ones([3, 3, 5, 2]), tf.ones([3]), 1, 'SAME'",
                               "bias", "[2] (out_channels)", "[3]"),
            "too small for valid": _bad("tf.ones([1, 2, 2, 1]), tf.ones([3, 3, 1, 1]), tf.ones([1]), 1, 'VALID'",
                                        "input", "dilated filter", "VALID"),
            "negative alpha": _bad("tf.ones([1, 5, 5, 1]), tf.ones([3, 3, 1, 1]), tf.ones([1]), 1, 'SAME', alpha=-0.1",
                                   "alpha", ">= 0", "-0.1"),
            "alpha string": _bad("tf.ones([1, 5, 5, 1]), tf.ones([3, 3, 1, 1]), tf.ones([1]), 1, 'SAME', alpha='0.1'",
                                 "alpha", "a number", "'0.1'", error="TypeError"),
            "zero stride": _bad("tf.ones([1, 5, 5, 1]), tf.ones([3, 3, 1, 1]), tf.ones([1]), 0, 'SAME'",
                                "strides", "[1, 0, 0, 1]"),
            "bad padding": _bad("tf.ones([1, 5, 5, 1]), tf.ones([3, 3, 1, 1]), tf.ones([1]), 1, 'FULL'",
                                "padding", "FULL", "SAME"),
            "nchw": _bad("tf.ones([1, 1, 5, 5]), tf.ones([3, 3, 1, 1]), tf.ones([1]), 1, 'SAME', data_format='NCHW'",
                         "data_format", "NHWC", "NCHW"),
            "int64 input": _bad("tf.ones([1, 5, 5, 1], tf.int64), tf.ones([3, 3, 1, 1], tf.int64), tf.ones([1], tf.int64), 1, 'SAME'",
                                "input", "int64"),
            "int32 channels": _bad("tf.ones([1, 5, 5, 2], tf.int32), tf.ones([3, 3, 1, 1], tf.int32), tf.ones([1], tf.int32), 1, 'SAME'",
                                   "filter", "2"),
            "bias dtype": _bad("tf.ones([1, 5, 5, 1]), tf.ones([3, 3, 1, 1]), tf.ones([1], tf.float64), 1, 'SAME'",
                               "bias", "float32", "float64"),
        },
    ),
)

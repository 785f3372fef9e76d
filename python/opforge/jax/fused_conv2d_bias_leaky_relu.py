"""opforge.jax's fused_conv2d_bias_leaky_relu: the handler of `Opforge>FusedConv2DBiasLeakyRelu`
(opforge.ops.fused_conv2d_bias_leaky_relu's kernel); its gradient composes LeakyReluGrad, this op
again (3x3 stride 1, Winograd) or Conv2DTranspose, and Conv2DTransposeFilterGrad, as the
TensorFlow gradient does."""
from __future__ import annotations

import functools
from typing import Tuple

import jax
import jax.numpy as jnp
import numpy as np

from opforge.jax import _ffi
from opforge.jax._batching import Fold, apply
from opforge.jax._checks import FLOAT_DTYPES, array, check_dtype, message
from opforge.jax.bias_leaky_relu import alpha_value, integer_bias_leaky_relu, tf_sum_leading
from opforge.jax.conv2d_transpose import _shape_key, conv_t, convert_padding, filter_grad, get_sequence, make_attrs

from opforge.ops.fused_conv2d_bias_leaky_relu import _stride1_input_grad_pads  # the same rule, on shapes

__all__ = ["fused_conv2d_bias_leaky_relu"]

_OP = "FusedConv2DBiasLeakyRelu"
_TARGET = "Opforge>FusedConv2DBiasLeakyRelu"
# input [N, H, W, C]: every output row is one batch element's; a mapped filter or bias is one
# call per element.
_FOLD = Fold((0,))

# (strides, padding, explicit_paddings, dilations, alpha): a custom_vjp's static argument.
Attrs = Tuple[Tuple[int, ...], str, Tuple[int, ...], Tuple[int, ...], float]


def _attr_dict(attrs: Attrs) -> dict:
    strides, padding, explicit, dilations, alpha = attrs
    return {"strides": strides, "padding": padding, "explicit_paddings": np.asarray(explicit, np.int64),
            "dilations": dilations, "alpha": alpha}


def _call(x, w, b, attrs: Attrs):
    return apply(_TARGET, (x, w, b), _attr_dict(attrs), _FOLD)[0]


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _fused(x, w, b, attrs: Attrs):
    return _call(x, w, b, attrs)


def _fwd(x, w, b, attrs):
    out = _fused(x, w, b, attrs)  # itself, so that a second derivative goes through its gradient
    return out, (x, w, out)


def _bwd(attrs, res, grad):
    from opforge.jax.leaky_relu import _leaky_relu_grad

    x, w, out = res
    strides, padding, explicit, dilations, alpha = attrs
    conv_attrs = make_attrs(strides, padding, explicit, "NHWC", dilations)
    # alpha >= 0: the output's sign is the pre-activation's, so the output tells the slope.
    # alpha 1 (the float attr) is the identity (ConvBNLeaky's training forward): no pass over it.
    gz = grad if float(np.float32(alpha)) == 1.0 else _leaky_relu_grad(grad, out, alpha)
    d_b = tf_sum_leading(gz)  # tf.reduce_sum(gz, axis=[0, 1, 2]), its order of additions
    pads = (_stride1_input_grad_pads(x, w, padding, explicit)
            if strides == (1, 1, 1, 1) and dilations == (1, 1, 1, 1) else None)
    if pads is not None:
        # 3x3, stride 1: the input gradient is this op on gz with the filter rotated by 180
        # degrees and its channels swapped (Winograd), no bias and the identity activation.
        rotated = jnp.transpose(jnp.flip(w, (0, 1)), (0, 1, 3, 2))
        d_x = _fused(gz, rotated, jnp.zeros(x.shape[3:], gz.dtype),
                     ((1, 1, 1, 1), "EXPLICIT", (0, 0, pads[0], pads[1], pads[2], pads[3], 0, 0), (1, 1, 1, 1), 1.0))
    else:
        # The convolution's input gradient is a transposed convolution of gz with the same filter.
        d_x = conv_t(gz, w, _shape_key(x.shape), conv_attrs)
    # Its filter gradient: the transposed convolution's filter gradient with gz as its input.
    d_w = filter_grad(gz, w, x, conv_attrs)
    return d_x, d_w, d_b


_fused.defvjp(_fwd, _bwd)


def _integer(x, w, b, strides4, padding, explicit, dilations4, alpha):
    """int32, as the TensorFlow chain takes it: its integer convolution (wrapping), bias_add, then
    opforge's leaky_relu in float32. The float kernel's checks run first, on the shapes alone
    (its Validate: nothing is computed, so the real shapes, which its messages then name)."""
    zeros = [np.broadcast_to(np.float32(0), np.shape(t)) for t in (x, w, b)]
    _ffi.infer(_TARGET, zeros, dict(_attr_dict((strides4, padding, explicit, dilations4, alpha)), T="float32"),
               np.float32)
    pads = padding if not explicit else [(explicit[2], explicit[3]), (explicit[4], explicit[5])]
    z = jax.lax.conv_general_dilated(x, w, window_strides=(strides4[1], strides4[2]), padding=pads,
                                     rhs_dilation=(dilations4[1], dilations4[2]),
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return integer_bias_leaky_relu(_OP, z, b, alpha)


def fused_conv2d_bias_leaky_relu(input, filters, bias, strides, padding, alpha: float = 0.2,  # noqa: A002
                                 data_format: str = "NHWC", dilations=None) -> jax.Array:
    """opforge.ops.fused_conv2d_bias_leaky_relu in JAX: `leaky_relu(conv2d(input, filters) + bias,
    alpha)` in one op (tf.nn.conv2d's arguments, NHWC), TensorFlow's bits. int32 takes
    TensorFlow's integer chain (wrapping, the activation in float32). Gradients flow to input,
    filters and bias, by the same ops as the TensorFlow gradient."""
    if data_format != "NHWC":
        raise ValueError(message(_OP, "data_format", '"NHWC" (the CPU layout)', repr(data_format)))
    strides4 = get_sequence(strides, 3, "strides", _OP)
    dilations4 = get_sequence(dilations, 3, "dilations", _OP)
    padding, explicit = convert_padding(padding, _OP)
    input = array(_OP, "input", input)  # noqa: A001
    check_dtype(_OP, "input", input, FLOAT_DTYPES + (np.dtype(np.int32),))
    filters = array(_OP, "filters", filters, dtype=input.dtype)
    bias = array(_OP, "bias", bias, dtype=input.dtype)
    for arg, t in (("filters", filters), ("bias", bias)):
        if t.dtype != input.dtype:
            raise TypeError(message(_OP, arg, f"the dtype of input ({np.dtype(input.dtype).name})",
                                    np.dtype(t.dtype).name))
    value = alpha_value(_OP, alpha)
    if input.dtype == np.int32:
        return _integer(input, filters, bias, strides4, padding, explicit, dilations4, value)
    return _fused(input, filters, bias, (strides4, padding, explicit, dilations4, value))

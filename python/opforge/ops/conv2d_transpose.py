"""Transposed 2-D convolution: `opforge.ops.conv2d_transpose` mirrors `tf.nn.conv2d_transpose`;
C++ ops `Opforge>Conv2DTranspose`, `>Conv2DTransposeInputGrad`, `>Conv2DTransposeFilterGrad`."""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple, Union

import tensorflow as tf

from opforge.ops._common import FLOAT_DTYPES, check_dtype, invalid_argument, lib

DTYPES = FLOAT_DTYPES
_DTYPE_SET = frozenset(DTYPES)
_OP = "opforge.ops.conv2d_transpose"

IntOrSeq = Union[int, Sequence[int], None]


def _get_sequence(value: IntOrSeq, channel_index: int, name: str) -> List[int]:
    """TensorFlow's `nn_ops._get_sequence(value, n=2, channel_index, name)`: an int or 1, 2 or 4
    values to the 4 values of the data format (4 values are taken as they are)."""
    if value is None:
        return [1, 1, 1, 1]
    if not isinstance(value, (list, tuple)) and not hasattr(value, "__len__"):
        value = [value]
    value = list(value)
    n = len(value)
    if n == 4:
        return value
    if n == 1:
        value = value * 2
    elif n != 2:
        raise ValueError(
            f"{name} should be of length 1, 2 or 4. Received: {name}={value} of length {n}"
        )
    return [1] + value + [1] if channel_index == 3 else [1, 1] + value


def _convert_padding(padding) -> Tuple[str, List[int]]:
    """TensorFlow's `nn_ops.convert_padding`: a string, or 4 pairs of explicit pads."""
    if isinstance(padding, str):
        if padding.upper() == "EXPLICIT":
            raise ValueError(
                "'EXPLICIT' is not a valid value for `padding`. To use explicit padding, "
                "`padding` must be a list."
            )
        return padding, []
    if isinstance(padding, (list, tuple)):
        flat: List[int] = []
        for i, pair in enumerate(padding):
            if not isinstance(pair, (list, tuple)) or len(pair) != 2:
                raise ValueError(
                    "When padding is a list, each element of padding must be a list/tuple of "
                    f"size 2. Received: padding={padding} with element at index {i} of size "
                    f"{len(pair) if isinstance(pair, (list, tuple)) else 'n/a'}"
                )
            flat.extend(int(v) for v in pair)
        if len(padding) != 4:
            raise ValueError(
                f"When padding is a list, it must be of size 4. Received: padding={padding} "
                f"of size {len(padding)}"
            )
        return "EXPLICIT", flat
    return padding, []


def conv2d_transpose(
    input,  # noqa: A002 (TensorFlow's argument name)
    filters,
    output_shape,
    strides: IntOrSeq,
    padding="SAME",
    data_format: str = "NHWC",
    dilations: IntOrSeq = None,
    name: Optional[str] = None,
) -> tf.Tensor:
    """The transpose of `conv2d` (the gradient of a convolution), as `tf.nn.conv2d_transpose`.

    Args:
      input: 4-D tensor `[batch, height, width, in_channels]` (NHWC) or
        `[batch, in_channels, height, width]` (NCHW); half, bfloat16, float32 or float64.
      filters: `[height, width, out_channels, in_channels]`, the dtype of `input`.
      output_shape: 1-D int32/int64 tensor (or list): 4 values in `data_format` order, or 2
        values `[height, width]`. It must be a size whose convolution gives the input's size;
        the error names the range that would fit.
      strides: an int or 1, 2 or 4 ints (4 in `data_format` order, batch and channel 1).
      padding: "SAME", "VALID", or 4 `[before, after]` pairs in `data_format` order.
      data_format: "NHWC" or "NCHW" (both run on the CPU, unlike TensorFlow's CPU kernel).
      dilations: an int or 1, 2 or 4 ints; dilation above 1 works on the CPU too.
      name: op name.

    Returns:
      A tensor of `output_shape` and the dtype of `input`. half and bfloat16 are computed in
      float and rounded once. The gradients with respect to `input` and `filters` are C++ ops.

    Raises:
      InvalidArgumentError: wrong ranks, channels that do not match, an output_shape that does
        not fit, bad strides, dilations or paddings, unsupported dtypes.
      ValueError: malformed `strides`, `dilations` or `padding` lists (as TensorFlow).
    """
    channel_index = 1 if data_format.startswith("NC") else 3
    strides4 = _get_sequence(strides, channel_index, "strides")
    dilations4 = _get_sequence(dilations, channel_index, "dilations")
    padding, explicit = _convert_padding(padding)
    if not (isinstance(input, tf.Tensor) and input.dtype in _DTYPE_SET):
        input = tf.convert_to_tensor(input, name="input")  # noqa: A001
    check_dtype(_OP, "input", input, DTYPES)
    if not (isinstance(filters, tf.Tensor) and filters.dtype == input.dtype):
        filters = tf.convert_to_tensor(filters, dtype_hint=input.dtype, name="filters")
    if filters.dtype != input.dtype:
        raise invalid_argument(
            f"{_OP}: filters must have the dtype of input ({input.dtype.name}), got "
            f"{filters.dtype.name}"
        )
    if not isinstance(output_shape, tf.Tensor) or output_shape.dtype not in (tf.int32, tf.int64):
        output_shape = tf.convert_to_tensor(output_shape, dtype_hint=tf.int32, name="output_shape")
    if output_shape.dtype not in (tf.int32, tf.int64):
        raise invalid_argument(
            f"{_OP}: output_shape must be int32 or int64, got {output_shape.dtype.name}"
        )
    return lib().opforge_conv2d_transpose(
        input,
        filters,
        output_shape,
        strides=strides4,
        padding=padding,
        explicit_paddings=explicit,
        data_format=data_format,
        dilations=dilations4,
        name=name,
    )


def _attrs(op) -> dict:
    padding = op.get_attr("padding")
    data_format = op.get_attr("data_format")
    return dict(
        strides=op.get_attr("strides"),
        padding=padding.decode() if isinstance(padding, bytes) else padding,
        explicit_paddings=op.get_attr("explicit_paddings"),
        data_format=data_format.decode() if isinstance(data_format, bytes) else data_format,
        dilations=op.get_attr("dilations"),
    )


@tf.RegisterGradient("Opforge>Conv2DTranspose")
def _conv2d_transpose_gradient(op, grad):
    x, filters, _ = op.inputs
    attrs = _attrs(op)
    # The tape says which inputs need no gradient (a frozen filter, say); skip their work.
    skip = getattr(op, "skip_input_indices", None) or ()
    m = lib()
    d_x = None if 0 in skip else m.opforge_conv2d_transpose_input_grad(grad, filters, **attrs)
    d_f = None if 1 in skip else m.opforge_conv2d_transpose_filter_grad(x, filters, grad, **attrs)
    return d_x, d_f, None  # output_shape: an integer size, no gradient


@tf.RegisterGradient("Opforge>Conv2DTransposeInputGrad")
def _input_grad_gradient(op, upstream):
    # grad_input = conv2d(g, f) is linear in g and in f.
    g, filters = op.inputs
    attrs = _attrs(op)
    m = lib()
    d_g = m.opforge_conv2d_transpose(upstream, filters, tf.shape(g), **attrs)
    d_f = m.opforge_conv2d_transpose_filter_grad(upstream, filters, g, **attrs)
    return d_g, d_f


@tf.RegisterGradient("Opforge>Conv2DTransposeFilterGrad")
def _filter_grad_gradient(op, upstream):
    # grad_filter = correlate(g, x) is linear in x and in g; the filter gives only its shape.
    x, filters, g = op.inputs
    attrs = _attrs(op)
    m = lib()
    d_x = m.opforge_conv2d_transpose_input_grad(g, upstream, **attrs)
    d_g = m.opforge_conv2d_transpose(x, upstream, tf.shape(g), **attrs)
    return d_x, None, d_g

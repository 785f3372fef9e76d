"""Transposed 2-D convolution: `opforge.ops.conv2d_transpose` mirrors `tf.nn.conv2d_transpose`;
C++ ops `Opforge>Conv2DTranspose`, `>Conv2DTransposeInputGrad`, `>Conv2DTransposeFilterGrad`."""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple, Union

import numpy as np
import tensorflow as tf

from opforge._export import STATE as _EXPORT
from opforge.ops._common import (FLOAT_DTYPES, check_dtype, dtype_error, lib, python_int, short_repr,
                                 to_tensor, type_error)
from opforge.ops._direct_conv import direct_conv2d_transpose
from opforge.ops.spec import BadInput, Case, OpSpec, Sample, SpeedCase, SpeedRun, scaled_batch, speed_normal

__all__ = ["conv2d_transpose"]
OP_NAMES = ("Opforge>Conv2DTranspose", "Opforge>Conv2DTransposeInputGrad", "Opforge>Conv2DTransposeFilterGrad")

# The forward op's dtypes: TensorFlow's CPU kernel's (int32 too; integers have no gradient).
DTYPES = FLOAT_DTYPES + (tf.int32,)
_DTYPE_SET = frozenset(DTYPES)
_OP = "Conv2DTranspose"

IntOrSeq = Union[int, Sequence[int], None]


def _get_sequence(value: IntOrSeq, channel_index: int, name: str, op: str = _OP) -> List[int]:
    """TensorFlow's `nn_ops._get_sequence(value, n=2, channel_index, name)`: an int or 1, 2 or 4
    ints to the 4 values of the data format (4 values are taken as they are). A list of another
    length is a ValueError, as TensorFlow's; a value that is no int (a float, inf, a string, an
    int beyond int64) an InvalidArgumentError naming the argument."""
    if value is None:
        return [1, 1, 1, 1]
    if not isinstance(value, (list, tuple)) and not hasattr(value, "__len__"):
        value = [value]
    if isinstance(value, (str, bytes)):
        raise type_error(op, name, "an int or a list of 1, 2 or 4 ints", short_repr(value))
    value = [python_int(op, name, v, "an int or a list of 1, 2 or 4 ints") for v in value]
    n = len(value)
    if n == 4:
        return value
    if n == 1:
        value = value * 2
    elif n != 2:
        raise ValueError(f"{op}: {name} must be an int or a list of 1, 2 or 4 ints, got {value} (length {n})")
    return [1] + value + [1] if channel_index == 3 else [1, 1] + value


def _convert_padding(padding, op: str = _OP) -> Tuple[str, List[int]]:
    """TensorFlow's `nn_ops.convert_padding`: a string, or 4 pairs of explicit pads."""
    if isinstance(padding, str):
        if padding.upper() == "EXPLICIT":
            raise ValueError(
                f"{op}: 'EXPLICIT' is not a valid value for `padding`. To use explicit padding, "
                "`padding` must be a list."
            )
        return padding, []
    if isinstance(padding, (list, tuple)):
        flat: List[int] = []
        for i, pair in enumerate(padding):
            if not isinstance(pair, (list, tuple)) or len(pair) != 2:
                raise ValueError(
                    f"{op}: when padding is a list, each element of padding must be a list/tuple of "
                    f"size 2. Received: padding={padding} with element at index {i} of size "
                    f"{len(pair) if isinstance(pair, (list, tuple)) else 'n/a'}"
                )
            flat.extend(python_int(op, "padding", v, "\"SAME\", \"VALID\" or 4 pairs of ints") for v in pair)
        if len(padding) != 4:
            raise ValueError(
                f"{op}: when padding is a list, it must be of size 4. Received: padding={padding} "
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
        `[batch, in_channels, height, width]` (NCHW); half, bfloat16, float32, float64 or int32.
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
      float and rounded once; int32 in 32-bit integers that wrap on overflow, exactly as
      TensorFlow's int32 kernel (which has no gradient; in NCHW too, which TensorFlow's CPU kernel
      refuses). The gradients with respect to `input` and `filters` (float types) are C++ ops.

    Where it runs: bfloat16, and float32 but for 3x3 stride-1 filters with 16+ channels on each
    side (opforge's Winograd), on oneDNN where it is installed (PyPI's `onednn-cpu-gomp`, a
    dependency on x86-64 Linux; `opforge doctor` says whether it runs), forward and both
    gradients: bfloat16 at the CPU's bfloat16 rate (AVX512-BF16, AMX). Otherwise opforge's own
    kernels (4x4 stride 2 by phases and Winograd F(2x2, 2x2), im2col products elsewhere).

    Raises:
      InvalidArgumentError: wrong ranks, channels that do not match, an output_shape that does
        not fit, bad strides, dilations or paddings, unsupported dtypes.
      ValueError: malformed `strides`, `dilations` or `padding` lists (as TensorFlow).
    """
    if data_format is None:
        data_format = "NHWC"  # as tf.nn.conv2d_transpose takes None
    if not isinstance(data_format, str):
        raise type_error(_OP, "data_format", '"NHWC" or "NCHW"', short_repr(data_format))
    channel_index = 1 if data_format.startswith("NC") else 3
    strides4 = _get_sequence(strides, channel_index, "strides")
    dilations4 = _get_sequence(dilations, channel_index, "dilations")
    padding, explicit = _convert_padding(padding)
    if not (isinstance(input, tf.Tensor) and input.dtype in _DTYPE_SET):
        input = to_tensor(_OP, "input", input)  # noqa: A001
    check_dtype(_OP, "input", input, DTYPES)
    if not (isinstance(filters, tf.Tensor) and filters.dtype == input.dtype):
        filters = to_tensor(_OP, "filters", filters, dtype_hint=input.dtype)
    if filters.dtype != input.dtype:
        raise dtype_error(_OP, "filters", f"the dtype of input ({input.dtype.name})", filters.dtype.name)
    if not isinstance(output_shape, tf.Tensor) or output_shape.dtype not in (tf.int32, tf.int64):
        python_value = not isinstance(output_shape, (tf.Tensor, tf.Variable, np.ndarray))
        given = output_shape
        output_shape = to_tensor(_OP, "output_shape", output_shape, dtype_hint=tf.int32)
        # TensorFlow's op takes int32 sizes: Python floats fail its conversion (TypeError), ints
        # beyond int32 (to_tensor keeps them int64) are a tensor it refuses (dtype_error).
        if python_value and output_shape.dtype != tf.int32:
            error = dtype_error if output_shape.dtype.is_integer else type_error
            raise error(_OP, "output_shape", "int32 sizes", f"{short_repr(given)} ({output_shape.dtype.name})")
    if output_shape.dtype not in (tf.int32, tf.int64):
        raise dtype_error(_OP, "output_shape", "int32 or int64", output_shape.dtype.name)
    if _EXPORT.standard:  # tracing for export (opforge._export): TensorFlow's op, the same values
        return _standard_conv2d_transpose(input, filters, output_shape, strides4, padding, explicit,
                                          data_format, dilations4, name)
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


def _standard_conv2d_transpose(input, filters, output_shape, strides4, padding, explicit,  # noqa: A002
                               data_format, dilations4, name) -> tf.Tensor:
    """The op in TensorFlow's ops, for export: `tf.nn.conv2d_transpose` (which converters map to
    ONNX's ConvTranspose, TFLite's TRANSPOSE_CONV) where a converter reads its padding right.

    Converters derive the ONNX pads from the output size alone, splitting the total padding
    `full - out` (`full = (in - 1) * stride + (k - 1) * dilation + 1`) as SAME does; that is
    TensorFlow's result for SAME, and for VALID where out == full. Elsewhere (VALID with a larger
    output, EXPLICIT padding, or sizes unknown at trace time) the transposed convolution runs VALID
    to its full size and the output window is cut out of it (and zero-filled past its end), which
    is what TensorFlow computes for every padding: the window starts at the top/left padding.
    """
    channel_index = 1 if data_format.startswith("NC") else 3
    spatial = (2, 3) if channel_index == 1 else (1, 2)
    strides = [strides4[i] for i in spatial]
    dilations = [dilations4[i] for i in spatial]
    batch = tf.shape(input)[0]
    channels = filters.shape[2] if filters.shape.rank == 4 and filters.shape[2] is not None else tf.shape(filters)[2]
    output_shape = tf.cast(output_shape, tf.int32)
    if output_shape.shape.rank == 1 and output_shape.shape[0] == 2:  # [height, width]: batch, channels added
        hw = [output_shape[0], output_shape[1]]
    else:
        hw = [output_shape[i] for i in spatial]
    static_hw = [tf.get_static_value(v) for v in hw]
    static_hw = [None if v is None else int(v) for v in static_hw]
    sizes = [input.shape[i] if input.shape.rank == 4 else None for i in spatial]
    kernel = [filters.shape[i] if filters.shape.rank == 4 else None for i in (0, 1)]
    full = [None if n is None or k is None else (n - 1) * s + (k - 1) * d + 1
            for n, k, s, d in zip(sizes, kernel, strides, dilations)]

    def shape4(h, w):
        return tf.stack([batch, channels, h, w] if channel_index == 1 else [batch, h, w, channels])

    exact = (padding in ("SAME", "VALID") and None not in full and None not in static_hw
             and all(f >= o if padding == "SAME" else f == o for f, o in zip(full, static_hw)))
    if exact:
        return tf.nn.conv2d_transpose(input, filters, shape4(*static_hw), strides4, padding, data_format,
                                      dilations4, name=name)
    dynamic = tf.shape(input)
    filter_shape = tf.shape(filters)
    full_t = [full[i] if full[i] is not None else
              (dynamic[spatial[i]] - 1) * strides[i] + (filter_shape[i] - 1) * dilations[i] + 1 for i in range(2)]
    y = tf.nn.conv2d_transpose(input, filters, shape4(*full_t), strides4, "VALID", data_format, dilations4)
    if padding == "EXPLICIT":
        before = [explicit[2 * i] for i in spatial]
    elif padding == "SAME":
        before = [tf.maximum(f - o, 0) // 2 for f, o in zip(full_t, hw)]
    else:
        before = [0, 0]
    # Zeros past the full output's end (VALID and EXPLICIT outputs may reach beyond it).
    after = [tf.maximum(b + o - f, 0) for b, o, f in zip(before, hw, full_t)]
    pads = [[0, 0]] * 4
    for i, axis in enumerate(spatial):
        pads[axis] = [0, after[i]]
    y = tf.pad(y, pads)
    begin = [0] * 4
    size = [-1] * 4
    for i, axis in enumerate(spatial):
        begin[axis], size[axis] = before[i], hw[i]
    return tf.slice(y, tf.stack(begin), tf.stack(size), name=name)


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


# --- spec ----------------------------------------------------------------------------------------

# (input NHWC, filter, output_shape, strides, padding)
_CASES = (
    ((2, 5, 6, 3), (4, 4, 5, 3), [2, 10, 12, 5], 2, "SAME"),
    ((1, 4, 5, 2), (3, 2, 3, 2), [1, 7, 10, 3], 2, "SAME"),
    ((2, 3, 4, 3), (2, 3, 2, 3), [2, 8, 13, 2], 3, "VALID"),
    ((1, 4, 4, 3), (3, 3, 2, 3), [1, 8, 9, 2], 2, [[0, 0], [1, 0], [0, 1], [0, 0]]),
    ((1, 1, 1, 2), (3, 3, 2, 2), [1, 2, 1, 2], 2, "SAME"),
    ((0, 5, 5, 2), (3, 3, 4, 2), [0, 10, 10, 4], 2, "SAME"),
)
# The YOLO-neck upsamplers: input NHWC, kernel size, output channels, stride.
SPEED_SHAPES = (((8, 13, 13, 512), 4, 256, 2), ((8, 26, 26, 256), 4, 128, 2), ((1, 104, 104, 64), 3, 64, 2))


def _case(i, x, f, out, s, pad, integer_valued):
    kind = "integer-valued" if integer_valued else "random float32"
    samples = tuple(Sample(shape, seed=2 * i + k, scale=3, integer_valued=integer_valued) for k, shape in
                    enumerate((x, f)))
    return Case(f"{list(x)}->{out} s{s} {pad} {kind}", samples, dict(output_shape=out, strides=s, padding=pad),
                dtypes=None if integer_valued else (tf.float32,))


def _speed(shape, k, co, s, part: str) -> SpeedCase:
    def setup(size, dtype):
        n, h, w, ci = scaled_batch(shape, size)
        out = [n, h * s, w * s, co]
        x = speed_normal([n, h, w, ci], dtype, seed=8)
        f = speed_normal([k, k, co, ci], dtype, seed=9, stddev=0.05)
        g = speed_normal(out, dtype, seed=10)
        attrs = dict(strides=[1, s, s, 1], padding="SAME")

        def with_grads(fn):
            def run():
                with tf.GradientTape() as tape:
                    tape.watch([x, f])
                    y = fn(x, f, out, s)
                return tape.gradient(y, [x, f], output_gradients=g)

            return run

        candidates = {
            "forward": {"opforge": lambda: conv2d_transpose(x, f, out, s),
                        "tf": lambda: tf.nn.conv2d_transpose(x, f, out, s)},
            # TensorFlow's own gradients of conv2d_transpose: conv2d and Conv2DBackpropFilter.
            "input gradient": {"opforge": lambda: lib().opforge_conv2d_transpose_input_grad(g, f, **attrs),
                               "tf": lambda: tf.nn.conv2d(g, f, s, "SAME")},
            "filter gradient": {"opforge": lambda: lib().opforge_conv2d_transpose_filter_grad(x, f, g, **attrs),
                                "tf": lambda: tf.raw_ops.Conv2DBackpropFilter(
                                    input=g, filter_sizes=tf.shape(f), out_backprop=x, **attrs)},
            "forward+gradients": {"opforge": with_grads(conv2d_transpose),
                                  "tf": with_grads(tf.nn.conv2d_transpose)},
        }[part]
        return SpeedRun(f"{part} [{n}, {h}, {w}, {ci}]->{out[1:]} {k}x{k} s{s}", candidates)

    return SpeedCase(setup, max_repeats=15)


_X = "tf.ones([1, 13, 13, 4])"
_F = "tf.ones([4, 4, 2, 4])"
_CALL = "opforge.ops.conv2d_transpose"


def _bad(args: str, *fragments: str, error: str = "InvalidArgumentError", call: str = _CALL,
         tf_code: Optional[str] = None) -> BadInput:
    return BadInput(f"{call}({args})", fragments, error, tf_code)


SPECS = (
    OpSpec(
        name="conv2d_transpose",
        replaces="tf.nn.conv2d_transpose",
        op=conv2d_transpose,
        reference=tf.nn.conv2d_transpose,
        reference_name="tf.nn.conv2d_transpose",
        exact_reference=direct_conv2d_transpose,
        dtypes=DTYPES,
        # Integer-valued data: every sum is exact, in half too, so any index or padding error
        # shows (int32 draws from its whole range, so that the sums wrap); random float32 data
        # differs from TensorFlow by the GEMM summation order (~1e-6).
        cases=tuple(_case(i, *c, integer_valued=True) for i, c in enumerate(_CASES))
        + tuple(_case(i, *c, integer_valued=False) for i, c in enumerate(_CASES)),
        # int32 wraps modulo 2^32 as TensorFlow's kernel: bit for bit.
        forward_tolerance={"float16": 1e-4, "bfloat16": 1e-4, "float32": 1e-4, "float64": 1e-4, "int32": 0.0},
        gradient_cases=(
            Case("SAME s2", (Sample((2, 3, 4, 3), seed=3), Sample((4, 4, 2, 3), seed=4)),
                 dict(output_shape=[2, 6, 8, 2], strides=2, padding="SAME")),
            Case("SAME d2", (Sample((1, 4, 3, 2), seed=3), Sample((3, 3, 2, 2), seed=4)),
                 dict(output_shape=[1, 4, 3, 2], strides=1, padding="SAME", dilations=2)),
        ),
        determinism_case=Case("large", (Sample((1, 40, 40, 24), seed=42), Sample((4, 4, 16, 24), seed=43)),
                              dict(output_shape=[1, 80, 80, 16], strides=2, padding="SAME")),
        speed=tuple(_speed(*shape, part) for part in ("forward+gradients", "forward", "input gradient",
                                                       "filter gradient") for shape in SPEED_SHAPES),
        bad_inputs={
            "input rank 3": _bad(f"tf.ones([13, 13, 4]), {_F}, [1, 26, 26, 2], 2", "input", "4-D", "[13, 13, 4]"),
            "filter rank 3": _bad(f"{_X}, tf.ones([4, 4, 2]), [1, 26, 26, 2], 2", "filter", "4-D", "[4, 4, 2]"),
            "channels mismatch": _bad(f"{_X}, tf.ones([4, 4, 2, 3]), [1, 26, 26, 2], 2", "in_channels", "4", "3"),
            "output too big": _bad(f"{_X}, {_F}, [1, 27, 26, 2], 2", "output_shape height 27", "from 25 to 26 fit"),
            "output too small VALID": _bad(f"{_X}, {_F}, [1, 26, 26, 2], 2, 'VALID'", "output_shape height 26",
                                           "from 28 to 29 fit"),
            "output_shape length 3": _bad(f"{_X}, {_F}, [1, 26, 26], 2", "output_shape", "4 values", "2 values",
                                          "[1, 26, 26]"),
            "output_shape 2-D": _bad(f"{_X}, {_F}, [[1, 26], [26, 2]], 2", "output_shape", "1-D"),
            "output_shape negative": _bad(f"{_X}, {_F}, [1, -26, 26, 2], 2", "output_shape", "-26"),
            "output_shape batch": _bad(f"{_X}, {_F}, [2, 26, 26, 2], 2", "output_shape", "batch size 1",
                                       "[2, 26, 26, 2]"),
            "output_shape channels": _bad(f"{_X}, {_F}, [1, 26, 26, 3], 2", "output_shape", "out_channels",
                                          "[1, 26, 26, 3]"),
            "output_shape float": _bad(f"{_X}, {_F}, [1.0, 26.0, 26.0, 2.0], 2", "output_shape", "int32",
                                       "float32", error="TypeError"),
            # An int64 output_shape is opforge's extension (TensorFlow's op takes int32 only, and
            # refuses this one for its dtype): no TensorFlow call to compare with.
            "output_shape huge": _bad(f"{_X}, {_F}, tf.constant([1, 2**40, 26, 2], tf.int64), 2", "output_shape",
                                      "1099511627776", tf_code=""),
            "output_shape huge list": _bad(f"{_X}, {_F}, [1, 2**40, 26, 2], 2", "output_shape", "1099511627776"),
            "strides length 3": _bad(f"{_X}, {_F}, [1, 26, 26, 2], [1, 2, 2]",
                                     "strides must be an int or a list of 1, 2 or 4 ints", error="ValueError"),
            "strides zero": _bad(f"{_X}, {_F}, [1, 26, 26, 2], 0", "strides", "[1, 0, 0, 1]"),
            "strides batch": _bad(f"{_X}, {_F}, [1, 26, 26, 2], [2, 2, 2, 1]", "strides", "batch and channel",
                                  "[2, 2, 2, 1]"),
            "dilations zero": _bad(f"{_X}, {_F}, [1, 26, 26, 2], 2, dilations=0", "dilations", "[1, 0, 0, 1]"),
            "dilations channel": _bad(f"{_X}, {_F}, [1, 26, 26, 2], 2, dilations=[1, 1, 1, 2]", "dilations",
                                      "batch and channel", "[1, 1, 1, 2]"),
            "padding FULL": _bad(f"{_X}, {_F}, [1, 26, 26, 2], 2, 'FULL'", "padding", "FULL"),
            "padding EXPLICIT string": _bad(f"{_X}, {_F}, [1, 26, 26, 2], 2, 'EXPLICIT'",
                                            "'EXPLICIT' is not a valid value for `padding`", error="ValueError"),
            "explicit 3 pairs": _bad(f"{_X}, {_F}, [1, 26, 26, 2], 2, [[0, 0], [1, 1], [1, 1]]", "padding",
                                     "size 4", error="ValueError"),
            "explicit batch pad": _bad(f"{_X}, {_F}, [1, 26, 26, 2], 2, [[1, 0], [1, 1], [1, 1], [0, 0]]",
                                       "explicit_paddings", "batch and channel"),
            "explicit negative": _bad(f"{_X}, {_F}, [1, 26, 26, 2], 2, [[0, 0], [1, -1], [1, 1], [0, 0]]",
                                      "explicit_paddings", "-1"),
            "explicit not fitting": _bad(f"{_X}, {_F}, [1, 26, 26, 2], 2, [[0, 0], [5, 5], [1, 1], [0, 0]]",
                                         "output_shape height 26", "EXPLICIT 5+5", "from 18 to 19 fit"),
            "data_format": _bad(f"{_X}, {_F}, [1, 26, 26, 2], 2, data_format='NCWH'", "data_format", "NCWH"),
            "int64 input": _bad("tf.ones([1, 13, 13, 4], tf.int64), tf.ones([4, 4, 2, 4], tf.int64), "
                                "[1, 26, 26, 2], 2", "input", "float16, bfloat16, float32, float64 or int32",
                                "int64"),
            "filter dtype": _bad(f"{_X}, tf.ones([4, 4, 2, 4], tf.float64), [1, 26, 26, 2], 2", "filters",
                                 "float32", "float64"),
            "raw strides length": _bad(f"{_X}, {_F}, [1, 26, 26, 2], strides=[1, 2, 2], padding='SAME'",
                                       "strides", "4 values", "[1, 2, 2]", call="lib().opforge_conv2d_transpose"),
            "raw explicit with SAME": _bad(
                f"{_X}, {_F}, [1, 26, 26, 2], strides=[1, 2, 2, 1], padding='SAME', "
                "explicit_paddings=[0, 0, 1, 1, 1, 1, 0, 0]", "explicit_paddings",
                "empty unless padding is EXPLICIT", call="lib().opforge_conv2d_transpose"),
            "raw explicit count": _bad(
                f"{_X}, {_F}, [1, 26, 26, 2], strides=[1, 2, 2, 1], padding='EXPLICIT', explicit_paddings=[0, 0, 1, 1]",
                "explicit_paddings", "8 values", "[0, 0, 1, 1]", call="lib().opforge_conv2d_transpose"),
            "input grad channels": _bad(f"tf.ones([1, 26, 26, 3]), {_F}, strides=[1, 2, 2, 1], padding='SAME'",
                                        "grad", "out_channels 2", "[1, 26, 26, 3]",
                                        call="lib().opforge_conv2d_transpose_input_grad"),
            "input grad rank": _bad(f"tf.ones([26, 26, 2]), {_F}, strides=[1, 2, 2, 1], padding='SAME'", "grad",
                                    "4-D", call="lib().opforge_conv2d_transpose_input_grad"),
            "filter grad shape": _bad(f"{_X}, {_F}, tf.ones([1, 30, 26, 2]), strides=[1, 2, 2, 1], padding='SAME'",
                                      "grad height 30", "from 25 to 26 fit",
                                      call="lib().opforge_conv2d_transpose_filter_grad"),
            "empty filter window": _bad(f"{_X}, tf.ones([0, 4, 2, 4]), [1, 26, 26, 2], 2", "filter",
                                        "non-empty window", "[0, 4, 2, 4]"),
        },
    ),
)

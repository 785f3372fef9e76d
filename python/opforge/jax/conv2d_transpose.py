"""opforge.jax's conv2d_transpose: the handlers of `Opforge>Conv2DTranspose`,
`Opforge>Conv2DTransposeInputGrad` and `Opforge>Conv2DTransposeFilterGrad` (opforge.ops.conv2d_transpose's
kernels), the gradients composed as the TensorFlow module's registered gradients compose them (second
order included)."""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Mapping, Sequence, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from opforge.jax._batching import SEQUENTIAL, Fold, Rule, apply
from opforge.jax._checks import FLOAT_DTYPES, array, check_dtype, concrete_ints, integer, message, short_repr

__all__ = ["conv2d_transpose"]

_OP = "Conv2DTranspose"
# The forward op's dtypes: TensorFlow's CPU kernel's (int32 too; integers have no gradient).
DTYPES = FLOAT_DTYPES + (np.dtype(np.int32),)
_SEQ = "an int or a list of 1, 2 or 4 ints"


# --- arguments, as opforge.ops.conv2d_transpose converts them -------------------------------------


def get_sequence(value, channel_index: int, name: str, op: str = _OP) -> Tuple[int, ...]:
    """TensorFlow's `nn_ops._get_sequence(value, n=2, channel_index, name)`: an int or 1, 2 or 4
    ints to the 4 values of the data format (4 values are taken as they are)."""
    if value is None:
        return (1, 1, 1, 1)
    if not isinstance(value, (list, tuple)) and not hasattr(value, "__len__"):
        value = [value]
    if isinstance(value, (str, bytes)):
        raise TypeError(message(op, name, _SEQ, short_repr(value)))
    try:
        items = list(value)
    except TypeError:  # a 0-d array
        items = [value.item() if hasattr(value, "item") else value]
    value = [integer(op, name, v, _SEQ) for v in items]
    n = len(value)
    if n == 4:
        return tuple(value)
    if n == 1:
        value = value * 2
    elif n != 2:
        raise ValueError(f"{op}: {name} must be {_SEQ}, got {value} (length {n})")
    return tuple([1] + value + [1] if channel_index == 3 else [1, 1] + value)


def convert_padding(padding, op: str = _OP) -> Tuple[str, Tuple[int, ...]]:
    """TensorFlow's `nn_ops.convert_padding`: a string, or 4 pairs of explicit pads."""
    if isinstance(padding, str):
        if padding.upper() == "EXPLICIT":
            raise ValueError(
                f"{op}: 'EXPLICIT' is not a valid value for `padding`. To use explicit padding, "
                "`padding` must be a list.")
        return padding, ()
    if isinstance(padding, (list, tuple)):
        flat = []
        for i, pair in enumerate(padding):
            if not isinstance(pair, (list, tuple)) or len(pair) != 2:
                raise ValueError(
                    f"{op}: when padding is a list, each element of padding must be a list/tuple of "
                    f"size 2. Received: padding={padding} with element at index {i} of size "
                    f"{len(pair) if isinstance(pair, (list, tuple)) else 'n/a'}")
            flat.extend(integer(op, "padding", v, "\"SAME\", \"VALID\" or 4 pairs of ints") for v in pair)
        if len(padding) != 4:
            raise ValueError(f"{op}: when padding is a list, it must be of size 4. Received: padding={padding} "
                             f"of size {len(padding)}")
        return "EXPLICIT", tuple(flat)
    raise TypeError(message(op, "padding", "\"SAME\", \"VALID\" or 4 pairs of ints", short_repr(padding)))


# The attributes the three ops share, as a hashable tuple of items (a custom_vjp's static argument).
Attrs = Tuple[Tuple[str, Any], ...]


def make_attrs(strides, padding: str, explicit, data_format: str, dilations) -> Attrs:
    return (("strides", tuple(strides)), ("padding", padding), ("explicit_paddings", tuple(explicit)),
            ("data_format", data_format), ("dilations", tuple(dilations)))


def _attr_dict(attrs: Attrs) -> dict:
    out = dict(attrs)
    # An int64 array: an empty list must still be a list of ints.
    out["explicit_paddings"] = np.asarray(out["explicit_paddings"], np.int64)
    return out


# --- the calls ---------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)  # holds a dict: compared and hashed by identity
class FoldOutputShape(Rule):
    """Fold for the forward op: the mapped axis of `input` merged into its batch axis, and the
    batch entry of a 4-value output_shape (`opforge_values`, and the operand) multiplied to match.
    A mapped filter: one call per element."""
    attrs: Mapping[str, Any]

    def __call__(self, run, axis_size, batched, inputs):
        if batched[1] or batched[2]:
            return SEQUENTIAL(run, axis_size, batched, inputs)
        x, filters, shape = inputs
        merged = x.reshape((axis_size * x.shape[1],) + tuple(x.shape[2:]))
        values = np.array(self.attrs["opforge_values"], np.int64)
        if values.size == 4:  # [batch, ...] in either data format
            values[0] *= axis_size
        attrs = dict(self.attrs, opforge_values=values)
        operand = jnp.asarray(values.astype(np.dtype(shape.dtype)).reshape(shape.shape))
        out = apply("Opforge>Conv2DTranspose", (merged, filters, operand), attrs, FoldOutputShape(attrs))
        # Every element's output has the element's batch, x.shape[1] (an empty axis or batch too).
        return [y.reshape((axis_size, x.shape[1]) + tuple(y.shape[1:])) for y in out], [True] * len(out)


# The input gradient's output is per batch element of grad; the filter gradient sums over the batch.
_INPUT_GRAD_FOLD = Fold((0,))

# output_shape as a static argument: (values, the operand's shape, its dtype name).
ShapeKey = Tuple[Tuple[int, ...], Tuple[int, ...], str]


def _shape_key(shape: Sequence[int]) -> ShapeKey:
    """A static shape as TensorFlow's tf.shape gives it (int32, 1-D)."""
    return (tuple(int(d) for d in shape), (len(shape),), "int32")


def _forward(x, filters, key: ShapeKey, attrs: Attrs):
    values, operand_shape, operand_dtype = key
    operand = jnp.asarray(np.array(values, np.int64).astype(operand_dtype).reshape(operand_shape))
    a = _attr_dict(attrs)
    a["opforge_values"] = np.array(values, np.int64)
    a["Tshape"] = np.dtype(operand.dtype).name
    return apply("Opforge>Conv2DTranspose", (x, filters, operand), a, FoldOutputShape(a), dtype=x.dtype)[0]


def _input_grad_call(g, filters, attrs: Attrs):
    return apply("Opforge>Conv2DTransposeInputGrad", (g, filters), _attr_dict(attrs), _INPUT_GRAD_FOLD)[0]


def _filter_grad_call(x, filters, g, attrs: Attrs):
    return apply("Opforge>Conv2DTransposeFilterGrad", (x, filters, g), _attr_dict(attrs), SEQUENTIAL)[0]


def _float0(x):
    return np.zeros(np.shape(x), jax.dtypes.float0)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def conv_t(x, filters, key: ShapeKey, attrs: Attrs):
    """Conv2DTranspose(x, filters, output_shape) with its TensorFlow gradient."""
    return _forward(x, filters, key, attrs)


def _conv_t_fwd(x, filters, key, attrs):
    return conv_t(x, filters, key, attrs), (x, filters)


def _conv_t_bwd(key, attrs, res, g):
    x, filters = res
    if jnp.issubdtype(x.dtype, jnp.integer):  # int32: no gradient (TensorFlow's has none either)
        return _float0(x), _float0(filters)
    return input_grad(g, filters, attrs), filter_grad(x, filters, g, attrs)


conv_t.defvjp(_conv_t_fwd, _conv_t_bwd)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def input_grad(g, filters, attrs: Attrs):
    """Conv2DTransposeInputGrad(g, filters): the gradient to the transposed convolution's input."""
    return _input_grad_call(g, filters, attrs)


def _input_grad_bwd(attrs, res, upstream):
    # grad_input = conv2d(g, f) is linear in g and in f.
    g, filters = res
    return conv_t(upstream, filters, _shape_key(g.shape), attrs), filter_grad(upstream, filters, g, attrs)


input_grad.defvjp(lambda g, f, attrs: (input_grad(g, f, attrs), (g, f)), _input_grad_bwd)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def filter_grad(x, filters, g, attrs: Attrs):
    """Conv2DTransposeFilterGrad(x, filters, g): the gradient to the filters (`filters` gives its
    shape only)."""
    return _filter_grad_call(x, filters, g, attrs)


def _filter_grad_bwd(attrs, res, upstream):
    # grad_filter = correlate(g, x) is linear in x and in g; the filter gives only its shape.
    x, filters, g = res
    return (input_grad(g, upstream, attrs), jnp.zeros_like(filters),
            conv_t(x, upstream, _shape_key(g.shape), attrs))


filter_grad.defvjp(lambda x, f, g, attrs: (filter_grad(x, f, g, attrs), (x, f, g)), _filter_grad_bwd)


def _output_shape(output_shape) -> ShapeKey:
    """output_shape's values (they decide the result's shape: known while JAX traces), the
    operand's shape and dtype: int32 and int64 arrays keep theirs; Python values are int32 where
    they fit (TensorFlow's conversion), int64 beyond (which the core refuses, naming them)."""
    array_given = isinstance(output_shape, (jax.Array, jax.core.Tracer, np.ndarray, np.generic))
    if array_given:
        dtype = np.dtype(output_shape.dtype)
        if dtype not in (np.dtype(np.int32), np.dtype(np.int64)):
            raise TypeError(message(_OP, "output_shape", "int32 or int64", dtype.name))
    else:
        try:  # a Python value: the dtype JAX would give it
            given = np.asarray(output_shape)
        except (TypeError, ValueError) as exc:
            raise type(exc)(message(_OP, "output_shape", "int32 or int64 sizes",
                                    f"{short_repr(output_shape)} ({str(exc).splitlines()[0][:120]})")) from None
        if given.dtype.kind not in "iu":
            name = np.dtype(jnp.asarray(given).dtype).name if given.dtype.kind in "fcb" else given.dtype.name
            raise TypeError(message(_OP, "output_shape", "int32 sizes", f"{short_repr(output_shape)} ({name})"))
    values, shape, dtype = concrete_ints(_OP, "output_shape", output_shape, "int32 or int64 sizes")
    if not array_given:
        fits = all(-(2**31) <= v < 2**31 for v in values)
        dtype = np.dtype(np.int32 if fits else np.int64)
    return tuple(values), tuple(shape), np.dtype(dtype).name


def conv2d_transpose(input, filters, output_shape, strides, padding="SAME",  # noqa: A002
                     data_format: str = "NHWC", dilations=None) -> jax.Array:
    """opforge.ops.conv2d_transpose in JAX (tf.nn.conv2d_transpose's arguments): the transpose of
    conv2d, TensorFlow's bits. `output_shape` (4 values in data_format order, or [height, width])
    must be known while JAX traces (a list, a NumPy or concrete array). Gradients to input and
    filters (float types) are the C++ ops Conv2DTransposeInputGrad and Conv2DTransposeFilterGrad."""
    if data_format is None:
        data_format = "NHWC"  # as tf.nn.conv2d_transpose takes None
    if not isinstance(data_format, str):
        raise TypeError(message(_OP, "data_format", '"NHWC" or "NCHW"', short_repr(data_format)))
    channel_index = 1 if data_format.startswith("NC") else 3
    strides4 = get_sequence(strides, channel_index, "strides")
    dilations4 = get_sequence(dilations, channel_index, "dilations")
    padding, explicit = convert_padding(padding)
    input = array(_OP, "input", input)  # noqa: A001
    check_dtype(_OP, "input", input, DTYPES)
    filters = array(_OP, "filters", filters, dtype=input.dtype)
    if filters.dtype != input.dtype:
        raise TypeError(message(_OP, "filters", f"the dtype of input ({np.dtype(input.dtype).name})",
                                np.dtype(filters.dtype).name))
    key = _output_shape(output_shape)
    return conv_t(input, filters, key, make_attrs(strides4, padding, explicit, data_format, dilations4))

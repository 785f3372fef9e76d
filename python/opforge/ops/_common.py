"""Helpers shared by the op wrappers: the loaded library and the one format of argument errors.

Argument checks live once, in the C++ core's validation; a wrapper checks only what the op cannot
see (Python types, conversions), and says so in the core's format:
`<Op>: <argument> must be <expected>, got <given>`.

The exception class is the one TensorFlow raises for the same mistake in its own functions, so
that a drop-in's callers catch it where they caught TensorFlow's: a Python value of the wrong type
is a TypeError (`type_error`; TensorFlow's "Expected float for argument 'alpha'"); a value that
cannot become a tensor keeps the class `tf.convert_to_tensor` gave (`to_tensor`); a tensor of a
dtype the op does not take is a TypeError while a graph is built and an InvalidArgumentError
eagerly (`dtype_error`: TensorFlow's op-def check and its kernel lookup); what a kernel would
refuse is an InvalidArgumentError (`invalid_argument`).
"""
from __future__ import annotations

import numbers
from typing import Iterable

import numpy as np
import tensorflow as tf

from opforge._loader import load_library

FLOAT_DTYPES = (tf.float16, tf.bfloat16, tf.float32, tf.float64)


def lib():
    """The op library module (loaded once, on first use)."""
    return load_library()


def _message(op: str, argument: str, expected: str, given) -> str:
    return f"{op}: {argument} must be {expected}, got {given}"


def invalid_argument(op: str, argument: str, expected: str, given) -> tf.errors.InvalidArgumentError:
    """The error the core would raise: `<op>: <argument> must be <expected>, got <given>`."""
    return tf.errors.InvalidArgumentError(None, None, _message(op, argument, expected, given))


def type_error(op: str, argument: str, expected: str, given) -> TypeError:
    """A Python value of the wrong type (a string for a float, 1 for a bool): TypeError, as
    TensorFlow's attribute and argument checks raise, in the core's message format."""
    return TypeError(_message(op, argument, expected, given))


def value_error(op: str, argument: str, expected: str, given) -> ValueError:
    """A value TensorFlow's own Python function refuses before any kernel runs (tf.image.resize's
    rank or method): ValueError, in the core's message format."""
    return ValueError(_message(op, argument, expected, given))


def shape_error(op: str, argument: str, expected: str, given) -> Exception:
    """A value a shape function refuses once it is known (a constant size out of range): a
    ValueError while a graph is built (TensorFlow's shape functions raise it), an
    InvalidArgumentError eagerly (its kernels)."""
    if tf.executing_eagerly():
        return invalid_argument(op, argument, expected, given)
    return value_error(op, argument, expected, given)


def dtype_error(op: str, argument: str, expected: str, given) -> Exception:
    """A tensor of a dtype the op does not take. TensorFlow refuses it with a TypeError while a
    graph is built (tf.function: the op definition's type check) and with an InvalidArgumentError
    eagerly (no kernel of that dtype); opforge raises the same class in each."""
    if tf.executing_eagerly():
        return invalid_argument(op, argument, expected, given)
    return type_error(op, argument, expected, given)


def short_repr(value, limit: int = 60) -> str:
    """repr(value), cut to `limit` characters (10**400 has 401 digits)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def to_tensor(op: str, argument: str, value, dtype_hint=None) -> tf.Tensor:
    """tf.convert_to_tensor, with an error naming the argument for a value that is no tensor
    (None, a dict, a ragged list, a string where numbers go): TensorFlow's own says only
    "Attempt to convert a value (None) with an unsupported type"."""
    if isinstance(value, tf.Tensor) and (dtype_hint is None or value.dtype == dtype_hint):
        return value
    try:
        if (dtype_hint is not None and tf.as_dtype(dtype_hint).is_integer
                and not isinstance(value, (tf.Tensor, tf.Variable, np.ndarray, np.generic))):
            # A Python int beyond the hint's range is wrapped silently under an integer hint
            # ([1, 2**40] as int32 is [1, 0]): such values keep the wider dtype, which the
            # caller's dtype check then names.
            plain = tf.convert_to_tensor(value, name=argument)
            if plain.dtype.is_integer and plain.dtype.size > tf.as_dtype(dtype_hint).size:
                return plain
        return tf.convert_to_tensor(value, dtype_hint=dtype_hint, name=argument)
    except (TypeError, ValueError) as exc:  # the class TensorFlow gave, with the argument named
        reason = str(exc).split("\n")[0]
        raise type(exc)(_message(op, argument, "a tensor or a value convertible to one",
                                 f"{short_repr(value)} ({reason[:120]})")) from None


def python_number(op: str, argument: str, value, expected: str = "a number") -> float:
    """A Python or NumPy real number as a float. Strings ("0.3"), bools, tensors and numbers
    beyond the float range (10**400) are errors naming the argument, not coerced."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value.item()
    if isinstance(value, tf.Tensor):
        raise type_error(op, argument, f"{expected} (a Python number)", "a tensor")
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise type_error(op, argument, expected, short_repr(value))
    try:
        return float(value)
    except OverflowError:  # TensorFlow's float attributes raise Python's OverflowError too
        raise OverflowError(_message(op, argument, f"{expected} within the float range", short_repr(value))) from None


def python_int(op: str, argument: str, value, expected: str = "ints") -> int:
    """A Python or NumPy integer (not a float such as 3.9, not a bool) in the int64 range of an
    op attribute, as an int."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Integral, np.integer)):
        raise type_error(op, argument, expected, short_repr(value))
    if not -(2**63) <= int(value) < 2**63:
        raise invalid_argument(op, argument, f"{expected} in the int64 range", short_repr(value))
    return int(value)


def python_bool(op: str, argument: str, value) -> bool:
    """A Python or NumPy bool (not 1, not "yes")."""
    if not isinstance(value, (bool, np.bool_)):
        raise type_error(op, argument, "a Python bool", short_repr(value))
    return bool(value)


def dtype_names(dtypes: Iterable[tf.DType]) -> str:
    names = [d.name for d in dtypes]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def check_dtype(op: str, argument: str, tensor: tf.Tensor, allowed) -> None:
    if tensor.dtype not in allowed:
        raise dtype_error(op, argument, dtype_names(allowed), tensor.dtype.name)

"""Argument checks of opforge.jax's functions, in the core's message format
(`<Op>: <argument> must be <expected>, got <given>`), as JAX raises them: a Python value of the
wrong type is a TypeError, a value or shape the op refuses a ValueError (at trace time, from the
op struct's own Validate: opforge.jax._ffi.infer). What only the kernel can see (a NaN in a
size input on the host, a box outside its image) comes back from the call with the core's
message: as JaxRuntimeError (INVALID_ARGUMENT) the first time, as a ValueError when JAX reuses a
cached call.
"""
from __future__ import annotations

import numbers
from typing import Iterable

import numpy as np

import jax
import jax.numpy as jnp

# The one message format of argument errors, and its value printer (opforge.ops._common).
from opforge.ops._common import _message as message  # noqa: F401  (re-exported to the op modules)
from opforge.ops._common import short_repr  # noqa: F401

FLOAT_DTYPES = (np.dtype(jnp.float16), np.dtype(jnp.bfloat16), np.dtype(np.float32), np.dtype(np.float64))


def array(op: str, argument: str, value, dtype=None) -> jax.Array:
    """`value` as a JAX array (a tracer stays one); `dtype` for Python scalars and lists only."""
    if isinstance(value, (jax.Array, jax.core.Tracer)):
        return value
    try:
        # Only Python scalars and lists take `dtype`: a typed value (a NumPy array, a TensorFlow
        # tensor) keeps its own, which the caller's dtype check names.
        if dtype is not None and not hasattr(value, "dtype"):
            return jnp.asarray(value, dtype=dtype)
        return jnp.asarray(value)
    except (TypeError, ValueError, OverflowError) as exc:
        raise type(exc)(message(op, argument, "an array or a value convertible to one",
                                f"{short_repr(value)} ({str(exc).splitlines()[0][:120]})")) from None


def dtype_names(dtypes: Iterable) -> str:
    names = [np.dtype(d).name for d in dtypes]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def check_dtype(op: str, argument: str, x, allowed) -> None:
    if np.dtype(x.dtype) not in [np.dtype(d) for d in allowed]:
        raise TypeError(message(op, argument, dtype_names(allowed), np.dtype(x.dtype).name))


def same_dtype(op: str, argument: str, x, like, like_name: str) -> None:
    if x.dtype != like.dtype:
        raise TypeError(message(op, argument, f"the dtype of {like_name} ({np.dtype(like.dtype).name})",
                                np.dtype(x.dtype).name))


def number(op: str, argument: str, value, expected: str = "a number") -> float:
    """A Python or NumPy real number as a float (not a string, a bool or an array)."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value.item()
    if hasattr(value, "shape") and hasattr(value, "dtype") and not isinstance(value, np.generic):
        # A JAX array or TensorFlow tensor: an attribute is a Python number (as TensorFlow says).
        raise TypeError(message(op, argument, f"{expected} (a Python number)", "an array (a tensor)"))
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(message(op, argument, expected, short_repr(value)))
    try:
        return float(value)
    except OverflowError:
        raise OverflowError(message(op, argument, f"{expected} within the float range", short_repr(value))) from None


def integer(op: str, argument: str, value, expected: str = "an int") -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Integral, np.integer)):
        raise TypeError(message(op, argument, expected, short_repr(value)))
    if not -(2**63) <= int(value) < 2**63:
        raise ValueError(message(op, argument, f"{expected} in the int64 range", short_repr(value)))
    return int(value)


def boolean(op: str, argument: str, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(message(op, argument, "a Python bool", short_repr(value)))
    return bool(value)


def string(op: str, argument: str, value, expected: str = "a string") -> str:
    if not isinstance(value, str):
        raise TypeError(message(op, argument, expected, short_repr(value)))
    return value


def ints(op: str, argument: str, value, expected: str = "a list of ints") -> tuple:
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return (int(value),)
    try:
        items = list(value)
    except TypeError:
        raise TypeError(message(op, argument, expected, short_repr(value))) from None
    return tuple(integer(op, argument, v, expected) for v in items)


def concrete_ints(op: str, argument: str, value, expected: str) -> tuple:
    """The values of a small integer input that decides a result's shape (a size, an output
    shape): a list, a NumPy or a concrete JAX array. Under jax.jit it must not be a tracer."""
    if isinstance(value, jax.core.Tracer):
        raise ValueError(message(op, argument, f"{expected}, known while JAX traces (a Python list, "
                                 "a NumPy array, or a static argument under jax.jit)", "a tracer"))
    array = np.asarray(value)
    if array.dtype.kind not in "iu":
        raise TypeError(message(op, argument, f"{expected} (integers)", short_repr(value)))
    return tuple(int(v) for v in array.reshape(-1)), array.shape, array.dtype

"""Helpers shared by the op wrappers: the loaded library and the one format of argument errors.

Argument checks live once, in the C++ core's validation; a wrapper checks only what the op cannot
see (Python types, conversions), and says so in the core's format:
`<Op>: <argument> must be <expected>, got <given>`.
"""
from __future__ import annotations

from typing import Iterable

import tensorflow as tf

from opforge._loader import load_library

FLOAT_DTYPES = (tf.float16, tf.bfloat16, tf.float32, tf.float64)


def lib():
    """The op library module (loaded once, on first use)."""
    return load_library()


def invalid_argument(op: str, argument: str, expected: str, given) -> tf.errors.InvalidArgumentError:
    """The error the core would raise: `<op>: <argument> must be <expected>, got <given>`."""
    return tf.errors.InvalidArgumentError(None, None, f"{op}: {argument} must be {expected}, got {given}")


def dtype_names(dtypes: Iterable[tf.DType]) -> str:
    names = [d.name for d in dtypes]
    return ", ".join(names[:-1]) + " or " + names[-1]


def check_dtype(op: str, argument: str, tensor: tf.Tensor, allowed) -> None:
    if tensor.dtype not in allowed:
        raise invalid_argument(op, argument, dtype_names(allowed), tensor.dtype.name)

"""Helpers shared by the op wrappers: the loaded library and argument errors."""
from __future__ import annotations

from typing import Iterable

import tensorflow as tf

from opforge._loader import load_library

FLOAT_DTYPES = (tf.float16, tf.bfloat16, tf.float32, tf.float64)


def lib():
    """The op library module (loaded once, on first use)."""
    return load_library()


def invalid_argument(message: str) -> tf.errors.InvalidArgumentError:
    return tf.errors.InvalidArgumentError(None, None, message)


def dtype_names(dtypes: Iterable[tf.DType]) -> str:
    names = [d.name for d in dtypes]
    return ", ".join(names[:-1]) + " or " + names[-1]


def check_dtype(op: str, argument: str, tensor: tf.Tensor, allowed) -> None:
    if tensor.dtype not in allowed:
        raise invalid_argument(
            f"{op}: {argument} must be {dtype_names(allowed)}, got {tensor.dtype.name}"
        )

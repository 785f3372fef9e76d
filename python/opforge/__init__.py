"""opforge: production-grade TensorFlow custom ops in C++, and the toolkit to write your own.

Importing opforge is cheap: TensorFlow and the C++ library are loaded on the first use of an op
(or by :func:`register_all`).

    import opforge
    y = opforge.ops.leaky_relu(x, alpha=0.2)
    layer = opforge.layers.LeakyReLU(negative_slope=0.3)
"""
from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from opforge._loader import LoadError, library_path, load_library

__version__ = "0.1.0"
__all__ = ["LoadError", "library_path", "load_library", "register_all", "ops", "layers", "fuse"]


def register_all() -> ModuleType:
    """Loads the library and registers every op, gradient and Keras layer with TensorFlow.

    Call it before `tf.saved_model.load` or `keras.models.load_model` of a model that uses
    opforge ops in a fresh process.
    """
    module = load_library()
    importlib.import_module("opforge.ops")  # registers the gradients
    importlib.import_module("opforge.layers")  # registers the Keras serializables
    return module


def __getattr__(name: str) -> Any:
    # `opforge.ops`, `opforge.layers` and `opforge.fuse` import TensorFlow; load them only when
    # asked for.
    if name in ("ops", "layers", "fuse"):
        module = importlib.import_module(f"opforge.{name}")
        globals()[name] = module
        return module
    raise AttributeError(f"module 'opforge' has no attribute {name!r}")

"""opforge: production-grade TensorFlow custom ops in C++, and the toolkit to write your own.

Importing opforge is cheap: TensorFlow and the C++ library are loaded on the first use of an op
(or by :func:`register_all`).

    import opforge
    y = opforge.ops.leaky_relu(x, alpha=0.2)
    layer = opforge.layers.LeakyReLU(negative_slope=0.3)
"""
from __future__ import annotations

import importlib
from typing import Any

from opforge._loader import LoadError, library_path, load_library, register_all

__version__ = "0.1.0"
__all__ = ["LoadError", "library_path", "load_library", "register_all", "ops", "layers"]


def __getattr__(name: str) -> Any:
    # `opforge.ops` and `opforge.layers` import TensorFlow; load them only when asked for.
    if name in ("ops", "layers"):
        module = importlib.import_module(f"opforge.{name}")
        globals()[name] = module
        return module
    raise AttributeError(f"module 'opforge' has no attribute {name!r}")

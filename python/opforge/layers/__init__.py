"""Keras layers built on opforge ops (Keras 3 on its TensorFlow or JAX backend, or tf-keras:
opforge._keras). Importing this package registers them as serializable
(package "opforge"), so `.keras` files that use them load after `import opforge.layers`.

Every module in this package holds layers (listed in its `__all__`); they are found by listing
the package, so adding a layer edits no file but its own.
"""
from __future__ import annotations

from opforge._keras import require_layers

require_layers("opforge.layers")

import importlib
import pkgutil

MODULES = tuple(
    importlib.import_module(f"{__name__}.{info.name}")
    for info in pkgutil.iter_modules(__path__)
    if not info.name.startswith("_")
)
for _module in MODULES:
    globals().update({name: getattr(_module, name) for name in _module.__all__})

__all__ = sorted(name for m in MODULES for name in m.__all__)

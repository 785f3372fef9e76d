"""opforge's ops. Each wrapper mirrors the TensorFlow function it replaces (same argument names
and defaults), so switching is a one-word change. Importing this package registers the
gradients; the C++ library itself is loaded on the first call.

Every module in this package is an op: it defines its wrappers (listed in its `__all__`), the
C++ op names it registers (`OP_NAMES`) and its specs (`SPECS`, see `opforge.ops.spec`). They are
found here by listing the package, so adding an op edits no file but its own.
"""
from __future__ import annotations

import importlib
import pkgutil


# `spec` is not an op: it declares what an op module's SPECS are made of (OpSpec, Case, SpeedCase...).
MODULES = tuple(
    importlib.import_module(f"{__name__}.{info.name}")
    for info in pkgutil.iter_modules(__path__)
    if not info.name.startswith("_") and info.name != "spec"
)

for _module in MODULES:
    for _name in ("__all__", "OP_NAMES", "SPECS"):
        if not hasattr(_module, _name):
            raise ImportError(f"{_module.__name__} is an op module (python/opforge/ops/) but defines "
                              f"no {_name}; every op module lists its wrappers (__all__), its C++ "
                              "ops (OP_NAMES) and its specs (SPECS)")

# Every op the C++ library registers (checked against the library by the tests).
OP_NAMES = tuple(name for module in MODULES for name in module.OP_NAMES)
# The ops that have a CPU kernel only, by design (an op module lists them in CPU_ONLY): the
# GPU build check and `opforge doctor` expect no GPU kernel for them.
CPU_ONLY = tuple(name for module in MODULES for name in getattr(module, "CPU_ONLY", ()))
# Every op's spec: what `opforge verify`, `opforge bench` and the generic tests iterate over.
SPECS = tuple(spec for module in MODULES for spec in module.SPECS)

for _module in MODULES:  # noqa: B007
    globals().update({name: getattr(_module, name) for name in _module.__all__})

__all__ = ["CPU_ONLY", "OP_NAMES", "SPECS"] + sorted(name for m in MODULES for name in m.__all__)

"""opforge's ops in JAX: every function of `opforge.ops` with the same name, arguments and
results (jax arrays in and out, the same named tuples), running the same C++ kernels through
their XLA FFI handlers (libopforge_ffi.so, `jax.ffi`), so the same bits as in TensorFlow.

    import jax, opforge.jax as ofj
    y = jax.jit(lambda x: ofj.leaky_relu(x, alpha=0.1))(x)
    g = jax.grad(lambda x: ofj.swish(x).sum())(x)

Every function works under `jax.jit`, `jax.grad` (a `jax.custom_vjp` on the op's gradient
kernel, where the TensorFlow op has a gradient) and `jax.vmap` (a batching rule for each op:
opforge.jax._batching). Bad input raises at trace time with the core's message (TypeError for a
Python value of the wrong type, ValueError for a value or shape the op refuses).

`pip install "opforge[jax]"` installs JAX (CPU). The CPU handlers are registered when this
package is first used; on a CUDA device, a CUDA build of opforge registers each op's CUDA
handler too (`cuda_targets()`). See docs/guides/jax-and-keras2.md.
"""
from __future__ import annotations

import importlib
import pkgutil

try:
    import jax  # noqa: F401
except ImportError as _error:  # pragma: no cover - the message is the point
    raise ImportError("opforge.jax needs JAX: pip install \"opforge[jax]\" (or jax[cpu])") from _error

from opforge.jax import _ffi

# Every module of this package that is no helper mirrors the op module of opforge.ops of its name.
MODULES = tuple(importlib.import_module(f"{__name__}.{info.name}") for info in pkgutil.iter_modules(__path__)
                if not info.name.startswith("_"))
for _module in MODULES:
    globals().update({name: getattr(_module, name) for name in _module.__all__})

__all__ = sorted(name for m in MODULES for name in m.__all__) + ["cuda_targets", "targets"]


def targets():
    """The XLA FFI targets registered with JAX's CPU platform ("Opforge>LeakyRelu", ...)."""
    return _ffi.targets()


def cuda_targets():
    """Those whose CUDA handler is registered too (JAX with a CUDA device and a CUDA build of
    opforge); the others run on JAX's CPU device only."""
    return _ffi.cuda_targets()

"""XLA support: which opforge ops lower to XLA, and a clear error for those that do not.

Some opforge ops have XLA kernels (cc/ops/<op>/<op>_xla.cc) and run inside
`tf.function(jit_compile=True)`. For every other op, TensorFlow's own error comes only when the
function is compiled and says "No registered 'Opforge>...' OpKernel for XLA_CPU_JIT devices".
opforge instead stops when such an op is added to a graph traced for XLA (TensorFlow enters an
XLAControlFlowContext while it traces a jit_compile function) and says what to do.

An op lowers in one of two ways (`xla_path`): an HLO lowering (the op written in XLA's own
operations, which XLA can fuse with its neighbours) or an XLA FFI custom call, which runs the op
struct's own CPU kernel from XLA (cc/common/xla_ffi.h): the same core as outside XLA, so the same
bits. The library reports the ops it lowers through its exported `OpforgeXlaLoweredOps()` and
those of them that are custom calls through `OpforgeXlaFfiOps()` (a library built without XLA
kernels has neither symbol: then no op lowers; one built against a TensorFlow whose wheel lacks
XLA's FFI has only HLO lowerings).
"""
from __future__ import annotations

import ctypes
import functools
from pathlib import Path
from types import ModuleType
from typing import Dict, FrozenSet, Tuple

import tensorflow as tf
from tensorflow.python.eager import context as _context
from tensorflow.python.framework import ops as _ops
from tensorflow.python.ops import control_flow_util as _control_flow_util

__all__ = ["lowered_ops", "ffi_ops", "ffi_gpu_ops", "xla_path", "supports_jit", "registered_late",
           "unsupported_message", "in_xla_trace"]

_lowered: FrozenSet[str] = frozenset()
_ffi: FrozenSet[str] = frozenset()
_ffi_gpu: FrozenSet[str] = frozenset()
_late = False
# Op name -> the name of its Python function without the prefix ("conv2d_transpose").
_snake_names: Dict[str, str] = {}
_executing_eagerly = _context.executing_eagerly
_in_xla_context = _control_flow_util.GraphOrParentsInXlaContext
_default_graph = _ops.get_default_graph


def _exported_text(path: Path, symbol: str) -> str:
    """The text a `const char* symbol()` of the library at `path` returns ("" without it)."""
    try:
        function = getattr(ctypes.CDLL(str(path)), symbol)
    except (OSError, AttributeError):
        return ""
    function.restype = ctypes.c_char_p
    return (function() or b"").decode()


def read_lowered_ops(path: Path) -> Tuple[FrozenSet[str], bool]:
    """The ops the library at `path` lowers to XLA, and whether they were registered after
    TensorFlow's one-time XLA kernel registration (opforge then registered them itself)."""
    text = _exported_text(path, "OpforgeXlaLoweredOps")
    late = text.startswith("late:")
    if late:
        text = text[len("late:"):]
    return frozenset(name for name in text.split(",") if name), late


def _exported_ops(path: Path, symbol: str) -> FrozenSet[str]:
    """The comma-separated op names a `const char* symbol()` of the library at `path` returns."""
    return frozenset(name for name in _exported_text(path, symbol).split(",") if name)


def read_ffi_ops(path: Path) -> FrozenSet[str]:
    """The ops the library at `path` runs under XLA as FFI custom calls."""
    return _exported_ops(path, "OpforgeXlaFfiOps")


def read_ffi_gpu_ops(path: Path) -> FrozenSet[str]:
    """The ops whose FFI custom call the library at `path` also runs on XLA:GPU (a CUDA build)."""
    return _exported_ops(path, "OpforgeXlaFfiGpuOps")


def ffi_gpu_ops() -> FrozenSet[str]:
    """The FFI custom-call ops that run on XLA:GPU too (their CUDA handlers are registered: a CUDA
    build of the library, for the ops with GPU kernels that read no input's values but a size)."""
    return _ffi_gpu


def ffi_ops() -> FrozenSet[str]:
    """The C++ ops that run under XLA as FFI custom calls (a subset of `lowered_ops()`)."""
    return _ffi


def xla_path(op: str) -> str:
    """How op `op` (`Opforge>YoloDecode`) runs under XLA: "FFI custom call" (on XLA:CPU; "FFI
    custom call, CPU and GPU" where its CUDA handler is registered too), "HLO lowering", or
    "none" (the loaded library has no XLA kernel for it)."""
    if op in _ffi_gpu:
        return "FFI custom call, CPU and GPU"
    if op in _ffi:
        return "FFI custom call"
    return "HLO lowering" if op in _lowered else "none"


def supports_jit(*ops: str) -> bool:
    """Whether every one of `ops` has an XLA kernel in the library (loading it if need be): what
    a layer built on them sets as `supports_jit`, so that Keras's jit_compile="auto" compiles a
    model with XLA exactly where opforge can. Where TensorFlow sees a GPU, an op that runs as an
    FFI custom call claims XLA support only if its CUDA handler is registered (`ffi_gpu_ops()`),
    so that Keras's jit_compile="auto", which compiles with XLA on a GPU, leaves a model with any
    other one to TensorFlow's own kernels."""
    from opforge.ops._common import lib

    lib()
    if not all(op in _lowered for op in ops):
        return False
    if any(op in _ffi and op not in _ffi_gpu for op in ops):
        import tensorflow as tf

        if tf.config.list_physical_devices("GPU"):
            return False
    return True


def lowered_ops() -> FrozenSet[str]:
    """The C++ ops (`Opforge>LeakyRelu`, ...) that have XLA kernels in the loaded library."""
    return _lowered


def registered_late() -> bool:
    """True if the library was loaded after TensorFlow registered its XLA kernels (after a first
    XLA compilation), so that opforge registered its own XLA kernels itself."""
    return _late


def in_xla_trace() -> bool:
    """True while a graph is being traced for XLA (tf.function(jit_compile=True), also in a
    function it calls)."""
    return not _executing_eagerly() and _in_xla_context(_default_graph())


def _python_name(snake: str) -> str:
    return snake[len("opforge_"):] if snake.startswith("opforge_") else snake


def unsupported_message(op: str, python_name: str) -> str:
    """The error for op `op` (called through lib().`python_name`) inside a jit_compile trace."""
    lowering = sorted({_snake_names.get(name, name) for name in _lowered
                       if not name.endswith("Grad")})
    return (
        f"opforge: {op} (opforge.ops.{_python_name(python_name)} or its gradient) has no XLA kernel, "
        "so it cannot run inside tf.function(jit_compile=True) or a Keras model compiled with "
        "jit_compile=True. Use jit_compile=False for the function (or model.compile) that calls "
        "it; the rest of the program can keep its own jit-compiled functions. "
        + (f"opforge ops that lower to XLA: {', '.join(lowering)}." if lowering else
           "This opforge build has no XLA kernels at all (it was built without TensorFlow's XLA "
           "library; `opforge doctor` says why).")
    )


def guard_ops(module: ModuleType, path: Path) -> None:
    """Wraps the functions of a loaded library (`opforge_conv2d_transpose`, `Opforge_...`) whose
    op has no XLA kernel so that adding the op to a graph traced for XLA raises opforge's error.
    Ops that lower are left untouched (no per-call cost); for the others the eager fast path
    pays one `executing_eagerly()` check."""
    global _lowered, _late, _ffi, _ffi_gpu
    _lowered, _late = read_lowered_ops(path)
    _ffi = read_ffi_ops(path) & _lowered
    _ffi_gpu = read_ffi_gpu_ops(path) & _ffi
    # The raw op functions are copies of the generated snake_case ones and keep their __name__.
    ops_by_function = {}
    for attr in dir(module):
        if attr.startswith("Opforge_") and callable(getattr(module, attr)):
            op = "Opforge>" + attr[len("Opforge_"):]
            snake = getattr(module, attr).__name__
            ops_by_function[attr] = op
            ops_by_function[snake] = op
            _snake_names[op] = _python_name(snake)
    for attr, op in ops_by_function.items():
        function = getattr(module, attr, None)
        if op in _lowered or function is None or getattr(function, "_opforge_xla_guard", False):
            continue
        message = unsupported_message(op, _snake_names[op])

        def guarded(*args, __function=function, __message=message, **kwargs):
            if not _executing_eagerly() and _in_xla_context(_default_graph()):
                raise tf.errors.InvalidArgumentError(None, None, __message)
            return __function(*args, **kwargs)

        functools.update_wrapper(guarded, function)
        guarded._opforge_xla_guard = True
        # What tf.autograph.experimental.do_not_convert marks: AutoGraph calls it as it is
        # (it would otherwise look for the generated op function's source and warn).
        guarded.autograph_info__ = frozenset()
        setattr(module, attr, guarded)

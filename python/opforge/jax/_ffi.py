"""The bridge between JAX and opforge's XLA FFI handlers (libopforge_ffi.so).

The handlers are the op structs' own (cc/common/xla_ffi.h): the very kernels TensorFlow runs, so
the same bits. This module registers every handler the library lists with JAX
(`jax.ffi.register_ffi_target`) and makes calls of them:

- `call(target, inputs, attrs)`: the results' shapes come from the op struct's own Validate
  (`OpforgeFfiInfer`), run on the inputs' static shapes while JAX traces, so bad input fails at
  trace time with the core's message (a ValueError), before any computation is built; their
  element types from the op's signature (`OpforgeFfiSignatures`). Inputs whose values the op
  reads on the host (anchors, NMS's sizes) must then be concrete: an error says so for a tracer.
`opforge.jax._batching.apply` wraps `call` in the op's `jax.vmap` rule.
"""
from __future__ import annotations

import ctypes
import functools
import math
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

import jax
import jax.numpy as jnp

LIBRARY = "libopforge_ffi.so"
MAX_RANK = 16
_lock = threading.Lock()


class _Attr(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("kind", ctypes.c_int32), ("count", ctypes.c_int64),
                ("data", ctypes.c_void_p)]


@dataclass(frozen=True)
class Signature:
    name: str
    inputs: Tuple[Tuple[str, str], ...]   # (name, type) with list inputs' "N * T" kept whole
    outputs: Tuple[Tuple[str, str], ...]
    attrs: str
    values_input: int


def library_path() -> Path:
    return Path(__file__).resolve().parent.parent / LIBRARY


def _split(text: str) -> Tuple[Tuple[str, str], ...]:
    items = []
    for item in text.split(";"):
        if item.strip():
            name, kind = item.split(":", 1)
            items.append((name.strip(), kind.strip()))
    return tuple(items)


@functools.lru_cache(maxsize=None)
def _library():
    """The handler library, loaded once, its handlers registered with JAX's CPU platform."""
    from opforge._loader import point_core_at_onednn

    # The same oneDNN as opforge's TensorFlow kernels take (the bfloat16 convolutions): the
    # same choice of kernel in both processes, so the same bits.
    point_core_at_onednn()
    path = library_path()
    if not path.is_file():
        raise ImportError(f"opforge.jax: {path} is missing: this opforge was built without XLA FFI "
                          "handlers (a TensorFlow wheel without xla/ffi/api headers); "
                          "`opforge doctor` says why")
    lib = ctypes.CDLL(str(path))
    lib.OpforgeFfiTargets.restype = ctypes.c_char_p
    lib.OpforgeFfiSignatures.restype = ctypes.c_char_p
    lib.OpforgeFfiInfer.restype = ctypes.c_int
    lib.OpforgeFfiInfer.argtypes = [
        ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(_Attr), ctypes.c_int, ctypes.c_int,
        ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_void_p),
        ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_int64),
        ctypes.c_char_p, ctypes.c_int64]
    for line in lib.OpforgeFfiTargets().decode().splitlines():
        target, symbol = line.split()
        jax.ffi.register_ffi_target(target, jax.ffi.pycapsule(getattr(lib, symbol)), platform="cpu")
    _register_cuda(lib)
    return lib


_cuda_targets: Tuple[str, ...] = ()


def _cuda_present() -> bool:
    try:
        return bool(jax.devices("cuda"))
    except RuntimeError:  # no CUDA platform in this jaxlib (jax[cpu]) or no device
        return False


def _register_cuda(lib) -> None:
    """Registers the CUDA platform's handlers (OpforgeFfiGpu_<Op>, on JAX's stream and allocator)
    where JAX has a CUDA device. They live in opforge's TensorFlow binding when it is a CUDA build
    (they call the ops' CUDA kernels, which libopforge_ffi.so does not link); TensorFlow has
    loaded it in this process (`import opforge`)."""
    global _cuda_targets
    if not _cuda_present():
        return
    from opforge._loader import library_path as binding_path

    try:
        binding = ctypes.CDLL(str(binding_path()))
    except OSError:
        return
    found = []
    for line in lib.OpforgeFfiTargets().decode().splitlines():
        target = line.split()[0]
        symbol = "OpforgeFfiGpu_" + target.split(">", 1)[1]
        if hasattr(binding, symbol):
            jax.ffi.register_ffi_target(target, jax.ffi.pycapsule(getattr(binding, symbol)), platform="CUDA")
            found.append(target)
    _cuda_targets = tuple(found)


def cuda_targets() -> Tuple[str, ...]:
    """The targets whose CUDA handler is registered with JAX (none without a CUDA device, or with
    a CPU build of opforge)."""
    _library()
    return _cuda_targets


@functools.lru_cache(maxsize=None)
def signatures() -> Dict[str, Signature]:
    """Every handler's signature, by target name ("Opforge>LeakyRelu")."""
    out = {}
    for line in _library().OpforgeFfiSignatures().decode().splitlines():
        name, inputs, outputs, attrs, values = line.split("\t")
        out[name] = Signature(name, _split(inputs), _split(outputs), attrs, int(values))
    return out


def targets() -> Tuple[str, ...]:
    """The targets registered with JAX."""
    return tuple(signatures())


_FIXED_TYPES = {"float": np.float32, "double": np.float64, "int32": np.int32, "int64": np.int64,
                "bool": np.bool_, "half": np.float16}


def output_kinds(target: str, attrs: Mapping[str, Any]) -> List[str]:
    """The element type of every output of `target`, a list output ("y_true: num_scales * T")
    repeated as its int attr says."""
    kinds = []
    for _, kind in signatures()[target].outputs:
        if "*" in kind:
            count, kind = (part.strip() for part in kind.split("*"))
            kinds += [kind] * int(attrs[count])
        else:
            kinds.append(kind)
    return kinds


def _result_dtype(kind: str, dtype, attrs: Mapping[str, Any]):
    if kind == "T":
        return dtype
    if kind in _FIXED_TYPES:
        return _FIXED_TYPES[kind]
    if kind in attrs:  # a type attr of its own ("U", "Tshape")
        return np.dtype(attrs[kind])
    raise TypeError(f"opforge.jax: an output of type {kind!r} this bridge cannot name")


def _attr_array(attrs: Mapping[str, Any]):
    """OpforgeFfiInfer's attributes, and the buffers they point at (kept alive by the caller)."""
    items, keep = [], []
    for name, value in attrs.items():
        if isinstance(value, (bool, np.bool_)):
            kind, data = 2, np.array([int(value)], np.int64)
        elif isinstance(value, str):
            kind, data = 3, np.frombuffer(value.encode() or b"\0", np.uint8)
        elif isinstance(value, (int, np.integer)):
            kind, data = 1, np.array([value], np.int64)
        elif isinstance(value, (float, np.floating)):
            kind, data = 0, np.array([value], np.float32)
        else:
            array = np.asarray(value)
            if array.dtype.kind in "iu":
                kind, data = 4, np.ascontiguousarray(array.reshape(-1), np.int64)
            else:
                kind, data = 5, np.ascontiguousarray(array.reshape(-1), np.float32)
        count = len(value.encode()) if kind == 3 else (1 if kind < 3 else data.size)
        keep.append(data)
        items.append(_Attr(name.encode(), kind, count, data.ctypes.data))
    array = (_Attr * max(len(items), 1))(*items)
    return array, len(items), keep


def _ffi_attrs(attrs: Mapping[str, Any]) -> Dict[str, Any]:
    """The attributes as jax.ffi.ffi_call takes them (NumPy arrays for lists)."""
    out = {}
    for name, value in attrs.items():
        if isinstance(value, (list, tuple)):
            array = np.asarray(value)
            value = array.astype(np.int64) if array.dtype.kind in "iub" or array.size == 0 else array.astype(np.float32)
        elif isinstance(value, float):
            value = np.float32(value)
        out[name] = value
    return out


def is_concrete(x) -> bool:
    try:
        np.asarray(x)
    except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
        return False
    return True


def dtype_name(dtype) -> str:
    """The core's name of an element type (common/dtype.h: "half" for float16)."""
    name = np.dtype(dtype).name
    return "half" if name == "float16" else name


def infer(target: str, inputs: Sequence[Any], attrs: Mapping[str, Any], dtype,
          concrete: Mapping[int, str] = {}) -> List[Optional[Tuple[int, ...]]]:
    """The output shapes a call of `target` gives (None for an output the op leaves out), from
    the op struct's Validate; bad input raises ValueError with the core's message. `concrete`
    names, by position, the inputs whose values the op reads (their values are passed)."""
    lib = _library()
    ranks = (ctypes.c_int32 * max(len(inputs), 1))(*[len(np.shape(x)) for x in inputs])
    dims_list = [int(d) for x in inputs for d in np.shape(x)]
    dims = (ctypes.c_int64 * max(len(dims_list), 1))(*dims_list)
    keep, pointers = [], []
    for i, x in enumerate(inputs):
        if i in concrete:
            if not is_concrete(x):
                raise ValueError(f"{target.split('>')[-1]}: {concrete[i]} must be a concrete array (its values "
                                 "decide the results' shapes or are checked before the call: under jax.jit, "
                                 "close over it or mark it static), got a tracer")
            value = np.ascontiguousarray(np.asarray(x))
            keep.append(value)
            pointers.append(value.ctypes.data if value.size else None)
        else:
            pointers.append(None)
    data = (ctypes.c_void_p * max(len(inputs), 1))(*pointers)
    attr_array, num_attrs, attr_keep = _attr_array(attrs)
    n = len(output_kinds(target, attrs))
    out_ranks = (ctypes.c_int32 * max(n, 1))()
    out_dims = (ctypes.c_int64 * max(n * MAX_RANK, 1))()
    error = ctypes.create_string_buffer(2048)
    code = lib.OpforgeFfiInfer(target.encode(), dtype_name(dtype).encode(), attr_array, num_attrs,
                               len(inputs), ranks, dims, data, n, MAX_RANK, out_ranks, out_dims,
                               error, len(error))
    del keep, attr_keep
    if code == 1:
        raise ValueError(error.value.decode())
    if code != 0:
        raise RuntimeError(f"opforge.jax: {error.value.decode()}")
    return [None if out_ranks[i] < 0 else tuple(out_dims[i * MAX_RANK + j] for j in range(out_ranks[i]))
            for i in range(n)]


def call(target: str, inputs: Sequence[Any], attrs: Mapping[str, Any], dtype=None,
         concrete: Mapping[int, str] = {}) -> Tuple[jax.Array, ...]:
    """Calls the handler of `target` on `inputs` (arrays of the kernel's element type `dtype`,
    by default the first input's) with `attrs` (every attribute of the op: the handler fills in
    no default; "T" is added). Returns every output of the op's signature, in order (a list
    output flattened)."""
    dtype = np.dtype(dtype if dtype is not None else inputs[0].dtype)
    _library()
    # An op without a CUDA handler (`cuda_targets()`) placed on a GPU fails when JAX lowers the
    # call, with XLA's "no registered implementation ... for platform CUDA": the platform is
    # JAX's choice at lowering (jax.default_device, the inputs' devices), not known here.
    attrs = dict(attrs)
    attrs["T"] = dtype_name(dtype)  # every handler picks its kernel by it
    shapes = infer(target, inputs, attrs, dtype, concrete)
    for i, shape in enumerate(shapes):
        if shape is not None and math.prod(shape) * 16 >= 2**63:  # what XLA's shapes can hold
            raise ValueError(f"{target.split('>')[-1]}: output {i} would have shape {list(shape)}, "
                             "more elements than an array can hold")
    results = [jax.ShapeDtypeStruct(shape if shape is not None else (0,), _result_dtype(kind, dtype, attrs))
               for shape, kind in zip(shapes, output_kinds(target, attrs))]
    out = jax.ffi.ffi_call(target, results)(*inputs, **_ffi_attrs(attrs))
    return tuple(out)

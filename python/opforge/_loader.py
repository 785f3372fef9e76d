"""Loads opforge's C++ library once, from the package's own directory, with clear errors.

TensorFlow custom-op libraries fail in famously unhelpful ways: a bare "undefined symbol" with
a mangled name, or a segfault when the library was built against another TensorFlow. This
module checks what it can before `tf.load_op_library` and turns every failure into a
:class:`LoadError` that says the cause and the command that fixes it.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import re
import threading
from pathlib import Path
from types import ModuleType
from typing import Optional

LIBRARY_NAME = "_opforge_ops.so"
REBUILD_HINT = (
    "Rebuild opforge against the TensorFlow you run: in an opforge checkout run `make build`; "
    "elsewhere `pip install --no-build-isolation --force-reinstall --no-deps <opforge source dir>` "
    "with that TensorFlow installed."
)

# The TensorFlow minor releases opforge builds against and is tested on (`make compat-check`
# builds each and runs the compat subset of the tests); the wheel's metadata states the same
# range (pyproject.toml's `cpu` and `gpu` extras).
SUPPORTED_TF = ("2.16", "2.21")


def onednn_library() -> Optional[Path]:
    """Where PyPI's onednn-cpu-gomp put oneDNN's library (libdnnl.so.3), or None.

    The core opens it with dlopen on its first bfloat16 convolution (common/onednn.h); the
    package installs it under the environment's lib/, which is on no loader path.
    """
    try:
        import importlib.metadata as metadata

        dist = metadata.distribution("onednn-cpu-gomp")
    except Exception:  # not installed
        return None
    for f in dist.files or ():
        if str(f).replace("\\", "/").split("/")[-1] == "libdnnl.so.3":
            path = Path(dist.locate_file(f)).resolve()
            if path.is_file():
                return path
    return None


def point_core_at_onednn() -> None:
    """Sets OPFORGE_ONEDNN_LIBRARY (unless the user set it) before the core first reads it."""
    if os.environ.get("OPFORGE_ONEDNN_LIBRARY"):
        return
    path = onednn_library()
    if path is not None:
        os.environ["OPFORGE_ONEDNN_LIBRARY"] = str(path)


point_core_at_onednn()


@functools.lru_cache(maxsize=None)
def onednn_status() -> str:
    """What the loaded op library's convolutions run on besides opforge's own kernels:
    "on: oneDNN 3.2.0 (<path>), ISA avx512_core_amx; bfloat16 convolutions: yes" or
    "off: <why>" (common/onednn.h). bfloat16
    convolutions on oneDNN run at the CPU's bfloat16 rate (AVX512-BF16, AMX); the layers'
    choice of convolution reads this (`onednn_bfloat16`)."""
    load_library()
    fn = ctypes.CDLL(str(library_path())).OpforgeOnednnInfo  # the handle TensorFlow loaded
    fn.argtypes, fn.restype = [ctypes.c_char_p, ctypes.c_int], ctypes.c_int
    size = fn(None, 0) + 1
    buf = ctypes.create_string_buffer(size)
    fn(buf, size)
    return buf.value.decode()


def onednn_bfloat16() -> bool:
    """Whether the op library's bfloat16 convolutions run on oneDNN at the CPU's bfloat16 rate
    (the library opened and the CPU has AVX512-BF16 or AMX)."""
    return onednn_status().endswith("bfloat16 convolutions: yes")


def tf_minor(version: str) -> tuple:
    """(major, minor) of a TensorFlow version string ("2.21.0", "2.16.2", "2.22.0rc1")."""
    match = re.match(r"(\d+)\.(\d+)", version)
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


def tf_supported(version: str) -> bool:
    """Whether TensorFlow `version` is in SUPPORTED_TF's range."""
    low, high = (tf_minor(v) for v in SUPPORTED_TF)
    return low <= tf_minor(version) <= high


_lock = threading.Lock()
_library: Optional[ModuleType] = None


class LoadError(ImportError):
    """opforge's C++ library could not be loaded; the message says why and how to fix it."""


def library_path() -> Path:
    """The library file: always inside the installed package, never the working directory."""
    return Path(__file__).resolve().parent / LIBRARY_NAME


def missing_library_message(path: Path) -> str:
    return (
        f"opforge's C++ library {LIBRARY_NAME} was not found at {path}. This opforge package "
        "was installed without its compiled library (for example, imported from the source tree "
        "instead of the installed package). Build and install it: `make build` in an opforge "
        "checkout, or `pip install --no-build-isolation .` from the source directory."
    )


def version_mismatch_message(built_with: str, running: str) -> str:
    return (
        f"opforge's C++ library was built against TensorFlow {built_with}, but TensorFlow "
        f"{running} is running. Custom-op libraries must be compiled against the exact TensorFlow "
        f"they load into (a mismatch can crash the process), so opforge refuses to load it. "
        + REBUILD_HINT
    )


def demangle(symbol: str) -> str:
    """Demangles a C++ symbol with the C++ runtime's own demangler; returns it unchanged if not."""
    try:
        lib = ctypes.CDLL(ctypes.util.find_library("stdc++") or "libstdc++.so.6")
        func = lib.__cxa_demangle
        func.restype = ctypes.c_void_p
        func.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
        status = ctypes.c_int(0)
        ptr = func(symbol.encode(), None, None, ctypes.byref(status))
        if status.value != 0 or not ptr:
            return symbol
        try:
            return ctypes.string_at(ptr).decode(errors="replace")
        finally:
            ctypes.CDLL(None).free(ctypes.c_void_p(ptr))
    except (OSError, AttributeError):
        return symbol


def explain_load_failure(path: Path, error: str, built_abi: str = "", running_abi: str = "") -> str:
    """Turns the text of a failed `tf.load_op_library` into a message with cause and fix."""
    match = re.search(r"undefined symbol: (\S+)", error)
    if not match:
        return f"opforge could not load its C++ library {path}: {error.strip()}\n{REBUILD_HINT}"
    symbol = match.group(1)
    readable = demangle(symbol)
    lines = [
        f"opforge could not load its C++ library {path}: it needs the symbol",
        f"    {readable}",
        f"    (mangled: {symbol})",
        "which neither TensorFlow nor any loaded library provides.",
    ]
    if "cxx11" in symbol or "__cxx11" in readable:
        lines.append(
            "The symbol uses the C++11 std::string/std::list ABI (`__cxx11`): the library and "
            "TensorFlow were compiled with different _GLIBCXX_USE_CXX11_ABI settings"
            + (f" (library: {built_abi}, this TensorFlow: {running_abi})" if built_abi else "")
            + ". The flag must come from tf.sysconfig.get_compile_flags(), as opforge's CMake "
            "build does."
        )
    else:
        lines.append(
            "This usually means the library was built against another TensorFlow version or "
            "was not linked with tf.sysconfig.get_link_flags()."
        )
    lines.append(REBUILD_HINT)
    return "\n".join(lines)


def _running_abi(tf_module: ModuleType) -> str:
    for flag in tf_module.sysconfig.get_compile_flags():
        if flag.startswith("-D_GLIBCXX_USE_CXX11_ABI="):
            return flag.split("=", 1)[1]
    return ""


def load_library(path: Optional[Path] = None) -> ModuleType:
    """Loads the op library (once) and returns the module `tf.load_op_library` made of it.

    With `path`, loads that file instead of the package's own library, without caching (for
    tools and tests).
    """
    global _library
    if path is None and _library is not None:
        return _library
    with _lock:
        if path is None and _library is not None:
            return _library
        import tensorflow as tf

        target = Path(path) if path is not None else library_path()
        if not target.is_file():
            raise LoadError(missing_library_message(target))
        built_abi = ""
        if path is None:
            try:
                from opforge import _build_info
            except ImportError as exc:
                raise LoadError(missing_library_message(target)) from exc
            if _build_info.TF_VERSION != tf.__version__:
                raise LoadError(version_mismatch_message(_build_info.TF_VERSION, tf.__version__))
            built_abi = _build_info.CXX11_ABI
        try:
            module = tf.load_op_library(str(target))
        except (tf.errors.NotFoundError, tf.errors.InvalidArgumentError, OSError) as exc:
            message = getattr(exc, "message", None) or str(exc)
            raise LoadError(
                explain_load_failure(target, message, built_abi, _running_abi(tf))
            ) from None
        name_raw_op_errors(module)
        # Ops without an XLA kernel raise opforge's error when traced for jit_compile=True.
        from opforge.ops import _xla

        _xla.guard_ops(module, target)
        if path is None:
            _library = module
        return module


# TensorFlow's eager type check names inputs by position: "cannot compute Opforge>ElementMul as
# input #1(zero-based) was expected to be a float tensor but is a int32 tensor".
_POSITION_ERROR = re.compile(r"input #(\d+)\(zero-based\) was expected to be a (\w+) tensor "
                             r"but is a (\w+) tensor")
_ALLOWED_ERROR = re.compile(r"Value for attr '(\w+)' of (\w+) is not in the list of allowed "
                            r"values: ([\w, ]+)")


def _article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"


def raw_op_error_message(op_def, message: str) -> Optional[str]:
    """The message naming the argument for TensorFlow's positional dtype errors of a raw op call
    (None for any other message): "<Op>: <argument> must be <expected>, got <given>"."""
    op = op_def.name.split(">", 1)[-1]
    inputs = list(op_def.input_arg)
    match = _POSITION_ERROR.search(message)
    if match and int(match.group(1)) < len(inputs):
        arg = inputs[int(match.group(1))]
        expected = f"{_article(match.group(2))} {match.group(2)} tensor"
        if arg.type_attr:
            same = [a.name for a in inputs if a.type_attr == arg.type_attr and a.name != arg.name]
            expected += f" (attr {arg.type_attr}" + (f", the dtype of {', '.join(same)}" if same else "") + ")"
        return f"{op}: {arg.name} must be {expected}, got {_article(match.group(3))} {match.group(3)} tensor"
    match = _ALLOWED_ERROR.search(message)
    if match:
        names = [a.name for a in inputs if a.type_attr == match.group(1) or a.number_attr == match.group(1)]
        argument = names[0] if names else f"attr {match.group(1)}"
        return f"{op}: {argument} must have a dtype among {match.group(3).strip()}, got {match.group(2)}"
    return None


def name_raw_op_errors(module: ModuleType) -> None:
    """Wraps the raw op functions of a loaded library (`Opforge_ElementMul`, ...) so that a dtype
    error names the argument as opforge's own errors do, instead of an input position."""
    import tensorflow as tf
    from tensorflow.python.framework import op_def_registry

    for attr in dir(module):
        fn = getattr(module, attr)
        if not attr.startswith("Opforge_") or not callable(fn) or getattr(fn, "_opforge_named", False):
            continue
        op_def = op_def_registry.get("Opforge>" + attr[len("Opforge_"):])
        if op_def is None:
            continue

        def wrapper(*args, __fn=fn, __op_def=op_def, **kwargs):
            try:
                return __fn(*args, **kwargs)
            except tf.errors.InvalidArgumentError as exc:
                named = raw_op_error_message(__op_def, exc.message)
                if named is None:
                    raise
                raise tf.errors.InvalidArgumentError(exc.node_def, exc.op, named) from None

        functools.update_wrapper(wrapper, fn)
        wrapper._opforge_named = True
        setattr(module, attr, wrapper)


def adapter_string(path, symbol: str, error) -> Optional[str]:
    """The string a runtime adapter library returns from its C function `symbol` (`const char*
    f(void)`: `OpforgeOrtOpNames`, `OpforgeOrtDomain`, `OpforgeLiteOpNames`); None where the
    library lacks the function (an older build). A library that cannot be loaded raises `error`
    (the caller's exception class) with the reason."""
    import ctypes

    try:
        handle = ctypes.CDLL(str(path))
    except OSError as exc:
        raise error(f"opforge's runtime library {path} could not be loaded: {exc}. Run `opforge doctor`; "
                    "rebuild opforge if the library is damaged.") from None
    try:
        fn = getattr(handle, symbol)
    except AttributeError:
        return None
    fn.restype = ctypes.c_char_p
    fn.argtypes = []
    return (fn() or b"").decode()


def adapter_names(path, symbol: str, error) -> Optional[set]:
    """The comma-separated names `adapter_string` reads, as a set (None where it gives None)."""
    text = adapter_string(path, symbol, error)
    return None if text is None else {n.strip() for n in text.split(",") if n.strip()}


def adapter_path(name: str, must_exist: bool, error, missing: str) -> Path:
    """The path of runtime adapter library `name` in the package directory, next to
    `_opforge_ops.so`. Where it is absent and `must_exist`, raises `error` (the caller's exception
    class) saying it was not found, then `missing` (what that means for the caller and what to do)."""
    path = Path(__file__).resolve().parent / name
    if must_exist and not path.is_file():
        raise error(f"opforge's {name} was not found at {path}: {missing}")
    return path

"""Compile your own TensorFlow op at run time and load it: `opforge.build.load` / `load_inline`.

    import tensorflow as tf
    import opforge.build

    lib = opforge.build.load_inline("add_one", cpp_source)
    y = lib.add_one(tf.constant([1.0, 2.0]))

The op is compiled against the running TensorFlow with the flags `tf.sysconfig` gives (include
directories, `_GLIBCXX_USE_CXX11_ABI`, `EIGEN_MAX_ALIGN_BYTES`, the C++ standard, the link
flags), as opforge compiles itself, and with opforge's C++ helpers on the include path
(`include_paths()`): Status and the validation message format (`common/status.h`),
`opforge::Parallel` on TensorFlow's intra-op thread pool (`common/parallel.h`), the dtype lists
(`common/dtype.h`), the Compute skeleton and registration macro (`common/tf_kernel.h`) and shape
functions that name the argument (`common/tf_shape.h`). The parts of the helpers that live in
.cc files (`tf_glue.cc`, `parallel.cc`) are installed as sources and compiled into each module
(once per compiler and flags, then reused from the cache): `_opforge_ops.so` hides its symbols,
so a user's module never links against it.

Builds are cached under `$OPFORGE_CACHE`, else `$XDG_CACHE_HOME/opforge`, else
`~/.cache/opforge`, one directory per key: a hash of the sources, the flags, the TensorFlow
version, its ABI and build flags, the compiler (path and `--version`) and nvcc's version. Headers
a source includes from its own directories are recorded after each build (the compiler's
dependency list) and re-hashed at every load, so editing one rebuilds too. A build holds an OS
lock (`fcntl.flock`) on the entry's `lock` file: parallel processes build once, the others wait
and load the result, and the kernel drops the lock of a killed build, so no stale lock ever
hangs the next one. Objects and the library are written under a private temporary directory and
renamed into place: a half-written library is never loaded.

Every compiler run is recorded in the entry's `builds.log`; a failed build raises
:class:`BuildError` with the first error line, the exact command and the compiler's full output.

The same op struct runs in ONNX Runtime: with `ort_sources=` (files) or `ort_source=` (text) a
second library, an ONNX Runtime custom-op library, is built in the same cache entry, without
TensorFlow's headers: the ORT sources (the op struct's header or text, `common/ort_kernel.h` and
one `OPFORGE_ORT_KERNELS(...)` line per op), the `sources` that include nothing of TensorFlow (the
core), and opforge's ONNX Runtime skeleton (`common/ort_kernel.cc`, `common/parallel.cc`), with
TensorFlow's ABI and Eigen defines and Eigen from TensorFlow's include directory (nothing else of
it). Its ops form the ONNX domain of the ops' namespace, lowercased (`Custom>MyOp` is op type
`MyOp` of domain `custom`; see `ort_domain`). `ort_library_path(module)` gives its path, for
`opforge.onnx.session(..., libraries=[...])`; `opforge.onnx.export` writes the module's ops as
nodes of that domain.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import queue
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from opforge._loader import LoadError, demangle

__all__ = [
    "BuildError",
    "OpConflictError",
    "build_library",
    "cache_dir",
    "include_paths",
    "load",
    "load_inline",
    "loaded_op_domains",
    "ort_domain",
    "ort_include_path",
    "ort_library_path",
    "xla_available",
]

# Bumped when the layout of a cache entry or the way a key is computed changes (2: the ONNX Runtime
# library, -ffp-contract=off).
_CACHE_FORMAT = 2
_HELPER_SOURCES = ("tf_glue.cc", "parallel.cc")
# A module with an XLA kernel (a source that includes common/tf_xla_ffi.h or registers an op with
# OPFORGE_REGISTER_XLA_FFI_OP; common/tf_xla.h, the HLO side, is installed for tf_xla_ffi.cc) also gets opforge's XLA FFI skeleton
# (xla_ffi.cc) and its tf2xla kernel (tf_xla_ffi.cc: the tf2xla and XLA builder headers, compiled
# once per configuration like the other helpers), and links TensorFlow's XLA library.
_XLA_HELPER_SOURCES = _HELPER_SOURCES + ("xla_ffi.cc", "tf_xla_ffi.cc")
_XLA_SOURCE = re.compile(r'#\s*include\s*[<"](?:opforge/)?common/tf_xla_ffi\.h[">]'
                         r'|\bOPFORGE_REGISTER_XLA_FFI_OP\s*\(')
# opforge's ONNX Runtime skeleton, compiled into each user's ONNX Runtime library.
_ORT_HELPER_SOURCES = ("ort_kernel.cc", "parallel.cc")
_ORT_EXPORTS = "{ global: RegisterCustomOps; OpforgeOrt*; local: *; };\n"
# A source that needs TensorFlow's headers (the binding); the others are the core, compiled into
# the ONNX Runtime library too.
_TF_ONLY = re.compile(r'#\s*include\s*[<"](?:tensorflow/|absl/|tsl/|xla/|third_party/|(?:opforge/)?common/(?:tf_|xla_))'
                      r'|\bREGISTER_OP\s*\(|\bREGISTER_KERNEL_BUILDER\s*\(|\bOPFORGE_REGISTER_KERNELS\s*\(')
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_REGISTER_OP = re.compile(r'REGISTER_OP\s*\(\s*"([^"]+)"\s*\)')
# An op struct's signature (common/op_signature.h), whose name OPFORGE_REGISTER_OP registers.
_SIGNATURE_NAME = re.compile(r'\bOpSignature\s+kSignature\s*\{\s*"([^"]+)"')
# nvcc's default targets, as opforge's own CMake build: PTX for every GPU from Turing on, native
# code for Hopper.
_DEFAULT_CUDA_ARCH = ("-gencode=arch=compute_75,code=compute_75", "-gencode=arch=compute_90,code=sm_90")

Flags = Union[Sequence[str], Mapping[str, Sequence[str]]]


class BuildError(LoadError):
    """Compiling or linking a user's op failed.

    Attributes: `command` (the argv that failed), `output` (the compiler's full output),
    `first_error` (its first error line), `returncode`, `entry` (the cache entry directory).
    """

    def __init__(self, message: str, command: Sequence[str] = (), output: str = "",
                 first_error: str = "", returncode: Optional[int] = None,
                 entry: Optional[Path] = None):
        super().__init__(message)
        self.command = list(command)
        self.output = output
        self.first_error = first_error
        self.returncode = returncode
        self.entry = entry


class OpConflictError(LoadError):
    """The module registers an op that this process already has from other sources (op
    registrations are process-global and permanent)."""


# --- where things are -----------------------------------------------------------------------------


def cache_dir() -> Path:
    """The cache root: `$OPFORGE_CACHE`, else `$XDG_CACHE_HOME/opforge`, else `~/.cache/opforge`."""
    if os.environ.get("OPFORGE_CACHE"):
        return Path(os.environ["OPFORGE_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "opforge"


def _include_root() -> Path:
    return Path(__file__).resolve().parent / "include"


def include_paths() -> List[str]:
    """The directories with opforge's C++ helpers, installed with the package.

    Both `#include "common/tf_kernel.h"` (as opforge's own ops write it, so a binding copied from
    `cc/ops/<op>/<op>_tf.cc` compiles unchanged) and `#include "opforge/common/tf_kernel.h"` work.
    """
    root = _include_root()
    if not (root / "opforge" / "common" / "tf_kernel.h").is_file():
        raise LoadError(
            f"opforge's C++ helpers are not installed (no {root / 'opforge' / 'common'}): this "
            "opforge was installed without them (imported from the source tree?). Build and "
            "install it: `make build` in an opforge checkout, or `pip install "
            "--no-build-isolation .` from the source directory."
        )
    return [str(root), str(root / "opforge")]


def _helpers_dir() -> Path:
    return _include_root() / "opforge" / "common"


def ort_include_path() -> Optional[str]:
    """The directory of ONNX Runtime's C API header (`onnxruntime_c_api.h`) installed with opforge,
    or None where this opforge was installed without its ONNX Runtime adapter (then `ort_sources`
    cannot be built)."""
    root = _include_root()
    if (root / "onnxruntime" / "onnxruntime_c_api.h").is_file() and all(
            (root / "opforge" / "common" / f).is_file() for f in ("ort_kernel.h", "ort_kernel.cc")):
        return str(root / "onnxruntime")
    return None


def ort_domain(op_names: Sequence[str], name: str) -> str:
    """The ONNX domain of a module's ops in its ONNX Runtime library: their namespace, lowercased
    (`Custom>MyOp` -> `custom`), or the module's name where they have none. One library is one
    domain, so the ops of a module with ONNX Runtime sources share one namespace (or none)."""
    spaces = sorted({op.split(">", 1)[0].lower() if ">" in op else "" for op in op_names})
    if len(spaces) > 1:
        raise ValueError(
            f"opforge.build: the ONNX Runtime library of {name!r} is one ONNX domain, but its ops "
            f"have several namespaces ({', '.join(repr(op) for op in op_names)}): give them one "
            "namespace (\"MyOps>A\", \"MyOps>B\"), or build them as separate modules")
    domain = spaces[0] if spaces and spaces[0] else name.lower()
    if domain == "opforge":
        raise ValueError(
            f"opforge.build: the ops of {name!r} ({', '.join(op_names)}) would be ONNX domain "
            "'opforge', the domain of opforge's own ONNX Runtime library: give them a namespace of "
            "your own (\"MyOps>Op\")")
    return domain


# --- what a build depends on ----------------------------------------------------------------------

_memo_lock = threading.Lock()
_tf_info_memo: Optional[dict] = None
_tool_memo: Dict[Tuple[str, int, int], str] = {}
_helpers_hash_memo: Dict[Tuple, str] = {}


def _tf_info() -> dict:
    """The running TensorFlow: version, flags, ABI and CUDA build (once per process)."""
    global _tf_info_memo
    if _tf_info_memo is None:
        import tensorflow as tf

        compile_flags = list(tf.sysconfig.get_compile_flags())
        build_info = dict(tf.sysconfig.get_build_info())
        abi = next((f.split("=", 1)[1] for f in compile_flags
                    if f.startswith("-D_GLIBCXX_USE_CXX11_ABI=")), "")
        std = next((f.split("c++")[-1] for f in compile_flags
                    if f.lstrip("-").startswith("std=c++")), "17")
        _tf_info_memo = {
            "version": tf.__version__,
            "compile_flags": compile_flags,
            "link_flags": list(tf.sysconfig.get_link_flags()),
            "abi": abi,
            "cxx_standard": std,
            "is_cuda_build": bool(build_info.get("is_cuda_build")),
            "cuda_version": str(build_info.get("cuda_version", "")),
        }
    return _tf_info_memo


def _tf_xla_library(tf_info: dict) -> Path:
    """TensorFlow's XLA library (libtensorflow_cc.so.2, which tf.sysconfig's link flags leave
    out): what a module with an XLA kernel links against, as opforge's own library does."""
    for flag in tf_info["link_flags"]:
        if flag.startswith("-L") and (Path(flag[2:]) / "libtensorflow_cc.so.2").is_file():
            return Path(flag[2:]) / "libtensorflow_cc.so.2"
    raise BuildError(
        "opforge.build: a source registers an XLA kernel (common/tf_xla.h, OPFORGE_REGISTER_XLA_FFI_OP), "
        "but this TensorFlow has no libtensorflow_cc.so.2 beside libtensorflow_framework.so.2: its "
        "wheel cannot compile custom ops with XLA. Build without the XLA source (the op then has no "
        "XLA kernel: jit_compile=False).")


def xla_available() -> bool:
    """Whether ops built here can have XLA kernels (sources with OPFORGE_REGISTER_XLA_FFI_OP,
    common/tf_xla_ffi.h): this TensorFlow ships libtensorflow_cc.so.2 and this opforge its XLA
    helpers."""
    try:
        _tf_xla_library(_tf_info())
    except BuildError:
        return False
    return (_helpers_dir() / "tf_xla_ffi.cc").is_file()


def _which(program: str) -> Optional[str]:
    found = shutil.which(program)
    return str(Path(found).resolve()) if found else None


def _tool_version(path: str) -> str:
    """`<path> --version`, memoised by the file's identity (the cached load runs no compiler)."""
    st = os.stat(path)
    key = (path, st.st_mtime_ns, st.st_size)
    with _memo_lock:
        if key in _tool_memo:
            return _tool_memo[key]
    try:
        proc = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
        text = (proc.stdout + proc.stderr).strip()
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BuildError(f"opforge.build: cannot run the compiler {path}: {exc}") from None
    with _memo_lock:
        _tool_memo[key] = text
    return text


def _cxx() -> str:
    """The C++ compiler: $CXX (a name or a path; extra words in it are not supported), else g++."""
    wanted = os.environ.get("CXX") or "g++"
    path = _which(wanted)
    if path is None:
        raise BuildError(
            f"opforge.build: no C++ compiler: {wanted!r} (from "
            f"{'$CXX' if os.environ.get('CXX') else 'the default'}) is not on PATH. Install g++ "
            "(e.g. `apt-get install g++`) or point $CXX at a compiler."
        )
    return path


def _cuda_home() -> Optional[Path]:
    for env in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(env) and (Path(os.environ[env]) / "bin" / "nvcc").is_file():
            return Path(os.environ[env])
    nvcc = _which("nvcc")
    if nvcc:
        return Path(nvcc).parent.parent
    if Path("/usr/local/cuda/bin/nvcc").is_file():
        return Path("/usr/local/cuda")
    return None


def cuda_sim_requested() -> bool:
    """Whether $OPFORGE_CUDA_SIM asks every load with cuda_sources for a cuda_sim build (what
    `opforge check --cuda-sim` sets for the op it checks and its child processes)."""
    return os.environ.get("OPFORGE_CUDA_SIM", "").strip().lower() in ("1", "true", "yes", "on")


def cuda_sim_available() -> bool:
    """Whether a cuda_sim build can be made here: the CUDA toolkit's headers and opforge's SIMT
    runtime are found (no GPU and no nvcc needed)."""
    try:
        _cuda_headers()
        return True
    except BuildError:
        return False


def _cuda_headers() -> Path:
    """The CUDA toolkit whose headers a cuda_sim build compiles against (no nvcc needed)."""
    home = _cuda_home()
    if home is None or not (home / "include" / "cuda_runtime.h").is_file():
        raise BuildError(
            "opforge.build: cuda_sim=True compiles the .cu files for opforge's SIMT runtime with the "
            "C++ compiler, against the CUDA toolkit's headers (cuda_runtime.h, cuda_fp16.h, cuda_bf16.h); "
            f"none found ({home / 'include' if home else '$CUDA_HOME, nvcc on PATH, /usr/local/cuda'}). "
            "Install the CUDA toolkit or set $CUDA_HOME.")
    if not (_include_root() / "opforge" / "common" / "simt" / "runtime.cc").is_file():
        raise BuildError("opforge.build: this opforge was installed without its SIMT runtime "
                         f"({_include_root() / 'opforge' / 'common' / 'simt'}); reinstall it")
    return home


def _nvcc() -> Tuple[str, Path]:
    home = _cuda_home()
    if home is None:
        raise BuildError(
            "opforge.build: CUDA sources were given but no nvcc was found ($CUDA_HOME/bin/nvcc, "
            "nvcc on PATH, /usr/local/cuda/bin/nvcc). Install the CUDA toolkit or set $CUDA_HOME; "
            "or build without cuda_sources (CPU kernels only)."
        )
    return str((home / "bin" / "nvcc").resolve()), home


def _helpers_hash() -> str:
    """A hash of the installed helpers (headers and the .cc files compiled into every module)."""
    include_paths()  # says so when they are not installed
    root = _helpers_dir()
    files = sorted(p for p in root.iterdir() if p.is_file())
    ident = tuple((p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in files)
    with _memo_lock:
        if ident in _helpers_hash_memo:
            return _helpers_hash_memo[ident]
    h = hashlib.sha256()
    for p in files:
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    digest = h.hexdigest()
    with _memo_lock:
        _helpers_hash_memo[ident] = digest
    return digest


def _split_flags(flags: Optional[Flags], kind: str) -> List[str]:
    """extra_cflags may be a list (C++ only) or {"cxx": [...], "nvcc": [...]}."""
    if not flags:
        return []
    if isinstance(flags, Mapping):
        return [str(f) for f in flags.get(kind, ())]
    if isinstance(flags, str):
        raise TypeError("opforge.build: flags must be a list of strings, not one string "
                        f"(got {flags!r}; use shlex.split)")
    return [str(f) for f in flags] if kind == "cxx" else []


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _digest(obj) -> str:
    return _sha(json.dumps(obj, sort_keys=True).encode())


def _strip_comments(code: str) -> str:
    code = re.sub(r"/\*.*?\*/", " ", code, flags=re.S)
    return re.sub(r"//[^\n]*", " ", code)


def _op_names(sources: Iterable[str]) -> List[str]:
    """The op names the sources register: a literal REGISTER_OP("Name"), or an op struct's
    signature (`static constexpr OpSignature kSignature{"Name", ...}`, which OPFORGE_REGISTER_OP
    registers)."""
    names: List[str] = []
    for code in sources:
        code = _strip_comments(code)
        for name in _REGISTER_OP.findall(code) + _SIGNATURE_NAME.findall(code):
            if name not in names:
                names.append(name)
    return names


def _local_headers(paths: Optional[Sequence[Path]]) -> List[str]:
    """The text of the headers beside source files (an op's <op>_op.h holds its signature)."""
    texts: List[str] = []
    for folder in dict.fromkeys(Path(p).parent for p in (paths or [])):
        for header in sorted(folder.glob("*.h")):
            try:
                texts.append(header.read_text(errors="replace"))
            except OSError:
                pass
    return texts


def _abi_message(flag: str, abi: str) -> str:
    return (
        f"opforge.build: extra_cflags sets {flag}, but this TensorFlow was compiled with "
        f"_GLIBCXX_USE_CXX11_ABI={abi}. The flag decides the layout of std::string and std::list "
        "(the C++11 `__cxx11` ABI or the old one): a library compiled with another value than "
        "TensorFlow's either fails to link (`undefined reference` to a TensorFlow function taking "
        "a std::string) or, worse, passes strings of the wrong layout and crashes at run time. "
        "opforge.build takes the flag from tf.sysconfig.get_compile_flags(); remove it from "
        "extra_cflags (and compile anything you link in with the same value)."
    )


class _Plan:
    """Everything one build needs, and the key that names its cache entry."""

    def __init__(self, name: str, sources: List[Tuple[str, bytes]], cuda_sources: List[Tuple[str, bytes]],
                 source_paths: Optional[List[Path]], cuda_paths: Optional[List[Path]],
                 extra_cflags: Optional[Flags], extra_ldflags: Sequence[str],
                 include_dirs: Sequence[str], build_directory: Optional[str],
                 ort_sources: Sequence[Tuple[str, bytes]] = (), ort_paths: Optional[List[Path]] = None,
                 cuda_sim: Optional[bool] = None):
        if not isinstance(name, str) or not _NAME.match(name):
            raise ValueError(f"opforge.build: name must be a C identifier (letters, digits, _), got {name!r}")
        if not sources and not cuda_sources:
            raise ValueError("opforge.build: no sources given")
        if isinstance(extra_ldflags, str) or isinstance(include_dirs, str):
            raise TypeError("opforge.build: extra_ldflags and include_dirs are lists of strings")
        self.name = name
        self.sources = sources
        self.cuda_sources = cuda_sources
        self.source_paths = source_paths  # None: load_inline (written into the entry)
        self.cuda_paths = cuda_paths
        self.tf = _tf_info()
        self.cxx = _cxx()
        self.cxx_version = _tool_version(self.cxx)
        self.nvcc = self.cuda_home = None
        self.nvcc_version = ""
        # cuda_sim: the .cu files compiled by the C++ compiler for opforge's SIMT runtime, the GPU
        # kernels registered on the CPU under the kernel label "cuda_sim" (opforge.cuda_sim).
        self.cuda_sim = bool(cuda_sources) and (cuda_sim if cuda_sim is not None else cuda_sim_requested())
        if self.cuda_sim:
            self.cuda_home = _cuda_headers()
        elif cuda_sources:
            self.nvcc, self.cuda_home = _nvcc()
            self.nvcc_version = _tool_version(self.nvcc)
        # GPU kernels can be registered with TensorFlow only in a CUDA TensorFlow; in a CPU one the
        # .cu files are still compiled and linked (their host entry points are callable).
        self.gpu_binding = bool(cuda_sources) and self.tf["is_cuda_build"] and not self.cuda_sim
        self.extra_cxx = _split_flags(extra_cflags, "cxx")
        self.extra_nvcc = _split_flags(extra_cflags, "nvcc")
        for flag in self.extra_cxx + self.extra_nvcc:
            match = re.search(r"_GLIBCXX_USE_CXX11_ABI(?:=(\w*))?", flag)
            if match and (match.group(1) or "1") != self.tf["abi"] and flag.startswith("-D"):
                raise BuildError(_abi_message(flag, self.tf["abi"]))
        self.extra_ldflags = [str(f) for f in extra_ldflags]
        self.include_dirs = [str(Path(d).expanduser().resolve()) for d in include_dirs]
        self.helpers = _helpers_hash()
        # XLA kernels (tf.function(jit_compile=True)): the op structs as FFI custom calls.
        self.xla = any(_XLA_SOURCE.search(_strip_comments(b.decode(errors="replace"))) for _, b in sources)
        if self.xla:
            self.xla_library = _tf_xla_library(self.tf)
        # What compiles the helpers and the precompiled header: everything but the sources.
        self.config = {
            "format": _CACHE_FORMAT,
            "tf_version": self.tf["version"],
            "tf_compile_flags": self.tf["compile_flags"],
            "tf_link_flags": self.tf["link_flags"],
            "abi": self.tf["abi"],
            "tf_cuda": [self.tf["is_cuda_build"], self.tf["cuda_version"]],
            "cxx": self.cxx,
            "cxx_version": self.cxx_version,
            "gpu_binding": self.gpu_binding,
            "cuda_sim": self.cuda_sim,
            "cuda_home": str(self.cuda_home or ""),
            "extra_cxx": self.extra_cxx,
            "include_dirs": self.include_dirs,
            "helpers": self.helpers,
        }
        self.config_key = _digest(self.config)
        self.op_names = _op_names([b.decode(errors="replace") for _, b in sources]
                                  + _local_headers(source_paths))
        # The ONNX Runtime library: its sources, the core among `sources`, its domain.
        self.ort_sources = list(ort_sources)
        self.ort_paths = ort_paths
        self.ort_domain = ""
        self.ort_header = ""
        self.ort_core: List[int] = []
        key_fields = {
            "config": self.config_key,
            "name": name,
            "sources": [(n, _sha(b)) for n, b in sources],
            "cuda_sources": [(n, _sha(b)) for n, b in cuda_sources],
            "source_dirs": [str(p.parent) for p in (source_paths or []) + (cuda_paths or [])],
            "nvcc": [self.nvcc or "", self.nvcc_version],
            "extra_nvcc": self.extra_nvcc,
            "extra_ldflags": self.extra_ldflags,
        }
        if self.ort_sources:
            self.ort_include = ort_include_path()
            if self.ort_include is None:
                raise BuildError(
                    "opforge.build: ONNX Runtime sources were given, but this opforge was installed "
                    f"without its ONNX Runtime adapter (no {_include_root() / 'onnxruntime' / 'onnxruntime_c_api.h'} "
                    "or common/ort_kernel.cc): its build found no ONNX Runtime headers. Reinstall "
                    "opforge where they are found (`opforge doctor` says what the build found), or "
                    "build without ort_sources/ort_source.")
            self.ort_domain = ort_domain(self.op_names, name)
            self.ort_core = [i for i, (_, b) in enumerate(sources)
                             if not _TF_ONLY.search(_strip_comments(b.decode(errors="replace")))]
            self.ort_header = _sha((Path(self.ort_include) / "onnxruntime_c_api.h").read_bytes())
            key_fields["ort"] = {
                "sources": [(n, _sha(b)) for n, b in self.ort_sources],
                "source_dirs": [str(p.parent) for p in (ort_paths or [])],
                "domain": self.ort_domain,
                "header": self.ort_header,
            }
        self.key = _digest(key_fields)
        root = cache_dir()
        self.entry = (Path(build_directory).expanduser().resolve() if build_directory
                      else root / f"{name}-{self.key[:16]}")
        self.shared = root / "_shared" / self.config_key[:16]
        self.library = self.entry / f"{name}_{self.key[:12]}.so"
        self.ort_library = self.entry / f"lib{name}_ort_{self.key[:12]}.so" if self.ort_sources else None
        # opforge's ONNX Runtime skeleton for this configuration, domain and ONNX Runtime header.
        self.ort_shared = (self.shared / f"ort_{self.ort_domain}_{self.ort_header[:12]}"
                           if self.ort_sources else None)

    # The flags of every C++ compile (helpers, precompiled header and user sources alike).
    def cxx_flags(self) -> List[str]:
        flags = ["-O2", "-fPIC", f"-std=c++{self.tf['cxx_standard']}",
                 # As opforge's core: no fused multiply-adds the source does not write, so the
                 # same op struct gives the same bits here and in the ONNX Runtime library.
                 "-ffp-contract=off",
                 # As opforge's own library: export nothing (TensorFlow finds the kernels through
                 # static registration), so our inline Eigen code never interposes with
                 # TensorFlow's copies, nor the helpers of two user modules with each other.
                 "-fvisibility=hidden", "-fvisibility-inlines-hidden"]
        for d in self.include_dirs:
            flags += ["-I", d]
        for d in include_paths():
            flags += ["-isystem", d]
        for flag in self.tf["compile_flags"]:
            if flag.startswith("-I"):
                flags += ["-isystem", flag[2:]]  # system: no warnings, not in the dependency list
            elif flag.lstrip("-").startswith("std=c++"):
                continue
            else:
                flags.append(flag)
        if self.gpu_binding:
            flags += ["-DGOOGLE_CUDA=1", "-DEIGEN_USE_GPU", "-isystem", str(self.cuda_home / "include")]
        if self.cuda_sim:
            flags += ["-DOPFORGE_CUDA_SIM=1", "-isystem", str(self.cuda_home / "include")]
        return flags + self.extra_cxx

    def xla_flags(self) -> List[str]:
        """The C++ flags of the helper with the tf2xla and XLA builder headers (tf_xla_ffi.cc):
        XLA's headers include two libraries from TensorFlow's external/ copies."""
        flags = []
        tf_include = next((f[2:] for f in self.tf["compile_flags"] if f.startswith("-I")), "")
        for d in ("external/highwayhash", "external/farmhash_archive/src"):
            if (Path(tf_include) / d).is_dir():
                flags += ["-isystem", str(Path(tf_include) / d)]
        return self.cxx_flags() + flags

    @property
    def helper_sources(self) -> Tuple[str, ...]:
        return _XLA_HELPER_SOURCES if self.xla else _HELPER_SOURCES

    def simt_flags(self) -> List[str]:
        """A .cu file (or the SIMT runtime) compiled as C++ for the SIMT runtime: the C++ flags,
        the prelude included first, nvcc's pragmas ignored."""
        return ["-x", "c++", *self.cxx_flags(), "-Wno-unknown-pragmas", "-include",
                str(_include_root() / "opforge" / "common" / "simt" / "simt.h")]

    def ort_cxx_flags(self) -> List[str]:
        """The ONNX Runtime library's compiles: no TensorFlow header (Eigen from its include
        directory, nothing else of it), TensorFlow's defines (_GLIBCXX_USE_CXX11_ABI,
        EIGEN_MAX_ALIGN_BYTES: the core is compiled as in the TensorFlow library), hidden symbols."""
        flags = ["-O2", "-fPIC", f"-std=c++{self.tf['cxx_standard']}", "-ffp-contract=off",
                 "-fvisibility=hidden", "-fvisibility-inlines-hidden",
                 f'-DOPFORGE_ORT_DOMAIN="{self.ort_domain}"']
        for d in self.include_dirs:
            flags += ["-I", d]
        for d in include_paths() + [self.ort_include, str(self.ort_shared / "eigen")]:
            flags += ["-isystem", d]
        flags += [f for f in self.tf["compile_flags"] if f.startswith("-D")]
        return flags + self.extra_cxx

    def ort_link_flags(self) -> List[str]:
        # Only the entry points are exported (as libopforge_ort.so), and nothing is left undefined.
        return [f"-Wl,--version-script={self.ort_shared / 'exports.map'}", "-Wl,--no-undefined",
                "-Wl,--exclude-libs,ALL", "-Wl,--as-needed"] + self.extra_ldflags

    def nvcc_flags(self) -> List[str]:
        defines = [f for f in self.tf["compile_flags"] if f.startswith("-D")]
        flags = ["-O2", f"-std=c++{self.tf['cxx_standard']}", "--expt-relaxed-constexpr",
                 "-Xcompiler", "-fPIC,-fvisibility=hidden", "-ccbin", self.cxx] + defines
        for d in self.include_dirs + include_paths():
            flags += ["-I", d]
        if not any(f.startswith(("-gencode", "-arch", "--gpu-architecture", "--generate-code"))
                   for f in self.extra_nvcc):
            flags += list(_DEFAULT_CUDA_ARCH)
        return flags + self.extra_nvcc

    def link_flags(self) -> List[str]:
        flags = ["-Wl,--no-undefined"]
        if self.cuda_sources and not self.cuda_sim:
            lib = next((d for d in (self.cuda_home / "lib64", self.cuda_home / "targets" / "x86_64-linux" / "lib",
                                    self.cuda_home / "lib") if (d / "libcudart_static.a").is_file()), None)
            if lib is None:
                raise BuildError(f"opforge.build: no libcudart_static.a under {self.cuda_home}")
            # As opforge's own module: the static runtime of this nvcc BEFORE TensorFlow's
            # libraries, so that the kernels register and launch through it and not through the
            # runtime (another CUDA version) that libtensorflow_framework.so.2 exports, and
            # hidden, so that nothing else binds to it.
            flags += [f"-L{lib}", "-lcudart_static", "-Wl,--exclude-libs,libcudart_static.a",
                      "-ldl", "-lrt", "-lpthread"]
        flags += list(self.tf["link_flags"])
        if self.xla:
            flags += [f"-L{self.xla_library.parent}", f"-l:{self.xla_library.name}"]
            # libtensorflow_cc.so.2 is ~800 MB: GNU ld takes 5 s to read its symbols, lld 0.8 s,
            # gold 1.2 s (2-core Xeon), which is most of a cold build of an op with an XLA kernel.
            linker = next((name for name in ("lld", "gold") if _which(f"ld.{name}")), None)
            if linker:
                flags.insert(0, f"-fuse-ld={linker}")
        return flags + self.extra_ldflags

    def environment(self) -> dict:
        """What the entry records and the cached load checks."""
        return {
            "tf_version": self.tf["version"],
            "abi": self.tf["abi"],
            "cxx": self.cxx,
            "cxx_version": self.cxx_version.splitlines()[0] if self.cxx_version else "",
            "nvcc_version": self.nvcc_version.splitlines()[-1] if self.nvcc_version else "",
            "tf_cuda_version": self.tf["cuda_version"],
        }


# --- locking, atomic files ------------------------------------------------------------------------


@contextlib.contextmanager
def _flock(path: Path, what: str, verbose: bool):
    """An exclusive OS lock on `path`. The kernel releases it when the holder dies, however it
    dies, so a killed build never leaves a lock behind that hangs the next one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if verbose:
                _say(f"waiting for another process building {what} (lock {path})")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide a shared cache's records from others
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _say(message: str) -> None:
    print(f"opforge.build: {message}", file=sys.stderr, flush=True)


def _read_json(path: Path) -> Optional[dict]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _deps_match(deps: Mapping[str, str]) -> bool:
    for dep, digest in deps.items():
        try:
            if _sha(Path(dep).read_bytes()) != digest:
                return False
        except OSError:
            return False
    return True


def _stale_reason(plan: _Plan, meta: Optional[dict]) -> Optional[str]:
    """Why the entry cannot be loaded as it is (None: it can)."""
    if meta is None:
        return "not built yet"
    recorded = meta.get("environment", {})
    running = plan.environment()
    for field, what in (("tf_version", "TensorFlow"), ("abi", "_GLIBCXX_USE_CXX11_ABI"),
                        ("cxx", "compiler"), ("cxx_version", "compiler version"),
                        ("nvcc_version", "nvcc"), ("tf_cuda_version", "TensorFlow's CUDA version")):
        if recorded.get(field) != running[field]:
            return (f"it was built for {what} {recorded.get(field)!r}, but this process has "
                    f"{running[field]!r}; a custom-op library must be compiled against the exact "
                    "TensorFlow, ABI and compiler it runs with (a mismatch can crash the process)")
    if meta.get("key") != plan.key:
        return "its sources or flags changed"
    if not plan.library.is_file():
        return "its library is missing"
    if plan.ort_library is not None and not plan.ort_library.is_file():
        return "its ONNX Runtime library is missing"
    if not _deps_match(meta.get("deps", {})):
        return "a header it includes changed"
    return None


# --- compiling --------------------------------------------------------------------------------------


_ERROR_LINE = re.compile(
    r"(\berror\b\s*:|\bfatal error\b|undefined reference to|\berror\b: ld returned|: error\b|\(\d+\): error)",
    re.I)


def _first_error(output: str) -> str:
    for line in output.splitlines():
        if _ERROR_LINE.search(line):
            return line.strip()
    lines = [line for line in output.splitlines() if line.strip()]
    return lines[0].strip() if lines else "(the compiler printed nothing)"


class _Job:
    def __init__(self, what: str, command: List[str], cwd: Path, log: Path, optional: bool = False):
        self.what, self.command, self.cwd, self.log = what, command, cwd, log
        self.optional = optional  # its failure fails nothing (logged)
        self.proc: Optional[subprocess.Popen] = None
        self.output = ""


def _run_jobs(jobs: List[_Job], plan: _Plan, verbose: bool) -> None:
    """Runs the jobs in order, as many at once as there are CPUs (`$OPFORGE_BUILD_JOBS` to
    change), each next one as soon as any finishes; raises BuildError for the first failure
    (after the running ones finish; no new one starts)."""
    if not jobs:
        return
    try:
        width = max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        width = max(1, os.cpu_count() or 1)
    width = max(1, int(os.environ.get("OPFORGE_BUILD_JOBS", width)))
    finished: "queue.Queue[_Job]" = queue.Queue()

    def wait(job: _Job) -> None:
        try:
            job.output, _ = job.proc.communicate()  # reads the pipe, so the compiler never blocks
        finally:
            finished.put(job)

    pending, running, failed = list(jobs), 0, []
    while pending or running:
        while pending and running < width and not failed:
            job = pending.pop(0)
            _log_run(plan, job)
            if verbose:
                _say(shlex.join(job.command))
            try:
                job.proc = subprocess.Popen(job.command, cwd=job.cwd, stdout=subprocess.PIPE,
                                            stderr=subprocess.STDOUT, text=True, errors="replace")
            except OSError as exc:
                failed.append(job)
                job.output = f"cannot run {job.command[0]}: {exc}"
                break
            threading.Thread(target=wait, args=(job,), daemon=True).start()
            running += 1
        if not running:
            break
        job = finished.get()
        running -= 1
        if verbose and job.output.strip():
            print(job.output, file=sys.stderr, end="" if job.output.endswith("\n") else "\n")
        if job.proc.returncode != 0 and job.optional:
            with open(job.log, "a") as f:
                f.write(f"{job.what} failed (not needed, continuing): {_first_error(job.output)}\n")
        elif job.proc.returncode != 0:
            failed.append(job)
    if failed:
        raise _build_error(plan, failed[0], others=failed[1:])


def _log_run(plan: _Plan, job: _Job) -> None:
    line = f"{time.strftime('%Y-%m-%dT%H:%M:%S')} pid {os.getpid()} {job.what}: {shlex.join(job.command)}\n"
    with open(job.log, "a") as f:
        f.write(line)


def _build_error(plan: _Plan, job: _Job, others: Sequence[_Job] = ()) -> BuildError:
    returncode = job.proc.returncode if job.proc is not None else None
    first = _first_error(job.output)
    output = job.output.rstrip()
    # The linker's mangled names, readable.
    readable = re.sub(r"`(_Z\w+)'", lambda m: f"`{demangle(m.group(1))}'", output)
    more = "".join(f"\n({o.what} failed too: {_first_error(o.output)})" for o in others)
    hint = ""
    if job.what.startswith("ONNX Runtime") and re.search(
            r"(tensorflow|absl|tsl|xla|third_party)/\S*: No such file|common/tf_\w+\.h: No such file", output):
        hint = ("\nThe ONNX Runtime library is compiled without TensorFlow's headers (only Eigen of "
                "its include directory): its sources, the op struct's header and the core (every "
                "source in `sources` that includes no TensorFlow header and registers no op) must "
                "not include one. Move the op struct to a header of its own that includes "
                "common/op_call.h and the core's header only.")
    elif "undefined reference" in output and "std::" in readable and "__cxx11" not in readable:
        hint = ("\nThe missing symbols take std::string or std::list without the C++11 ABI "
                "(`__cxx11`): something was compiled with another _GLIBCXX_USE_CXX11_ABI than "
                f"TensorFlow's ({plan.tf['abi']}, from tf.sysconfig); compile everything you link "
                "in with TensorFlow's value.")
    elif "undefined reference" in output:
        hint = ("\nA symbol nobody defines: the library is linked with -Wl,--no-undefined against "
                "TensorFlow (tf.sysconfig.get_link_flags()), so what neither your sources, "
                "opforge's helpers nor TensorFlow define fails here rather than at load time. "
                "Add the source that defines it, or the library, with extra_ldflags.")
    message = (
        f"opforge.build: building {plan.name!r} failed ({job.what}, exit status "
        f"{returncode}).\n"
        f"First error:\n    {first}\n"
        f"Command:\n    {shlex.join(job.command)}\n"
        f"Full compiler output:\n{readable}{more}{hint}\n"
        f"(Build directory: {plan.entry}; every command run is in its builds.log.)"
    )
    return BuildError(message, job.command, job.output, first, returncode, plan.entry)


def _use_pch() -> bool:
    return os.environ.get("OPFORGE_BUILD_PCH", "1") not in ("0", "", "off", "no", "false")


@contextlib.contextmanager
def _shared_ready(plan: _Plan, verbose: bool):
    """The helper objects and the precompiled header for this compiler and these flags: built once
    per configuration, shared by every module.

    Yields (helper objects, precompiled header to -include or None, jobs still to run): the
    caller runs the jobs together with its own compiles (they need not wait for each other), and
    the objects move into place when the block ends without an error.
    """
    shared = plan.shared
    objects = [shared / (Path(s).stem + ".o") for s in plan.helper_sources]
    pch_header = shared / "opforge_tf_pch.h"
    pch = pch_header.with_name(pch_header.name + ".gch")
    # A precompiled header that failed once for this configuration is not tried again.
    want_pch = _use_pch() and not (shared / "pch.failed").is_file()
    if all(o.is_file() for o in objects) and (pch.is_file() or not want_pch):
        yield objects, (pch_header if want_pch else None), []
        return
    with _flock(shared / "lock", "opforge's helpers", verbose):
        for stale in shared.glob("tmp-*"):  # left by a killed build
            shutil.rmtree(stale, ignore_errors=True)
        _write_atomic(shared / "config.json", json.dumps(plan.config, indent=1).encode())
        log = shared / "builds.log"
        tmp = Path(tempfile.mkdtemp(dir=shared, prefix="tmp-"))
        try:
            flags = plan.cxx_flags()
            jobs = []
            pch_job = None
            if want_pch and not pch.is_file():
                # Compiled beside this build's own compiles, which do without it (waiting for it
                # would make the first build ~40% slower); every later build uses it.
                tmp_header = tmp / pch_header.name
                shutil.copyfile(_helpers_dir() / "tf_pch.h", tmp_header)
                pch_job = _Job("precompiled header",
                               [plan.cxx, *flags, "-x", "c++-header", str(tmp_header), "-o",
                                str(tmp_header) + ".gch"], tmp, log, optional=True)
                jobs.append(pch_job)
            use_pch = want_pch and pch_job is None
            include = ["-include", str(pch_header), "-Winvalid-pch"] if use_pch else []
            helper_jobs = [_Job(f"opforge helper {src}",
                                [plan.cxx, *include, *flags, "-c", str(_helpers_dir() / src), "-o",
                                 str(tmp / obj.name)] if src != "tf_xla_ffi.cc" else
                                [plan.cxx, *plan.xla_flags(), "-c", str(_helpers_dir() / src), "-o",
                                 str(tmp / obj.name)], tmp, log)
                           for src, obj in zip(plan.helper_sources, objects) if not obj.is_file()]
            jobs += helper_jobs
            try:
                yield objects, (pch_header if use_pch else None), jobs
            finally:  # kept even when the user's compile failed beside them
                for job in helper_jobs:
                    if job.proc is not None and job.proc.returncode == 0:
                        with contextlib.suppress(OSError):
                            os.replace(job.command[-1], shared / Path(job.command[-1]).name)
                if pch_job is not None and pch_job.proc is not None:
                    with contextlib.suppress(OSError):
                        if pch_job.proc.returncode == 0:
                            shutil.copyfile(pch_job.command[-3], pch_header)
                            os.replace(pch_job.command[-1], pch)
                        else:
                            _write_atomic(shared / "pch.failed", pch_job.output.encode())
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def _ort_shared_ready(plan: _Plan, verbose: bool):
    """opforge's ONNX Runtime skeleton (ort_kernel.cc, parallel.cc) compiled for this
    configuration and domain, the version script and the Eigen-only include directory: made once,
    shared by every module of that domain. Yields (objects, jobs still to run), as _shared_ready."""
    if plan.ort_library is None:
        yield [], []
        return
    shared = plan.ort_shared
    objects = [shared / (Path(s).stem + ".o") for s in _ORT_HELPER_SOURCES]
    eigen = shared / "eigen"
    if all(o.is_file() for o in objects) and (shared / "exports.map").is_file() and eigen.is_dir():
        yield objects, []
        return
    # Its own lock: _shared_ready may hold the configuration's (flock is per open file).
    with _flock(shared / "lock", "opforge's ONNX Runtime skeleton", verbose):
        for stale in shared.glob("tmp-*"):
            shutil.rmtree(stale, ignore_errors=True)
        if not (shared / "exports.map").is_file():
            _write_atomic(shared / "exports.map", _ORT_EXPORTS.encode())
        if not eigen.is_dir():
            # Eigen, and nothing else of TensorFlow's include directory (as opforge's CMake build
            # compiles its core): a TensorFlow include in the ONNX Runtime library fails to compile.
            tf_include = next((f[2:] for f in plan.tf["compile_flags"] if f.startswith("-I")), "")
            tmp_eigen = Path(tempfile.mkdtemp(dir=shared, prefix="tmp-eigen-"))
            for d in ("Eigen", "unsupported"):
                if (Path(tf_include) / d).is_dir():
                    os.symlink(str(Path(tf_include) / d), tmp_eigen / d)
            os.replace(tmp_eigen, eigen)
        log = shared / "builds.log"
        tmp = Path(tempfile.mkdtemp(dir=shared, prefix="tmp-"))
        try:
            flags = plan.ort_cxx_flags()
            jobs = [_Job(f"opforge ONNX Runtime helper {src}",
                         [plan.cxx, *flags, "-c", str(_helpers_dir() / src), "-o", str(tmp / obj.name)],
                         tmp, log)
                    for src, obj in zip(_ORT_HELPER_SOURCES, objects) if not obj.is_file()]
            try:
                yield objects, jobs
            finally:
                for job in jobs:
                    if job.proc is not None and job.proc.returncode == 0:
                        with contextlib.suppress(OSError):
                            os.replace(job.command[-1], shared / Path(job.command[-1]).name)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def _parse_deps(depfile: Path, exclude: Sequence[str]) -> List[str]:
    try:
        text = depfile.read_text().replace("\\\n", " ")
    except OSError:
        return []
    _, _, rest = text.partition(":")
    deps = []
    for dep in rest.split():
        path = str(Path(dep).resolve())
        if not any(path.startswith(e) for e in exclude) and path not in deps:
            deps.append(path)
    return deps


def _build(plan: _Plan, reason: str, verbose: bool) -> None:
    """Compiles and links the entry's library (the caller holds the entry's lock)."""
    started = time.perf_counter()
    entry = plan.entry
    log = entry / "builds.log"
    # Leftovers of a build that was killed: nobody else holds the lock, so nobody uses them.
    for stale in entry.glob("tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(dir=entry, prefix="tmp-"))
    try:
        with open(log, "a") as f:
            f.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} pid {os.getpid()} build ({reason})\n")
        if plan.source_paths is None:  # load_inline: the sources live in the entry
            src_dir = entry / "src"
            src_dir.mkdir(exist_ok=True)
            paths = []
            for filename, data in plan.sources + plan.cuda_sources + plan.ort_sources:
                path = src_dir / filename
                if not path.is_file() or path.read_bytes() != data:
                    _write_atomic(path, data)
                paths.append(path)
            n_cxx, n_cu = len(plan.sources), len(plan.cuda_sources)
            cxx_paths, cu_paths = paths[:n_cxx], paths[n_cxx:n_cxx + n_cu]
            ort_paths = paths[n_cxx + n_cu:]
        else:
            cxx_paths, cu_paths = plan.source_paths, plan.cuda_paths or []
            ort_paths = plan.ort_paths or []
        # The ONNX Runtime library's own sources, then the core among the TensorFlow library's.
        ort_compiles = list(ort_paths) + [cxx_paths[i] for i in plan.ort_core]
        with _shared_ready(plan, verbose) as (helper_objects, pch, helper_jobs), \
                _ort_shared_ready(plan, verbose) as (ort_helper_objects, ort_helper_jobs):
            flags = plan.cxx_flags()
            include = ["-include", str(pch), "-Winvalid-pch"] if pch else []
            jobs, depfiles, objects = [], [], []
            for i, src in enumerate(cxx_paths):
                obj = tmp / f"{i}_{src.stem}.o"
                dep = tmp / f"{i}_{src.stem}.d"
                jobs.append(_Job(f"compile {src.name}",
                                 [plan.cxx, *include, *flags, "-MMD", "-MF", str(dep), "-c", str(src),
                                  "-o", str(obj)], entry, log))
                depfiles.append(dep)
                objects.append(obj)
            if plan.cuda_sim:
                # The kernels for the SIMT runtime, and the runtime itself (cuFFT's calls are not
                # in a user's cuda_sim build).
                runtime = _include_root() / "opforge" / "common" / "simt" / "runtime.cc"
                for i, src in enumerate(list(cu_paths) + [runtime]):
                    obj = tmp / f"cu{i}_{src.stem}.o"
                    dep = tmp / f"cu{i}_{src.stem}.d"
                    what = "the SIMT runtime" if src == runtime else f"{src.name} for the SIMT runtime"
                    compile_flags = flags if src == runtime else plan.simt_flags()
                    jobs.append(_Job(f"compile {what}",
                                     [plan.cxx, *compile_flags, "-MMD", "-MF", str(dep), "-c", str(src),
                                      "-o", str(obj)], entry, log))
                    depfiles.append(dep)
                    objects.append(obj)
            nvcc_flags = plan.nvcc_flags() if cu_paths and not plan.cuda_sim else []
            for i, src in enumerate(cu_paths if not plan.cuda_sim else []):
                obj = tmp / f"cu{i}_{src.stem}.o"
                dep = tmp / f"cu{i}_{src.stem}.d"
                jobs.append(_Job(f"nvcc {src.name}",
                                 [plan.nvcc, *nvcc_flags, "-MD", "-MF", str(dep), "-c", str(src),
                                  "-o", str(obj)], entry, log))
                depfiles.append(dep)
                objects.append(obj)
            ort_flags = plan.ort_cxx_flags() if ort_compiles else []
            ort_objects = []
            for i, src in enumerate(ort_compiles):
                obj = tmp / f"ort{i}_{src.stem}.o"
                dep = tmp / f"ort{i}_{src.stem}.d"
                jobs.append(_Job(f"ONNX Runtime compile {src.name}",
                                 [plan.cxx, *ort_flags, "-MMD", "-MF", str(dep), "-c", str(src),
                                  "-o", str(obj)], entry, log))
                depfiles.append(dep)
                ort_objects.append(obj)
            _run_jobs(helper_jobs + ort_helper_jobs + jobs, plan, verbose)
        tmp_library = tmp / plan.library.name
        link = _Job("link", [plan.cxx, "-shared", "-o", str(tmp_library), *map(str, objects),
                             *map(str, helper_objects), *plan.link_flags()], entry, log)
        links = [link]
        if plan.ort_library is not None:
            tmp_ort_library = tmp / plan.ort_library.name
            links.append(_Job("ONNX Runtime link",
                              [plan.cxx, "-shared", "-o", str(tmp_ort_library), *map(str, ort_objects),
                               *map(str, ort_helper_objects), *plan.ort_link_flags()], entry, log))
        _run_jobs(links, plan, verbose)

        exclude = [str(Path(p).resolve()) for p in include_paths()] + [str(plan.shared.resolve())]
        exclude += [str((entry / "src").resolve())] if plan.source_paths is None else []
        exclude += [str(Path(p).resolve()) for p in
                    (plan.source_paths or []) + (plan.cuda_paths or []) + (plan.ort_paths or [])]
        if plan.cuda_home:
            exclude.append(str(plan.cuda_home.resolve()))
        deps = {}
        for depfile in depfiles:
            for dep in _parse_deps(depfile, exclude):
                with contextlib.suppress(OSError):
                    deps[dep] = _sha(Path(dep).read_bytes())
        seconds = time.perf_counter() - started
        meta = {
            "key": plan.key,
            "name": plan.name,
            "library": plan.library.name,
            "environment": plan.environment(),
            "op_names": plan.op_names,
            "deps": deps,
            "link_command": link.command,
            "compile_commands": [j.command for j in jobs],
            "ort_library": plan.ort_library.name if plan.ort_library is not None else None,
            "ort_domain": plan.ort_domain or None,
            "ort_link_command": links[1].command if len(links) > 1 else None,
            "build_seconds": round(seconds, 3),
            "built": time.strftime("%Y-%m-%dT%H:%M:%S"),
        }
        # Old libraries of this entry (a build_directory reused with other sources) go; a process
        # that has one loaded keeps its mapping.
        keep = {plan.library.name, plan.ort_library.name if plan.ort_library is not None else ""}
        for old in list(entry.glob(f"{plan.name}_*.so")) + list(entry.glob(f"lib{plan.name}_ort_*.so")):
            if old.name not in keep:
                with contextlib.suppress(OSError):
                    old.unlink()
        # The libraries first, then the record that names them: a reader that sees the record
        # sees whole libraries (each appears by an atomic rename).
        if plan.ort_library is not None:
            os.replace(tmp_ort_library, plan.ort_library)
        os.replace(tmp_library, plan.library)
        _write_atomic(entry / "build.json", json.dumps(meta, indent=1).encode())
        with open(log, "a") as f:
            f.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} pid {os.getpid()} built in {seconds:.1f} s\n")
        if verbose:
            _say(f"built {plan.library} in {seconds:.1f} s")
    except BuildError as exc:
        with open(log, "a") as f:
            f.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} pid {os.getpid()} failed: {exc.first_error}\n")
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _ensure_built(plan: _Plan, verbose: bool) -> Path:
    meta_path = plan.entry / "build.json"
    reason = _stale_reason(plan, _read_json(meta_path))
    if reason is None:
        return plan.library
    plan.entry.mkdir(parents=True, exist_ok=True)
    with _flock(plan.entry / "lock", repr(plan.name), verbose):
        reason = _stale_reason(plan, _read_json(meta_path))  # built while we waited?
        if reason is None:
            return plan.library
        if verbose or reason.startswith("it was built for"):
            if reason.startswith("it was built for"):
                _say(f"not reusing {plan.entry}: {reason}. Rebuilding.")
            else:
                _say(f"building {plan.name!r} in {plan.entry} ({reason})")
        _build(plan, reason, verbose)
    return plan.library


# --- loading ----------------------------------------------------------------------------------------

_load_lock = threading.RLock()
_loaded: Dict[str, ModuleType] = {}  # key -> module
_op_owners: Dict[str, Tuple[str, str, str]] = {}  # op name -> (module name, key, library path)
# op name -> (ONNX domain, ONNX Runtime library path or None), for opforge.onnx.export.
_op_domains: Dict[str, Tuple[str, Optional[str]]] = {}


def _record_module(plan: _Plan, module: ModuleType, ops: Iterable[str]) -> None:
    """Remembers the loaded ops (owner, ONNX domain) and the module's ONNX Runtime library."""
    library = str(plan.ort_library) if plan.ort_library is not None else None
    for op in ops:
        _op_owners[op] = (plan.name, plan.key, str(plan.library))
        if plan.ort_domain:
            domain = plan.ort_domain
        else:  # no ONNX Runtime library: the domain it would have (ops of several namespaces: each its own)
            domain = op.split(">", 1)[0].lower() if ">" in op else plan.name.lower()
        _op_domains[op] = (domain, library)
    with contextlib.suppress(AttributeError, TypeError):
        module._opforge_ort_library = library
    _loaded[plan.key] = module


def loaded_op_domains() -> Dict[str, Tuple[str, Optional[str]]]:
    """The ops this process loaded through opforge.build: op name -> (its ONNX domain, the path of
    its module's ONNX Runtime library, or None where it was built without one). opforge.onnx.export
    writes these ops as nodes of their domain."""
    with _load_lock:
        return dict(_op_domains)


def ort_library_path(library: Union[ModuleType, str, os.PathLike]) -> Path:
    """The ONNX Runtime custom-op library built beside a module's TensorFlow library, for
    `opforge.onnx.session(..., libraries=[...])` (or `SessionOptions.register_custom_ops_library`).

    Args:
      library: the module `load` / `load_inline` returned, or the path `build_library` returned.

    Raises:
      ValueError: it was built without `ort_sources` / `ort_source` (or not by opforge.build).
    """
    if isinstance(library, ModuleType):
        path = getattr(library, "_opforge_ort_library", False)
        if path:
            return Path(path)
        what = (f"the module {library.__name__!r} was built without ONNX Runtime sources"
                if path is None else f"the module {library.__name__!r} was not loaded by opforge.build")
    else:
        tf_library = Path(library).expanduser().resolve()
        meta = _read_json(tf_library.parent / "build.json") or {}
        if meta.get("library") == tf_library.name and meta.get("ort_library"):
            return tf_library.parent / meta["ort_library"]
        what = f"{tf_library} is no library opforge.build built with ONNX Runtime sources"
    raise ValueError(f"opforge.build.ort_library_path: {what}; build it with ort_sources=[...] "
                     "(load, build_library) or ort_source=... (load_inline) for an ONNX Runtime library")


def _conflict_message(plan: _Plan, op: str) -> str:
    owner = _op_owners.get(op)
    if owner is not None:
        by = (f"by the module {owner[0]!r} that opforge.build loaded earlier from different "
              f"sources or flags ({owner[2]})")
        fix = (f"rename the op (REGISTER_OP(\"{op}V2\") and its kernel registrations) to load "
               "both, or restart the Python process to load the new version in place of the old")
    else:
        by = "by TensorFlow itself or another library loaded in this process"
        fix = ("rename the op (REGISTER_OP(\"MyPrefix>" + op.split(">")[-1] + "\")...), "
               "or, if it comes from an earlier version of this module, restart the Python process")
    return (
        f"opforge.build: cannot load {plan.name!r}: it registers the op {op!r}, which is already "
        f"registered in this process {by}. TensorFlow's op registrations are process-global and "
        "permanent: a registered op can be neither replaced nor unloaded (TensorFlow would keep "
        "the old definition, and a second kernel for the same op and dtype makes every call to "
        f"it fail as ambiguous). To fix it, {fix}."
    )


def _explain_load_failure(plan: _Plan, message: str) -> str:
    match = re.search(r"undefined symbol: (\S+)", message)
    if not match:
        return (f"opforge.build: TensorFlow could not load {plan.library} (built from {plan.name!r}): "
                f"{message.strip()}")
    symbol = match.group(1)
    lines = [
        f"opforge.build: TensorFlow could not load {plan.library} (built from {plan.name!r}): it "
        "needs the symbol",
        f"    {demangle(symbol)}",
        f"    (mangled: {symbol})",
        "which neither TensorFlow nor any loaded library provides.",
    ]
    if "cxx11" in symbol:
        lines.append(
            "The symbol uses the C++11 std::string/std::list ABI (`__cxx11`): the library and "
            f"TensorFlow disagree on _GLIBCXX_USE_CXX11_ABI (this TensorFlow: {plan.tf['abi']}). "
            "Do not set it in extra_cflags: opforge.build takes it from tf.sysconfig.")
    else:
        lines.append("Did extra_ldflags name a library that is not loaded? Delete the cache entry "
                     f"{plan.entry} to rebuild it.")
    return "\n".join(lines)


def _load_plan(plan: _Plan, verbose: bool) -> ModuleType:
    with _load_lock:
        module = _loaded.get(plan.key)
        if module is not None:
            return module
        from tensorflow.python.framework import op_def_registry

        if _mapped_in_process(plan.library):
            # This very library (these sources and flags) is loaded already, not through
            # opforge.build: by tf.load_op_library, say in a child of `opforge check` or before a
            # SavedModel load. Its ops are these ones: hand out TensorFlow's module for it.
            import tensorflow as tf

            module = tf.load_op_library(str(plan.library))
            _record_module(plan, module, _library_ops(plan.library, plan.op_names))
            return module
        # Before compiling: an op this process already has cannot be loaded again.
        for op in plan.op_names:
            if op_def_registry.get(op) is not None:
                raise OpConflictError(_conflict_message(plan, op))
        library = _ensure_built(plan, verbose)
        import tensorflow as tf

        try:
            module = tf.load_op_library(str(library))
        except (tf.errors.OpError, OSError) as exc:
            message = getattr(exc, "message", None) or str(exc)
            raise LoadError(_explain_load_failure(plan, message)) from None
        registered = _library_ops(library, plan.op_names)
        for op in plan.op_names:
            # TensorFlow skips, silently, an op the process already has (registered meanwhile).
            if op not in registered and op_def_registry.get(op) is not None:
                raise OpConflictError(_conflict_message(plan, op))
        _record_module(plan, module, registered)
        return module


def _mapped_in_process(library: Path) -> bool:
    """Whether the file `library` is loaded (mapped) in this process (Linux: /proc/self/maps)."""
    try:
        target = str(Path(library).resolve())
        if not Path(target).is_file():
            return False
        with open("/proc/self/maps") as maps:
            return any(line.rstrip("\n").endswith(" " + target) for line in maps)
    except OSError:
        return False


def _library_ops(library: Path, fallback: List[str]) -> List[str]:
    """The ops TensorFlow registered from the (loaded) library: its op list leaves out those it
    skipped because the process already had them."""
    try:
        from tensorflow.core.framework import op_def_pb2
        from tensorflow.python.client import pywrap_tf_session as py_tf

        handle = py_tf.TF_LoadLibrary(str(library))  # already loaded: TensorFlow's cached record
        try:
            data = py_tf.TF_GetOpList(handle)
        finally:
            py_tf.TF_DeleteLibraryHandle(handle)
        op_list = op_def_pb2.OpList()
        op_list.ParseFromString(data)
        return [op.name for op in op_list.op]
    except Exception:  # internal API moved: trust the sources
        return list(fallback)


def _read_sources(paths: Iterable[Union[str, os.PathLike]]) -> Tuple[List[Tuple[str, bytes]], List[Path]]:
    files, resolved = [], []
    for p in paths:
        path = Path(p).expanduser().resolve()
        try:
            files.append((path.name, path.read_bytes()))
        except OSError as exc:
            raise BuildError(f"opforge.build: cannot read the source {p}: {exc.strerror}") from None
        resolved.append(path)
    return files, resolved


def _as_list(value) -> list:
    if value is None:
        return []
    if isinstance(value, (str, os.PathLike)):
        return [value]
    return list(value)


def build_library(name: str, sources: Sequence[Union[str, os.PathLike]] = (),
                  cuda_sources: Sequence[Union[str, os.PathLike]] = (), extra_cflags: Flags = (),
                  extra_ldflags: Sequence[str] = (), include_dirs: Sequence[str] = (),
                  build_directory: Optional[str] = None, verbose: bool = False,
                  cpp_source: Optional[str] = None, cuda_source: Optional[str] = None,
                  ort_sources: Sequence[Union[str, os.PathLike]] = (),
                  ort_source: Optional[Union[str, Sequence[str]]] = None,
                  cuda_sim: Optional[bool] = None) -> Path:
    """Builds (or finds in the cache) the library and returns its path, without loading it.

    Takes `sources`/`cuda_sources`/`ort_sources` (files) as `load`, or
    `cpp_source`/`cuda_source`/`ort_source` (text) as `load_inline`. The ONNX Runtime library, if
    any, is `ort_library_path(<the returned path>)`.
    """
    plan = _plan(name, sources, cuda_sources, extra_cflags, extra_ldflags, include_dirs,
                 build_directory, cpp_source, cuda_source, ort_sources, ort_source, cuda_sim)
    with _load_lock:
        return _ensure_built(plan, verbose)


def _plan(name, sources, cuda_sources, extra_cflags, extra_ldflags, include_dirs, build_directory,
          cpp_source=None, cuda_source=None, ort_sources=(), ort_source=None, cuda_sim=None) -> _Plan:
    if cpp_source is not None or cuda_source is not None:
        if _as_list(ort_sources):
            raise ValueError("opforge.build: with the sources as text (cpp_source), give the ONNX "
                             "Runtime sources as text too (ort_source)")
        srcs = [(f"{name}.cc", _text(cpp_source).encode())] if cpp_source is not None else []
        cus = [(f"{name}_cuda.cu", _text(cuda_source).encode())] if cuda_source is not None else []
        orts = [(f"{name}_ort.cc", _text(ort_source).encode())] if ort_source is not None else []
        return _Plan(name, srcs, cus, None, None, extra_cflags, extra_ldflags, include_dirs,
                     build_directory, orts, None, cuda_sim)
    if ort_source is not None:
        raise ValueError("opforge.build: with the sources as files, give the ONNX Runtime sources as "
                         "files too (ort_sources)")
    srcs, src_paths = _read_sources(_as_list(sources))
    cus, cu_paths = _read_sources(_as_list(cuda_sources))
    orts, ort_paths = _read_sources(_as_list(ort_sources))
    for path in src_paths + ort_paths:
        if path.suffix == ".cu":
            raise ValueError(f"opforge.build: {path} is a CUDA source: pass it in cuda_sources")
    return _Plan(name, srcs, cus, src_paths, cu_paths, extra_cflags, extra_ldflags, include_dirs,
                 build_directory, orts, ort_paths, cuda_sim)


def _text(source) -> str:
    if isinstance(source, (list, tuple)):
        return "\n".join(source)
    return str(source)


def load(name: str, sources: Sequence[Union[str, os.PathLike]], cuda_sources: Sequence[Union[str, os.PathLike]] = (),
         extra_cflags: Flags = (), extra_ldflags: Sequence[str] = (), include_dirs: Sequence[str] = (),
         build_directory: Optional[str] = None, verbose: bool = False,
         ort_sources: Sequence[Union[str, os.PathLike]] = (), cuda_sim: Optional[bool] = None) -> ModuleType:
    """Compiles the C++ (and CUDA) source files into an op library against the running
    TensorFlow, caches it, loads it with `tf.load_op_library` and returns that module.

    Args:
      name: the module's name (a C identifier); names the cache entry and the library file.
      sources: C++ files (`.cc`, `.cpp`). The headers they include (other than opforge's,
        TensorFlow's and the system's) are tracked: editing one rebuilds.
      cuda_sources: `.cu` files, compiled by nvcc (`$CUDA_HOME/bin/nvcc`, or on PATH) into objects
        and linked with the static CUDA runtime. Without nvcc, BuildError says so.
      extra_cflags: more compiler flags: a list (for the C++ compiler), or
        `{"cxx": [...], "nvcc": [...]}`.
      extra_ldflags: more linker flags (`-L...`, `-l...`).
      include_dirs: more include directories (searched before opforge's and TensorFlow's).
      build_directory: build there instead of in the cache (`$OPFORGE_CACHE`, else
        `$XDG_CACHE_HOME/opforge` or `~/.cache/opforge`); a later build with other sources
        replaces it.
      verbose: print the commands, the compiler's output and the time taken to stderr.
      ort_sources: C++ files of the ONNX Runtime adapter: they include the op struct's header (no
        TensorFlow header in it) and `common/ort_kernel.h`, with one `OPFORGE_ORT_KERNELS(...)`
        line per op. They are built, with the files of `sources` that include no TensorFlow
        header (the core) and opforge's ONNX Runtime skeleton, into a second library in the same
        cache entry, an ONNX Runtime custom-op library without TensorFlow
        (`ort_library_path(module)`); its ops are the ONNX domain `ort_domain(...)` gives.
      cuda_sim: build `cuda_sources` for opforge's SIMT runtime instead of nvcc (no GPU and no
        nvcc needed, the CUDA toolkit's headers are): the C++ compiler compiles each `.cu` file
        after the runtime's prelude, and the kernels registered with `OPFORGE_REGISTER_KERNELS`
        for the GPU are registered on the CPU as well, under the kernel label "cuda_sim", beside
        the CPU kernels. `opforge.cuda_sim.function(fn, op_names)` runs them; `opforge check
        --cuda-sim` compares them with the CPU kernels, with the SIMT runtime's checks (barriers,
        warp intrinsics, launch limits, block order). None (the default): $OPFORGE_CUDA_SIM.
        cuFFT is not available to a user's cuda_sim build.

    Returns the module `tf.load_op_library` returns: one function per op (`AddOne` becomes
    `add_one`). The same sources and flags loaded again in this process return the
    same module, without looking at the cache.

    Raises:
      BuildError: compiling or linking failed (the first error, the command, the full output).
      OpConflictError: the sources register an op this process already has (from other sources,
        or TensorFlow's own); op registrations cannot be replaced: rename it or restart.
      LoadError: TensorFlow could not load the library (the reason, explained).
    """
    return _load_plan(_plan(name, sources, cuda_sources, extra_cflags, extra_ldflags, include_dirs,
                            build_directory, ort_sources=ort_sources, cuda_sim=cuda_sim), verbose)


def load_inline(name: str, cpp_source: Union[str, Sequence[str]], cuda_source: Optional[Union[str, Sequence[str]]] = None,
                extra_cflags: Flags = (), extra_ldflags: Sequence[str] = (), include_dirs: Sequence[str] = (),
                build_directory: Optional[str] = None, verbose: bool = False,
                ort_source: Optional[Union[str, Sequence[str]]] = None,
                cuda_sim: Optional[bool] = None) -> ModuleType:
    """`load` with the sources given as text (a string, or a list of strings joined by newlines).

    The C++ source is written to `<entry>/src/<name>.cc` (the CUDA source to `<name>_cuda.cu`, the
    ONNX Runtime source to `<name>_ort.cc`), where compiler messages point. A list lets one op
    struct serve both runtimes: `cpp_source=[op_struct, tf_binding]`,
    `ort_source=[op_struct, ort_registration]` (the op struct's text includes `common/op_call.h`,
    no TensorFlow header). See `load` for the rest.
    """
    return _load_plan(_plan(name, (), (), extra_cflags, extra_ldflags, include_dirs, build_directory,
                            cpp_source, cuda_source, ort_source=ort_source, cuda_sim=cuda_sim), verbose)

"""Loading the library: cheap import, package-relative path, and a clear message per failure."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

import opforge
from opforge import _loader
from helpers import run_python


def test_import_is_cheap_and_does_not_load_tensorflow():
    proc = run_python(
        """
        import sys, time
        t = time.perf_counter()
        import opforge
        elapsed = time.perf_counter() - t
        print('tensorflow' in sys.modules, elapsed)
        """
    )
    assert proc.returncode == 0, proc.stderr
    loaded, elapsed = proc.stdout.split()
    assert loaded == "False"
    assert float(elapsed) < 1.0


def test_library_comes_from_the_package_directory_not_the_working_directory(tmp_path):
    assert _loader.library_path().parent == Path(opforge.__file__).resolve().parent
    # A junk library of the same name in the working directory must be ignored.
    (tmp_path / _loader.LIBRARY_NAME).write_bytes(b"not a library")
    proc = run_python(
        """
        import opforge, tensorflow as tf
        print(opforge.ops.leaky_relu(tf.constant([-1.0, 2.0])).numpy().tolist())
        """,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "[-0.20000000298023224, 2.0]" in proc.stdout


def test_library_is_loaded_once():
    assert opforge.load_library() is opforge.load_library()


def test_missing_library_message(tmp_path):
    with pytest.raises(opforge.LoadError) as info:
        _loader.load_library(tmp_path / _loader.LIBRARY_NAME)
    message = str(info.value)
    assert "was not found" in message and str(tmp_path) in message
    assert "make build" in message


def test_version_mismatch_message_names_both_versions_and_the_fix():
    proc = run_python(
        """
        import tensorflow as tf
        import opforge
        from opforge import _build_info
        _build_info.TF_VERSION = "2.0.0"
        try:
            opforge.ops.leaky_relu(tf.ones([2]))
        except opforge.LoadError as e:
            print("LOADERROR", e)
        """
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "LOADERROR" in out
    import tensorflow as tf

    assert "2.0.0" in out and tf.__version__ in out
    assert "make build" in out and "pip install --no-build-isolation" in out


def _compile(tmp_path: Path, source: str, name: str) -> Path:
    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        pytest.skip("no C++ compiler to build a broken library")
    src = tmp_path / f"{name}.cc"
    src.write_text(source)
    lib = tmp_path / f"{name}.so"
    subprocess.run(
        [compiler, "-shared", "-fPIC", "-D_GLIBCXX_USE_CXX11_ABI=1", str(src), "-o", str(lib)],
        check=True,
    )
    return lib


def test_undefined_cxx11_symbol_is_demangled_and_explained(tmp_path):
    lib = _compile(
        tmp_path,
        "#include <string>\nvoid opforge_missing(const std::string& s);\n"
        "void use() { opforge_missing(\"x\"); }\n",
        "broken_abi",
    )
    with pytest.raises(opforge.LoadError) as info:
        _loader.load_library(lib)
    message = str(info.value)
    assert "opforge_missing(std::__cxx11::basic_string" in message  # demangled
    assert "_Z15opforge_missingRKNSt7__cxx11" in message  # and the raw name
    assert "_GLIBCXX_USE_CXX11_ABI" in message
    assert "make build" in message


def test_undefined_plain_symbol_is_explained(tmp_path):
    lib = _compile(
        tmp_path, "void opforge_gone(int);\nvoid use() { opforge_gone(1); }\n", "broken_plain"
    )
    with pytest.raises(opforge.LoadError) as info:
        _loader.load_library(lib)
    message = str(info.value)
    assert "opforge_gone(int)" in message
    assert "another TensorFlow version" in message


def test_demangle():
    assert _loader.demangle("_Z3fooi") == "foo(int)"
    assert _loader.demangle("not_mangled") == "not_mangled"


def test_op_names_match_the_library():
    import tensorflow as tf
    from tensorflow.python.framework import op_def_registry

    module = opforge.load_library()
    functions = {
        name for name in dir(module)
        if name.startswith("opforge_") and not name.endswith("_eager_fallback")
    }
    assert len(functions) == len(opforge.ops.OP_NAMES)
    for op_name in opforge.ops.OP_NAMES:
        assert op_def_registry.get(op_name) is not None, op_name
    del tf


def test_register_all_returns_the_library():
    assert opforge.register_all() is opforge.load_library()

"""Loading the library: cheap import, package-relative path, and a clear message per failure."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

import opforge
from opforge import _loader
from helpers import package_copy, run_python


def test_import_registers_everything_and_costs_little():
    """`import opforge` alone loads the library (the ops are known to TensorFlow), registers the
    gradients and the Keras layers, and costs little on top of TensorFlow and Keras."""
    proc = run_python(
        """
        import time
        t0 = time.perf_counter()
        import tensorflow as tf, keras
        t1 = time.perf_counter()
        import opforge
        t2 = time.perf_counter()
        from tensorflow.python.framework import op_def_registry
        from tensorflow.python.framework import ops as tf_ops
        print("OPS", all(op_def_registry.get(n) is not None for n in opforge.ops.OP_NAMES))
        print("GRADIENT", tf_ops.gradient_registry.lookup("Opforge>LeakyRelu") is not None)
        print("LAYER", keras.saving.get_registered_object("opforge>LeakyReLU") is opforge.layers.LeakyReLU)
        print("MODEL", keras.saving.get_registered_object("opforge>YoloV3TinySubclassed") is not None)
        print("COST", t2 - t1, t1 - t0)
        """
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    for key in ("OPS", "GRADIENT", "LAYER", "MODEL"):
        assert f"{key} True" in proc.stdout, proc.stdout
    cost, tensorflow_cost = map(float, proc.stdout.split("COST ")[1].split())
    # 0.05 s measured on the 2-core EPYC against 1.6 s for TensorFlow and Keras.
    assert cost < 0.5, (cost, tensorflow_cost)


def test_keras_and_savedmodel_load_after_only_import_opforge(tmp_path):
    """The two failures of a fresh process that only ran `import opforge`: keras.models.load_model
    (Could not locate class 'LeakyReLU') and tf.saved_model.load (Op type not registered)."""
    proc = run_python(
        f"""
        import numpy as np, tensorflow as tf, keras, opforge
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), opforge.layers.LeakyReLU(0.3)])
        model.save(r"{tmp_path}/m.keras")
        model.export(r"{tmp_path}/sm", verbose=False)
        x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
        np.save(r"{tmp_path}/x.npy", x)
        np.save(r"{tmp_path}/y.npy", model(x).numpy())
        """
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = run_python(
        f"""
        import numpy as np, tensorflow as tf, keras
        import opforge
        x = np.load(r"{tmp_path}/x.npy"); y = np.load(r"{tmp_path}/y.npy")
        print("KERAS", np.array_equal(keras.models.load_model(r"{tmp_path}/m.keras")(x).numpy(), y))
        loaded = tf.saved_model.load(r"{tmp_path}/sm")  # held: serve() needs its variables
        print("SAVEDMODEL", np.array_equal(loaded.serve(x).numpy(), y))
        """
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "KERAS True" in proc.stdout and "SAVEDMODEL True" in proc.stdout, proc.stdout


def test_import_survives_a_broken_library_and_op_calls_say_why(tmp_path):
    """A library that cannot load must not make `import opforge` fail (`opforge doctor` has to
    run): the import warns with the LoadError's message and each op call raises it."""
    package_copy(tmp_path, junk_library=True)
    proc = run_python(
        """
        import warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import opforge
        print("WARNED", any("could not load its C++ library" in str(w.message) for w in caught))
        try:
            opforge.ops.leaky_relu([1.0])
        except opforge.LoadError as e:
            print("RAISED", "could not load its C++ library" in str(e))
        """,
        cwd=tmp_path,
        env_extra={"PYTHONPATH": str(tmp_path)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "WARNED True" in proc.stdout and "RAISED True" in proc.stdout, proc.stdout


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


def test_version_mismatch_message_names_both_versions_and_the_fix(tmp_path):
    # A copy of the installed package that says it was built against TensorFlow 2.0.0.
    package_copy(tmp_path, tf_version="2.0.0")
    proc = run_python(
        """
        import warnings
        import tensorflow as tf
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import opforge
        print("WARNED", any("2.0.0" in str(w.message) for w in caught))
        try:
            opforge.ops.leaky_relu(tf.ones([2]))
        except opforge.LoadError as e:
            print("LOADERROR", e)
        """,
        cwd=tmp_path,
        env_extra={"PYTHONPATH": str(tmp_path)},
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "WARNED True" in out and "LOADERROR" in out, out
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

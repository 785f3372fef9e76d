"""opforge's PEP 517 build backend: scikit-build-core, with a clear message where it is missing.

`pip install --no-build-isolation .` (how opforge is built against the TensorFlow already
installed) does not install build requirements, and pip's own error for a missing backend is a
bare "No module named 'scikit_build_core'". This shim re-exports scikit-build-core's hooks, or
says what to install.
"""
try:
    from scikit_build_core.build import *  # noqa: F401,F403  (the PEP 517 hooks)
    from scikit_build_core.build import __all__  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised by tests/test_install.py in a child
    raise ImportError(
        "opforge is built with scikit-build-core (and CMake >= 3.22, Ninja or Make, a C++17 "
        "compiler), which this environment lacks. With --no-build-isolation pip does not install "
        "build requirements; install them first:\n"
        '    pip install "scikit-build-core>=0.10" "cmake>=3.22" ninja\n'
        "then run `pip install --no-build-isolation .` again (with TensorFlow already installed: "
        "opforge compiles against it)."
    ) from exc

"""opforge: production-grade TensorFlow custom ops in C++, and the toolkit to write your own.

`import opforge` makes everything loadable: it loads the C++ library (registering every op and
kernel with TensorFlow, so a SavedModel that uses opforge ops loads), registers the gradients
and registers the Keras layers (so a `.keras` file that uses them loads).

    import opforge
    y = opforge.ops.leaky_relu(x, alpha=0.2)
    layer = opforge.layers.LeakyReLU(negative_slope=0.3)
"""
from __future__ import annotations

import warnings
from types import ModuleType

from opforge._loader import LoadError, library_path, load_library

__version__ = "0.1.0"
__all__ = ["KerasVersionError", "LoadError", "library_path", "load_library", "register_all", "ops", "layers", "models"]


def register_all() -> ModuleType:
    """Returns the loaded library. `import opforge` already registers every op, gradient and
    Keras layer; this stays for code written before it did (and raises the library's
    LoadError, if it could not be loaded)."""
    return load_library()


try:
    load_library()
except LoadError as _error:
    # Still importable, so that `opforge doctor` can say what is wrong; every op call raises the
    # same LoadError.
    warnings.warn(str(_error), RuntimeWarning, stacklevel=2)

# The gradients (ops), then the Keras serializables (the layers and the YOLO-v3 model classes).
# Measured on the 2-core EPYC: 0.05 s on top of `import tensorflow, keras` (1.6 s), of which
# tf.load_op_library is 0.02 s.
from opforge import ops  # noqa: E402
from opforge._keras import KerasVersionError, keras3_problem, layers_problem  # noqa: E402

# Keras 2 (TensorFlow 2.15, or TF_USE_LEGACY_KERAS=1): the ops work, the layers are tf-keras
# layers where tf-keras is installed; a Keras part that cannot load raises KerasVersionError
# naming the Keras it needs when it is first used or imported.
_KERAS_PARTS = ()
if layers_problem() is None:
    from opforge import layers  # noqa: E402
else:
    _KERAS_PARTS += ("layers",)
if keras3_problem() is None:
    from opforge import models  # noqa: E402
else:
    _KERAS_PARTS += ("models",)


def __getattr__(name: str):
    import importlib

    if name in _KERAS_PARTS:
        return importlib.import_module(f"opforge.{name}")  # raises KerasVersionError
    raise AttributeError(f"module 'opforge' has no attribute {name!r}")

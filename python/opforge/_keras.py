"""Which Keras this process has, and the checks that opforge's Keras parts make before they load.

opforge's layers are Keras layers of the Keras that `tf.keras` is: Keras 3 (the `keras` package,
TensorFlow 2.16 and later; on its TensorFlow or JAX backend), or Keras 2 from the `tf-keras`
package where `TF_USE_LEGACY_KERAS=1` makes `tf.keras` that one. `framework()` is that module;
each layer module subclasses its `layers.Layer`, so the layers mix with the user's models either
way. `opforge.models` (the YOLO-v3 models, their training loop and `.keras` app) are Keras 3
only: under Keras 2 they refuse at import, naming the Keras they need. Where no Keras that the
layers can join is there (Keras 2 of TensorFlow 2.15, or TF_USE_LEGACY_KERAS=1 without
tf-keras), `opforge.layers` refuses likewise; the ops (`opforge.ops`) work with any Keras.
"""
from __future__ import annotations

import os
from typing import Optional

__all__ = ["KerasVersionError", "keras3_problem", "require_keras3", "legacy", "framework", "layers_problem",
           "require_layers"]

NEEDED = "Keras 3 (the `keras` package >= 3.0, with `tf.keras` being that Keras)"


class KerasVersionError(ImportError):
    """opforge's layers and models need Keras 3; this process has another Keras."""


def _legacy_requested() -> bool:
    return os.environ.get("TF_USE_LEGACY_KERAS", "").strip().lower() in ("1", "true", "yes")


def keras3_problem() -> Optional[str]:
    """None where Keras 3 is what TensorFlow uses; otherwise what is there instead."""
    try:
        import keras
    except ImportError as error:  # pragma: no cover: every TensorFlow >= 2.16 installs keras
        return f"the `keras` package cannot be imported ({error})"
    version = getattr(keras, "__version__", "unknown")
    try:
        major = int(str(version).split(".")[0])
    except ValueError:
        major = 0
    if major < 3:
        return f"this environment has Keras {version} (TensorFlow 2.15 and earlier ship Keras 2)"
    if _legacy_requested():
        return (f"TF_USE_LEGACY_KERAS={os.environ['TF_USE_LEGACY_KERAS']} makes `tf.keras` the "
                f"legacy Keras 2 (tf-keras), while opforge's models are Keras {version} models")
    return None


def require_keras3(what: str) -> None:
    """Raises KerasVersionError naming the Keras `what` needs, unless Keras 3 is in use."""
    problem = keras3_problem()
    if problem is not None:
        raise KerasVersionError(
            f"{what} needs {NEEDED}, but {problem}. The ops (opforge.ops) work with this Keras; "
            "for the layers and models use TensorFlow >= 2.16 with its Keras 3 and leave "
            "TF_USE_LEGACY_KERAS unset.")


def legacy() -> bool:
    """True where `tf.keras` is Keras 2 from tf-keras (TF_USE_LEGACY_KERAS=1 and tf-keras
    installed): the layers are then tf-keras layers."""
    if not _legacy_requested():
        return False
    try:
        import tf_keras  # noqa: F401  (tf.keras imports it anyway under TF_USE_LEGACY_KERAS=1)
    except ImportError:
        return False
    return True


def framework():
    """The Keras module the layers subclass: `tf_keras` under `legacy()`, else `keras`."""
    if legacy():
        import tf_keras

        return tf_keras
    import keras

    return keras


def layers_problem() -> Optional[str]:
    """None where the layers can be built (Keras 3, or tf-keras under TF_USE_LEGACY_KERAS=1);
    otherwise what is there instead."""
    if legacy():
        return None
    problem = keras3_problem()
    if problem is not None and _legacy_requested():
        problem += " and the tf-keras package is not installed (pip install tf-keras)"
    return problem


def require_layers(what: str) -> None:
    """Raises KerasVersionError naming the Keras `what` needs, unless the layers can be built."""
    problem = layers_problem()
    if problem is not None:
        raise KerasVersionError(
            f"{what} needs Keras 3 (the `keras` package >= 3.0) or Keras 2 from tf-keras with "
            f"TF_USE_LEGACY_KERAS=1, but {problem}. The ops (opforge.ops) work with this Keras.")

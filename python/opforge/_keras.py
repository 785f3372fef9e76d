"""Which Keras this process has, and the check that opforge's Keras parts make before they load.

opforge's layers and models are Keras 3 layers (`keras.layers.Layer` of the `keras` package, the
Keras TensorFlow 2.16 and later ship). Under Keras 2 (TensorFlow 2.15, or `tf-keras` with
`TF_USE_LEGACY_KERAS=1`, where `tf.keras` is Keras 2) they could be built but not mixed with the
user's `tf.keras` model, which would fail far from its cause. So `opforge.layers`,
`opforge.models` and `opforge.models.fuse` refuse at import, naming the Keras they need; the ops
(`opforge.ops`) work with any Keras.
"""
from __future__ import annotations

import os
from typing import Optional

__all__ = ["KerasVersionError", "keras3_problem", "require_keras3"]

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
                f"legacy Keras 2 (tf-keras), while opforge's layers are Keras {version} layers")
    return None


def require_keras3(what: str) -> None:
    """Raises KerasVersionError naming the Keras `what` needs, unless Keras 3 is in use."""
    problem = keras3_problem()
    if problem is not None:
        raise KerasVersionError(
            f"{what} needs {NEEDED}, but {problem}. The ops (opforge.ops) work with this Keras; "
            "for the layers and models use TensorFlow >= 2.16 with its Keras 3 and leave "
            "TF_USE_LEGACY_KERAS unset.")

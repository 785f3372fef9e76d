"""Which Keras backend runs the layers, and their ops on it.

opforge's layers run on Keras 3's TensorFlow backend (opforge.ops: the TensorFlow kernels) and on
its JAX backend (opforge.jax: the same kernels through their XLA FFI handlers, so the same bits);
a layer asks `ops()` for the op functions of the running backend. Another backend (torch, numpy,
openvino) has no way to call the kernels: the layers refuse at construction (`require`), naming
the backends they support.
"""
from __future__ import annotations

from types import ModuleType

from opforge._keras import framework

keras = framework()
SUPPORTED = ("tensorflow", "jax")


def name() -> str:
    return keras.backend.backend()


def is_jax() -> bool:
    return name() == "jax"


def require(layer: str) -> None:
    """Raises ValueError unless the running Keras backend is one the layers run on."""
    backend = name()
    if backend not in SUPPORTED:
        raise ValueError(
            f"{layer} runs on Keras's TensorFlow and JAX backends (KERAS_BACKEND=tensorflow or jax), "
            f"not on this process's {backend!r} backend: opforge's kernels are TensorFlow ops and XLA "
            "FFI handlers, which that backend cannot call")


def ops() -> ModuleType:
    """opforge.ops under the TensorFlow backend, opforge.jax under the JAX backend."""
    if is_jax():
        import opforge.jax

        return opforge.jax
    import opforge.ops

    return opforge.ops


def cast(x, dtype):
    """x in `dtype`, on the running backend (tf.cast under tf-keras, which has no keras.ops)."""
    if hasattr(keras, "ops"):
        return keras.ops.cast(x, dtype)
    import tensorflow as tf

    return tf.cast(x, dtype)


def image_data_format() -> str:
    config = getattr(keras, "config", None)
    if config is not None and hasattr(config, "image_data_format"):
        return config.image_data_format()
    return keras.backend.image_data_format()

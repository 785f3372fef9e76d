"""`opforge.layers.LeakyReLU`: `keras.layers.LeakyReLU` on the `Opforge>LeakyRelu` op."""
from __future__ import annotations

from typing import Any, Dict

import keras
import tensorflow as tf

from opforge.layers._checks import check_with_op
from opforge.ops._common import python_number
from opforge.ops.leaky_relu import leaky_relu

__all__ = ["LeakyReLU"]


@keras.saving.register_keras_serializable(package="opforge")
class LeakyReLU(keras.layers.Layer):
    """Leaky ReLU layer: `x` where x > 0, `negative_slope * x` elsewhere.

    Mirrors `keras.layers.LeakyReLU(negative_slope=0.3)` and computes with opforge's C++ kernel
    (and its C++ gradient). Unlike Keras, any finite slope is accepted, negative ones included.
    The op has no XLA kernel, so the layer sets `supports_jit = False` and Keras does not try to
    JIT-compile models that contain it.
    """

    def __init__(self, negative_slope: float = 0.3, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        try:
            # A number, not coerced: "0.3" and True are errors.
            self.negative_slope = python_number("LeakyReLU", "negative_slope", negative_slope)
        except tf.errors.InvalidArgumentError as exc:
            raise ValueError(f"opforge.layers.LeakyReLU: {exc.message}") from None
        check_with_op(f"opforge.layers.LeakyReLU(negative_slope={negative_slope!r})",
                      lambda: leaky_relu(tf.zeros([0]), alpha=self.negative_slope))
        self.supports_masking = True
        self.supports_jit = False
        self.built = True

    def call(self, inputs):
        return leaky_relu(inputs, alpha=self.negative_slope)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self) -> Dict[str, Any]:
        config = super().get_config()
        config.update({"negative_slope": self.negative_slope})
        return config

"""`opforge.layers.LeakyReLU`: `keras.layers.LeakyReLU` on the `Opforge>LeakyRelu` op."""
from __future__ import annotations

import warnings
from typing import Any, Dict

from opforge._keras import framework
import tensorflow as tf

from opforge.layers import _backend
from opforge.layers._checks import check_with_op
from opforge.ops._common import python_number
from opforge.ops.leaky_relu import leaky_relu

keras = framework()  # Keras 3, or tf-keras under TF_USE_LEGACY_KERAS=1 (opforge._keras)
__all__ = ["LeakyReLU"]


@keras.saving.register_keras_serializable(package="opforge")
class LeakyReLU(keras.layers.Layer):
    """Leaky ReLU layer: `x` where x > 0, `negative_slope * x` elsewhere.

    Mirrors `keras.layers.LeakyReLU(negative_slope=0.3)` and computes with opforge's C++ kernel
    (and its C++ gradient). `alpha=` (the name in tf.keras 2 and most YOLO code) is accepted
    with Keras's deprecation warning. Unlike Keras, any finite slope is accepted, negative ones
    included. The output has the layer's compute dtype (float16 under `mixed_float16`).
    """

    def __init__(self, negative_slope: float = 0.3, **kwargs: Any) -> None:
        if "alpha" in kwargs:  # as keras.layers.LeakyReLU
            negative_slope = kwargs.pop("alpha")
            warnings.warn("Argument `alpha` is deprecated. Use `negative_slope` instead.")
        super().__init__(**kwargs)
        _backend.require("opforge.layers.LeakyReLU")
        try:
            # A number, not coerced: "0.3" and True are errors.
            self.negative_slope = python_number("LeakyReLU", "negative_slope", negative_slope)
        except (TypeError, OverflowError) as exc:  # a Keras constructor's ValueError, naming the argument
            raise ValueError(f"opforge.layers.LeakyReLU: {exc}") from None
        check_with_op(f"opforge.layers.LeakyReLU(negative_slope={negative_slope!r})",
                      lambda: leaky_relu(tf.zeros([0]), alpha=self.negative_slope))
        self.supports_masking = True
        # The op lowers to XLA (cc/ops/leaky_relu/leaky_relu_xla.cc): jit_compile=True works.
        self.supports_jit = True
        self.built = True

    def call(self, inputs):
        out = _backend.ops().leaky_relu(inputs, alpha=self.negative_slope)
        # Integer inputs give float32 (as tf.nn.leaky_relu); Keras's symbolic tensor says the
        # compute dtype.
        return out if out.dtype == self.compute_dtype else _backend.cast(out, self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self) -> Dict[str, Any]:
        config = super().get_config()
        config.update({"negative_slope": self.negative_slope})
        return config

"""`opforge.layers.Swish`: `keras.layers.Activation("silu")` on the `Opforge>Swish` op."""
from __future__ import annotations

from typing import Any, Dict

import keras
import tensorflow as tf

from opforge.ops import _xla
from opforge.ops.swish import swish

__all__ = ["Swish"]


@keras.saving.register_keras_serializable(package="opforge")
class Swish(keras.layers.Layer):
    """Swish (SiLU) layer: `x * sigmoid(x)`, as `keras.layers.Activation("silu")`.

    Computes with opforge's C++ kernel and its C++ gradient. The output has the layer's compute
    dtype (float16 under `mixed_float16`). The op lowers to XLA, so models using it train with
    `jit_compile=True`.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.supports_masking = True
        # Under XLA the op runs as an FFI custom call (cc/ops/swish/swish_xla.cc): the same bits.
        self.supports_jit = _xla.supports_jit("Opforge>Swish", "Opforge>SwishGrad")
        self.built = True

    def call(self, inputs):
        out = swish(inputs)
        return out if out.dtype == self.compute_dtype else tf.cast(out, self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self) -> Dict[str, Any]:
        return super().get_config()

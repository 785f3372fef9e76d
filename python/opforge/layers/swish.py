"""`opforge.layers.Swish`: `keras.layers.Activation("silu")` on the `Opforge>Swish` op."""
from __future__ import annotations

from typing import Any, Dict

from opforge._keras import framework

from opforge.layers import _backend
from opforge.ops import _xla

keras = framework()  # Keras 3, or tf-keras under TF_USE_LEGACY_KERAS=1 (opforge._keras)
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
        _backend.require("opforge.layers.Swish")
        self.supports_masking = True
        # Under XLA the op runs as an FFI custom call (cc/ops/swish/swish_xla.cc): the same bits.
        self.supports_jit = _xla.supports_jit("Opforge>Swish", "Opforge>SwishGrad")
        self.built = True

    def call(self, inputs):
        out = _backend.ops().swish(inputs)
        return out if out.dtype == self.compute_dtype else _backend.cast(out, self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self) -> Dict[str, Any]:
        return super().get_config()

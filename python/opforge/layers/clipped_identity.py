"""`opforge.layers.ClippedIdentity`: a clip with a leaky straight-through gradient, on the
`Opforge>ClippedIdentity` op."""
from __future__ import annotations

from typing import Any, Dict

from opforge._keras import framework
import tensorflow as tf

from opforge.layers import _backend
from opforge.layers._checks import check_with_op
from opforge.ops._common import python_number
from opforge.ops.clipped_identity import clipped_identity

keras = framework()  # Keras 3, or tf-keras under TF_USE_LEGACY_KERAS=1 (opforge._keras)
__all__ = ["ClippedIdentity"]


@keras.saving.register_keras_serializable(package="opforge")
class ClippedIdentity(keras.layers.Layer):
    """`clip(x, clip_min, clip_max)` forward; gradient 1 inside the range and `leak` outside.

    A straight-through estimator that still leaks a little gradient to values past the range
    (`leak=0` is `tf.clip_by_value`'s gradient, `leak=1` a plain straight-through estimator).
    Computes with opforge's C++ kernel and its C++ gradient; the output has the layer's compute
    dtype (float16 under `mixed_float16`; the bounds are then rounded to float16). The op lowers
    to XLA, so models using it train with `jit_compile=True`.
    """

    def __init__(self, clip_min: float = -1.0, clip_max: float = 1.0, leak: float = 0.01,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        _backend.require("opforge.layers.ClippedIdentity")
        try:
            self.clip_min = python_number("ClippedIdentity", "clip_min", clip_min)
            self.clip_max = python_number("ClippedIdentity", "clip_max", clip_max)
            self.leak = python_number("ClippedIdentity", "leak", leak)
        except (TypeError, OverflowError) as exc:  # a Keras constructor's ValueError, naming the argument
            raise ValueError(f"opforge.layers.ClippedIdentity: {exc}") from None
        check_with_op(
            f"opforge.layers.ClippedIdentity(clip_min={clip_min!r}, clip_max={clip_max!r}, leak={leak!r})",
            lambda: clipped_identity(tf.zeros([0]), self.clip_min, self.clip_max, self.leak))
        self.supports_masking = True
        self.supports_jit = True  # cc/ops/clipped_identity/clipped_identity_xla.cc
        self.built = True

    def call(self, inputs):
        out = _backend.ops().clipped_identity(inputs, self.clip_min, self.clip_max, self.leak)
        return out if out.dtype == self.compute_dtype else _backend.cast(out, self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self) -> Dict[str, Any]:
        config = super().get_config()
        config.update({"clip_min": self.clip_min, "clip_max": self.clip_max, "leak": self.leak})
        return config

"""`opforge.layers.InverseMfcc`: MFCCs to audio inside a Keras model (`opforge.audio.mfcc_to_audio`
on the `Opforge>MfccToMel`, `Opforge>MelToStft` and `Opforge>GriffinLim` ops)."""
from __future__ import annotations

import numbers
from typing import Any, Dict, Optional

from opforge._keras import framework
import tensorflow as tf

from opforge.audio import mfcc_to_audio
from opforge.layers import _backend
from opforge.layers._checks import check_with_op
from opforge.ops import _xla

keras = framework()  # Keras 3, or tf-keras under TF_USE_LEGACY_KERAS=1 (opforge._keras)
__all__ = ["InverseMfcc"]

_LAYER = "opforge.layers.InverseMfcc"

# The layer's arguments, those of opforge.audio.mfcc_to_audio (= librosa.feature.inverse.mfcc_to_audio
# with the Mel filter bank's `norm` as `mel_norm`), with their defaults.
_DEFAULTS: Dict[str, Any] = {
    "n_mels": 128, "dct_type": 2, "norm": "ortho", "ref": 1.0, "lifter": 0, "sr": 22050, "n_fft": 2048,
    "hop_length": None, "win_length": None, "window": "hann", "center": True, "pad_mode": "constant",
    "power": 2.0, "n_iter": 32, "length": None, "momentum": 0.99, "init": "random", "seed": None, "fmin": 0.0,
    "fmax": None, "htk": False, "mel_norm": "slaney",
}


@keras.saving.register_keras_serializable(package="opforge")
class InverseMfcc(keras.layers.Layer):
    """MFCCs [batch, ..., n_mfcc, T] to audio [batch, ..., samples], as
    `librosa.feature.inverse.mfcc_to_audio`: inverse DCT and dB -> power, the non-negative
    least-squares inverse of the Mel filter bank, Griffin-Lim. The arguments are those of
    `opforge.audio.mfcc_to_audio` with the same defaults (`norm` is the DCT's normalisation,
    `mel_norm` the filter bank's).

    With `init="random"` and `seed=None` every call draws fresh initial phases; give `seed` for
    the same audio on every call (and after saving and loading). The layer has no weights and
    no gradient (Griffin-Lim and the NNLS are not differentiable). It computes in float32 (or
    float64 under a float64 policy) and returns the layer's compute dtype. Under XLA the three ops
    run as FFI custom calls (`supports_jit`), with the same results.
    """

    def __init__(self, n_mels: int = 128, dct_type: int = 2, norm: Optional[str] = "ortho", ref: float = 1.0,
                 lifter: float = 0, sr: float = 22050, n_fft: int = 2048, hop_length: Optional[int] = None,
                 win_length: Optional[int] = None, window: str = "hann", center: bool = True,
                 pad_mode: str = "constant", power: float = 2.0, n_iter: int = 32, length: Optional[int] = None,
                 momentum: float = 0.99, init: Optional[str] = "random", seed: Optional[int] = None,
                 fmin: float = 0.0, fmax: Optional[float] = None, htk: bool = False,
                 mel_norm: Optional[str] = "slaney", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        _backend.require(_LAYER)
        args = dict(n_mels=n_mels, dct_type=dct_type, norm=norm, ref=ref, lifter=lifter, sr=sr, n_fft=n_fft,
                    hop_length=hop_length, win_length=win_length, window=window, center=center,
                    pad_mode=pad_mode, power=power, n_iter=n_iter, length=length, momentum=momentum, init=init,
                    seed=seed, fmin=fmin, fmax=fmax, htk=htk, mel_norm=mel_norm)
        given = ", ".join(f"{k}={v!r}" for k, v in args.items() if v != _DEFAULTS[k])
        # The ops' cores check every argument: one frame of one coefficient through the whole
        # chain (a millisecond), so that a bad argument fails here rather than in the first call.
        # `length` must match the input's frames (the op checks it per call); here only its type.
        if length is not None and (isinstance(length, bool) or not isinstance(length, numbers.Integral)
                                   or length <= 0):
            raise ValueError(f"{_LAYER}({given}): length must be None or a positive int, got {length!r}")
        check_with_op(f"{_LAYER}({given})",
                      lambda: mfcc_to_audio(tf.zeros([1, 1], tf.float32), **dict(args, length=None)))
        for key, value in args.items():
            setattr(self, key, value)
        self.supports_jit = _xla.supports_jit("Opforge>MfccToMel", "Opforge>MelToStft",
                                              "Opforge>GriffinLim")

    def _args(self) -> Dict[str, Any]:
        return {key: getattr(self, key) for key in _DEFAULTS}

    def _call_jax(self, inputs):
        """The layer on Keras's JAX backend: opforge.audio.mfcc_to_audio's chain of opforge.jax
        ops (mfcc_to_mel, mel_to_stft, griffin_lim), the same kernels."""
        ofj = _backend.ops()
        x = inputs
        if x.dtype not in ("float32", "float64"):  # float16 / bfloat16 policies: the ops take float32
            x = x.astype("float32")
        a = self._args()
        mel = ofj.mfcc_to_mel(x, n_mels=a["n_mels"], dct_type=a["dct_type"], norm=a["norm"], ref=a["ref"],
                              lifter=a["lifter"])
        stft = ofj.mel_to_stft(mel, sr=a["sr"], n_fft=a["n_fft"], power=a["power"], fmin=a["fmin"], fmax=a["fmax"],
                               htk=a["htk"], norm=a["mel_norm"])
        audio = ofj.griffin_lim(stft, n_iter=a["n_iter"], hop_length=a["hop_length"], win_length=a["win_length"],
                                n_fft=a["n_fft"], window=a["window"], center=a["center"], length=a["length"],
                                pad_mode=a["pad_mode"], momentum=a["momentum"], init=a["init"], seed=a["seed"])
        return audio.astype(self.compute_dtype)

    def call(self, inputs):
        if _backend.is_jax():
            return self._call_jax(inputs)
        x = inputs
        if x.dtype not in (tf.float32, tf.float64):  # float16 / bfloat16 policies: the ops take float32
            x = tf.cast(x, tf.float32)
        audio = mfcc_to_audio(x, **self._args())
        return tf.cast(audio, self.compute_dtype)

    def output_length(self, frames: Optional[int]) -> Optional[int]:
        """Samples out for `frames` input frames (librosa.istft's length); None if unknown."""
        if self.length is not None:
            return int(self.length)
        if frames is None:
            return None
        win = self.n_fft if self.win_length is None else self.win_length
        hop = win // 4 if self.hop_length is None else self.hop_length
        samples = self.n_fft + hop * (frames - 1)
        return samples - 2 * (self.n_fft // 2) if self.center else samples

    def compute_output_shape(self, input_shape):
        shape = tuple(input_shape)
        return shape[:-2] + (self.output_length(shape[-1]),)

    def get_config(self) -> Dict[str, Any]:
        config = super().get_config()
        config.update(self._args())
        return config

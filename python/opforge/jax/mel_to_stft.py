"""opforge.jax's mel_to_stft: the handler of `Opforge>MelToStft` (opforge.ops.mel_to_stft's
kernel, the non-negative least-squares inverse of a Mel filter bank, as
librosa.feature.inverse.mel_to_stft). No gradient, as in TensorFlow (`tf.no_gradient`)."""
from __future__ import annotations

from typing import Optional

import numpy as np

import jax
import jax.numpy as jnp

from opforge.jax._batching import Leading, apply
from opforge.jax._checks import array, boolean, check_dtype, integer, message, number, short_repr

__all__ = ["mel_to_stft"]

AUDIO_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
_OP = "MelToStft"
# M [..., n_mels, T]: any leading batch axes, each frame solved on its own; a vmapped filter bank
# is a call per element.
_RULE = Leading((0,))


def _mel_norm(norm) -> str:
    """librosa's filter normalisation ("slaney" or None) as the op's string attr; other strings
    go to the core, which names them. librosa's p-norms (numbers) are not supported."""
    if norm is None:
        return "none"
    if not isinstance(norm, str):
        # opforge.ops raises InvalidArgumentError here (a value the op refuses): ValueError.
        raise ValueError(message(_OP, "norm", '"slaney" or None', short_repr(norm)))
    return norm


def mel_to_stft(M, sr: float = 22050, n_fft: int = 2048, power: float = 2.0, fmin: float = 0.0,
                fmax: Optional[float] = None, htk: bool = False, norm: Optional[str] = "slaney",
                filters=None) -> jax.Array:
    """opforge.ops.mel_to_stft in JAX (librosa.feature.inverse.mel_to_stft): a Mel (power)
    spectrogram `M` [..., n_mels, T] (float32 or float64, finite) back to an STFT magnitude
    [..., 1 + n_fft // 2, T] by non-negative least squares against librosa's Mel filter bank
    (or the given `filters` [n_mels, 1 + n_fft // 2], cast to M's dtype), then ** (1 / power);
    TensorFlow's bits. sr, power, fmin and fmax are stored as float32 attributes, as in
    TensorFlow.

    Not differentiable (TensorFlow's `tf.no_gradient`): jax.grad through it raises; wrap the
    call in `jax.lax.stop_gradient` for TensorFlow's None (a zero gradient)."""
    # Errors name M as the op does ("mel"), with librosa's name for it.
    M = array(_OP, "mel (M)", M)
    check_dtype(_OP, "mel (M)", M, AUDIO_DTYPES)
    if fmax is None:
        fmax_attr = -1.0  # the op's sr / 2
    else:
        fmax_attr = number(_OP, "fmax", fmax, "a frequency (Hz) or None")
        if not fmax_attr >= 0:  # the op reads a negative fmax as sr / 2: refuse one given here
            raise ValueError(message(_OP, "fmax", "a frequency >= 0 (Hz) or None", short_repr(fmax)))
    if filters is None:
        filters = jnp.zeros((0, 0), M.dtype)  # the op builds librosa's bank from the attributes
    else:
        filters = array(_OP, "filters", filters)
        check_dtype(_OP, "filters", filters, AUDIO_DTYPES)
        if filters.dtype != M.dtype:
            filters = filters.astype(M.dtype)
    attrs = {
        "sr": number(_OP, "sr", sr, "a sampling rate > 0"),
        "n_fft": integer(_OP, "n_fft", n_fft, "an int"),
        "power": number(_OP, "power", power, "a number > 0"),
        "fmin": number(_OP, "fmin", fmin, "a frequency >= 0"),
        "fmax": fmax_attr,
        "htk": boolean(_OP, "htk", htk),
        "norm": _mel_norm(norm),
    }
    return apply("Opforge>MelToStft", (M, filters), attrs, _RULE)[0]

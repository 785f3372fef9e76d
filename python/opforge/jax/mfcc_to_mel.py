"""opforge.jax's mfcc_to_mel: the handlers of `Opforge>MfccToMel` and `Opforge>MfccToMelGrad`
(opforge.ops.mfcc_to_mel's kernels, librosa.feature.inverse.mfcc_to_mel)."""
from __future__ import annotations

import functools
from typing import Optional

import numpy as np

import jax

from opforge.jax._batching import Leading, apply
from opforge.jax._checks import array, check_dtype, integer, message, number, short_repr

__all__ = ["mfcc_to_mel"]

AUDIO_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
_OP = "MfccToMel"
# [..., n_mfcc, T] -> [..., n_mels, T]: any leading batch axes, each frame on its own.
_FORWARD_RULE = Leading((0,))
_GRAD_RULE = Leading((0, 1, 2))  # grad, mel, mfcc: [..., n_mels, T], [..., n_mels, T], [..., n_mfcc, T]


def _norm(norm) -> str:
    """librosa's norm ("ortho" or None) as the op's string attr; other strings go to the core,
    which names them."""
    if norm is None:
        return "none"
    if not isinstance(norm, str):
        # opforge.ops raises InvalidArgumentError here (a value the op refuses): ValueError.
        raise ValueError(message(_OP, "norm", '"ortho" or None', short_repr(norm)))
    return norm


def _grad(grad, mel, mfcc, attrs):
    return apply("Opforge>MfccToMelGrad", (grad, mel, mfcc), dict(attrs), _GRAD_RULE)[0]


@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def _mfcc_to_mel(mfcc, attrs):
    return apply("Opforge>MfccToMel", (mfcc,), dict(attrs), _FORWARD_RULE)[0]


def _mfcc_to_mel_fwd(mfcc, attrs):
    mel = _mfcc_to_mel(mfcc, attrs)
    return mel, (mel, mfcc)


def _mfcc_to_mel_bwd(attrs, res, g):
    # opforge.ops.mfcc_to_mel's gradient: MfccToMelGrad(grad, mel (the output), mfcc, attrs).
    # First order only, as in TensorFlow (no gradient is registered for MfccToMelGrad).
    mel, mfcc = res
    return (_grad(g, mel, mfcc, attrs),)


_mfcc_to_mel.defvjp(_mfcc_to_mel_fwd, _mfcc_to_mel_bwd)


def mfcc_to_mel(mfcc, n_mels: int = 128, dct_type: int = 2, norm: Optional[str] = "ortho", ref: float = 1.0,
                lifter: float = 0) -> jax.Array:
    """opforge.ops.mfcc_to_mel in JAX (librosa.feature.inverse.mfcc_to_mel): `mfcc`
    [..., n_mfcc, T] float32 or float64 back to a Mel power spectrogram [..., n_mels, T]:
    inverse liftering, the inverse DCT (type `dct_type`, `norm` "ortho" or None) zero-padded to
    n_mels, then ref * 10^(x / 10); TensorFlow's bits. `ref` and `lifter` are stored as float32
    attributes, as in TensorFlow. Differentiable once (MfccToMelGrad)."""
    mfcc = array(_OP, "mfcc", mfcc)
    check_dtype(_OP, "mfcc", mfcc, AUDIO_DTYPES)
    attrs = (("n_mels", integer(_OP, "n_mels", n_mels, "an int")),
             ("dct_type", integer(_OP, "dct_type", dct_type, "2 or 3")),
             ("norm", _norm(norm)),
             ("ref", number(_OP, "ref", ref, "a number > 0")),
             ("lifter", number(_OP, "lifter", lifter, "a number >= 0")))
    return _mfcc_to_mel(mfcc, attrs)

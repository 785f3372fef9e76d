"""opforge.jax's griffin_lim: the handler of `Opforge>GriffinLim` (opforge.ops.griffin_lim's
kernel, the fast Griffin-Lim algorithm as librosa.griffinlim). No gradient, as in TensorFlow
(`tf.no_gradient`)."""
from __future__ import annotations

from typing import Optional

import numpy as np

import jax
import jax.numpy as jnp

from opforge.jax._batching import SEQUENTIAL, Leading, apply
from opforge.jax._checks import array, boolean, check_dtype, integer, message, number, short_repr

__all__ = ["griffin_lim"]

AUDIO_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
_OP = "GriffinLim"
# Zero or given initial phases: S [..., n_freq, T] (and phases, its shape) take any leading
# batch axes, each spectrogram on its own; one call.
_LEADING = Leading((0,))
_LEADING_PHASES = Leading((0, 1))


def _positive_or_none(name: str, value, default: str) -> int:
    """An optional positive int attr: None -> 0 (the op's default), else > 0."""
    if value is None:
        return 0
    v = integer(_OP, name, value, f"a positive int or None ({default})")
    if v <= 0:
        raise ValueError(message(_OP, name, f"a positive int or None ({default})", short_repr(value)))
    return v


def _string(name: str, value, expected: str) -> str:
    if not isinstance(value, str):
        # opforge.ops raises InvalidArgumentError here (a value the op refuses): ValueError.
        raise ValueError(message(_OP, name, expected, short_repr(value)))
    return value


def griffin_lim(S, n_iter: int = 32, hop_length: Optional[int] = None, win_length: Optional[int] = None,
                n_fft: Optional[int] = None, window: str = "hann", center: bool = True,
                length: Optional[int] = None, pad_mode: str = "constant", momentum: float = 0.99,
                init: Optional[str] = "random", seed: Optional[int] = None, phases=None) -> jax.Array:
    """opforge.ops.griffin_lim in JAX (librosa.griffinlim): audio [..., L] from STFT magnitudes
    `S` [..., 1 + n_fft // 2, T] (float32 or float64, finite) by the fast Griffin-Lim algorithm
    with momentum; TensorFlow's bits. The random initial phases (init="random") are NumPy's
    `RandomState(seed).random(S.shape)`, drawn by the kernel for S's whole shape; seed None
    draws a fresh seed per call (nondeterministic). `phases` (radians, S's shape, cast to S's
    dtype) are given initial phases instead. `momentum` is stored as a float32 attribute, as
    in TensorFlow.

    Under jax.vmap, seeded random phases are drawn per element (each element its own call, as
    the op called on it alone); zero or given phases take the vmapped axis as one more leading
    axis (one call).

    Not differentiable (TensorFlow's `tf.no_gradient`): jax.grad through it raises; wrap the
    call in `jax.lax.stop_gradient` for TensorFlow's None (a zero gradient)."""
    # Errors name S as the op does ("magnitude"), with librosa's name for it.
    S = array(_OP, "magnitude (S)", S)
    check_dtype(_OP, "magnitude (S)", S, AUDIO_DTYPES)
    if n_fft is None:
        # From S's shape (static in JAX); 0 lets the op say what is wrong with a shape it refuses.
        n_freq = S.shape[-2] if S.ndim >= 2 else None
        n_fft_attr = 2 * (n_freq - 1) if n_freq is not None and n_freq >= 2 else 0
    else:
        n_fft_attr = _positive_or_none("n_fft", n_fft, "2 * (S.shape[-2] - 1)")
    if phases is not None:
        if init not in ("random", "phases"):
            raise ValueError(message(_OP, "init", '"random" (the default) or "phases" when phases are given',
                                     short_repr(init)))
        init_attr = "phases"
        phases = array(_OP, "phases", phases)
        check_dtype(_OP, "phases", phases, AUDIO_DTYPES)
        if phases.dtype != S.dtype:
            phases = phases.astype(S.dtype)
    else:
        if init == "phases":
            raise ValueError(message(_OP, "phases", 'given when init is "phases"', "None"))
        init_attr = "none" if init is None else _string("init", init, '"random" or None')
        phases = jnp.zeros((0,), S.dtype)
    if seed is None:
        seed_attr = -1
    else:
        seed_attr = integer(_OP, "seed", seed, "an int in [0, 2^32 - 1] or None")
        if not 0 <= seed_attr <= 2**32 - 1:
            raise ValueError(message(_OP, "seed", "an int in [0, 2^32 - 1] or None", short_repr(seed)))
    attrs = {
        "n_iter": integer(_OP, "n_iter", n_iter, "an int >= 0"),
        "n_fft": n_fft_attr,
        "hop_length": _positive_or_none("hop_length", hop_length, "win_length // 4"),
        "win_length": _positive_or_none("win_length", win_length, "n_fft"),
        "window": _string("window", window, 'a window name ("hann", "hamming", "blackman", "boxcar")'),
        "center": boolean(_OP, "center", center),
        "pad_mode": _string("pad_mode", pad_mode, 'a numpy.pad mode ("constant", "edge", "reflect", "symmetric")'),
        "momentum": number(_OP, "momentum", momentum, "a number >= 0"),
        "length": _positive_or_none("length", length, "no cropping or padding"),
        "init": init_attr,
        "seed": seed_attr,
    }
    if init_attr == "random":
        # The phases are drawn for the whole of S's shape: under vmap each element is its own
        # call, so that it draws what the op called on it alone draws.
        rule = SEQUENTIAL
    elif init_attr == "phases":
        rule = _LEADING_PHASES
    else:
        rule = _LEADING
    return apply("Opforge>GriffinLim", (S, phases), attrs, rule)[0]

"""The non-negative least-squares inverse of a Mel filter bank: `opforge.ops.mel_to_stft` mirrors
`librosa.feature.inverse.mel_to_stft`; C++ op `Opforge>MelToStft` (no gradient)."""
from __future__ import annotations

from typing import Optional

import numpy as np
import tensorflow as tf

from opforge.ops._common import (check_dtype, invalid_argument, lib, python_bool, python_int, python_number,
                                 short_repr, to_tensor)
from opforge.ops.spec import BadInput, Case, OpSpec, Sample, SpeedCase, SpeedRun, scaled_batch

__all__ = ["mel_to_stft"]
OP_NAMES = ("Opforge>MelToStft",)

AUDIO_DTYPES = (tf.float32, tf.float64)
_OP = "MelToStft"


def _mel_norm(norm) -> str:
    """librosa's filter normalisation ("slaney" or None) as the op's string attr; other strings go
    to the core, which names them. librosa's p-norms (numbers) are not supported."""
    if norm is None:
        return "none"
    if not isinstance(norm, str):
        raise invalid_argument(_OP, "norm", '"slaney" or None', short_repr(norm))
    return norm


def mel_to_stft(M, sr: float = 22050, n_fft: int = 2048, power: float = 2.0, fmin: float = 0.0,
                fmax: Optional[float] = None, htk: bool = False, norm: Optional[str] = "slaney", filters=None,
                name: Optional[str] = None) -> tf.Tensor:
    """A Mel spectrogram back to an STFT magnitude, by non-negative least squares.

    Mirrors `librosa.feature.inverse.mel_to_stft(M, sr=22050, n_fft=2048, power=2.0, fmin=0.0,
    fmax=None, htk=False, norm="slaney")` (librosa 1.0, as 0.11; its **kwargs for `librosa.filters.mel`
    are named here): for every frame b of M,

        s = argmin_{s >= 0} || filters @ s - b ||^2,     result = s ** (1 / power)

    with librosa's Mel filter bank `librosa.filters.mel(sr=sr, n_fft=n_fft, n_mels=n_mels,
    fmin=fmin, fmax=fmax, htk=htk, norm=norm, dtype=M.dtype)`, the same filters to the bit. Where
    librosa runs L-BFGS-B, opforge runs a semismooth Newton method on the dual (each step one
    tridiagonal factorisation), which reaches the same objective or a lower one: the least-squares
    minimum itself where M is a real Mel spectrogram. The minimiser is not unique where a band
    holds several frequency bins (the bank has more columns than rows), so the result can differ
    from librosa's by a vector the bank maps to (almost) nothing, with the same or a better fit.

    Args:
      M: [..., n_mels, T] float32 or float64 Mel (power) spectrogram, finite; time is the last
        axis, leading batch axes are allowed.
      sr, n_fft, fmin, fmax, htk, norm: librosa.filters.mel's arguments (`fmax` None: sr / 2;
        `norm` "slaney" or None). Op attributes: TensorFlow stores sr, fmin, fmax and power as
        float32, and the kernel reads back the shortest decimal of each (the literal written).
      power: the exponent the spectrogram was computed with (> 0): 2 for power, 1 for magnitude.
      filters: instead of librosa's bank, a given one ([n_mels, 1 + n_fft // 2], cast to M's
        dtype) with the structure of overlapping triangles: finite, >= 0, at most two non-zeros
        per frequency column, in adjacent rows. TensorFlow's own bank is
        `tf.transpose(tf.signal.linear_to_mel_weight_matrix(...))` (opforge addition).

    Returns:
      [..., 1 + n_fft // 2, T], M's dtype, >= 0.

    Not differentiable (`tf.no_gradient`).

    Raises:
      InvalidArgumentError: M not float32/float64 or of rank < 2, an empty time axis, a NaN or
        infinite Mel value, bad filter arguments (sr <= 0, n_fft < 1, fmin < 0, fmax <= fmin),
        power <= 0, filters of another shape or not a triangular bank.
    """
    # Errors name M as the op does ("mel"), with librosa's name for it.
    M = to_tensor(_OP, "mel (M)", M)
    check_dtype(_OP, "mel (M)", M, AUDIO_DTYPES)
    if fmax is None:
        fmax_attr = -1.0  # the op's sr / 2
    else:
        fmax_attr = python_number(_OP, "fmax", fmax, "a frequency (Hz) or None")
        if not fmax_attr >= 0:  # the op reads a negative fmax as sr / 2: refuse one given here
            raise invalid_argument(_OP, "fmax", "a frequency >= 0 (Hz) or None", short_repr(fmax))
    if filters is None:
        filters = tf.zeros([0, 0], M.dtype)  # the op builds librosa's bank from the attributes
    else:
        filters = to_tensor(_OP, "filters", filters)
        check_dtype(_OP, "filters", filters, AUDIO_DTYPES)
        if filters.dtype != M.dtype:
            filters = tf.cast(filters, M.dtype)
    return lib().opforge_mel_to_stft(
        M,
        filters,
        sr=python_number(_OP, "sr", sr, "a sampling rate > 0"),
        n_fft=python_int(_OP, "n_fft", n_fft, "an int"),
        power=python_number(_OP, "power", power, "a number > 0"),
        fmin=python_number(_OP, "fmin", fmin, "a frequency >= 0"),
        fmax=fmax_attr,
        htk=python_bool(_OP, "htk", htk),
        norm=_mel_norm(norm),
        name=name,
    )


tf.no_gradient("Opforge>MelToStft")


# --- the reference --------------------------------------------------------------------------------


def librosa_filters(dtype, n_mels: int, sr=22050, n_fft=2048, fmin=0.0, fmax=None, htk=False, norm="slaney"):
    """librosa.filters.mel in `dtype` (a tf.DType), as float64 values: the bank the op uses."""
    import librosa

    np_dtype = tf.as_dtype(dtype).as_numpy_dtype
    return librosa.filters.mel(sr=sr, n_fft=n_fft, n_mels=n_mels, fmin=fmin, fmax=fmax, htk=htk, norm=norm,
                               dtype=np_dtype).astype(np.float64)


def nnls_reference(M, sr=22050, n_fft=2048, power=2.0, fmin=0.0, fmax=None, htk=False, norm="slaney"):
    """The exact NNLS minimiser of every frame (scipy.optimize.nnls, an active-set method, in
    float64) with librosa's filter bank in M's dtype, then ** (1 / power), in M's dtype. Unique
    only where the frequency bins the minimiser uses have independent columns in the bank: the
    spec's cases are such banks (see CASES)."""
    import scipy.optimize

    M = tf.convert_to_tensor(M)
    x = M.numpy().astype(np.float64)
    bank = librosa_filters(M.dtype, x.shape[-2], sr, n_fft, fmin, fmax, htk, norm)
    frames = np.moveaxis(x, -1, -2).reshape(-1, x.shape[-2])
    s = np.stack([scipy.optimize.nnls(bank, b)[0] for b in frames]) if len(frames) else np.zeros((0, bank.shape[1]))
    s = np.moveaxis(s.reshape(*x.shape[:-2], x.shape[-1], bank.shape[1]), -1, -2)
    return tf.constant((s ** (1.0 / power)).astype(M.dtype.as_numpy_dtype))


# --- spec -------------------------------------------------------------------------------------------

# (mel shape, attrs): banks with few frequency bins per band, where the NNLS minimiser of these
# frames (standard normal x `scale`: many negative, so many bins at 0) is unique, and opforge and
# scipy.optimize.nnls agree to ~1e-8 relative (found by search over sr, n_fft, n_mels, htk, norm,
# fmin/fmax). On real banks (2048 points, 128 bands) the minimiser is not unique: see
# tests/test_mel_to_stft.py, which compares the objective with librosa's.
CASES = (
    ((8, 5), dict(sr=22050, n_fft=16, fmin=300.0, fmax=3000.0, htk=True, power=1.0), 1e-2),
    ((2, 8, 5), dict(sr=22050, n_fft=32, fmin=300.0, fmax=3000.0, power=2.0), 1e-2),
    ((16, 5), dict(sr=16000, n_fft=16, htk=True, power=1.0), 1e-2),
    ((8, 6), dict(sr=22050, n_fft=16, fmin=300.0, fmax=3000.0, htk=True, norm=None, power=1.0), 1.0),
    ((3, 1, 40, 5), dict(sr=22050, n_fft=32, power=1.0), 1e-2),
    ((24, 7), dict(sr=8000, n_fft=32, htk=True, power=2.0), 1e-2),
    ((16, 1), dict(sr=22050, n_fft=16, fmin=300.0, fmax=3000.0, norm=None, power=1.0, htk=True), 1.0),
    ((0, 16, 5), dict(sr=22050, n_fft=32), 1e-2),  # an empty batch
)


def _case_name(shape, attrs) -> str:
    return f"{list(shape)} " + " ".join(f"{k}={v}" for k, v in attrs.items())


def _speed(shape) -> SpeedCase:
    """5 s of 22.05 kHz audio (216 frames of 128 bands), n_fft 2048: librosa's L-BFGS-B through
    tf.numpy_function against opforge."""
    def setup(size, dtype):
        s = scaled_batch(shape, size)
        # A real Mel power spectrogram: noise with a decaying spectrum (what MFCC inversion feeds).
        rng = np.random.default_rng(3)
        mel = (rng.random(s) * np.exp(-np.arange(s[-2]) / 30.0)[:, None]).astype(np.float32)
        x = tf.cast(tf.constant(mel), dtype)

        def via_librosa():
            import librosa

            return tf.numpy_function(lambda a: librosa.feature.inverse.mel_to_stft(a).astype(dtype.as_numpy_dtype),
                                     [x], dtype)

        return SpeedRun(f"{dtype.name} {s} -> n_fft 2048 (librosa through tf.numpy_function)",
                        {"opforge": lambda: mel_to_stft(x), "librosa": via_librosa})

    return SpeedCase(setup, max_repeats=5)


SPECS = (
    OpSpec(
        name="mel_to_stft",
        op=mel_to_stft,
        reference=nnls_reference,
        reference_name="scipy.optimize.nnls on librosa.filters.mel",
        dtypes=AUDIO_DTYPES,
        cases=tuple(Case(_case_name(shape, attrs), (Sample(shape, seed=20 + i, scale=scale),), attrs)
                    for i, (shape, attrs, scale) in enumerate(CASES)),
        # Values up to ~30, measured within 3e-6 (relative 8e-8) in both dtypes: the solver's
        # regularisation (mu = 1e-10 of the bank's scale) and stopping rule, and float32 rounding.
        forward_tolerance={"float32": 1e-5, "float64": 5e-6},
        differentiable=False,
        determinism_case=Case("216 frames of 128 bands", (Sample((2, 128, 216), seed=42, scale=1e-2),), {}),
        speed=(_speed((1, 128, 216)),),
        bad_inputs={
            "empty time axis": BadInput("opforge.ops.mel_to_stft(tf.ones([128, 0]))",
                                        ("MelToStft", "mel", "non-empty time axis", "[128, 0]")),
            "NaN": BadInput("opforge.ops.mel_to_stft(tf.concat([tf.ones([128, 3]), tf.fill([128, 1], float('nan'))], 1))",
                            ("MelToStft", "mel", "finite", "nan at flat index 3")),
            "inf": BadInput("opforge.ops.mel_to_stft(tf.fill([2, 8, 4], float('inf')), n_fft=64)",
                            ("mel", "finite", "inf at flat index 0")),
            "rank 1": BadInput("opforge.ops.mel_to_stft(tf.ones([128]))", ("mel", "rank >= 2", "[128]")),
            "graph rank 1": BadInput(
                "tf.function(lambda m: opforge.ops.mel_to_stft(m), input_signature=[tf.TensorSpec([None], "
                "tf.float32)]).get_concrete_function()", ("MelToStft", "mel", "rank >= 2"), "ValueError"),
            "no bands": BadInput("opforge.ops.mel_to_stft(tf.ones([0, 4]))", ("mel", "at least one Mel band", "[0, 4]")),
            "fmax below fmin": BadInput("opforge.ops.mel_to_stft(tf.ones([16, 4]), fmin=500.0, fmax=400.0)",
                                        ("fmax", "above fmin = 500", "400")),
            "fmax negative": BadInput("opforge.ops.mel_to_stft(tf.ones([16, 4]), fmax=-3.0)",
                                      ("fmax", ">= 0", "-3.0")),
            "fmin negative": BadInput("opforge.ops.mel_to_stft(tf.ones([16, 4]), fmin=-1.0)", ("fmin", ">= 0", "-1")),
            "power 0": BadInput("opforge.ops.mel_to_stft(tf.ones([16, 4]), power=0)", ("power", "> 0", "got 0")),
            "n_fft 0": BadInput("opforge.ops.mel_to_stft(tf.ones([16, 4]), n_fft=0)", ("n_fft", "positive", "got 0")),
            "n_fft float": BadInput("opforge.ops.mel_to_stft(tf.ones([16, 4]), n_fft=512.0)", ("n_fft", "512.0"), error="TypeError"),
            "sr 0": BadInput("opforge.ops.mel_to_stft(tf.ones([16, 4]), sr=0)", ("sr", "> 0", "got 0")),
            "norm l1": BadInput("opforge.ops.mel_to_stft(tf.ones([16, 4]), norm=1)", ("norm", "slaney", "got 1")),
            "norm text": BadInput("opforge.ops.mel_to_stft(tf.ones([16, 4]), norm='l2')", ("norm", '"l2"')),
            "htk not bool": BadInput("opforge.ops.mel_to_stft(tf.ones([16, 4]), htk=1)", ("htk", "bool", "1"), error="TypeError"),
            "M int32": BadInput("opforge.ops.mel_to_stft(tf.ones([16, 4], tf.int32))", ("mel (M)", "int32")),
            "filters shape": BadInput("opforge.ops.mel_to_stft(tf.ones([16, 4]), n_fft=64, filters=tf.ones([16, 30]))",
                                      ("filters", "[16, 33]", "got shape [16, 30]")),
            "filters rows": BadInput("opforge.ops.mel_to_stft(tf.ones([16, 4]), n_fft=64, filters=tf.ones([15, 33]))",
                                     ("filters", "[16, 33]", "got shape [15, 33]")),
            "filters structure": BadInput(
                "opforge.ops.mel_to_stft(tf.ones([16, 4]), n_fft=64, filters=tf.ones([16, 33]))",
                ("filters", "at most two non-zeros", "16 non-zeros in column 0")),
            "filters negative": BadInput(
                "opforge.ops.mel_to_stft(tf.ones([2, 4]), n_fft=2, filters=[[1.0, -1.0], [0.0, 0.0]])",
                ("filters", ">= 0", "-1 at [0, 1]")),
            "filters NaN": BadInput(
                "opforge.ops.mel_to_stft(tf.ones([2, 4]), n_fft=2, filters=[[1.0, float('nan')], [0.0, 0.0]])",
                ("filters", "finite", "nan at [0, 1]")),
            "graph filters shape": BadInput(
                "tf.function(lambda m: opforge.ops.mel_to_stft(m, n_fft=64, filters=tf.ones([16, 30])), input_signature="
                "[tf.TensorSpec([None, 16, None], tf.float32)]).get_concrete_function()",
                ("MelToStft", "filters", "[16, 33]", "[16, 30]"), "ValueError"),
            "raw filters rank": BadInput("lib().opforge_mel_to_stft(tf.ones([16, 4]), tf.zeros([0]))",
                                         ("filters", "[0, 0]", "got shape [0]")),
        },
    ),
)

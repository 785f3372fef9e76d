"""MFCCs back to a Mel power spectrogram: `opforge.ops.mfcc_to_mel` mirrors
`librosa.feature.inverse.mfcc_to_mel`; C++ ops `Opforge>MfccToMel` and `Opforge>MfccToMelGrad`."""
from __future__ import annotations

import math
from typing import Optional

import numpy as np
import tensorflow as tf

from opforge.ops._common import check_dtype, invalid_argument, lib, python_int, python_number, short_repr, to_tensor
from opforge.ops.spec import BadInput, Case, OpSpec, Sample, SpeedCase, SpeedRun, scaled_batch, speed_normal

__all__ = ["mfcc_to_mel"]
OP_NAMES = ("Opforge>MfccToMel", "Opforge>MfccToMelGrad")

AUDIO_DTYPES = (tf.float32, tf.float64)
_OP = "MfccToMel"


def _norm(op: str, norm) -> str:
    """librosa's norm ("ortho" or None) as the op's string attr; other strings go to the core,
    which names them."""
    if norm is None:
        return "none"
    if not isinstance(norm, str):
        raise invalid_argument(op, "norm", '"ortho" or None', short_repr(norm))
    return norm


def mfcc_to_mel(mfcc, n_mels: int = 128, dct_type: int = 2, norm: Optional[str] = "ortho", ref: float = 1.0,
                lifter: float = 0, name: Optional[str] = None) -> tf.Tensor:
    """Mel-frequency cepstral coefficients back to a Mel power spectrogram.

    Mirrors `librosa.feature.inverse.mfcc_to_mel(mfcc, n_mels=128, dct_type=2, norm="ortho",
    ref=1.0, lifter=0)` (librosa 1.0, as 0.11): the same arguments, defaults and results (to float64
    rounding): inverse liftering when `lifter` > 0, the inverse DCT along the coefficient axis
    (`scipy.fft.idct(mfcc, type=dct_type, norm=norm, n=n_mels)`: types 2 and 3, `norm` "ortho"
    or None) zero-padded from n_mfcc to `n_mels` coefficients, then `librosa.db_to_power(x,
    ref=ref)` = ref * 10^(x / 10).

    Args:
      mfcc: [..., n_mfcc, T] float32 or float64; time is the last axis, leading batch axes are
        allowed (librosa's layout). 1 <= n_mfcc <= n_mels, T >= 1.
      n_mels: Mel bands of the result.
      dct_type: 2 or 3.
      norm: "ortho" or None ("none").
      ref: the power of 0 dB (> 0; a number, not librosa's callable).
      lifter: >= 0; 0 for none.

    Returns:
      The Mel power spectrogram [..., n_mels, T], mfcc's dtype.

    Differs from librosa: computed in float64 for float32 input too and rounded once (librosa
    computes in the input's dtype). `ref` and `lifter` are op attributes, which TensorFlow stores as
    float32; the kernel reads back the shortest decimal of that float32, i.e. the literal you wrote
    when it has at most 9 significant digits (1e-3 is 0.001 exactly). NaN and infinity propagate
    as in librosa. Differentiable: the gradient is the C++ op
    `Opforge>MfccToMelGrad` (first order only).

    Raises:
      InvalidArgumentError: mfcc not float32/float64 or of rank < 2, n_mfcc > n_mels, an empty
        time axis, dct_type not 2 or 3, norm not "ortho"/None, ref <= 0, lifter < 0.
    """
    mfcc = to_tensor(_OP, "mfcc", mfcc)
    check_dtype(_OP, "mfcc", mfcc, AUDIO_DTYPES)
    return lib().opforge_mfcc_to_mel(
        mfcc,
        n_mels=python_int(_OP, "n_mels", n_mels, "an int"),
        dct_type=python_int(_OP, "dct_type", dct_type, "2 or 3"),
        norm=_norm(_OP, norm),
        ref=python_number(_OP, "ref", ref, "a number > 0"),
        lifter=python_number(_OP, "lifter", lifter, "a number >= 0"),
        name=name,
    )


def _attrs(op) -> dict:
    return {k: op.get_attr(k) for k in ("n_mels", "dct_type", "norm", "ref", "lifter")}


@tf.RegisterGradient("Opforge>MfccToMel")
def _mfcc_to_mel_gradient(op, grad):
    return lib().opforge_mfcc_to_mel_grad(grad, op.outputs[0], op.inputs[0], **_attrs(op))


# --- the reference: librosa, and the same maths in TensorFlow ops ---------------------------------


def librosa_reference(mfcc, n_mels=128, dct_type=2, norm="ortho", ref=1.0, lifter=0):
    """librosa.feature.inverse.mfcc_to_mel on the float64 values (time last, any leading axes),
    rounded to mfcc's dtype."""
    import librosa

    x = np.asarray(mfcc.numpy() if hasattr(mfcc, "numpy") else mfcc, np.float64)
    out = librosa.feature.inverse.mfcc_to_mel(x, n_mels=n_mels, dct_type=dct_type, norm=norm, ref=ref,
                                               lifter=lifter)
    return tf.constant(out.astype(tf.as_dtype(getattr(mfcc, "dtype", tf.float64)).as_numpy_dtype))


def mfcc_basis(n_mfcc: int, n_mels=128, dct_type=2, norm="ortho", lifter=0) -> np.ndarray:
    """librosa's map as one float64 matrix [n_mels, n_mfcc]: scipy's inverse DCT of each unit
    coefficient (the transform is linear), each column divided by librosa's lifter sine."""
    import scipy.fft

    basis = scipy.fft.idct(np.eye(n_mfcc), axis=0, type=dct_type, norm=norm, n=n_mels)
    if lifter > 0:
        sine = 1 + lifter * 0.5 * np.sin(np.pi * np.arange(1, n_mfcc + 1) / lifter)
        basis = basis / (sine + np.finfo(np.float32).tiny)
    return basis


def tf_reference(mfcc, n_mels=128, dct_type=2, norm="ortho", ref=1.0, lifter=0):
    """The same maths in TensorFlow ops (differentiable, exact with inf and NaN: no FFT mixes a
    non-finite coefficient into every band): ref * 10^(basis @ mfcc / 10) in float64."""
    mfcc = tf.convert_to_tensor(mfcc)
    basis = tf.constant(mfcc_basis(int(mfcc.shape[-2]), n_mels, dct_type, norm, lifter))
    x = tf.linalg.matmul(basis, tf.cast(mfcc, tf.float64))  # broadcasts over leading axes
    mel = ref * tf.exp(x * (0.1 * math.log(10.0)))
    return tf.cast(mel, mfcc.dtype)


# --- spec -------------------------------------------------------------------------------------------

# (mfcc shape, attrs): every dct type and norm, lifters, batch axes, n_mfcc = n_mels, one frame.
# n_mels are powers of two: no cosine of the inverse DCT is then exactly 0 (a 0 x inf in one sum
# and not in the other would make NaN against inf).
CASES = (
    ((20, 9), dict(n_mels=128)),
    ((13, 11), dict(n_mels=64, dct_type=3)),
    ((16, 10), dict(n_mels=32, norm=None)),
    ((2, 12, 10), dict(n_mels=32, dct_type=3, norm=None)),
    ((20, 9), dict(n_mels=128, lifter=22, ref=2.5)),
    ((3, 2, 8, 9), dict(n_mels=16, dct_type=3, lifter=5.5)),
    ((16, 9), dict(n_mels=16, ref=1e-3)),
    ((40, 1), dict(n_mels=64, lifter=1.0)),
    ((0, 20, 9), dict(n_mels=32)),  # an empty batch
)


def _case_name(shape, attrs) -> str:
    return f"{list(shape)} " + " ".join(f"{k}={v}" for k, v in attrs.items())


def _speed(shape, n_mels: int) -> SpeedCase:
    def setup(size, dtype):
        s = scaled_batch(shape, size)
        x = speed_normal(s, dtype, seed=5, stddev=10.0)

        def via_librosa():
            import librosa

            return tf.numpy_function(
                lambda a: librosa.feature.inverse.mfcc_to_mel(a, n_mels=n_mels).astype(dtype.as_numpy_dtype), [x],
                dtype)

        return SpeedRun(f"{dtype.name} {s} -> n_mels {n_mels} (librosa through tf.numpy_function)",
                        {"opforge": lambda: mfcc_to_mel(x, n_mels=n_mels), "librosa": via_librosa})

    return SpeedCase(setup, max_repeats=30)


SPECS = (
    OpSpec(
        name="mfcc_to_mel",
        op=mfcc_to_mel,
        reference=librosa_reference,
        reference_name="librosa.feature.inverse.mfcc_to_mel",
        exact_reference=tf_reference,
        dtypes=AUDIO_DTYPES,
        # Coefficients of a real MFCC scale (standard normal x 10 dB): Mel powers up to ~5e4.
        # float32: the float64 value rounded once, as librosa's float64 result cast (measured: the
        # same bits; the bound is one float32 ulp at 5e4); float64: round-off (measured 1e-10).
        cases=tuple(Case(_case_name(shape, attrs), (Sample(shape, seed=30 + i, scale=10.0),), attrs)
                    for i, (shape, attrs) in enumerate(CASES)),
        forward_tolerance={"float32": 4e-3, "float64": 1e-9},
        gradient_cases=tuple(
            Case(_case_name(shape, attrs), (Sample(shape, seed=50 + i, scale=2.0),), attrs)
            for i, (shape, attrs) in enumerate((
                ((6, 4), dict(n_mels=8)),
                ((2, 5, 3), dict(n_mels=16, dct_type=3, norm=None, lifter=3.0, ref=0.5)),
                ((4, 5), dict(n_mels=4, dct_type=2, norm=None)),
            ))),
        gradient_tolerance=1e-6,
        gradient_delta=1e-6,
        determinism_case=Case("5 s of 22.05 kHz", (Sample((2, 20, 216), seed=42, scale=10.0),), dict(n_mels=128)),
        speed=(_speed((1, 20, 216), 128), _speed((16, 20, 216), 128)),
        bad_inputs={
            "n_mfcc > n_mels": BadInput("opforge.ops.mfcc_to_mel(tf.ones([20, 5]), n_mels=10)",
                                        ("MfccToMel", "mfcc", "at most n_mels = 10", "[20, 5]")),
            "graph n_mfcc > n_mels": BadInput(
                "tf.function(lambda m: opforge.ops.mfcc_to_mel(m, n_mels=10), input_signature=["
                "tf.TensorSpec([None, 20, None], tf.float32)]).get_concrete_function()",
                ("MfccToMel", "mfcc", "at most n_mels = 10", "[?, 20, ?]"), "ValueError"),
            "empty time axis": BadInput("opforge.ops.mfcc_to_mel(tf.ones([2, 20, 0]))",
                                        ("mfcc", "non-empty time axis", "[2, 20, 0]")),
            "no coefficients": BadInput("opforge.ops.mfcc_to_mel(tf.ones([0, 5]))",
                                        ("mfcc", "at least one coefficient", "[0, 5]")),
            "rank 1": BadInput("opforge.ops.mfcc_to_mel(tf.ones([20]))", ("mfcc", "rank >= 2", "[20]")),
            "dct_type 1": BadInput("opforge.ops.mfcc_to_mel(tf.ones([20, 5]), dct_type=1)",
                                   ("dct_type", "2 or 3", "got 1")),
            "dct_type float": BadInput("opforge.ops.mfcc_to_mel(tf.ones([20, 5]), dct_type=2.0)",
                                       ("dct_type", "2.0"), error="TypeError"),
            "norm l2": BadInput("opforge.ops.mfcc_to_mel(tf.ones([20, 5]), norm='l2')",
                                ("norm", '"ortho"', '"l2"')),
            "norm number": BadInput("opforge.ops.mfcc_to_mel(tf.ones([20, 5]), norm=2)", ("norm", "ortho", "got 2")),
            "ref 0": BadInput("opforge.ops.mfcc_to_mel(tf.ones([20, 5]), ref=0.0)", ("ref", "> 0", "got 0")),
            "ref NaN": BadInput("opforge.ops.mfcc_to_mel(tf.ones([20, 5]), ref=float('nan'))",
                                ("ref", "finite", "nan")),
            "ref text": BadInput("opforge.ops.mfcc_to_mel(tf.ones([20, 5]), ref='1')", ("ref", "'1'"), error="TypeError"),
            "lifter negative": BadInput("opforge.ops.mfcc_to_mel(tf.ones([20, 5]), lifter=-1)",
                                        ("lifter", ">= 0", "-1")),
            "n_mels 0": BadInput("opforge.ops.mfcc_to_mel(tf.ones([20, 5]), n_mels=0)",
                                 ("n_mels", "positive", "got 0")),
            "mfcc int32": BadInput("opforge.ops.mfcc_to_mel(tf.ones([20, 5], tf.int32))", ("mfcc", "int32")),
            "mfcc None": BadInput("opforge.ops.mfcc_to_mel(None)", ("mfcc", "None"), error="ValueError"),
            "grad mel shape": BadInput(
                "lib().opforge_mfcc_to_mel_grad(tf.ones([10, 5]), tf.ones([10, 4]), tf.ones([3, 5]), n_mels=10)",
                ("MfccToMelGrad", "mel", "[10, 5]", "[10, 4]")),
            "grad shape": BadInput(
                "lib().opforge_mfcc_to_mel_grad(tf.ones([12, 5]), tf.ones([10, 5]), tf.ones([3, 5]), n_mels=10)",
                ("MfccToMelGrad", "grad", "[10, 5]", "[12, 5]")),
        },
    ),
)

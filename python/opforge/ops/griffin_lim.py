"""Phase retrieval by the fast Griffin-Lim algorithm: `opforge.ops.griffin_lim` mirrors
`librosa.griffinlim`; C++ op `Opforge>GriffinLim` (no gradient)."""
from __future__ import annotations

from typing import Optional

import numpy as np
import tensorflow as tf

from opforge.ops._common import (check_dtype, invalid_argument, lib, python_bool, python_int, python_number,
                                 short_repr, to_tensor)
from opforge.ops.spec import BadInput, Case, OpSpec, Sample, SpeedCase, SpeedRun, scaled_batch, speed_normal

__all__ = ["griffin_lim"]
OP_NAMES = ("Opforge>GriffinLim",)

AUDIO_DTYPES = (tf.float32, tf.float64)
_OP = "GriffinLim"


def _positive_or_none(name: str, value, default: str) -> int:
    """An optional positive int attr: None -> 0 (the op's default), else > 0."""
    if value is None:
        return 0
    v = python_int(_OP, name, value, f"a positive int or None ({default})")
    if v <= 0:
        raise invalid_argument(_OP, name, f"a positive int or None ({default})", short_repr(value))
    return v


def _string(name: str, value, expected: str) -> str:
    if not isinstance(value, str):
        raise invalid_argument(_OP, name, expected, short_repr(value))
    return value


def griffin_lim(S, n_iter: int = 32, hop_length: Optional[int] = None, win_length: Optional[int] = None,
                n_fft: Optional[int] = None, window: str = "hann", center: bool = True,
                length: Optional[int] = None, pad_mode: str = "constant", momentum: float = 0.99,
                init: Optional[str] = "random", seed: Optional[int] = None, phases=None,
                name: Optional[str] = None) -> tf.Tensor:
    """Audio from an STFT magnitude by the fast Griffin-Lim algorithm with momentum.

    Mirrors `librosa.griffinlim(S, n_iter=32, hop_length=None, win_length=None, n_fft=None,
    window="hann", center=True, length=None, pad_mode="constant", momentum=0.99, init="random",
    rng=None)` (librosa 1.0; `random_state=None` in 0.11): the same iterations (Perraudin et al. 2013), with
    librosa's STFT and ISTFT (window of `win_length` samples centred in `n_fft`, hop
    `hop_length`, centred frames padded with `pad_mode`, the ISTFT's window-sum normalisation,
    `length`), and the same result to rounding for the same initial phases.

    Args:
      S: [..., 1 + n_fft // 2, T] float32 or float64 magnitudes, finite; time is the last axis,
        leading batch axes are allowed.
      n_iter: iterations (>= 0; 0 is one ISTFT of S with the initial phases).
      hop_length: None: win_length // 4.
      win_length: None: n_fft (at most n_fft).
      n_fft: None: 2 * (S.shape[-2] - 1) (taken at run time when that dimension is unknown).
      window: "hann", "hamming", "blackman" or "boxcar" (scipy.signal.get_window's periodic
        windows; librosa also takes arrays and other names).
      center, pad_mode: centred frames, the signal padded with "constant", "edge", "reflect" or
        "symmetric" (numpy.pad's modes).
      length: the exact output length (cropped or zero-padded), None: n_fft + hop (T - 1), less
        2 (n_fft // 2) when centred.
      momentum: >= 0 (librosa warns above 1). An op attribute, which TensorFlow stores as
        float32; the kernel reads back its shortest decimal (0.99 exactly, as librosa uses it).
      init: "random" (phases uniform in [0, 2 pi)) or None (phases 0, librosa's init=None).
      seed: the random phases are numpy's `RandomState(seed).random(S.shape)` exactly, so the
        result equals librosa 1.0's with `rng=numpy.random.RandomState(seed)` and librosa 0.11's
        with `random_state=seed` (seed in [0, 2^32 - 1]; librosa 1.0's `rng=seed` draws from a
        PCG64 generator instead, other phases); None (librosa's rng=None): a fresh seed per call,
        nondeterministic.
      phases: initial phases in radians, S's shape (cast to S's dtype): opforge addition,
        librosa starts only from random or zero phases. Overrides init="random".

    Returns:
      [..., L] audio, S's dtype.

    Not differentiable (`tf.no_gradient`). Differs from librosa: the FFTs run in S's precision
    (Eigen's FFT; librosa's NumPy FFT runs in float64 and rounds to complex64 for float32 input),
    so float32 results differ from librosa's by float32 rounding, grown by the iterations.

    Raises:
      InvalidArgumentError: S not float32/float64 or of rank < 2, an empty time axis, NaN or
        infinite magnitudes or phases, n_fft not matching S (1 + n_fft // 2 bins), win_length >
        n_fft, hop_length, win_length, n_fft or length not positive, a length whose STFT has
        another number of frames than S, an unknown window, pad_mode or init, seed outside
        [0, 2^32 - 1], phases of another shape.
    """
    # Errors name S as the op does ("magnitude"), with librosa's name for it.
    S = to_tensor(_OP, "magnitude (S)", S)
    check_dtype(_OP, "magnitude (S)", S, AUDIO_DTYPES)
    if n_fft is None:
        # From S's static shape; 0 lets the op take 2 (n_freq - 1) at run time.
        rank = S.shape.rank
        n_freq = S.shape[-2] if rank is not None and rank >= 2 else None
        n_fft_attr = 2 * (n_freq - 1) if n_freq is not None and n_freq >= 2 else 0
    else:
        n_fft_attr = _positive_or_none("n_fft", n_fft, "2 * (S.shape[-2] - 1)")
    if phases is not None:
        if init not in ("random", "phases"):
            raise invalid_argument(_OP, "init", '"random" (the default) or "phases" when phases are given',
                                   short_repr(init))
        init_attr = "phases"
        phases = to_tensor(_OP, "phases", phases)
        check_dtype(_OP, "phases", phases, AUDIO_DTYPES)
        if phases.dtype != S.dtype:
            phases = tf.cast(phases, S.dtype)
    else:
        if init == "phases":
            raise invalid_argument(_OP, "phases", 'given when init is "phases"', "None")
        init_attr = "none" if init is None else _string("init", init, '"random" or None')
        phases = tf.zeros([0], S.dtype)
    if seed is None:
        seed_attr = -1
    else:
        seed_attr = python_int(_OP, "seed", seed, "an int in [0, 2^32 - 1] or None")
        if not 0 <= seed_attr <= 2**32 - 1:
            raise invalid_argument(_OP, "seed", "an int in [0, 2^32 - 1] or None", short_repr(seed))
    return lib().opforge_griffin_lim(
        S,
        phases,
        n_iter=python_int(_OP, "n_iter", n_iter, "an int >= 0"),
        n_fft=n_fft_attr,
        hop_length=_positive_or_none("hop_length", hop_length, "win_length // 4"),
        win_length=_positive_or_none("win_length", win_length, "n_fft"),
        window=_string("window", window, 'a window name ("hann", "hamming", "blackman", "boxcar")'),
        center=python_bool(_OP, "center", center),
        pad_mode=_string("pad_mode", pad_mode, 'a numpy.pad mode ("constant", "edge", "reflect", "symmetric")'),
        momentum=python_number(_OP, "momentum", momentum, "a number >= 0"),
        length=_positive_or_none("length", length, "no cropping or padding"),
        init=init_attr,
        seed=seed_attr,
        name=name,
    )


tf.no_gradient("Opforge>GriffinLim")


# --- the reference --------------------------------------------------------------------------------


def librosa_seed_kwargs(seed) -> dict:
    """librosa.griffinlim's keyword for the initial phases opforge's `seed` draws, numpy's
    `RandomState(seed)`: `rng=RandomState(seed)` in librosa >= 1.0 (whose `rng=seed` would be a
    PCG64 `default_rng(seed)`, other phases), `random_state=seed` in librosa 0.11. None: fresh."""
    import librosa

    if seed is None:
        return {}
    if int(librosa.__version__.split(".")[0]) >= 1:
        return {"rng": np.random.RandomState(seed)}
    return {"random_state": seed}


def librosa_reference(S, n_iter=32, hop_length=None, win_length=None, n_fft=None, window="hann", center=True,
                      length=None, pad_mode="constant", momentum=0.99, init="random", seed=None):
    """librosa.griffinlim on the float64 magnitudes (leading axes as librosa's multichannel
    input, the phases of `seed`), in S's dtype."""
    import librosa

    S = tf.convert_to_tensor(S)
    x = S.numpy().astype(np.float64)
    kwargs = dict(n_iter=n_iter, hop_length=hop_length, win_length=win_length, n_fft=n_fft, window=window,
                  center=center, length=length, pad_mode=pad_mode, momentum=momentum, init=init)
    if x.size == 0:  # an empty batch: librosa's length for one item
        probe = librosa.griffinlim(np.ones(x.shape[-2:]), **dict(kwargs, n_iter=0, init=None))
        out = np.zeros((*x.shape[:-2], probe.shape[-1]))
    else:
        out = librosa.griffinlim(x, **librosa_seed_kwargs(seed), **kwargs)
    return tf.constant(out.astype(S.dtype.as_numpy_dtype))


def _griffinlim_from(S, angles, n_iter=32, hop_length=None, win_length=None, n_fft=None, window="hann",
                     center=True, length=None, pad_mode="constant", momentum=0.99, init=None):
    """librosa.griffinlim's loop (librosa 1.0 and 0.11, librosa/core/spectrum.py) from given initial
    angles (complex, |angles| = 1), with librosa's own stft and istft: librosa has no argument
    for initial phases."""
    import librosa

    if n_fft is None:
        n_fft = 2 * (S.shape[-2] - 1)
    eps = np.finfo(S.dtype).tiny
    angles = S * angles
    tprev = np.zeros_like(angles)
    stft = dict(n_fft=n_fft, hop_length=hop_length, win_length=win_length, window=window, center=center)
    for _ in range(n_iter):
        inverse = librosa.istft(angles, length=length, **stft)
        rebuilt = librosa.stft(inverse, pad_mode=pad_mode, **stft)
        angles[:] = rebuilt
        if momentum:
            angles -= (momentum / (1 + momentum)) * tprev
        angles /= np.abs(angles) + eps
        angles *= S
        tprev, rebuilt = rebuilt, tprev
    return librosa.istft(angles, length=length, **stft)


def phases_reference(S, phases, **kwargs):
    """The reference for given initial phases (radians): librosa's loop from exp(i phases)."""
    x = np.asarray(S, np.float64)
    p = np.asarray(phases, np.float64)
    flat, pflat = x.reshape(-1, *x.shape[-2:]), p.reshape(-1, *x.shape[-2:])
    outs = [_griffinlim_from(flat[i], np.exp(1j * pflat[i]), **kwargs) for i in range(flat.shape[0])]
    return np.reshape(np.stack(outs), (*x.shape[:-2], -1))


# --- spec -------------------------------------------------------------------------------------------


def _magnitude(shape, seed: int) -> Sample:
    """Magnitudes |standard normal| (fixed values, so that they are >= 0)."""
    values = np.abs(np.random.default_rng(seed).standard_normal(shape))
    return Sample(shape, values=values)


# (S shape, attrs): initial phases seeded and ones; windows, hops, centring, pad modes, length
# (longer; shorter only without iterations, where its STFT keeps T frames), odd n_fft, batch
# axes, one frame, no iteration, an empty batch.
CASES = (
    ((17, 12), dict(n_iter=4, init=None)),
    ((17, 12), dict(n_iter=8, seed=3)),
    ((2, 33, 9), dict(n_iter=5, hop_length=16, win_length=48, window="hamming", seed=11)),
    ((17, 10), dict(n_iter=3, center=False, init=None, momentum=0.5)),
    ((17, 10), dict(n_iter=6, pad_mode="reflect", length=78, seed=0)),
    ((2, 1, 17, 8), dict(n_iter=2, window="blackman", length=61, pad_mode="edge", seed=5)),
    ((17, 9), dict(n_iter=0, length=40, seed=9)),  # no STFT: any length, here a crop
    ((16, 8), dict(n_fft=31, n_iter=3, pad_mode="symmetric", window="boxcar", seed=2)),
    ((17, 1), dict(n_iter=3, init=None, center=False)),
    ((17, 6), dict(n_iter=0, init=None)),
    ((0, 17, 6), dict(n_iter=2, seed=1)),
)


def _case_name(shape, attrs) -> str:
    return f"{list(shape)} " + " ".join(f"{k}={v}" for k, v in attrs.items())


def _speed(shape, n_iter: int = 32) -> SpeedCase:
    """5 s of 22.05 kHz audio: S [1025, 216], n_fft 2048, hop 512, 32 iterations."""
    def setup(size, dtype):
        s = scaled_batch(shape, size)
        x = tf.abs(speed_normal(s, dtype, seed=4))

        def via_librosa():
            import librosa

            return tf.numpy_function(
                lambda a: librosa.griffinlim(a, n_iter=n_iter, **librosa_seed_kwargs(0)).astype(dtype.as_numpy_dtype),
                [x], dtype)

        return SpeedRun(f"{dtype.name} {s}, {n_iter} iterations (librosa through tf.numpy_function)",
                        {"opforge": lambda: griffin_lim(x, n_iter=n_iter, seed=0), "librosa": via_librosa})

    return SpeedCase(setup, max_repeats=5)


SPECS = (
    OpSpec(
        name="griffin_lim",
        op=griffin_lim,
        reference=librosa_reference,
        reference_name="librosa.griffinlim",
        dtypes=AUDIO_DTYPES,
        cases=tuple(Case(_case_name(shape, attrs), (_magnitude(shape, 60 + i),), attrs)
                    for i, (shape, attrs) in enumerate(CASES)),
        # Audio up to ~9. Measured: float64 within 5e-14 (FFT round-off, Eigen's against NumPy's),
        # float32 within 2e-5 (float32 arithmetic against librosa in float64, grown by the
        # iterations).
        forward_tolerance={"float32": 1e-4, "float64": 1e-12},
        differentiable=False,
        determinism_case=Case("[2, 1025, 40], 4 iterations", (_magnitude((2, 1025, 40), 42),),
                              dict(n_iter=4, seed=7)),
        speed=(_speed((1, 1025, 216)),),
        bad_inputs={
            "win_length > n_fft": BadInput("opforge.ops.griffin_lim(tf.ones([1025, 10]), win_length=4096)",
                                           ("GriffinLim", "win_length", "at most n_fft = 2048", "4096")),
            "n_fft < win_length": BadInput("opforge.ops.griffin_lim(tf.ones([513, 10]), n_fft=1024, win_length=2048)",
                                           ("win_length", "at most n_fft = 1024", "2048")),
            "hop 0": BadInput("opforge.ops.griffin_lim(tf.ones([1025, 10]), hop_length=0)",
                              ("hop_length", "positive", "got 0")),
            "hop negative": BadInput("opforge.ops.griffin_lim(tf.ones([1025, 10]), hop_length=-512)",
                                     ("hop_length", "positive", "-512")),
            "raw hop negative": BadInput(
                "lib().opforge_griffin_lim(tf.ones([1025, 10]), tf.zeros([0]), n_fft=2048, hop_length=-3)",
                ("GriffinLim", "hop_length", "positive", "-3")),
            "hop 0 from win_length": BadInput("opforge.ops.griffin_lim(tf.ones([3, 10]), win_length=3)",
                                              ("hop_length", "positive", "win_length / 4")),
            "empty time axis": BadInput("opforge.ops.griffin_lim(tf.ones([2, 1025, 0]))",
                                        ("magnitude", "non-empty time axis", "[2, 1025, 0]")),
            "graph empty time axis": BadInput(
                "tf.function(lambda s: opforge.ops.griffin_lim(s), input_signature=[tf.TensorSpec([None, 1025, 0], "
                "tf.float32)]).get_concrete_function()",
                ("GriffinLim", "magnitude", "non-empty time axis", "[?, 1025, 0]"), "ValueError"),
            "NaN": BadInput("opforge.ops.griffin_lim(tf.concat([tf.ones([17, 3]), tf.fill([17, 1], float('nan'))], 1))",
                            ("magnitude", "finite", "nan at flat index 3")),
            "phases NaN": BadInput(
                "opforge.ops.griffin_lim(tf.ones([17, 4]), phases=tf.fill([17, 4], float('nan')))",
                ("phases", "finite", "nan")),
            "phases shape": BadInput("opforge.ops.griffin_lim(tf.ones([17, 4]), phases=tf.zeros([17, 3]))",
                                     ("phases", "[17, 4]", "[17, 3]")),
            "phases and init None": BadInput("opforge.ops.griffin_lim(tf.ones([17, 4]), init=None, phases=tf.zeros([17, 4]))",
                                             ("init", "phases", "None")),
            "init phases without phases": BadInput("opforge.ops.griffin_lim(tf.ones([17, 4]), init='phases')",
                                                   ("phases", "given", "None")),
            "raw phases unused": BadInput(
                "lib().opforge_griffin_lim(tf.ones([17, 4]), tf.zeros([17, 4]), n_fft=32, init='random', seed=1)",
                ("phases", "empty", "[17, 4]")),
            "rank 1": BadInput("opforge.ops.griffin_lim(tf.ones([1025]))", ("magnitude", "rank >= 2", "[1025]")),
            "one bin": BadInput("opforge.ops.griffin_lim(tf.ones([1, 10]))", ("magnitude", "at least 2 frequency bins")),
            "n_fft mismatch": BadInput("opforge.ops.griffin_lim(tf.ones([1025, 10]), n_fft=1024)",
                                       ("magnitude", "n_fft / 2 + 1 = 513", "[1025, 10]")),
            "length mismatch": BadInput("opforge.ops.griffin_lim(tf.ones([17, 10]), length=8)",
                                        ("length", "10 frames", "got 8")),
            "length 0": BadInput("opforge.ops.griffin_lim(tf.ones([17, 10]), length=0)", ("length", "positive", "0")),
            "window": BadInput("opforge.ops.griffin_lim(tf.ones([17, 4]), window='kaiser')", ("window", '"kaiser"')),
            "window array": BadInput("opforge.ops.griffin_lim(tf.ones([17, 4]), window=np.ones(32))", ("window", "array")),
            "pad_mode": BadInput("opforge.ops.griffin_lim(tf.ones([17, 4]), pad_mode='wrap')", ("pad_mode", '"wrap"')),
            "init": BadInput("opforge.ops.griffin_lim(tf.ones([17, 4]), init='zeros')", ("init", '"zeros"')),
            "seed negative": BadInput("opforge.ops.griffin_lim(tf.ones([17, 4]), seed=-5)",
                                      ("seed", "[0, 2^32 - 1]", "-5")),
            "seed 2^32": BadInput("opforge.ops.griffin_lim(tf.ones([17, 4]), seed=2**32)",
                                  ("seed", "[0, 2^32 - 1]", "4294967296")),
            "raw seed -2": BadInput("lib().opforge_griffin_lim(tf.ones([17, 4]), tf.zeros([0]), n_fft=32, seed=-2)",
                                    ("GriffinLim", "seed", "-1 (a fresh seed per call)", "-2")),
            "momentum negative": BadInput("opforge.ops.griffin_lim(tf.ones([17, 4]), momentum=-0.5)",
                                          ("momentum", ">= 0", "-0.5")),
            "n_iter negative": BadInput("opforge.ops.griffin_lim(tf.ones([17, 4]), n_iter=-1)", ("n_iter", ">= 0", "-1")),
            "center not bool": BadInput("opforge.ops.griffin_lim(tf.ones([17, 4]), center='yes')", ("center", "bool"), error="TypeError"),
            "S int32": BadInput("opforge.ops.griffin_lim(tf.ones([17, 4], tf.int32))", ("magnitude (S)", "int32")),
        },
    ),
)

"""What the griffin_lim spec cannot say: librosa's griffinlim on a voice-like signal's STFT
from fixed initial phases (init=None, and given phases through librosa's own loop) after 1 and 32
iterations; seeded random phases equal to librosa's from RandomState(seed); random phases reaching
librosa's spectral convergence; seed=None fresh on every call, also inside tf.function; batch
axes; eager against tf.function and the static shapes with an unknown batch; the issue's bad
inputs in a child process."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import tensorflow as tf

import opforge
from helpers import check_bad_input, run_cases_in_child
from test_mfcc_to_mel import voice

librosa = pytest.importorskip("librosa")

from opforge.ops.griffin_lim import librosa_seed_kwargs, phases_reference  # noqa: E402  (librosa's loop from given phases)

# librosa.griffinlim's STFT arguments; each with the magnitude of the signal's own STFT.
CONFIGS = {
    "default": dict(),
    "512 win 400 hop 160 hamming uncentred": dict(n_fft=512, win_length=400, hop_length=160, window="hamming",
                                                  center=False),
    "1024 hop 256 reflect length momentum 0.5": dict(n_fft=1024, hop_length=256, pad_mode="reflect", length=11111,
                                                     momentum=0.5),
}
STFT_ARGS = ("n_fft", "win_length", "hop_length", "window", "center")


def magnitude(config, seconds=0.5, dtype=np.float64):
    stft = {k: v for k, v in config.items() if k in STFT_ARGS}
    return np.abs(librosa.stft(voice(seconds), **stft)).astype(dtype)


def relative(a, b) -> float:
    return float(np.abs(np.asarray(a, np.float64) - b).max() / np.abs(b).max())


@pytest.mark.parametrize("n_iter", [1, 32])
@pytest.mark.parametrize("config", list(CONFIGS), ids=list(CONFIGS))
def test_fixed_initial_phases_match_librosa(config, n_iter):
    attrs = dict(CONFIGS[config], n_iter=n_iter)
    S = magnitude(attrs)
    phases = np.random.default_rng(5).uniform(-np.pi, np.pi, S.shape)
    # float64: librosa's result to 1e-4 as the issue asks, measured at FFT rounding (~1e-12).
    ones = librosa.griffinlim(S, init=None, **attrs)
    given = phases_reference(S, phases, **attrs)
    # The given-phases reference is librosa's loop: from phases 0 it is librosa's init=None exactly.
    assert np.array_equal(phases_reference(S, np.zeros(S.shape), **attrs), ones)
    ours_ones = opforge.ops.griffin_lim(S, init=None, **attrs).numpy()
    ours_given = opforge.ops.griffin_lim(S, phases=phases, **attrs).numpy()
    assert ours_ones.shape == ones.shape and ours_given.shape == given.shape
    assert relative(ours_ones, ones) <= 1e-10
    assert relative(ours_given, given) <= 1e-10
    # float32: after one iteration to float32 rounding; after 32 the iterations grow float32
    # rounding in any implementation: librosa's own float32 result (float64 FFTs rounded to
    # complex64) is 3e-5 to 2.5e-3 off its float64 one; opforge's (float32 FFTs) within 1e-4 of
    # it, or where librosa's own float32 error is larger, within 4 times that (measured <= 2x).
    S32 = S.astype(np.float32)
    ours32 = opforge.ops.griffin_lim(S32, init=None, **attrs).numpy()
    theirs32 = librosa.griffinlim(S32, init=None, **attrs)
    assert ours32.dtype == np.float32
    if n_iter == 1:
        assert relative(ours32, ones) <= 1e-5 and relative(ours32, theirs32) <= 1e-5
    else:
        assert relative(ours32, ones) <= max(1e-4, 4 * relative(theirs32, ones))


@pytest.mark.parametrize("seed", [0, 7, 2**32 - 1])
def test_seeded_random_phases_equal_librosas_random_state(seed):
    """The op draws numpy's RandomState(seed).random(S.shape) bit for bit, so librosa's
    phases from RandomState(seed) (rng= in librosa 1.0, random_state=seed in 0.11) are
    reproduced: to rounding after no iteration (one ISTFT of the drawn
    phases) and FFT rounding after 32; batch axes draw over the whole shape, as librosa's
    multichannel input does."""
    S = magnitude(CONFIGS["default"])
    for n_iter, tolerance in ((0, 1e-13), (1, 1e-13), (32, 1e-10)):
        ours = opforge.ops.griffin_lim(S, n_iter=n_iter, seed=seed).numpy()
        assert relative(ours, librosa.griffinlim(S, n_iter=n_iter, **librosa_seed_kwargs(seed))) <= tolerance, n_iter
    batch = np.stack([S[:, :10], 0.5 * S[:, 5:15]])
    ours = opforge.ops.griffin_lim(batch, n_iter=4, seed=seed).numpy()
    assert relative(ours, librosa.griffinlim(batch, n_iter=4, **librosa_seed_kwargs(seed))) <= 1e-12


def spectral_convergence(S, audio, config) -> float:
    stft = {k: v for k, v in config.items() if k in STFT_ARGS}
    rebuilt = np.abs(librosa.stft(audio, **stft))
    return float(np.linalg.norm(S - rebuilt) / np.linalg.norm(S))


def test_random_phases_reach_librosas_spectral_convergence():
    """Random initial phases, 32 iterations: the mean spectral convergence over eight draws is
    within 5% of librosa's over eight other draws (one draw varies by ~10%)."""
    config = CONFIGS["default"]
    S = magnitude(config, seconds=1.0)
    ours = [spectral_convergence(S, opforge.ops.griffin_lim(S, seed=s).numpy(), config) for s in range(8)]
    theirs = [spectral_convergence(S, librosa.griffinlim(S, **librosa_seed_kwargs(100 + s)), config) for s in range(8)]
    assert np.mean(ours) <= 1.05 * np.mean(theirs), (ours, theirs)
    assert max(ours) < 0.2  # a good reconstruction: -14 dB or better


def test_seed_none_draws_fresh_phases_on_every_call():
    S = tf.constant(magnitude(CONFIGS["default"])[:, :12], tf.float32)
    a, b = (opforge.ops.griffin_lim(S, n_iter=2).numpy() for _ in range(2))
    assert not np.array_equal(a, b)
    fn = tf.function(lambda s: opforge.ops.griffin_lim(s, n_iter=2))
    c, d = fn(S).numpy(), fn(S).numpy()
    assert not np.array_equal(c, d)  # a stateful op: not folded, not cached
    both = tf.function(lambda s: (opforge.ops.griffin_lim(s, n_iter=2), opforge.ops.griffin_lim(s, n_iter=2)))(S)
    assert not np.array_equal(both[0].numpy(), both[1].numpy())  # not merged
    # A fixed seed is deterministic everywhere.
    seeded = [opforge.ops.griffin_lim(S, n_iter=2, seed=1).numpy(),
              tf.function(lambda s: opforge.ops.griffin_lim(s, n_iter=2, seed=1))(S).numpy()]
    assert np.array_equal(seeded[0], seeded[1])


def test_batch_axes_equal_per_item_calls():
    S = magnitude(CONFIGS["default"])[:, :16]
    x = np.stack([S, 0.3 * S, S[::-1].copy()] * 2).reshape(2, 3, *S.shape)
    phases = np.random.default_rng(2).uniform(-np.pi, np.pi, x.shape)
    for kwargs in (dict(init=None), dict(phases=phases)):
        batched = opforge.ops.griffin_lim(x, n_iter=5, **kwargs).numpy()
        assert batched.shape == (2, 3, 512 * 15)
        for i, j in itertools.product(range(2), range(3)):
            item = {k: v[i, j] for k, v in kwargs.items() if k == "phases"} or kwargs
            assert np.array_equal(batched[i, j], opforge.ops.griffin_lim(x[i, j], n_iter=5, **item).numpy())


def test_eager_and_tf_function_agree_and_static_shapes():
    S = tf.constant(magnitude(CONFIGS["default"])[None, :, :20], tf.float32)
    fn = tf.function(lambda s: opforge.ops.griffin_lim(s, n_iter=3, seed=4),
                     input_signature=[tf.TensorSpec([None, 1025, 20])])
    assert fn.get_concrete_function().structured_outputs.shape.as_list() == [None, 512 * 19]
    assert np.array_equal(fn(S).numpy(), opforge.ops.griffin_lim(S, n_iter=3, seed=4).numpy())
    shapes = [
        ((None, None, 257, 30), dict(), [None, None, 128 * 29]),  # n_fft 512 from the shape
        ((None, 257, 30), dict(hop_length=100, center=False), [None, 512 + 100 * 29]),
        ((None, 257, None), dict(length=5000), [None, 5000]),
        ((None, None), dict(n_fft=512, win_length=400), [None]),
        ((2, None, 30), dict(n_fft=512), [2, 128 * 29]),  # n_freq from n_fft
        ((2, None, 30), dict(), [2, None]),  # n_fft taken at run time
        (None, dict(), None),
    ]
    for given, attrs, expected in shapes:
        g = tf.function(lambda s: opforge.ops.griffin_lim(s, seed=0, **attrs),
                        input_signature=[tf.TensorSpec(given, tf.float64)]).get_concrete_function()
        got = g.structured_outputs.shape
        assert (got.rank is None if expected is None else got.as_list() == expected), (given, attrs, got)
    # n_fft left to the run time (an unknown frequency axis) gives librosa's answer too.
    x = magnitude(CONFIGS["default"])[:, :9]
    late = tf.function(lambda s: opforge.ops.griffin_lim(s, n_iter=3, init=None),
                       input_signature=[tf.TensorSpec([None, None], tf.float64)])(x).numpy()
    assert relative(late, librosa.griffinlim(x, n_iter=3, init=None)) <= 1e-12
    # No gradient: a tape gives None.
    with tf.GradientTape() as tape:
        tape.watch(S)
        out = opforge.ops.griffin_lim(S, n_iter=1, seed=0)
    assert tape.gradient(out, S) is None


def test_issue_bad_inputs_raise_named_errors_in_a_child():
    ones = "tf.ones([1025, 10], tf.float64)"
    cases = {
        "n_fft < win_length": (f"opforge.ops.griffin_lim({ones}, win_length=2049)",
                               ("GriffinLim:", "win_length", "at most n_fft = 2048", "2049")),
        "graph n_fft < win_length": (
            "tf.function(lambda s: opforge.ops.griffin_lim(s, n_fft=512, win_length=1024), input_signature=["
            "tf.TensorSpec([None, None, 40])]).get_concrete_function()",
            ("GriffinLim:", "win_length", "at most n_fft = 512", "1024")),
        "hop 0": (f"opforge.ops.griffin_lim({ones}, hop_length=0)", ("GriffinLim:", "hop_length", "positive", "0")),
        "hop negative": (f"lib().opforge_griffin_lim({ones}, tf.zeros([0], tf.float64), n_fft=2048, hop_length=-1)",
                         ("GriffinLim:", "hop_length", "positive", "-1")),
        "graph hop negative": (
            "tf.function(lambda s: lib().opforge_griffin_lim(s, tf.zeros([0]), n_fft=0, hop_length=-1), "
            "input_signature=[tf.TensorSpec([None, 9, 4])]).get_concrete_function()",
            ("GriffinLim:", "hop_length", "positive", "-1")),
        "empty time axis": ("opforge.ops.griffin_lim(tf.ones([3, 1025, 0]))",
                            ("GriffinLim:", "magnitude", "non-empty time axis", "[3, 1025, 0]")),
        "NaN": ("opforge.ops.griffin_lim(np.where(np.arange(17 * 4).reshape(17, 4) == 9, np.nan, 1.0))",
                ("GriffinLim:", "magnitude", "finite", "nan at flat index 9")),
        "inf phases": ("opforge.ops.griffin_lim(tf.ones([17, 4]), phases=tf.fill([17, 4], np.inf))",
                       ("GriffinLim:", "phases", "finite", "inf")),
        # The fuzzer's find: hop (T - 1) overflowed int64 and TensorShape aborted the process.
        "huge hop": ("lib().opforge_griffin_lim(tf.ones([3, 3]), tf.zeros([0]), n_fft=4, hop_length=2**62, "
                     "n_iter=0, center=False, init='none')",
                     ("GriffinLim:", "hop_length", "at most 2^40", str(2**62))),
    }
    results = run_cases_in_child({name: code for name, (code, _) in cases.items()})
    for name, (_, fragments) in cases.items():
        error = "ValueError" if name.startswith("graph") else "InvalidArgumentError"
        check_bad_input(results, name, error, fragments)

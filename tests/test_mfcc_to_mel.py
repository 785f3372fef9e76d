"""What the mfcc_to_mel spec cannot say: librosa's inverse of its own MFCCs of a voice-like
signal, to 1e-5 relative, for every DCT type, norm and lifter, in both dtypes; the float64
gradient; batch axes; eager against tf.function and the static shapes with an unknown batch; the
issue's bad inputs in a child process."""
from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest
import tensorflow as tf

import opforge
from helpers import check_bad_input, run_cases_in_child

librosa = pytest.importorskip("librosa")

SR = 22050


def voice(seconds: float = 1.0, seed: int = 0) -> np.ndarray:
    """A vowel-like signal: a 120 Hz glottal pulse train with vibrato through three formants, and
    a little noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * SR)) / SR
    phase = 2 * np.pi * np.cumsum(120 + 6 * np.sin(2 * np.pi * 5 * t)) / SR
    y = np.zeros_like(t)
    for k in range(1, 60):
        f = 120 * k
        gain = sum(np.exp(-((f - c) / w) ** 2) for c, w in ((700, 130), (1220, 150), (2600, 250))) + 0.02
        y += gain / k * np.sin(k * phase)
    return (0.3 * y / np.abs(y).max() + 0.003 * rng.standard_normal(t.size)).astype(np.float64)


def mfccs(dct_type: int, norm, lifter: float, n_mfcc: int = 20, n_mels: int = 128) -> np.ndarray:
    return librosa.feature.mfcc(y=voice(), sr=SR, n_mfcc=n_mfcc, n_mels=n_mels, dct_type=dct_type, norm=norm,
                                lifter=lifter)


def relative_error(ours, ref) -> float:
    ours, ref = np.asarray(ours, np.float64), np.asarray(ref, np.float64)
    return float(np.max(np.abs(ours - ref) / np.abs(ref)))


@pytest.mark.parametrize("dct_type,norm,lifter", list(itertools.product((2, 3), ("ortho", None), (0, 1.0, 22, 7.5))),
                         ids=lambda v: str(v))
def test_inverse_of_librosas_mfcc_matches_librosa(dct_type, norm, lifter):
    m = mfccs(dct_type, norm, lifter)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # librosa warns about lifters near its critical values
        ref64 = librosa.feature.inverse.mfcc_to_mel(m, n_mels=128, dct_type=dct_type, norm=norm, lifter=lifter)
        ref32 = librosa.feature.inverse.mfcc_to_mel(m.astype(np.float32), n_mels=128, dct_type=dct_type, norm=norm,
                                                    lifter=lifter)
        ref64_of32 = librosa.feature.inverse.mfcc_to_mel(m.astype(np.float32).astype(np.float64), n_mels=128,
                                                         dct_type=dct_type, norm=norm, lifter=lifter)
    ours64 = opforge.ops.mfcc_to_mel(m, n_mels=128, dct_type=dct_type, norm=norm, lifter=lifter).numpy()
    ours32 = opforge.ops.mfcc_to_mel(m.astype(np.float32), n_mels=128, dct_type=dct_type, norm=norm,
                                     lifter=lifter).numpy()
    assert ours64.dtype == np.float64 and ours32.dtype == np.float32 and ours64.shape == (128, m.shape[1])
    assert relative_error(ours64, ref64) <= 1e-12
    # float32: opforge rounds the float64 value once; librosa computes in float32.
    assert relative_error(ours32, ref32) <= 1e-5
    assert relative_error(ours32, ref64_of32) <= 6e-8  # one rounding of librosa's float64 answer
    # A real inversion: the Mel spectrogram the MFCCs were made from, up to the discarded cepstra.
    assert ref64.min() > 0


@pytest.mark.parametrize("n_mfcc,n_mels,ref", [(128, 128, 1.0), (1, 40, 0.5), (13, 26, 2.0**-8)])
def test_coefficient_counts_and_ref(n_mfcc, n_mels, ref):
    m = np.random.default_rng(n_mfcc).standard_normal((n_mfcc, 17)) * 10
    ours = opforge.ops.mfcc_to_mel(m, n_mels=n_mels, ref=ref).numpy()
    expected = librosa.feature.inverse.mfcc_to_mel(m, n_mels=n_mels, ref=ref)
    assert relative_error(ours, expected) <= 1e-12


def test_nan_and_inf_propagate_as_in_librosa():
    """No error for NaN (librosa raises none either): a NaN coefficient makes its frame NaN, +inf
    in c0 makes every band of its frame inf, -inf makes it 0; other frames are untouched."""
    m = np.random.default_rng(1).standard_normal((20, 4)) * 10
    m[0, 1], m[0, 2], m[3, 3] = np.inf, -np.inf, np.nan
    out = opforge.ops.mfcc_to_mel(m).numpy()
    clean = librosa.feature.inverse.mfcc_to_mel(m[:, :1])
    assert relative_error(out[:, :1], clean) <= 1e-12
    assert np.all(out[:, 1] == np.inf) and np.all(out[:, 2] == 0) and np.all(np.isnan(out[:, 3]))


@pytest.mark.parametrize("attrs", [dict(), dict(dct_type=3, norm=None, lifter=4.0, ref=0.25),
                                   dict(n_mels=24, lifter=22)], ids=str)
def test_gradient_float64_matches_numerical(attrs):
    n_mels = attrs.get("n_mels", 32)
    attrs = dict(attrs, n_mels=n_mels)
    x = tf.constant(np.random.default_rng(4).standard_normal((2, 12, 5)) * 3)
    theoretical, numerical = tf.test.compute_gradient(lambda v: opforge.ops.mfcc_to_mel(v, **attrs), [x], delta=1e-6)
    scale = np.abs(numerical[0]).max()
    assert np.abs(theoretical[0] - numerical[0]).max() <= 1e-7 * scale
    # And exactly the autodiff of the same maths in TensorFlow ops (a weighted sum of upstreams).
    from opforge.ops.mfcc_to_mel import tf_reference

    upstream = tf.constant(np.random.default_rng(5).standard_normal((2, n_mels, 5)))
    grads = []
    for fn in (opforge.ops.mfcc_to_mel, tf_reference):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = fn(x, **attrs)
        grads.append(tape.gradient(y, x, output_gradients=upstream).numpy())
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-12, atol=1e-12 * np.abs(grads[1]).max())


def test_gradient_float32_matches_float64():
    x = np.random.default_rng(6).standard_normal((20, 9)) * 5
    grads = []
    for dtype in (tf.float32, tf.float64):
        v = tf.constant(x, dtype)
        with tf.GradientTape() as tape:
            tape.watch(v)
            loss = tf.reduce_sum(tf.math.log(opforge.ops.mfcc_to_mel(v, n_mels=64)))
        grads.append(tape.gradient(loss, v).numpy())
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-5, atol=1e-5 * np.abs(grads[1]).max())


def test_batch_axes_equal_per_item_calls():
    x = np.random.default_rng(7).standard_normal((2, 3, 20, 11)) * 10
    batched = opforge.ops.mfcc_to_mel(x, n_mels=64, lifter=22).numpy()
    assert batched.shape == (2, 3, 64, 11)
    for i, j in itertools.product(range(2), range(3)):
        item = opforge.ops.mfcc_to_mel(x[i, j], n_mels=64, lifter=22).numpy()
        assert np.array_equal(batched[i, j], item)
        assert relative_error(item, librosa.feature.inverse.mfcc_to_mel(x[i, j], n_mels=64, lifter=22)) <= 1e-12


def test_eager_and_tf_function_agree_and_static_shapes():
    x = tf.constant(np.random.default_rng(8).standard_normal((4, 20, 30)) * 10, tf.float32)
    fn = tf.function(lambda v: opforge.ops.mfcc_to_mel(v, n_mels=128, dct_type=3),
                     input_signature=[tf.TensorSpec([None, 20, None], tf.float32)])
    assert fn.get_concrete_function().structured_outputs.shape.as_list() == [None, 128, None]
    assert np.array_equal(fn(x).numpy(), opforge.ops.mfcc_to_mel(x, n_mels=128, dct_type=3).numpy())
    shapes = {
        (None, None, 20, 30): [None, None, 128, 30],
        (5, None, 30): [5, 128, 30],
        (None, None): [128, None],
    }
    for given, expected in shapes.items():
        g = tf.function(lambda v: opforge.ops.mfcc_to_mel(v),
                        input_signature=[tf.TensorSpec(list(given), tf.float64)]).get_concrete_function()
        assert g.structured_outputs.shape.as_list() == expected, given
    # The gradient's static shape is mfcc's.
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = opforge.ops.mfcc_to_mel(x, n_mels=40)
    assert tape.gradient(y, x).shape == x.shape


def test_issue_bad_inputs_raise_named_errors_in_a_child():
    cases = {
        "n_mfcc > n_mels": ("opforge.ops.mfcc_to_mel(tf.ones([2, 40, 10], tf.float64), n_mels=32)",
                            ("MfccToMel:", "mfcc", "at most n_mels = 32", "[2, 40, 10]")),
        "empty time axis": ("opforge.ops.mfcc_to_mel(tf.ones([20, 0]))", ("MfccToMel:", "mfcc", "non-empty", "[20, 0]")),
        "graph empty time axis": (
            "tf.function(lambda m: opforge.ops.mfcc_to_mel(m), input_signature=[tf.TensorSpec([None, 20, 0])])"
            ".get_concrete_function()", ("MfccToMel:", "mfcc", "non-empty", "[?, 20, 0]")),
        "raw dct_type": ("lib().opforge_mfcc_to_mel(tf.ones([20, 3]), dct_type=4)", ("MfccToMel:", "dct_type", "got 4")),
        "raw norm": ("lib().opforge_mfcc_to_mel(tf.ones([20, 3]), norm='backward')",
                     ("MfccToMel:", "norm", '"backward"')),
        "raw grad attrs": ("lib().opforge_mfcc_to_mel_grad(tf.ones([8, 3]), tf.ones([8, 3]), tf.ones([2, 3]), "
                           "n_mels=8, lifter=-2.0)", ("MfccToMelGrad:", "lifter", ">= 0", "-2")),
    }
    results = run_cases_in_child({name: code for name, (code, _) in cases.items()})
    for name, (_, fragments) in cases.items():
        error = "ValueError" if name.startswith("graph") else "InvalidArgumentError"
        check_bad_input(results, name, error, fragments)

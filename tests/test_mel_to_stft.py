"""What the mel_to_stft spec cannot say: on real Mel spectrograms (where the NNLS minimiser is not
unique, so solutions differ), the objective opforge reaches is no worse than librosa's, both
measured with the same float64 filter bank; a given filter bank (librosa's, TensorFlow's); batch
axes; eager against tf.function and the static shapes with an unknown batch; the issue's bad
inputs in a child process."""
from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest
import tensorflow as tf

import opforge
from helpers import check_bad_input, run_cases_in_child
from test_mfcc_to_mel import SR, voice

librosa = pytest.importorskip("librosa")


def bank64(n_mels, sr=SR, n_fft=2048, fmin=0.0, fmax=None, htk=False, norm="slaney"):
    return librosa.filters.mel(sr=sr, n_fft=n_fft, n_mels=n_mels, fmin=fmin, fmax=fmax, htk=htk, norm=norm,
                               dtype=np.float64)


def objectives(stft, mel, power, bank):
    """0.5 |bank @ stft^power - mel|^2 per frame, in float64."""
    s = np.asarray(stft, np.float64) ** power
    r = bank @ s - np.asarray(mel, np.float64)
    return 0.5 * np.sum(r * r, axis=-2)


def librosa_mel_to_stft(mel, **attrs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # empty-filter warnings of small banks
        return librosa.feature.inverse.mel_to_stft(mel, **attrs)


# (name, how the Mel spectrogram is made, mel_to_stft's attrs). Made from the voice-like signal:
# power and magnitude spectrograms, HTK and unnormalised banks with fmin/fmax, another rate and
# size, the smooth spectrum mfcc_to_mel gives back (not reachable by the bank), and noise.
MEL_CASES = {
    "power": (dict(), dict()),
    "magnitude": (dict(power=1.0), dict(power=1.0)),
    "htk fmin fmax": (dict(htk=True, fmin=50.0, fmax=8000.0), dict(htk=True, fmin=50.0, fmax=8000.0)),
    # (librosa's L-BFGS-B needs minutes on an unnormalised bank with power 2: magnitude here)
    "magnitude htk no norm fmax": (dict(htk=True, norm=None, power=1.0, fmax=6000.0),
                                   dict(htk=True, norm=None, power=1.0, fmax=6000.0)),
    "16 kHz, 512 points, 40 bands": (dict(sr=16000, n_fft=512, n_mels=40), dict(sr=16000, n_fft=512)),
    "from mfcc": ("mfcc", dict()),
    "noise": ("noise", dict()),
}


def make_mel(how):
    if how == "mfcc":
        m = librosa.feature.mfcc(y=voice(0.5, seed=2), sr=SR, n_mfcc=20)
        return librosa.feature.inverse.mfcc_to_mel(m)
    if how == "noise":
        return np.random.default_rng(3).random((128, 20)) * np.exp(-np.arange(128) / 25.0)[:, None]
    how = dict(how)
    sr = how.pop("sr", SR)
    y = voice(0.5, seed=1)
    if sr != SR:
        y = librosa.resample(y, orig_sr=SR, target_sr=sr)
    return librosa.feature.melspectrogram(y=y, sr=sr, **how)


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("case", list(MEL_CASES), ids=list(MEL_CASES))
def test_objective_no_worse_than_librosas(case, dtype):
    how, attrs = MEL_CASES[case]
    mel = make_mel(how).astype(dtype)
    power = attrs.get("power", 2.0)
    bank = bank64(mel.shape[-2], **{k: v for k, v in attrs.items() if k != "power"})
    ours = opforge.ops.mel_to_stft(mel, **attrs).numpy()
    theirs = librosa_mel_to_stft(mel, **attrs)
    assert ours.shape == theirs.shape == (bank.shape[1], mel.shape[1]) and ours.dtype == dtype
    assert np.all(ours >= 0)
    target = mel.astype(np.float64)
    ours_obj, theirs_obj = objectives(ours, target, power, bank), objectives(theirs, target, power, bank)
    norm = 0.5 * np.sum(target ** 2, axis=0)
    # float32: the solution's own rounding (6e-8 relative) leaves ~1e-15 |mel|^2: the floor. The
    # float64 floor is the float32 bank's difference from the float64 one: none in float64.
    floor = (1e-12 if dtype == np.float32 else 1e-24) * norm
    assert np.all(ours_obj <= theirs_obj * (1 + 1e-3) + floor), (ours_obj / theirs_obj).max()
    assert ours_obj.sum() <= theirs_obj.sum() * (1 + 1e-3) + floor.sum()


def test_reachable_mel_is_inverted_to_rounding():
    """A real Mel spectrogram lies in the bank's cone: the least-squares minimum is 0, which
    opforge reaches to float64 rounding (librosa's L-BFGS-B stops well above it)."""
    mel = make_mel(dict())
    ours = opforge.ops.mel_to_stft(mel).numpy()
    obj = objectives(ours, mel, 2.0, bank64(128)).sum()
    assert obj <= 1e-24 * np.sum(mel ** 2)


def test_given_librosa_bank_gives_the_built_ones_answer():
    """librosa's bank handed in gives the answer of the bank built from the attrs (which then
    play no part): the same bits in float32 (the same bank), and in float64, where opforge's bank
    differs from librosa's in the last bits (libm against NumPy), the same to 1e-9."""
    for dtype, attrs in itertools.product((np.float32, np.float64),
                                          (dict(), dict(htk=True, norm=None, fmin=100.0, fmax=5000.0))):
        mel = make_mel(dict(n_mels=64)).astype(dtype)[:, :12]
        bank = librosa.filters.mel(sr=SR, n_fft=2048, n_mels=64, dtype=dtype, **attrs)
        built = opforge.ops.mel_to_stft(mel, **attrs).numpy()
        given = opforge.ops.mel_to_stft(mel, filters=bank).numpy()
        if dtype == np.float32:
            assert np.array_equal(built, given), attrs
        else:
            np.testing.assert_allclose(given, built, rtol=0, atol=1e-9 * np.abs(built).max())


@pytest.mark.parametrize("num_mel_bins,n_fft,sample_rate,lower,upper", [
    (40, 512, 16000, 80.0, 7600.0), (128, 2048, 22050, 0.0, 11025.0), (20, 256, 8000, 300.0, 3400.0)])
def test_tensorflow_filter_bank_inverts_its_own_mel_spectrogram(num_mel_bins, n_fft, sample_rate, lower, upper):
    """TensorFlow's MFCC pipeline: |tf.signal.stft| @ linear_to_mel_weight_matrix, time on axis
    -2. Its bank, transposed, is a valid given bank, and its Mel spectrogram of a real signal is
    inverted to the least-squares minimum (0: reachable) in float64, ~rounding in float32."""
    y = voice(0.5).astype(np.float32)
    if sample_rate != SR:
        y = librosa.resample(y, orig_sr=SR, target_sr=sample_rate).astype(np.float32)
    weights = tf.signal.linear_to_mel_weight_matrix(num_mel_bins, n_fft // 2 + 1, sample_rate, lower, upper)
    power = tf.abs(tf.signal.stft(y, n_fft, n_fft // 4, n_fft)) ** 2  # [frames, bins]
    mel = tf.transpose(tf.matmul(power, weights))  # [bands, frames]
    bank = tf.transpose(weights)
    for dtype in (tf.float64, tf.float32):
        m = tf.cast(mel, dtype)
        s = opforge.ops.mel_to_stft(m, n_fft=n_fft, power=1.0, filters=tf.cast(bank, dtype)).numpy()
        obj = objectives(s, m.numpy(), 1.0, bank.numpy().astype(np.float64)).sum()
        norm = 0.5 * np.sum(m.numpy().astype(np.float64) ** 2)
        assert obj <= (1e-13 if dtype == tf.float32 else 1e-20) * norm, (dtype.name, obj / norm)
    # A float32 bank with float64 Mel values is cast to float64.
    s = opforge.ops.mel_to_stft(tf.cast(mel, tf.float64), n_fft=n_fft, power=1.0, filters=bank)
    assert s.dtype == tf.float64


def test_batch_axes_equal_per_item_calls():
    mel = np.stack([make_mel(dict(n_mels=40))[:, :9], make_mel("noise")[:40, :9]]).reshape(2, 1, 40, 9)
    batched = opforge.ops.mel_to_stft(mel, n_fft=1024).numpy()
    assert batched.shape == (2, 1, 513, 9)
    for i in range(2):
        assert np.array_equal(batched[i, 0], opforge.ops.mel_to_stft(mel[i, 0], n_fft=1024).numpy())


def test_eager_and_tf_function_agree_and_static_shapes():
    mel = tf.constant(make_mel(dict())[None, :, :10], tf.float32)
    fn = tf.function(lambda m: opforge.ops.mel_to_stft(m), input_signature=[tf.TensorSpec([None, 128, None])])
    assert fn.get_concrete_function().structured_outputs.shape.as_list() == [None, 1025, None]
    assert np.array_equal(fn(mel).numpy(), opforge.ops.mel_to_stft(mel).numpy())
    shapes = {
        ((None, None, 40, 7), 512): [None, None, 257, 7],
        ((None, None), 64): [33, None],
        ((3, 16, None), 31): [3, 16, None],
    }
    for (given, n_fft), expected in shapes.items():
        g = tf.function(lambda m: opforge.ops.mel_to_stft(m, n_fft=n_fft),
                        input_signature=[tf.TensorSpec(list(given), tf.float64)]).get_concrete_function()
        assert g.structured_outputs.shape.as_list() == expected, given
    # No gradient: a tape gives None.
    with tf.GradientTape() as tape:
        tape.watch(mel)
        out = opforge.ops.mel_to_stft(mel)
    assert tape.gradient(out, mel) is None


def test_issue_bad_inputs_raise_named_errors_in_a_child():
    cases = {
        "empty time axis": ("opforge.ops.mel_to_stft(tf.ones([2, 128, 0], tf.float64))",
                            ("MelToStft:", "mel", "non-empty time axis", "[2, 128, 0]")),
        "graph empty time axis": (
            "tf.function(lambda m: opforge.ops.mel_to_stft(m), input_signature=[tf.TensorSpec([None, 128, 0])])"
            ".get_concrete_function()", ("MelToStft:", "mel", "non-empty time axis", "[?, 128, 0]")),
        "NaN": ("opforge.ops.mel_to_stft(np.where(np.arange(40 * 3).reshape(40, 3) == 7, np.nan, 1.0), n_fft=512)",
                ("MelToStft:", "mel", "finite", "nan at flat index 7")),
        "NaN in a batch": ("opforge.ops.mel_to_stft(tf.concat([tf.ones([1, 40, 3]), tf.fill([1, 40, 3], np.nan)], 0),"
                           " n_fft=512)", ("MelToStft:", "mel", "finite", "nan at flat index 120")),
        "graph filters of another size": (
            "tf.function(lambda m, f: opforge.ops.mel_to_stft(m, n_fft=512, filters=f), input_signature=["
            "tf.TensorSpec([None, 40, None]), tf.TensorSpec([40, 256])]).get_concrete_function()",
            ("MelToStft:", "filters", "[40, 257]", "[40, 256]")),
        "filters of three bands per bin": (
            "opforge.ops.mel_to_stft(tf.ones([3, 2]), n_fft=4, filters=[[1.0, 0, 0], [1.0, 0, 0], [1.0, 0, 0]])",
            ("MelToStft:", "filters", "adjacent rows", "3 non-zeros in column 0 (rows 0 to 2)")),
        "raw power": ("lib().opforge_mel_to_stft(tf.ones([8, 2]), tf.zeros([0, 0]), power=-2.0)",
                      ("MelToStft:", "power", "> 0", "-2")),
        "graph raw norm": (
            "tf.function(lambda m: lib().opforge_mel_to_stft(m, tf.zeros([0, 0]), norm='area'), input_signature=["
            "tf.TensorSpec(None)]).get_concrete_function()", ("MelToStft:", "norm", '"area"')),
    }
    results = run_cases_in_child({name: code for name, (code, _) in cases.items()})
    for name, (_, fragments) in cases.items():
        error = "ValueError" if name.startswith("graph") else "InvalidArgumentError"
        check_bad_input(results, name, error, fragments)

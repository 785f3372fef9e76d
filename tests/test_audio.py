"""opforge.audio: mfcc_to_audio, mfcc_to_mel and mel_to_audio against librosa's
librosa.feature.inverse, inverse_tf_mfcc against TensorFlow's own MFCC pipeline, the demo's
pieces (speech, librosa-compatible MFCCs in TensorFlow, WAV, PNG), bad inputs."""
from __future__ import annotations

import shutil
import sys

import librosa
import numpy as np
import pytest
import tensorflow as tf

import opforge  # noqa: F401  (loads the ops)
from opforge import audio, ops
from opforge.ops.griffin_lim import librosa_seed_kwargs
from opforge.tools.audio_demo import (mel_filters, mfcc_tf, read_wav, save_spectrograms, speech, stft_magnitude,
                                synth_speech, write_wav)

from helpers import check_bad_input, run_cases_in_child

SR = 22050


@pytest.fixture(scope="module")
def voice() -> np.ndarray:
    """1.5 s of the synthesised vowel-like speech at 22.05 kHz."""
    return synth_speech(SR, 1.5)


@pytest.fixture(scope="module")
def mfcc(voice) -> np.ndarray:
    return librosa.feature.mfcc(y=voice, sr=SR, n_mfcc=20)


def _sc(reference: np.ndarray, estimate: np.ndarray, **stft) -> float:
    """Spectral convergence of |librosa.stft| of two signals (the estimate cut or padded to length)."""
    estimate = np.pad(estimate[: len(reference)], (0, max(len(reference) - len(estimate), 0)))
    return audio.spectral_convergence(np.abs(librosa.stft(reference, **stft)), np.abs(librosa.stft(estimate, **stft)))


# --- mfcc_to_mel --------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("dct_type,norm,lifter", [(2, "ortho", 0), (2, None, 0), (3, "ortho", 22), (3, None, 7.5),
                                                  (2, "ortho", 22)])
def test_mfcc_to_mel_matches_librosa(mfcc, dtype, dct_type, norm, lifter):
    x = np.stack([mfcc, 0.5 * mfcc[:, ::-1]]).astype(dtype)  # a batch axis
    got = audio.mfcc_to_mel(x, n_mels=96, dct_type=dct_type, norm=norm, ref=2.0, lifter=lifter).numpy()
    want = librosa.feature.inverse.mfcc_to_mel(x, n_mels=96, dct_type=dct_type, norm=norm, ref=2.0, lifter=lifter)
    assert got.dtype == dtype and got.shape == (2, 96, mfcc.shape[1])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=0)


# --- the chain: the same arguments reach each op as in librosa -----------------------------------

GRIFFIN_LIM_CASES = {
    "defaults, seeded": dict(seed=3),
    "ones, hop and window, no centring": dict(init=None, hop_length=256, win_length=1024, center=False, momentum=0.5),
    "hamming, reflect, length": dict(seed=11, window="hamming", pad_mode="reflect", length=33000, n_iter=8),
    "filter bank arguments": dict(seed=5, fmin=60.0, fmax=8000.0, htk=True, norm=None, power=1.0, n_fft=1024),
}


@pytest.mark.parametrize("case", GRIFFIN_LIM_CASES)
def test_mel_to_audio_is_librosas_chain(voice, case):
    """mel_to_audio = librosa.griffinlim(mel_to_stft(M), same arguments): equal to librosa's
    Griffin-Lim run on the op's NNLS solution (the NNLS solvers differ; their objectives are
    compared in test_mel_to_stft.py), with the same initial phases."""
    kw = dict(GRIFFIN_LIM_CASES[case])
    n_fft, power = kw.get("n_fft", 2048), kw.get("power", 2.0)
    M = librosa.feature.melspectrogram(y=voice.astype(np.float64), sr=SR, n_fft=n_fft, power=power,
                                       n_mels=64, fmin=kw.get("fmin", 0.0), fmax=kw.get("fmax"),
                                       htk=kw.get("htk", False), norm=kw.get("norm", "slaney"))
    got = audio.mel_to_audio(M, sr=SR, **kw).numpy()
    stft = ops.mel_to_stft(M, sr=SR, n_fft=n_fft, power=power, fmin=kw.get("fmin", 0.0), fmax=kw.get("fmax"),
                           htk=kw.get("htk", False), norm=kw.get("norm", "slaney")).numpy()
    want = librosa.griffinlim(
        stft, n_iter=kw.get("n_iter", 32), hop_length=kw.get("hop_length"), win_length=kw.get("win_length"),
        n_fft=n_fft, window=kw.get("window", "hann"), center=kw.get("center", True), length=kw.get("length"),
        pad_mode=kw.get("pad_mode", "constant"), momentum=kw.get("momentum", 0.99),
        init=kw.get("init", "random"), **librosa_seed_kwargs(kw.get("seed")))
    assert got.dtype == np.float64 and got.shape == want.shape
    # rtol: without centring the ends divide by the window's vanishing tails (samples of 80x the peak).
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8 * np.abs(want).max())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_mfcc_to_audio_is_librosas_chain(mfcc, dtype):
    """mfcc_to_audio = griffinlim(mel_to_stft(mfcc_to_mel(mfcc))) with every argument passed on
    (DCT, lifter and ref; the filter bank's as mel_norm; Griffin-Lim's)."""
    x = mfcc.astype(dtype)
    dct = dict(n_mels=64, dct_type=3, norm=None, ref=0.5, lifter=10)
    bank = dict(sr=16000, n_fft=1024, power=1.5, fmin=40.0, fmax=7000.0, htk=True)
    gl = dict(n_iter=12, hop_length=200, win_length=800, window="hann", center=True, pad_mode="constant",
              momentum=0.9)
    got = audio.mfcc_to_audio(x, **dct, **bank, **gl, seed=7, mel_norm=None).numpy()
    stft = ops.mel_to_stft(ops.mfcc_to_mel(x, **dct), **bank, norm=None).numpy()
    want = librosa.griffinlim(stft, n_fft=1024, **librosa_seed_kwargs(7), **gl)
    assert got.dtype == dtype and got.shape == want.shape
    tolerance = 1e-4 if dtype == np.float32 else 1e-9
    np.testing.assert_allclose(got, want, rtol=0, atol=tolerance * np.abs(want).max())
    # And the Mel spectrogram on the way is librosa's.
    np.testing.assert_allclose(ops.mfcc_to_mel(x, **dct).numpy(), librosa.feature.inverse.mfcc_to_mel(x, **dct),
                               rtol=1e-5)


def test_random_init_reaches_librosas_convergence(voice, mfcc):
    """With random initial phases the reconstruction is as good as librosa's mfcc_to_audio,
    seed by seed (the same initial phases: librosa draws them from numpy's global RandomState),
    within 5% in spectral convergence: of |STFT| against the magnitude Griffin-Lim was given
    (each library's own NNLS solution; measured 0.165-0.168 against librosa's 0.168-0.172), and
    against the original speech (0.850 for both: 20 MFCCs keep the envelope, not the harmonics)."""
    target_ours = ops.mel_to_stft(ops.mfcc_to_mel(mfcc)).numpy()
    target_theirs = librosa.feature.inverse.mel_to_stft(librosa.feature.inverse.mfcc_to_mel(mfcc))
    ours, theirs, ours_gl, theirs_gl = [], [], [], []
    for seed in (0, 1, 2):
        y = audio.mfcc_to_audio(mfcc, length=len(voice), seed=seed).numpy()
        np.random.seed(seed)
        z = librosa.feature.inverse.mfcc_to_audio(mfcc, length=len(voice))
        ours.append(_sc(voice, y))
        theirs.append(_sc(voice, z))
        ours_gl.append(audio.spectral_convergence(target_ours, np.abs(librosa.stft(y))))
        theirs_gl.append(audio.spectral_convergence(target_theirs, np.abs(librosa.stft(z))))
    print("spectral convergence against the original: opforge", np.round(ours, 4), "librosa", np.round(theirs, 4))
    print("against Griffin-Lim's target: opforge", np.round(ours_gl, 4), "librosa", np.round(theirs_gl, 4))
    assert all(a <= 1.05 * b for a, b in zip(ours, theirs)), (ours, theirs)
    assert all(a <= 1.05 * b for a, b in zip(ours_gl, theirs_gl)), (ours_gl, theirs_gl)
    # seed=None: fresh phases on every call, the same quality.
    a = audio.mfcc_to_audio(mfcc, length=len(voice)).numpy()
    b = audio.mfcc_to_audio(mfcc, length=len(voice)).numpy()
    assert not np.array_equal(a, b)
    assert max(_sc(voice, a), _sc(voice, b)) <= 1.05 * max(theirs)


def test_batch_axes(voice):
    """Leading axes are batch axes: each item is the unbatched call (phases of ones: random
    phases are drawn over the whole batch); seeded calls repeat exactly; tf.function with
    unknown batch and time axes keeps what the shapes say."""
    ys = np.stack([voice, voice[::-1], 0.3 * voice, np.roll(voice, 1000), voice ** 2, -voice])
    feats = librosa.feature.mfcc(y=ys, sr=SR, n_mfcc=13).reshape(2, 3, 13, -1)
    kw = dict(n_mels=80, n_iter=6, init=None)
    batch = audio.mfcc_to_audio(feats, **kw).numpy()
    assert batch.shape[:2] == (2, 3)
    for i in range(2):
        for j in range(3):
            np.testing.assert_array_equal(batch[i, j], audio.mfcc_to_audio(feats[i, j], **kw).numpy())
    seeded = [audio.mfcc_to_audio(feats, n_mels=80, n_iter=6, seed=42).numpy() for _ in range(2)]
    np.testing.assert_array_equal(seeded[0], seeded[1])

    fn = tf.function(lambda x: audio.mfcc_to_audio(x, **kw),
                     input_signature=[tf.TensorSpec([None, None, 13, None], tf.float32)])
    out_shape = fn.get_concrete_function().structured_outputs.shape
    assert out_shape.rank == 3, out_shape
    np.testing.assert_array_equal(fn(feats).numpy(), batch)
    mel = tf.function(lambda x: audio.mfcc_to_mel(x, n_mels=80),
                      input_signature=[tf.TensorSpec([None, 13, 50], tf.float32)]).get_concrete_function()
    assert mel.structured_outputs.shape.as_list() == [None, 80, 50]


def test_mfcc_to_audio_with_the_demo_features(voice):
    """The demo's fallback MFCCs (TensorFlow ops) are librosa's, and so is the filter bank."""
    np.testing.assert_allclose(mfcc_tf(voice, SR), librosa.feature.mfcc(y=voice, sr=SR), rtol=0, atol=1e-3)
    np.testing.assert_allclose(mel_filters(16000, 512, 40, 80.0, 7000.0, True, None),
                               librosa.filters.mel(sr=16000, n_fft=512, n_mels=40, fmin=80.0, fmax=7000.0, htk=True,
                                                   norm=None, dtype=np.float64), rtol=0, atol=1e-12)
    np.testing.assert_allclose(stft_magnitude(voice), np.abs(librosa.stft(voice.astype(np.float64))),
                               rtol=0, atol=1e-9)


# --- inverse_tf_mfcc ---------------------------------------------------------------------------

def _tf_mfccs(pcm, sample_rate, frame_length, frame_step, fft_length, num_mel_bins, num_mfccs,
              lower=80.0, upper=7600.0):
    """TensorFlow's MFCC pipeline as tf.signal.mfccs_from_log_mel_spectrograms documents it."""
    stfts = tf.signal.stft(pcm, frame_length=frame_length, frame_step=frame_step, fft_length=fft_length)
    spectrograms = tf.abs(stfts)
    matrix = tf.signal.linear_to_mel_weight_matrix(num_mel_bins, stfts.shape[-1], sample_rate, lower, upper,
                                                   dtype=spectrograms.dtype)
    mel = tf.tensordot(spectrograms, matrix, 1)
    log_mel = tf.math.log(mel + 1e-6)
    return tf.signal.mfccs_from_log_mel_spectrograms(log_mel)[..., :num_mfccs]


def _tf_sc(pcm, rebuilt, frame_length, frame_step, fft_length, shift=0):
    """Spectral convergence on tf.signal.stft magnitudes; `shift` > 0 delays the reconstruction."""
    rebuilt = np.asarray(rebuilt)
    rebuilt = np.concatenate([np.zeros(shift), rebuilt])[:len(pcm)] if shift >= 0 else rebuilt[-shift:]
    rebuilt = np.pad(rebuilt[:len(pcm)], (0, len(pcm) - min(len(rebuilt), len(pcm)))).astype(np.float32)
    a = tf.signal.stft(pcm, frame_length, frame_step, fft_length)
    b = tf.signal.stft(rebuilt, frame_length, frame_step, fft_length)
    return audio.spectral_convergence(a.numpy(), b.numpy())


# (frame_length, frame_step, fft_length, num_mel_bins, num_mfccs) -> the spectral convergence
# measured on the synthesised speech (16 kHz, 2 s, seed 0 phases, 32 iterations), and the bound
# asserted. 25 ms frames every 10 ms in 512 points (the window 56 samples from the frame's start in
# librosa's convention), and TensorFlow's documented 1024/256/1024 with 13 coefficients.
TF_CASES = {
    "all 80 coefficients": ((400, 160, 512, 80, 80), 0.111, 0.13),
    "13 coefficients": ((400, 160, 512, 80, 13), 0.459, 0.49),
    "TF's documented 1024/256/1024, 13 coefficients": ((1024, 256, 1024, 80, 13), 0.842, 0.87),
}


@pytest.mark.parametrize("case", TF_CASES)
def test_inverse_tf_mfcc_round_trip(case):
    (frame_length, frame_step, fft_length, num_mel_bins, num_mfccs), measured, bound = TF_CASES[case]
    pcm = synth_speech(16000, 2.0)
    mfccs = _tf_mfccs(pcm, 16000, frame_length, frame_step, fft_length, num_mel_bins, num_mfccs)
    rebuilt = audio.inverse_tf_mfcc(mfccs, 16000, frame_length, frame_step, fft_length, num_mel_bins, 80.0, 7600.0,
                                    seed=0, length=len(pcm)).numpy()
    assert rebuilt.shape == pcm.shape and rebuilt.dtype == np.float32
    sc = _tf_sc(pcm, rebuilt, frame_length, frame_step, fft_length)
    print(f"{case}: spectral convergence {sc:.4f} (stated {measured})")
    assert sc < bound, sc
    # The ends are at the signal's scale (no division by the window's vanishing tails).
    assert np.abs(rebuilt).max() < 2 * np.abs(pcm).max()


def test_inverse_tf_mfcc_alignment():
    """TensorFlow windows the first frame_length samples of each frame, Griffin-Lim (as librosa)
    the middle ones: the output is shifted back by (fft_length - frame_length) // 2 samples.
    The spectral convergence is lowest at the returned alignment: shifting it by a few samples,
    or not correcting it, is worse."""
    frame_length, frame_step, fft_length = 400, 160, 1024  # the window 312 samples into the frame
    pcm = synth_speech(16000, 1.5, seed=1)
    mfccs = _tf_mfccs(pcm, 16000, frame_length, frame_step, fft_length, 64, 64)
    rebuilt = audio.inverse_tf_mfcc(mfccs, 16000, frame_length, frame_step, fft_length, 64, 80.0, 7600.0, n_iter=48,
                                    seed=0).numpy()
    assert rebuilt.shape == (frame_length + frame_step * (mfccs.shape[0] - 1),)
    sc = {d: _tf_sc(pcm, rebuilt, frame_length, frame_step, fft_length, shift=d) for d in (-8, -2, -1, 0, 1, 2, 8)}
    sc["uncorrected"] = _tf_sc(pcm, rebuilt, frame_length, frame_step, fft_length, shift=312)
    print({k: round(v, 4) for k, v in sc.items()})
    assert sc[0] <= min(sc[-1], sc[1], sc[-2], sc[2]) + 1e-3
    assert sc[0] < min(sc[-8], sc[8]) - 1e-3
    assert sc[0] < 0.6 * sc["uncorrected"]


@pytest.mark.uses_tool("espeak-ng")
@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng not installed")
def test_inverse_tf_mfcc_on_espeak_speech():
    """espeak-ng's speech (22.05 kHz, 25 ms frames every 10 ms, TF's default fft_length 1024):
    measured 0.179 with all 80 coefficients, 0.450 with 13."""
    pcm, rate, _ = speech()
    for num_mfccs, bound in ((80, 0.20), (13, 0.48)):
        mfccs = _tf_mfccs(pcm, rate, 551, 220, None, 80, num_mfccs)
        rebuilt = audio.inverse_tf_mfcc(mfccs, rate, 551, 220, None, 80, 80.0, 7600.0, seed=0, length=len(pcm))
        sc = _tf_sc(pcm, rebuilt.numpy(), 551, 220, 1024)
        print(f"espeak-ng, {num_mfccs} coefficients: spectral convergence {sc:.4f}")
        assert sc < bound, sc


def test_inverse_tf_mfcc_batch_dtype_and_graph():
    """[batch, T, num_mfccs] in float64; under tf.function with unknown batch and time axes."""
    pcm = np.stack([synth_speech(16000, 1.0, seed=s) for s in range(3)]).astype(np.float64)
    mfccs = _tf_mfccs(pcm, 16000, 400, 160, 512, 40, 40)
    args = (16000, 400, 160, 512, 40, 80.0, 7600.0)
    batch = audio.inverse_tf_mfcc(mfccs, *args, n_iter=8, init=None).numpy()
    assert batch.dtype == np.float64 and batch.shape == (3, 400 + 160 * (mfccs.shape[1] - 1))
    for i in range(3):
        np.testing.assert_array_equal(batch[i], audio.inverse_tf_mfcc(mfccs[i], *args, n_iter=8, init=None).numpy())
    fn = tf.function(lambda x: audio.inverse_tf_mfcc(x, *args, n_iter=8, init=None, length=16000),
                     input_signature=[tf.TensorSpec([None, None, 40], tf.float64)])
    assert fn.get_concrete_function().structured_outputs.shape.as_list() == [None, 16000]
    out = fn(mfccs).numpy()
    np.testing.assert_array_equal(out[:, :batch.shape[1]], batch[:, :16000])
    # power=2 inverts a pipeline on |STFT|^2 (measured 0.296; the same with |STFT| and power=1:
    # 0.267); power=1 on it is far off (8.2).
    stfts = tf.signal.stft(pcm[0], 400, 160, 512)
    matrix = tf.signal.linear_to_mel_weight_matrix(40, 257, 16000, 80.0, 7600.0, dtype=tf.float64)
    mfccs = tf.signal.mfccs_from_log_mel_spectrograms(tf.math.log(tf.tensordot(tf.abs(stfts) ** 2, matrix, 1) + 1e-6))
    sc = {power: _tf_sc(pcm[0].astype(np.float32),
                        audio.inverse_tf_mfcc(mfccs, *args, power=power, seed=0, length=16000).numpy(), 400, 160, 512)
          for power in (1.0, 2.0)}
    assert sc[2.0] < 0.33 and sc[1.0] > 1.0, sc


# --- the demo's files ----------------------------------------------------------------------------

@pytest.mark.uses_tool("espeak-ng")
def test_speech_from_espeak_or_synthesised():
    """espeak-ng's speech at its own rate where it is on PATH, else the synthesised speech at the
    rate asked for (`.ci/run` runs this a second time with espeak-ng hidden from PATH)."""
    y, rate, source = speech(SR, 1.0)
    assert y.dtype == np.float32 and y.ndim == 1 and 0.4 < np.abs(y).max() <= 0.5
    if shutil.which("espeak-ng") is not None:
        assert source.startswith("espeak-ng: "), source
        assert rate == 22050 and y.size > rate // 2, (rate, y.size)
    else:
        assert source == "synthesised vowel-like speech (espeak-ng not installed)", source
        assert rate == SR and y.size == SR


def test_wav_round_trip(tmp_path, voice):
    write_wav(tmp_path / "a.wav", voice, SR)
    back, rate = read_wav(tmp_path / "a.wav")
    assert rate == SR and np.abs(back - voice).max() < 1 / 32767


@pytest.mark.parametrize("drawer", ["matplotlib", "Pillow"])
def test_spectrogram_png(tmp_path, voice, monkeypatch, drawer):
    """matplotlib draws the PNG where it is importable (a test dependency); Pillow otherwise."""
    if drawer == "Pillow":
        monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    else:
        pytest.importorskip("matplotlib")
    S = stft_magnitude(voice)
    assert save_spectrograms(tmp_path / "s.png", S, 0.5 * S, SR, 512) == drawer
    from PIL import Image

    with Image.open(tmp_path / "s.png") as image:
        assert image.size[0] >= 400 and image.size[1] >= 400


@pytest.mark.uses_tool("espeak-ng")
def test_cli_demo(tmp_path):
    """`opforge audio demo --out DIR` writes the two WAV files and the PNG, prints the figures;
    its speech is espeak-ng's where espeak-ng is on PATH, else synthesised."""
    from helpers import run_python

    proc = run_python(f"""
        import sys
        from opforge.tools.cli import main
        sys.exit(main(["audio", "demo", "--out", r"{tmp_path}", "--seconds", "1.5", "--n-iter", "8"]))
        """)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name in ("original.wav", "reconstructed.wav", "spectrograms.png"):
        assert (tmp_path / name).stat().st_size > 1000, name
    assert "spectral convergence" in proc.stdout and "real-time factor" in proc.stdout, proc.stdout
    spoken = "speech: espeak-ng: " in proc.stdout
    assert spoken == (shutil.which("espeak-ng") is not None), proc.stdout
    assert spoken or "speech: synthesised vowel-like speech" in proc.stdout, proc.stdout
    original, _ = read_wav(tmp_path / "original.wav")
    rebuilt, _ = read_wav(tmp_path / "reconstructed.wav")
    assert original.shape == rebuilt.shape


def test_bench_prints_its_figures():
    """`opforge audio bench`'s report (a short case, one interleaved round) in a fresh process,
    where the thread limits can still be set."""
    from helpers import run_python

    proc = run_python("""
        import sys
        from opforge.tools import audio_demo
        sys.exit(audio_demo.bench(repeats=1, threads=2, seconds=1.0))
        """)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for fragment in ("machine:", "TensorFlow 2 threads", "ratio librosa / opforge:", "real-time factor:",
                     "mfcc_to_mel", "mel_to_stft (NNLS)", "griffin_lim", "librosa's split"):
        assert fragment in proc.stdout, (fragment, proc.stdout)


# --- bad inputs --------------------------------------------------------------------------------

BAD = {
    "n_mfcc > n_mels": ("opforge.audio.mfcc_to_audio(np.zeros([30, 5], np.float32), n_mels=20)",
                        ["n_mels = 20", "[30, 5]"]),
    "n_fft < win_length": ("opforge.audio.mfcc_to_audio(np.zeros([20, 5], np.float32), n_fft=512, win_length=1024)",
                           ["win_length", "1024", "512"]),
    "hop_length 0": ("opforge.audio.mfcc_to_audio(np.zeros([20, 5], np.float32), hop_length=0)",
                     ["hop_length", "0"]),
    "win_length 0": (
        "opforge.audio.mfcc_to_audio(np.zeros([20, 5], np.float32), win_length=0)", ["win_length", "0"]),
    "hop_length negative": ("opforge.audio.mfcc_to_audio(np.zeros([20, 5], np.float32), hop_length=-256)",
                            ["hop_length", "-256"]),
    "empty time axis": ("opforge.audio.mfcc_to_audio(np.zeros([20, 0], np.float32))", ["time axis", "[20, 0]"]),
    "NaN": ("opforge.audio.mfcc_to_audio(np.full([20, 5], np.nan, np.float32))", ["finite"]),
    "infinity": ("opforge.audio.mel_to_audio(np.full([128, 5], np.inf, np.float32))", ["finite"]),
    "rank 1": ("opforge.audio.mfcc_to_audio(np.zeros([20], np.float32))", ["rank"]),
    "int mfcc": ("opforge.audio.mfcc_to_audio(np.zeros([20, 5], np.int32))", ["int32"]),
    "mel_norm": ("opforge.audio.mfcc_to_audio(np.zeros([20, 5], np.float32), mel_norm='l2')", ["mel_norm", "'l2'"]),
    "dct norm": ("opforge.audio.mfcc_to_audio(np.zeros([20, 5], np.float32), norm='l2')", ["norm", "l2"]),
    "window": ("opforge.audio.mfcc_to_audio(np.zeros([20, 5], np.float32), window='kaiser')", ["window", "kaiser"]),
    "n_iter": ("opforge.audio.mfcc_to_audio(np.zeros([20, 5], np.float32), n_iter=-1)", ["n_iter", "-1"]),
    "tf fft_length < frame_length": (
        "opforge.audio.inverse_tf_mfcc(np.zeros([5, 13], np.float32), 16000, 400, 160, 256, 40, 80.0, 7600.0)",
        ["fft_length", "frame_length", "256"]),
    "tf frame_step 0": (
        "opforge.audio.inverse_tf_mfcc(np.zeros([5, 13], np.float32), 16000, 400, 0, 512, 40, 80.0, 7600.0)",
        ["frame_step", "0"]),
    "tf rank 1": ("opforge.audio.inverse_tf_mfcc(np.zeros([13], np.float32), 16000, 400, 160, 512, 40, 80.0, 7600.0)",
                  ["mfccs", "rank"]),
    "tf num_mfccs > num_mel_bins": (
        "opforge.audio.inverse_tf_mfcc(np.zeros([5, 50], np.float32), 16000, 400, 160, 512, 40, 80.0, 7600.0)",
        ["mfccs", "num_mel_bins = 40", "[5, 50]"]),
    "tf empty time axis": (
        "opforge.audio.inverse_tf_mfcc(np.zeros([0, 13], np.float32), 16000, 400, 160, 512, 40, 80.0, 7600.0)",
        ["mfccs", "time axis", "[0, 13]"]),
    "tf NaN": ("opforge.audio.inverse_tf_mfcc(np.full([5, 13], np.nan), 16000, 400, 160, 512, 40, 80.0, 7600.0)",
               ["finite"]),
}


def test_bad_inputs_raise_clear_errors():
    """Each bad input raises InvalidArgumentError naming the argument, in a child process (a
    crash would fail with the case's name instead of taking pytest down)."""
    cases = {name: "import opforge.audio\n" + code for name, (code, _) in BAD.items()}
    results = run_cases_in_child(cases)
    for name, (_, fragments) in BAD.items():
        check_bad_input(results, name, "InvalidArgumentError", fragments)

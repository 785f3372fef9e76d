"""`opforge audio demo` and `opforge audio bench`: speech to MFCCs and back with
`opforge.audio.mfcc_to_audio`.

The speech comes from espeak-ng when it is installed, otherwise from `synth_speech` (a
vowel-like harmonic signal: a glottal source on a gliding pitch, shaped by moving formants,
syllable by syllable). The MFCCs are librosa's (`librosa.feature.mfcc`) when librosa is
importable, otherwise the same pipeline written with TensorFlow ops (`mfcc_tf`, tested equal to
librosa's).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
import wave
from pathlib import Path
from typing import Dict, Optional, Tuple

import numpy as np

SPEECH_TEXT = "Cepstral coefficients turned back into speech, in TensorFlow, faster than real time."

# Formants (Hz) of five vowels (Peterson and Barney's adult male averages) and their bandwidths.
_VOWELS = {"a": (730, 1090, 2440), "e": (530, 1840, 2480), "i": (270, 2290, 3010), "o": (570, 840, 2410),
           "u": (300, 870, 2240)}
_BANDWIDTHS = (90.0, 110.0, 170.0)


def synth_speech(sr: int = 22050, seconds: float = 3.0, seed: int = 0) -> np.ndarray:
    """A deterministic vowel-like signal (float32, peak 0.5): harmonics of a pitch that glides
    between about 100 and 150 Hz with a 5 Hz vibrato, each harmonic weighted by three formant
    resonances that move from vowel to vowel every syllable (about 4 per second), a -6 dB/octave
    source tilt, syllable envelopes with short pauses, and a little breath noise."""
    rng = np.random.default_rng(seed)
    n = int(round(sr * seconds))
    t = np.arange(n) / sr
    f0 = 125.0 + 22.0 * np.sin(2 * np.pi * 0.4 * t + rng.uniform(0, 2 * np.pi)) + 3.0 * np.sin(2 * np.pi * 5.0 * t)
    phase = 2 * np.pi * np.cumsum(f0) / sr
    # Syllables: a vowel each, formants gliding between the syllables' centres.
    n_syll = max(int(np.ceil(seconds * 4.0)), 1)
    bounds = np.linspace(0.0, seconds, n_syll + 1)
    bounds[1:-1] += rng.uniform(-0.2, 0.2, n_syll - 1) * seconds / n_syll
    centres = 0.5 * (bounds[:-1] + bounds[1:])
    names = list(_VOWELS)
    vowels = [names[i] for i in rng.integers(0, len(names), n_syll)]
    formants = [np.interp(t, centres, [_VOWELS[v][j] for v in vowels]) for j in range(3)]
    y = np.zeros(n)
    for k in range(1, int(sr / 2 / 100.0)):
        fk = k * f0
        amp = np.zeros(n)
        for fj, bj, gain in zip(formants, _BANDWIDTHS, (1.0, 0.6, 0.3)):
            amp += gain / (1.0 + ((fk - fj) / bj) ** 2)
        amp *= (fk < sr / 2 - 200) / np.sqrt(k)
        y += amp * np.sin(k * phase)
    # Syllable envelopes: a raised cosine over 85% of each syllable, silence in between.
    envelope = np.zeros(n)
    for start, stop in zip(bounds[:-1], bounds[1:]):
        stop = start + 0.85 * (stop - start)
        inside = (t >= start) & (t < stop)
        envelope[inside] = np.sin(np.pi * (t[inside] - start) / (stop - start)) ** 0.6
    y = y * envelope
    y += 0.004 * np.max(np.abs(y)) * rng.standard_normal(n) * (0.3 + envelope)
    return (0.5 * y / np.max(np.abs(y))).astype(np.float32)


def read_wav(path) -> Tuple[np.ndarray, int]:
    """A 16-bit PCM WAV file as float32 in [-1, 1] (channels averaged) and its sample rate."""
    with wave.open(str(path), "rb") as f:
        if f.getsampwidth() != 2:
            raise ValueError(f"{path}: expected 16-bit PCM, got {8 * f.getsampwidth()}-bit samples")
        data = np.frombuffer(f.readframes(f.getnframes()), dtype="<i2").astype(np.float32) / 32768.0
        return data.reshape(-1, f.getnchannels()).mean(axis=1), f.getframerate()


def write_wav(path, y: np.ndarray, sr: int) -> None:
    """Mono 16-bit PCM (values clipped to [-1, 1])."""
    pcm = np.round(np.clip(np.asarray(y, np.float64), -1.0, 1.0) * 32767.0).astype("<i2")
    with wave.open(str(path), "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(int(sr))
        f.writeframes(pcm.tobytes())


def speech(sr: int = 22050, seconds: float = 3.0, text: str = SPEECH_TEXT) -> Tuple[np.ndarray, int, str]:
    """(audio float32, sample rate, where it came from): `text` spoken by espeak-ng when it is
    installed (at its own rate, 22050 Hz), else `synth_speech(sr, seconds)`."""
    espeak = shutil.which("espeak-ng")
    if espeak:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "speech.wav"
            proc = subprocess.run([espeak, "-w", str(path), text], capture_output=True, text=True, timeout=60)
            if proc.returncode == 0 and path.exists():
                y, rate = read_wav(path)
                if y.size and np.max(np.abs(y)) > 0:
                    return (0.5 * y / np.max(np.abs(y))).astype(np.float32), rate, f"espeak-ng: {text!r}"
    return synth_speech(sr, seconds), sr, "synthesised vowel-like speech (espeak-ng not installed)"


# --- librosa's MFCC pipeline in TensorFlow (when librosa is not importable) ------------------------

def _hz_to_mel(f, htk: bool):
    f = np.asarray(f, np.float64)
    if htk:
        return 2595.0 * np.log10(1.0 + f / 700.0)
    f_sp, min_log_hz, min_log_mel, logstep = 200.0 / 3, 1000.0, 15.0, np.log(6.4) / 27.0
    return np.where(f >= min_log_hz, min_log_mel + np.log(np.maximum(f, 1e-10) / min_log_hz) / logstep, f / f_sp)


def _mel_to_hz(m, htk: bool):
    m = np.asarray(m, np.float64)
    if htk:
        return 700.0 * (10.0 ** (m / 2595.0) - 1.0)
    f_sp, min_log_hz, min_log_mel, logstep = 200.0 / 3, 1000.0, 15.0, np.log(6.4) / 27.0
    return np.where(m >= min_log_mel, min_log_hz * np.exp(logstep * (m - min_log_mel)), f_sp * m)


def mel_filters(sr: float, n_fft: int, n_mels: int = 128, fmin: float = 0.0, fmax: Optional[float] = None,
                htk: bool = False, norm: Optional[str] = "slaney") -> np.ndarray:
    """librosa.filters.mel in NumPy (float64): [n_mels, 1 + n_fft // 2]."""
    fmax = sr / 2.0 if fmax is None else fmax
    fftfreqs = np.fft.rfftfreq(n_fft, 1.0 / sr)
    mel_f = _mel_to_hz(np.linspace(_hz_to_mel(fmin, htk), _hz_to_mel(fmax, htk), n_mels + 2), htk)
    fdiff = np.diff(mel_f)
    ramps = mel_f[:, None] - fftfreqs[None, :]
    weights = np.maximum(0.0, np.minimum(-ramps[:-2] / fdiff[:-1, None], ramps[2:] / fdiff[1:, None]))
    if norm == "slaney":
        weights *= (2.0 / (mel_f[2:n_mels + 2] - mel_f[:n_mels]))[:, None]
    return weights


def stft_magnitude(y, n_fft: int = 2048, hop_length: int = 512):
    """|librosa.stft(y, n_fft, hop_length)| (hann window, centred frames, zero padding) with
    tf.signal.stft: [..., 1 + n_fft // 2, frames], float64 NumPy."""
    import tensorflow as tf

    y = tf.convert_to_tensor(np.asarray(y, np.float64))
    pad = n_fft // 2
    padded = tf.pad(y, [[0, 0]] * (len(y.shape) - 1) + [[pad, pad]])
    spec = tf.signal.stft(padded, n_fft, hop_length, n_fft, window_fn=tf.signal.hann_window, pad_end=False)
    return np.swapaxes(np.abs(spec.numpy()), -1, -2)


def mfcc_tf(y, sr: int = 22050, n_mfcc: int = 20, n_mels: int = 128, n_fft: int = 2048,
            hop_length: int = 512) -> np.ndarray:
    """librosa.feature.mfcc(y=y, sr=sr, n_mfcc, n_mels, n_fft, hop_length) with TensorFlow ops:
    power spectrogram of the centred hann STFT, Slaney Mel filter bank, power_to_db (amin 1e-10,
    top_db 80 below the maximum), orthonormal DCT-II, the first n_mfcc. [n_mfcc, frames],
    float32."""
    import tensorflow as tf

    power = stft_magnitude(y, n_fft, hop_length) ** 2
    mel = mel_filters(sr, n_fft, n_mels) @ power
    db = 10.0 * np.log10(np.maximum(1e-10, mel))
    db = np.maximum(db, db.max() - 80.0)
    cepstra = tf.signal.dct(tf.constant(np.swapaxes(db, -1, -2)), type=2, norm="ortho")[..., :n_mfcc]
    return np.swapaxes(cepstra.numpy(), -1, -2).astype(np.float32)


def mfcc_features(y, sr: int, n_mfcc: int = 20, n_mels: int = 128, n_fft: int = 2048,
                  hop_length: int = 512) -> Tuple[np.ndarray, str]:
    """(MFCCs [n_mfcc, frames] float32, which pipeline computed them): librosa's when it is
    importable, else `mfcc_tf`."""
    try:
        import librosa
    except ImportError:
        return mfcc_tf(y, sr, n_mfcc, n_mels, n_fft, hop_length), "TensorFlow ops (librosa not importable)"
    mfcc = librosa.feature.mfcc(y=np.asarray(y, np.float32), sr=sr, n_mfcc=n_mfcc, n_mels=n_mels, n_fft=n_fft,
                                hop_length=hop_length)
    return mfcc.astype(np.float32), f"librosa {librosa.__version__}"


# --- the spectrogram picture ------------------------------------------------------------------

def _log_db(S: np.ndarray, top: float) -> np.ndarray:
    return np.clip(20.0 * np.log10(np.maximum(S, 1e-12) / top), -80.0, 0.0)


def save_spectrograms(path, original: np.ndarray, reconstructed: np.ndarray, sr: int, hop_length: int,
                      titles=("original", "reconstructed")) -> str:
    """A PNG of two magnitude spectrograms ([freq, frames]) in dB (0 dB = the original's peak, 80 dB
    range), one above the other. matplotlib when installed, else Pillow. Returns which drew it."""
    top = float(np.max(original)) or 1.0
    images = [_log_db(original, top), _log_db(reconstructed, top)]
    seconds = original.shape[1] * hop_length / sr
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        pass
    else:
        fig, axes = plt.subplots(2, 1, figsize=(10, 7), sharex=True, constrained_layout=True)
        for ax, image, title in zip(axes, images, titles):
            shown = ax.imshow(image, origin="lower", aspect="auto", cmap="magma", vmin=-80, vmax=0,
                              extent=(0, seconds, 0, sr / 2000.0))
            ax.set_title(title)
            ax.set_ylabel("kHz")
        axes[-1].set_xlabel("seconds")
        fig.colorbar(shown, ax=axes, label="dB")
        fig.savefig(path, dpi=100)
        plt.close(fig)
        return "matplotlib"
    from PIL import Image, ImageDraw

    # magma-like colour map: black -> purple -> orange -> pale yellow.
    anchors = np.array([[0, 0, 4], [81, 18, 124], [183, 55, 121], [252, 137, 97], [252, 253, 191]], np.float64)
    width, height, header = max(4 * original.shape[1], 400), 300, 22
    canvas = Image.new("RGB", (width, 2 * (height + header)), "white")
    draw = ImageDraw.Draw(canvas)
    for i, (image, title) in enumerate(zip(images, titles)):
        level = (image + 80.0) / 80.0 * (len(anchors) - 1)
        lo = np.clip(np.floor(level).astype(int), 0, len(anchors) - 2)
        frac = (level - lo)[..., None]
        # Rows flipped: low frequencies at the bottom.
        rgb = (anchors[lo] * (1 - frac) + anchors[lo + 1] * frac).astype(np.uint8)[::-1]
        picture = Image.fromarray(rgb, "RGB").resize((width, height), Image.BILINEAR)
        y0 = i * (height + header)
        draw.text((4, y0 + 4), f"{title}: 0-{sr / 2000:.1f} kHz, {seconds:.2f} s, 80 dB range", fill="black")
        canvas.paste(picture, (0, y0 + header))
    canvas.save(path)
    return "Pillow"


# --- demo and bench ----------------------------------------------------------------------------

def _median_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def demo(out: str = "audio_out", seconds: float = 3.0, n_iter: int = 32) -> int:
    """Speech -> MFCCs -> opforge.audio.mfcc_to_audio -> original.wav, reconstructed.wav,
    spectrograms.png in `out`; prints the spectral convergence and the real-time factor."""
    import opforge.audio

    n_mfcc, n_mels, n_fft, hop = 20, 128, 2048, 512
    y, sr, source = speech(22050, seconds)
    mfcc, pipeline = mfcc_features(y, sr, n_mfcc, n_mels, n_fft, hop)
    print(f"speech: {source}, {len(y) / sr:.2f} s at {sr} Hz")
    print(f"MFCCs: {pipeline}; n_mfcc={n_mfcc}, n_mels={n_mels}, n_fft={n_fft}, hop_length={hop}, "
          f"{mfcc.shape[-1]} frames")

    def invert():
        return opforge.audio.mfcc_to_audio(mfcc, n_mels=n_mels, sr=sr, n_fft=n_fft, hop_length=hop, n_iter=n_iter,
                                           length=len(y), seed=0).numpy()

    rebuilt = invert()  # the first call also loads the library and warms the caches
    elapsed = _median_seconds(invert, 3)
    original_spec, rebuilt_spec = stft_magnitude(y, n_fft, hop), stft_magnitude(rebuilt, n_fft, hop)
    convergence = opforge.audio.spectral_convergence(original_spec, rebuilt_spec)
    outdir = Path(out)
    outdir.mkdir(parents=True, exist_ok=True)
    write_wav(outdir / "original.wav", y, sr)
    write_wav(outdir / "reconstructed.wav", rebuilt, sr)
    drawer = save_spectrograms(outdir / "spectrograms.png", original_spec, rebuilt_spec, sr, hop,
                               ("original", f"reconstructed from {n_mfcc} MFCCs (Griffin-Lim, {n_iter} iterations)"))
    duration = len(y) / sr
    print(f"inverted with opforge.audio.mfcc_to_audio (n_iter={n_iter}) in {elapsed * 1e3:.1f} ms (median of 3)")
    print(f"spectral convergence ||S - S_rec|| / ||S|| = {convergence:.3f} (|STFT| of the original and the "
          "reconstruction; 20 MFCCs keep only the spectral envelope, so the harmonics are not restored)")
    print(f"real-time factor {elapsed / duration:.4f} ({duration / elapsed:.1f}x faster than real time)")
    print(f"wrote {outdir}/original.wav, {outdir}/reconstructed.wav (16-bit PCM), "
          f"{outdir}/spectrograms.png ({drawer})")
    return 0


def _limit_threads(threads: int) -> str:
    """TensorFlow's thread pools (before its runtime starts) and NumPy's BLAS to `threads`."""
    import tensorflow as tf

    notes = []
    try:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
        notes.append(f"TensorFlow {threads} threads")
    except RuntimeError:
        notes.append(f"TensorFlow {tf.config.threading.get_intra_op_parallelism_threads() or os.cpu_count()} "
                     "threads (already started)")
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(threads)
        notes.append(f"BLAS {threads} threads")
    except ImportError:
        pass
    return ", ".join(notes)


def bench(repeats: int = 10, threads: int = 2, seconds: float = 5.0) -> int:
    """opforge.audio.mfcc_to_audio against librosa.feature.inverse.mfcc_to_audio called through
    tf.numpy_function: 5 s of 22.05 kHz audio, n_mfcc=20, n_mels=128, n_fft=2048, n_iter=32,
    interleaved, medians; the real-time factor; the split between the three ops."""
    threading = _limit_threads(threads)
    import tensorflow as tf

    import opforge.audio
    from opforge import ops
    from opforge._machine import machine
    from opforge.tools.timing import interleaved

    try:
        import librosa
    except ImportError:
        print("opforge audio bench: librosa is not importable (pip install librosa, a test dependency)")
        return 1
    from opforge.ops.griffin_lim import librosa_seed_kwargs
    sr, n_mfcc, n_mels, n_fft, n_iter = 22050, 20, 128, 2048, 32
    y = synth_speech(sr, seconds)
    mfcc = tf.constant(librosa.feature.mfcc(y=y, sr=sr, n_mfcc=n_mfcc, n_mels=n_mels, n_fft=n_fft))
    frames = int(mfcc.shape[-1])
    devices = [d.device_type for d in tf.config.list_logical_devices()]
    print(f"machine: {machine()}; {threading}; devices {', '.join(devices)}")
    print(f"case: {seconds:g} s of {sr} Hz audio (synthesised speech), n_mfcc={n_mfcc}, n_mels={n_mels}, "
          f"n_fft={n_fft}, hop_length={n_fft // 4}, n_iter={n_iter}, {frames} frames, float32")

    def ours():
        return opforge.audio.mfcc_to_audio(mfcc, n_mels=n_mels, sr=sr, n_fft=n_fft, n_iter=n_iter, seed=0)

    def reference(x):
        return librosa.feature.inverse.mfcc_to_audio(x, n_mels=n_mels, sr=sr, n_fft=n_fft,
                                                     n_iter=n_iter).astype(np.float32)

    def theirs():
        return tf.numpy_function(reference, [mfcc], tf.float32)

    medians = interleaved({"opforge": ours, "librosa": theirs}, repeats=repeats, warmup=1)
    ratio = medians["librosa"] / medians["opforge"]
    print(f"opforge.audio.mfcc_to_audio                           {medians['opforge'] * 1e3:9.1f} ms")
    print(f"librosa.feature.inverse.mfcc_to_audio (numpy_function) {medians['librosa'] * 1e3:9.1f} ms")
    print(f"ratio librosa / opforge: {ratio:.1f}x (median of {repeats} interleaved calls each)")
    print(f"real-time factor: {medians['opforge'] / seconds:.4f} ({seconds / medians['opforge']:.1f}x faster "
          f"than real time); librosa {medians['librosa'] / seconds:.3f}")
    mel = ops.mfcc_to_mel(mfcc, n_mels=n_mels)
    stft = ops.mel_to_stft(mel, sr=sr, n_fft=n_fft)
    steps: Dict[str, object] = {
        "mfcc_to_mel": lambda: ops.mfcc_to_mel(mfcc, n_mels=n_mels),
        "mel_to_stft (NNLS)": lambda: ops.mel_to_stft(mel, sr=sr, n_fft=n_fft),
        "griffin_lim": lambda: ops.griffin_lim(stft, n_iter=n_iter, n_fft=n_fft, seed=0),
    }
    split = interleaved(steps, repeats=max(repeats, 10), warmup=1)
    total = sum(split.values())
    print("split (each op alone, interleaved medians): " + "; ".join(
        f"{name} {seconds_ * 1e3:.2f} ms ({100 * seconds_ / total:.1f}%)" for name, seconds_ in split.items()))
    mel_np, stft_np = mel.numpy(), stft.numpy()
    lib_steps = {
        "mfcc_to_mel": lambda: librosa.feature.inverse.mfcc_to_mel(mfcc.numpy(), n_mels=n_mels),
        "mel_to_stft (NNLS)": lambda: librosa.feature.inverse.mel_to_stft(mel_np, sr=sr, n_fft=n_fft),
        "griffinlim": lambda: librosa.griffinlim(stft_np, n_iter=n_iter, n_fft=n_fft, **librosa_seed_kwargs(0)),
    }
    lib_split = interleaved(lib_steps, repeats=3, warmup=0)
    lib_total = sum(lib_split.values())
    print("librosa's split (3 calls each): " + "; ".join(
        f"{name} {seconds_ * 1e3:.1f} ms ({100 * seconds_ / lib_total:.1f}%)" for name, seconds_ in lib_split.items()))
    return 0


def export(out: str = "mfcc_to_audio.onnx", sr: int = 22050, n_mfcc: int = 20, n_mels: int = 128,
           n_fft: int = 2048, n_iter: int = 32, seed: int = 0, seconds: float = 2.0) -> int:
    """`opforge audio export --format onnx`: `opforge.audio.mfcc_to_audio` (MFCCs [n_mfcc, T], any
    T, to audio) as an ONNX file whose inverse-MFCC ops are `opforge` nodes (libopforge_ort.so
    runs them), with a fixed Griffin-Lim seed; then runs it in ONNX Runtime on the MFCCs of a few
    seconds of speech and says whether the audio is TensorFlow's."""
    import tensorflow as tf

    import opforge.onnx
    from opforge.audio import mfcc_to_audio

    kwargs = dict(n_mels=n_mels, sr=sr, n_fft=n_fft, n_iter=n_iter, seed=seed)
    fn = tf.function(lambda mfcc: mfcc_to_audio(mfcc, **kwargs))
    signature = [tf.TensorSpec([n_mfcc, None], tf.float32, name="mfcc")]
    opforge.onnx.export(fn, out, input_signature=signature)
    y, sr_used, source = speech(sr, seconds)
    mfcc = np.asarray(mfcc_features(y, sr, n_mfcc=n_mfcc, n_mels=n_mels, n_fft=n_fft)[0], np.float32)
    expected = fn(tf.constant(mfcc)).numpy()
    session = opforge.onnx.session(out, intra_op_num_threads=2)
    got = session.run(None, {session.get_inputs()[0].name: mfcc})[0]
    err = float(np.abs(got - expected).max()) if got.shape == expected.shape else float("inf")
    scale = float(np.abs(expected).max()) or 1.0
    same = err <= 1e-5 * scale
    print(f"wrote {out}: mfcc float32 [{n_mfcc}, T] -> audio at {sr} Hz (n_mels={n_mels}, n_fft={n_fft}, "
          f"n_iter={n_iter}, seed={seed}); in ONNX Runtime {opforge.onnx.ort_version()} on {mfcc.shape[1]} frames "
          f"of {source.split(':')[0]}: {len(got)} samples, max difference from TensorFlow {err:.2e} "
          f"({'equal within rounding' if same else 'DIFFERENT'})")
    return 0 if same else 1

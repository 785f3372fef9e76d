"""Audio from MFCCs: the inverse of librosa's and of TensorFlow's MFCC pipelines, in TensorFlow.

- `mfcc_to_audio`, `mfcc_to_mel` and `mel_to_audio` mirror `librosa.feature.inverse` (librosa
  1.0, as 0.11): same argument names, defaults and chaining (mfcc_to_mel -> mel_to_stft -> griffinlim
  with the same n_fft, hop, window and centring), time on the last axis, leading batch axes
  allowed. They run the C++ ops `Opforge>MfccToMel`, `Opforge>MelToStft` and
  `Opforge>GriffinLim` (`opforge.ops.mfcc_to_mel`, `mel_to_stft`, `griffin_lim`).
- `inverse_tf_mfcc` inverts TensorFlow's own pipeline as its documentation writes it
  (`tf.signal.stft` -> `tf.abs` -> `tf.signal.linear_to_mel_weight_matrix` -> log with an
  offset -> `tf.signal.mfccs_from_log_mel_spectrograms`), time on axis -2 as TensorFlow lays it
  out.

Arguments are checked once, by the ops' C++ cores (errors name the argument); this module checks
only what the ops cannot see (the names it renames, TensorFlow's framing arguments).
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np
import tensorflow as tf

from opforge.ops import griffin_lim, mel_to_stft
from opforge.ops import mfcc_to_mel as _mfcc_to_mel_op
from opforge.ops._common import invalid_argument, python_int, python_number, short_repr, to_tensor

__all__ = ["mfcc_to_audio", "mfcc_to_mel", "mel_to_audio", "inverse_tf_mfcc", "spectral_convergence"]


def mfcc_to_mel(mfcc, n_mels: int = 128, dct_type: int = 2, norm: Optional[str] = "ortho", ref: float = 1.0,
                lifter: float = 0, name: Optional[str] = None) -> tf.Tensor:
    """MFCCs [..., n_mfcc, T] to a Mel power spectrogram [..., n_mels, T], as
    `librosa.feature.inverse.mfcc_to_mel`: inverse liftering (`lifter` > 0), the inverse DCT
    (`dct_type` 2 or 3, `norm` "ortho" or None) zero-padded to `n_mels`, then
    `librosa.db_to_power(., ref=ref)`. Differentiable (`Opforge>MfccToMelGrad`)."""
    return _mfcc_to_mel_op(mfcc, n_mels=n_mels, dct_type=dct_type, norm=norm, ref=ref, lifter=lifter,
                           name=name or "mfcc_to_mel")


def mel_to_audio(M, sr: float = 22050, n_fft: int = 2048, hop_length: Optional[int] = None,
                 win_length: Optional[int] = None, window: str = "hann", center: bool = True,
                 pad_mode: str = "constant", power: float = 2.0, n_iter: int = 32, length: Optional[int] = None,
                 momentum: float = 0.99, init: Optional[str] = "random", seed: Optional[int] = None,
                 fmin: float = 0.0, fmax: Optional[float] = None, htk: bool = False,
                 norm: Optional[str] = "slaney", name: Optional[str] = None) -> tf.Tensor:
    """A Mel power spectrogram [..., n_mels, T] to audio [..., samples], as
    `librosa.feature.inverse.mel_to_audio`: the non-negative least-squares inverse of librosa's
    Mel filter bank (`sr`, `n_fft`, `fmin`, `fmax`, `htk`, `norm`; then `** (1 / power)`),
    then Griffin-Lim with the same `n_fft` and `hop_length`, `win_length`, `window`, `center`,
    `pad_mode`, `n_iter`, `length`.

    opforge adds librosa.griffinlim's `momentum` and `init` ("random" or None: phases of 1), and
    `seed`: random initial phases drawn as `numpy.random.RandomState(seed).random(S.shape)`
    (so the result equals librosa 1.0's with `rng=numpy.random.RandomState(seed)`, librosa 0.11's
    with `random_state=seed`); None draws a fresh seed per call.
    Not differentiable.
    """
    with tf.name_scope(name or "mel_to_audio"):
        stft = mel_to_stft(M, sr=sr, n_fft=n_fft, power=power, fmin=fmin, fmax=fmax, htk=htk, norm=norm)
        return griffin_lim(stft, n_iter=n_iter, hop_length=hop_length, win_length=win_length, n_fft=n_fft,
                           window=window, center=center, length=length, pad_mode=pad_mode, momentum=momentum,
                           init=init, seed=seed)


def mfcc_to_audio(mfcc, n_mels: int = 128, dct_type: int = 2, norm: Optional[str] = "ortho", ref: float = 1.0,
                  lifter: float = 0, sr: float = 22050, n_fft: int = 2048, hop_length: Optional[int] = None,
                  win_length: Optional[int] = None, window: str = "hann", center: bool = True,
                  pad_mode: str = "constant", power: float = 2.0, n_iter: int = 32, length: Optional[int] = None,
                  momentum: float = 0.99, init: Optional[str] = "random", seed: Optional[int] = None,
                  fmin: float = 0.0, fmax: Optional[float] = None, htk: bool = False,
                  mel_norm: Optional[str] = "slaney", name: Optional[str] = None) -> tf.Tensor:
    """MFCCs [..., n_mfcc, T] to audio [..., samples], as `librosa.feature.inverse.mfcc_to_audio`:
    `mfcc_to_mel(mfcc, n_mels, dct_type, norm, ref, lifter)`, then `mel_to_audio` with the rest.

    `norm` is the DCT's normalisation (as in librosa); the Mel filter bank's, which librosa
    passes as `norm` in its **kwargs, is `mel_norm` here ("slaney" or None). `seed`, `init` and
    `momentum` are those of `mel_to_audio`. float32 or float64; time is the last axis, any
    leading axes are batch axes. Not differentiable (Griffin-Lim and the NNLS have no gradient).

        audio = opforge.audio.mfcc_to_audio(librosa.feature.mfcc(y=y, sr=sr), sr=sr, length=len(y))
    """
    if not (mel_norm is None or (isinstance(mel_norm, str) and mel_norm in ("slaney", "none", "None"))):
        raise invalid_argument("mfcc_to_audio", "mel_norm", "'slaney' or None (the Mel filter bank's "
                               "normalisation; `norm` is the DCT's)", short_repr(mel_norm))
    with tf.name_scope(name or "mfcc_to_audio"):
        mel = mfcc_to_mel(mfcc, n_mels=n_mels, dct_type=dct_type, norm=norm, ref=ref, lifter=lifter)
        return mel_to_audio(mel, sr=sr, n_fft=n_fft, hop_length=hop_length, win_length=win_length, window=window,
                            center=center, pad_mode=pad_mode, power=power, n_iter=n_iter, length=length,
                            momentum=momentum, init=init, seed=seed, fmin=fmin, fmax=fmax, htk=htk, norm=mel_norm)


def inverse_tf_mfcc(mfccs, sample_rate: float, frame_length: int, frame_step: int, fft_length: Optional[int],
                    num_mel_bins: int, lower_edge_hertz: float, upper_edge_hertz: float, n_iter: int = 32, *,
                    log_offset: float = 1e-6, power: float = 1.0, momentum: float = 0.99,
                    init: Optional[str] = "random", seed: Optional[int] = None, length: Optional[int] = None,
                    name: Optional[str] = None) -> tf.Tensor:
    """Audio [..., samples] from MFCCs [..., T, num_mfccs] made by TensorFlow's own pipeline:

        stfts = tf.signal.stft(pcm, frame_length, frame_step, fft_length)   # hann, no centring
        spectrograms = tf.abs(stfts)                                        # ** power
        mel = tf.tensordot(spectrograms, tf.signal.linear_to_mel_weight_matrix(
            num_mel_bins, fft_length // 2 + 1, sample_rate, lower_edge_hertz, upper_edge_hertz), 1)
        mfccs = tf.signal.mfccs_from_log_mel_spectrograms(tf.math.log(mel + log_offset))[..., :num_mfccs]

    Inverted step by step: TensorFlow's DCT-II scaling (1 / sqrt(2 num_mel_bins) on the
    unnormalised DCT: the orthonormal DCT but for coefficient 0, sqrt(2) larger) is undone and
    the truncated coefficients are zero-padded through the inverse orthonormal DCT
    (`Opforge>MfccToMel`, its dB scale turned into the natural log); then exp(.) - log_offset
    (clamped at 0); the NNLS inverse of TensorFlow's Mel matrix (HTK scale, no normalisation, the
    DC bin zeroed) with `Opforge>MelToStft`; Griffin-Lim (`Opforge>GriffinLim`, `n_iter`
    iterations, `momentum`, `init`, `seed` as in `mel_to_audio`) with left-aligned frames
    (center=False), hop `frame_step` and a periodic Hann window of `frame_length` in `fft_length`
    points. Where the window's overlapping squares sum to under 1% of their peak (the first and
    last few samples), Griffin-Lim's division by that sum is limited, so that the ends keep the
    signal's scale instead of a 1e8-fold amplification of samples TensorFlow's STFT barely sees.

    `tf.signal.stft` windows the first `frame_length` samples of each `fft_length`-point frame,
    while Griffin-Lim (as librosa) centres the window in the frame, (fft_length - frame_length)
    // 2 samples later; the magnitudes are the same for the signal delayed by that much, so the
    delay is cut off here. The result has the samples the frames cover,
    frame_length + frame_step * (T - 1); `length` crops or zero-pads it to exactly that many (the
    original signal's length, to compare sample by sample).

    `power`: 1 for `tf.abs(stfts)` (the documented pipeline), 2 for the squared magnitude.
    `fft_length` None means TensorFlow's default, the smallest power of 2 >= frame_length.
    """
    op = "inverse_tf_mfcc"
    frame_length = python_int(op, "frame_length", frame_length, "a positive int")
    frame_step = python_int(op, "frame_step", frame_step, "a positive int")
    num_mel_bins = python_int(op, "num_mel_bins", num_mel_bins, "a positive int")
    for arg, value in (("frame_length", frame_length), ("frame_step", frame_step), ("num_mel_bins", num_mel_bins)):
        if value <= 0:
            raise invalid_argument(op, arg, "a positive int", value)
    if fft_length is None:
        fft_length = 1 << max(frame_length - 1, 0).bit_length()  # tf.signal.stft's default
    fft_length = python_int(op, "fft_length", fft_length, "an int >= frame_length")
    if fft_length < frame_length:
        raise invalid_argument(op, "fft_length", f"at least frame_length ({frame_length})", fft_length)
    log_offset = python_number(op, "log_offset", log_offset, "a finite number >= 0")
    if not (math.isfinite(log_offset) and log_offset >= 0):
        raise invalid_argument(op, "log_offset", "a finite number >= 0", log_offset)
    if length is not None:
        length = python_int(op, "length", length, "None or a positive int")
        if length <= 0:
            raise invalid_argument(op, "length", "None or a positive int", length)
    with tf.name_scope(name or op):
        mfccs = to_tensor(op, "mfccs", mfccs)
        if mfccs.dtype not in (tf.float32, tf.float64):
            raise invalid_argument(op, "mfccs", "float32 or float64", mfccs.dtype.name)
        if mfccs.shape.rank is not None and mfccs.shape.rank < 2:
            raise invalid_argument(op, "mfccs", "of rank >= 2 ([..., T, num_mfccs])",
                                   f"shape {mfccs.shape.as_list()}")
        # Named in the caller's layout (the ops see it transposed, with librosa's names).
        shape = mfccs.shape.as_list() if mfccs.shape.rank is not None else None
        if shape is not None and shape[-1] is not None and shape[-1] > num_mel_bins:
            raise invalid_argument(op, "mfccs", f"at most num_mel_bins = {num_mel_bins} coefficients (axis -1)",
                                   f"shape {shape}")
        if shape is not None and shape[-2] == 0:
            raise invalid_argument(op, "mfccs", "a non-empty time axis (axis -2)", f"shape {shape}")
        dtype = mfccs.dtype
        cepstra = tf.linalg.matrix_transpose(mfccs)  # [..., num_mfccs, T]: time last, as the ops take it
        # TF's coefficients -> orthonormal DCT-II coefficients (c0 / sqrt(2)), scaled so that the
        # op's dB -> power (10^(x / 10)) becomes exp(x): 10 / ln 10.
        to_db = 10.0 / math.log(10.0)
        first = tf.equal(tf.range(tf.shape(cepstra)[-2]), 0)[:, None]
        scale = tf.where(first, tf.constant(to_db / math.sqrt(2.0), dtype), tf.constant(to_db, dtype))
        mel = _mfcc_to_mel_op(cepstra * scale, n_mels=num_mel_bins, dct_type=2, norm="ortho", ref=1.0)
        mel = tf.maximum(mel - tf.constant(log_offset, dtype), 0)
        weights = tf.signal.linear_to_mel_weight_matrix(num_mel_bins, fft_length // 2 + 1, sample_rate,
                                                        lower_edge_hertz, upper_edge_hertz, dtype=dtype)
        magnitude = mel_to_stft(mel, sr=float(sample_rate), n_fft=fft_length, power=power,
                                filters=tf.transpose(weights))
        audio = griffin_lim(magnitude, n_iter=n_iter, hop_length=frame_step, win_length=frame_length,
                            n_fft=fft_length, window="hann", center=False, momentum=momentum, init=init, seed=seed)
        delay = (fft_length - frame_length) // 2
        frames = magnitude.shape[-1]
        if frames is None:
            frames = tf.shape(magnitude)[-1]
        covered = frame_length + frame_step * (frames - 1)
        audio = audio[..., delay:delay + covered]
        # Griffin-Lim's last ISTFT divides by the window's sum of squares, which at the two ends
        # falls to the Hann window's square (0 at the first sample, 4e-9 at the next for 400
        # points): there it amplifies whatever the frames hold by up to 1e8, samples that
        # TensorFlow's STFT itself weighs by almost nothing. Where that sum is below 1% of its
        # peak the division stops (y * sum / (0.01 peak)), which keeps the ends at the signal's
        # scale and leaves the spectral convergence unchanged (measured: +-0.0002).
        squares = tf.square(tf.signal.hann_window(frame_length, periodic=True, dtype=dtype))
        overlap = tf.signal.overlap_and_add(tf.tile(squares[None, :], tf.stack([frames, 1])), frame_step)
        audio = audio * tf.minimum(tf.constant(1.0, dtype), overlap / (0.01 * tf.reduce_max(overlap)))
        if length is not None:
            audio = audio[..., :length]
            pad = length - tf.shape(audio)[-1]
            rank = tf.rank(audio)
            audio = tf.pad(audio, tf.concat([tf.zeros([rank - 1, 2], tf.int32), [[0, pad]]], 0))
            audio = tf.ensure_shape(audio, audio.shape[:-1].concatenate([length]))
        return audio


def spectral_convergence(reference, estimate) -> float:
    """|| |reference| - |estimate| ||_F / || |reference| ||_F over all elements (magnitude
    spectrograms of the same shape, or complex STFTs): 0 is a perfect reconstruction."""
    reference = np.abs(np.asarray(reference, dtype=np.complex128))
    estimate = np.abs(np.asarray(estimate, dtype=np.complex128))
    if reference.shape != estimate.shape:
        raise ValueError(f"spectral_convergence: shapes differ, {reference.shape} and {estimate.shape}")
    return float(np.linalg.norm(reference - estimate) / np.linalg.norm(reference))

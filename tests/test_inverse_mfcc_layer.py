"""opforge.layers.InverseMfcc: opforge.audio.mfcc_to_audio as a Keras layer; its shapes, config,
constructor errors and saving (.keras and SavedModel, loaded in a fresh process)."""
from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import opforge
from opforge import audio
from opforge.ops import _xla
from opforge.tools.audio_demo import synth_speech

from helpers import assert_round_trip_in_fresh_process

SMALL = dict(n_mels=64, sr=16000, n_fft=512, n_iter=4, seed=0)


def _mfcc(batch: int = 2, frames: int = 40, n_mfcc: int = 20) -> np.ndarray:
    import librosa

    ys = np.stack([synth_speech(16000, (frames - 1) * 128 / 16000, seed=s) for s in range(batch)])
    x = librosa.feature.mfcc(y=ys, sr=16000, n_mfcc=n_mfcc, n_fft=512, hop_length=128, n_mels=64)
    assert x.shape == (batch, n_mfcc, frames), x.shape
    return x.astype(np.float32)


def test_layer_is_mfcc_to_audio():
    x = _mfcc()
    layer = opforge.layers.InverseMfcc(**SMALL)
    np.testing.assert_array_equal(layer(x).numpy(), audio.mfcc_to_audio(x, **SMALL).numpy())
    assert not layer.weights
    # FFI custom calls on XLA:CPU: claimed where the build has them and no GPU is visible.
    assert layer.supports_jit == (all(_xla.xla_path(op) != "none" for op in (
        "Opforge>MfccToMel", "Opforge>MelToStft", "Opforge>GriffinLim"))
        and not tf.config.list_physical_devices("GPU"))


def test_layer_under_xla_gives_the_same_audio():
    """Under jit_compile the three ops run as FFI custom calls: with a seed, the same bits."""
    if not _xla.supports_jit("Opforge>MfccToMel", "Opforge>MelToStft", "Opforge>GriffinLim"):
        pytest.skip("this build has no XLA kernels for the audio ops")
    x = _mfcc()
    layer = opforge.layers.InverseMfcc(**SMALL)
    compiled = tf.function(layer, jit_compile=True)(x)
    np.testing.assert_array_equal(compiled.numpy(), layer(x).numpy())


@pytest.mark.parametrize("kwargs", [dict(), dict(center=False), dict(hop_length=100, win_length=400),
                                    dict(length=4100), dict(center=False, n_fft=511, hop_length=77)])
def test_compute_output_shape(kwargs):
    layer = opforge.layers.InverseMfcc(**dict(SMALL, **kwargs))
    x = _mfcc(frames=33)
    out = layer(x)
    assert layer.compute_output_shape(x.shape) == tuple(out.shape)
    assert layer.compute_output_shape((None, 20, None)) == (None, kwargs.get("length"))
    # Symbolic Keras tensors get the same shapes.
    symbolic = layer(keras.Input((20, 33)))
    assert tuple(symbolic.shape) == (None, out.shape[-1])


def test_config_round_trip():
    layer = opforge.layers.InverseMfcc(n_mels=80, dct_type=3, norm=None, lifter=22, fmax=7000.0, htk=True,
                                       mel_norm=None, seed=3, init=None, length=1234, name="inv")
    config = layer.get_config()
    for key in ("n_mels", "dct_type", "norm", "ref", "lifter", "sr", "n_fft", "hop_length", "win_length", "window",
                "center", "pad_mode", "power", "n_iter", "length", "momentum", "init", "seed", "fmin", "fmax", "htk",
                "mel_norm"):
        assert key in config, key
    again = opforge.layers.InverseMfcc.from_config(config)
    assert again.get_config() == config
    restored = keras.layers.deserialize(keras.layers.serialize(layer))
    assert type(restored) is opforge.layers.InverseMfcc and restored.get_config() == config


@pytest.mark.parametrize("kwargs,fragment", [
    (dict(n_mels=0), "n_mels"),
    (dict(hop_length=0), "hop_length"),
    (dict(n_fft=256, win_length=512), "win_length"),
    (dict(window="kaiser"), "window"),
    (dict(mel_norm="l2"), "mel_norm"),
    (dict(dct_type=1), "dct_type"),
    (dict(n_iter=-1), "n_iter"),
    (dict(length=0), "length"),
])
def test_bad_arguments_fail_in_the_constructor(kwargs, fragment):
    with pytest.raises(ValueError, match=fragment) as info:
        opforge.layers.InverseMfcc(**kwargs)
    assert "opforge.layers.InverseMfcc(" in str(info.value)


def test_mixed_precision_policy():
    x = _mfcc(frames=20)
    layer = opforge.layers.InverseMfcc(**SMALL, dtype="mixed_float16")
    out = layer(x)
    assert out.dtype == tf.float16
    np.testing.assert_allclose(out.numpy().astype(np.float32), audio.mfcc_to_audio(x, **SMALL).numpy(),
                               rtol=0, atol=2e-3 * float(np.abs(out.numpy()).max()))


def test_saved_and_loaded_in_a_fresh_process(tmp_path):
    x = _mfcc(frames=30)
    model = keras.Sequential([keras.Input((20, 30)), opforge.layers.InverseMfcc(**SMALL, length=3750)])
    assert model.output_shape == (None, 3750)
    assert_round_trip_in_fresh_process(model, x, tmp_path, "Opforge>GriffinLim")

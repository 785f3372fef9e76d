"""What the clipped_identity spec cannot say: the leak outside the range and 1 inside (bounds
included, NaN inside), the second-order gradient, and the layer's argument errors."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import opforge
from helpers import bits_equal


def test_forward_is_tf_clip_by_value_and_the_gradient_leaks_outside():
    x = tf.constant([-3.0, -1.0, -0.5, 0.0, 1.0, 2.5, np.inf, -np.inf, np.nan], tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = opforge.ops.clipped_identity(x, clip_min=-1.0, clip_max=1.0, leak=0.01)
    assert bits_equal(y.numpy(), tf.clip_by_value(x, -1.0, 1.0).numpy())
    slope = np.float32(0.01)
    np.testing.assert_array_equal(tape.gradient(y, x).numpy(),
                                  [slope, 1, 1, 1, 1, slope, slope, slope, 1])  # bounds inside, NaN inside


def test_clipped_identity_second_order_is_linear_in_the_upstream_gradient():
    x = tf.constant([-2.0, 0.5, 3.0], tf.float64)
    with tf.GradientTape() as outer:
        outer.watch(x)
        with tf.GradientTape() as inner:
            inner.watch(x)
            y = opforge.ops.clipped_identity(x, -1.0, 1.0, 0.25)
        g = inner.gradient(y, x, output_gradients=x)  # dx = slope * x
    np.testing.assert_array_equal(outer.gradient(g, x).numpy(), [0.25, 1.0, 0.25])
    with tf.GradientTape() as outer:
        outer.watch(x)
        with tf.GradientTape() as inner:
            inner.watch(x)
            y = opforge.ops.clipped_identity(x, -1.0, 1.0, 0.25)
        g = inner.gradient(y, x)  # piecewise constant in x
    second = outer.gradient(g, x)
    assert second is None or not np.any(second.numpy())


def test_clipped_identity_layer_rejects_bad_arguments():
    with pytest.raises(ValueError, match="clip_max must be at least clip_min"):
        opforge.layers.ClippedIdentity(clip_min=1.0, clip_max=0.0)
    with pytest.raises(ValueError, match="leak must be a finite number"):
        opforge.layers.ClippedIdentity(leak=float("nan"))
    with pytest.raises(ValueError, match="clip_min"):
        opforge.layers.ClippedIdentity(clip_min="low")

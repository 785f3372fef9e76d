"""Test set-up: two logical CPU devices (for MirroredStrategy) and the `device` fixture that runs
a test on the CPU and, where one is present, on the GPU. Shared helpers live in helpers.py."""
from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

# Must happen before TensorFlow initialises its devices.
_cpus = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(
    _cpus[0], [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()]
)

DEVICES = ["CPU"] + (["GPU"] if tf.config.list_physical_devices("GPU") else [])


@pytest.fixture(params=DEVICES)
def device(request):
    """Runs the test's ops on each device there is (the GPU kernels where a GPU is present)."""
    with tf.device(f"/{request.param}:0"):
        yield request.param


@pytest.fixture(scope="session")
def logical_cpus():
    return tf.config.list_logical_devices("CPU")

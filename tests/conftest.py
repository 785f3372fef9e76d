"""Test set-up: two logical CPU devices (for MirroredStrategy), the `device` fixture that runs
a test on the CPU and, where one is present, on the GPU, and the `gpu_device` fixture of
tests/test_gpu.py. Shared helpers live in helpers.py."""
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


@pytest.fixture(scope="session")
def gpu_device():
    """The device tests/test_gpu.py runs opforge's GPU kernels on, compared with the CPU kernels.

    "/GPU:0" where TensorFlow sees a GPU; otherwise the test skips ("skipped: no GPU").
    OPFORGE_TEST_DEVICE=CPU gives "/CPU:0" instead: a dry run (the CPU against itself, which
    must pass trivially) that runs every line of those tests on a machine without a GPU.
    OPFORGE_TEST_DEVICE=GPU demands a GPU: its absence is an error, not a skip (a GPU check
    script must not pass by skipping everything). (Named gpu_device: `device` above is the
    CPU-and-GPU parametrised fixture of the generic tests.)
    """
    wanted = os.environ.get("OPFORGE_TEST_DEVICE", "").strip().upper()
    if wanted not in ("", "CPU", "GPU"):
        pytest.fail(f"OPFORGE_TEST_DEVICE must be CPU or GPU, got {wanted!r}")
    if wanted == "CPU":
        return "/CPU:0"
    if not tf.config.list_physical_devices("GPU"):
        if wanted == "GPU":
            pytest.fail("OPFORGE_TEST_DEVICE=GPU but TensorFlow sees no GPU "
                        f"(TensorFlow {tf.__version__}, CUDA build: {tf.test.is_built_with_cuda()})")
        pytest.skip("skipped: no GPU")
    return "/GPU:0"

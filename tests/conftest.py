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


@pytest.fixture(params=["GPU", "cuda_sim"])
def gpu_device(request):
    """Where tests/test_gpu.py runs opforge's GPU kernels, compared with the CPU kernels: each
    test runs twice, on the GPU (`gpu_device_only`) and on the SIMT runtime (`cuda_sim_device`)."""
    if request.param == "cuda_sim":
        return request.getfixturevalue("cuda_sim_device")
    return request.getfixturevalue("gpu_device_only")


@pytest.fixture(scope="session")
def cuda_sim_device():
    """"cuda_sim": the GPU kernels (the op structs' Gpu paths and their CUDA kernels, compiled for
    the SIMT runtime) run on the CPU inside TensorFlow, through opforge.cuda_sim. Needs the
    cuda_sim library (`make cuda-sim`; `make test` builds it and sets OPFORGE_CUDA_SIM_LIBRARY,
    and then a missing library fails); without the CUDA toolkit's headers the test skips."""
    from opforge import cuda_sim

    path = cuda_sim.opforge_library_path()
    if path is None:
        pytest.skip("skipped: no cuda_sim library (it needs the CUDA toolkit's headers; `make test` builds it)")
    cuda_sim.load_opforge_kernels(path)
    return "cuda_sim"


@pytest.fixture(scope="session")
def gpu_device_only():
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


# --- the compat subset (`make compat-check`) ---------------------------------------------------
# What is run against every supported TensorFlow: every op spec's forward and gradient cases, the
# ops' and layers' `.keras` and SavedModel round trips, the XLA glue and every FFI custom call
# (skipped where the wheel's FFI API cannot build them), and a YOLO-tiny training step. Named here, in one place, by test (file::function); `pytest -m compat` selects them.
COMPAT_SUBSET = (
    "test_specs.py::test_forward_matches_reference",
    "test_specs.py::test_gradient_matches_float64_numerical",
    "test_specs.py::test_savedmodel_round_trip_in_fresh_process",
    "test_layers_and_saving.py::test_keras_and_savedmodel_round_trip_in_fresh_process",
    "test_conv2d_transpose_layer.py::test_keras_and_savedmodel_round_trip_in_fresh_process",
    "test_resize_bilinear.py::test_keras_and_savedmodel_round_trip_in_fresh_process",
    "test_inverse_mfcc_layer.py::test_saved_and_loaded_in_a_fresh_process",
    "test_keras_conventions.py::test_layers_load_in_a_fresh_process_after_only_import_opforge",
    "test_yolo_layers.py::test_yolo_layers_round_trip_through_keras_files",
    "test_yolo_layers.py::test_detector_savedmodel_serves_any_batch_in_fresh_process",
    "test_loading.py::test_keras_and_savedmodel_load_after_only_import_opforge",
    "test_yolo_models.py::test_first_step_loss_and_gradients_agree_between_twins",
    "test_yolo_models.py::test_fit_and_custom_loop_give_the_same_first_step_loss",
    "test_xla.py::test_lowered_ops_reported",
    "test_xla.py::test_leaky_relu_equals_cpu",
    "test_xla_ffi.py::",
    "test_keras_versions.py::",
)


# --- the whole-system tests (`make test-slow`) ----------------------------------------------------
# `make test` runs the C++ suites (the core, every CUDA kernel on the SIMT runtime, the race
# check) and pytest's tests of each op, layer and saved model, the GPU path (cuda_sim) and the
# scaffold's CUDA check, inside 30 minutes on a fresh 2-core machine. The tests below exercise the
# whole system and take most of pytest's time there: builds of a user's C++ (opforge.build,
# `opforge check`, a second scaffolded op), the CLI's runs over every op, training to a result and
# the YOLO twins, deployment and the benchmarks, fuzzing runs, TensorFlow's own test suites and
# error classes against the ops, and every example of the manual. `make test-slow` runs them and
# `.ci/run` runs both. Named by file (`file.py::`) or test (file::function); `pytest -m slow`
# selects them.
SLOW_TESTS = (
    "test_build.py::",
    "test_build_ort.py::",
    "test_check.py::",
    "test_scaffold.py::test_softplus_from_the_scaffold_with_two_lines_of_cpp",
    "test_cli.py::",
    "test_paths.py::test_bench_paths_quick_runs",
    "test_yolo_app.py::",
    "test_yolo_models.py::",
    "test_xla_models.py::",
    "test_yolo_distribute.py::",
    "test_deploy.py::",
    "test_deploy_bench.py::",
    "test_bench_dtype.py::",
    "test_fuzz.py::",
    "test_drop_in_errors.py::",
    "test_tf_test_bases.py::",
    "test_keras_versions.py::",
    "test_docs_examples.py::",
)


def pytest_collection_modifyitems(config, items):
    for item in items:
        nodeid = item.nodeid.split("/")[-1]
        if any(nodeid.startswith(entry) for entry in COMPAT_SUBSET):
            item.add_marker(pytest.mark.compat)
        if any(nodeid.startswith(entry) for entry in SLOW_TESTS):
            item.add_marker(pytest.mark.slow)

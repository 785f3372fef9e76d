"""opforge.cuda_sim: the GPU kernels run on the CPU inside TensorFlow (the comparisons themselves are
tests/test_gpu.py's, on its "cuda_sim" device); here, that the label reaches the kernels, and
that where it cannot reach, it says so instead of running the CPU kernel unseen."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import opforge
from opforge import cuda_sim

GPU_OPS = [n for n in opforge.ops.OP_NAMES if n not in opforge.ops.CPU_ONLY]


@pytest.fixture(scope="module")
def sim(cuda_sim_device):
    return cuda_sim_device


def test_the_gpu_kernel_runs_not_the_cpu_one(sim):
    # Swish's CUDA kernels use CUDA's expf, the CPU's Eigen's logistic: the two differ in the last
    # bits somewhere over many values (within swish_cuda_test.cc's bound), so equal bits
    # everywhere would mean the CPU kernel ran.
    x = tf.constant(np.random.default_rng(5).standard_normal(4096).astype(np.float32) * 4)

    def grad(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = opforge.ops.swish(x)
        return y, tape.gradient(y, x)

    cpu = [t.numpy() for t in grad(x)]
    gpu = [t.numpy() for t in cuda_sim.function(grad, GPU_OPS)(x)]
    assert any(not np.array_equal(g, c) for g, c in zip(gpu, cpu)), "the cuda_sim run gave the CPU's bits"
    for g, c in zip(gpu, cpu):
        np.testing.assert_allclose(g, c, rtol=8 * 2.0**-23, atol=8 * 2.0**-23 * 4)


def test_a_dtype_without_a_gpu_kernel_fails_rather_than_running_on_the_cpu(sim):
    # ElementMul's GPU kernels take no complex128 (its CPU kernels do).
    from tensorflow.python.framework import kernels

    gpu_types = {t for k in kernels.get_registered_kernels_for_op("Opforge>ElementMul").kernel
                 if k.label == cuda_sim.LABEL for c in k.constraint for t in c.allowed_values.list.type}
    assert gpu_types, "no cuda_sim kernel of ElementMul is registered"
    a = tf.ones([4], tf.complex128)
    assert tf.complex128.as_datatype_enum not in gpu_types
    with pytest.raises((tf.errors.NotFoundError, tf.errors.InvalidArgumentError), match="ElementMul"):
        cuda_sim.function(opforge.ops.element_mul, GPU_OPS)(a, a)


def test_a_nested_function_is_refused_not_run_on_the_cpu(sim):
    inner = tf.function(lambda x: opforge.ops.leaky_relu(x, 0.1))
    with pytest.raises(RuntimeError, match=r"Opforge>LeakyRelu.*nested tf.function"):
        cuda_sim.function(lambda x: inner(x) * 2.0, GPU_OPS)(tf.ones([3]))


def test_kernels_outside_a_graph_is_an_error():
    with pytest.raises(RuntimeError, match="inside a tf.function"):
        with cuda_sim.kernels(["Opforge>LeakyRelu"]):
            pass

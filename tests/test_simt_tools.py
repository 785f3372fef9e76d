"""The scripts around the SIMT runtime's run of the CUDA tests (`make cuda-test` without a GPU):
cmake/check_launches.py, which fails when a CUDA kernel under cc/ was never launched (or never
run in two orders), and cmake/run_sharded.py, which runs a GoogleTest binary in shards; and the
build's check of static shared memory, which the SIMT runtime leaves to nvcc."""
from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _module(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "cmake" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_kernel_list_is_read_off_the_sources():
    kernels = _module("check_launches").defined_kernels(ROOT)
    # Every __global__ of the tree, with __launch_bounds__ and templates, tests excluded.
    assert ("cc/common/cuda_util.cuh", "ElementwiseKernel") in kernels
    assert ("cc/ops/conv2d_transpose/conv2d_transpose.cu", "FilterGradKernel") in kernels
    assert ("cc/ops/mel_to_stft/mel_to_stft.cu", "SolveKernel") in kernels
    text = "".join(p.read_text() for p in sorted((ROOT / "cc").rglob("*.cu")))
    text += (ROOT / "cc/common/cuda_util.cuh").read_text()
    assert len(kernels) == text.count("__global__ void")


def _tree(tmp_path):
    (tmp_path / "cc" / "ops" / "a").mkdir(parents=True)
    (tmp_path / "cc" / "ops" / "a" / "a.cu").write_text(
        "template <typename T>\n__global__ void __launch_bounds__(256)\nFirst(int n) {}\n"
        "__global__ void Second(T* x, int n) {}\n")
    return tmp_path


def _run(root, *counts):
    return subprocess.run(
        [sys.executable, str(ROOT / "cmake" / "check_launches.py"), str(root), *map(str, counts)],
        capture_output=True, text=True)


def test_a_kernel_no_test_launched_fails_the_check_by_name(tmp_path):
    root = _tree(tmp_path)
    shard0, shard1 = tmp_path / "launches.0", tmp_path / "launches.1"
    shard0.write_text("cc/ops/a/a.cu\tFirst\t3\t2\n")
    shard1.write_text("cc/common/simt/simt_test.cc\tAddKernel\t2\t2\n")
    proc = _run(root, shard0, shard1)
    assert proc.returncode == 1
    assert "1 of 2 CUDA kernels launched" in proc.stdout
    assert "never launched: Second (cc/ops/a/a.cu)" in proc.stdout
    shard1.write_text("cc/ops/a/a.cu\tSecond\t1\t1\n")
    proc = _run(root, shard0, shard1)
    assert proc.returncode == 0, proc.stdout
    assert "2 of 2 CUDA kernels launched, 4 launches; 2 run in two orders (3 launches)" in proc.stdout


def test_a_kernel_never_run_in_two_orders_fails_the_check_by_name(tmp_path):
    # Launched, but every launch past the order check's reach (or with the check off).
    root = _tree(tmp_path)
    counts = tmp_path / "launches.0"
    counts.write_text("cc/ops/a/a.cu\tFirst\t3\t1\ncc/ops/a/a.cu\tSecond\t5\t0\n")
    proc = _run(root, counts)
    assert proc.returncode == 1
    assert "2 of 2 CUDA kernels launched, 8 launches; 1 run in two orders" in proc.stdout
    assert "never run in two orders (the order check): Second (cc/ops/a/a.cu)" in proc.stdout


def test_shards_run_at_once_and_any_failure_fails_the_run(tmp_path):
    # A stand-in for a GoogleTest binary: fails in shard 1 only.
    fake = tmp_path / "fake_test.py"
    fake.write_text(
        "import os, sys\n"
        "i = os.environ['GTEST_SHARD_INDEX']\n"
        "print('shard', i, 'of', os.environ['GTEST_TOTAL_SHARDS'], os.environ['EXTRA'])\n"
        "sys.exit(1 if i == '1' else 0)\n")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "cmake" / "run_sharded.py"), "2", sys.executable, str(fake),
         "--", "EXTRA=yes"], capture_output=True, text=True)
    assert proc.returncode == 1
    assert "shard 0 of 2 yes" in proc.stdout and "shard 1 of 2 yes" in proc.stdout
    assert "shard(s) [2] of 2 failed" in proc.stdout


def test_static_shared_memory_past_48_kb_fails_the_build_for_sm_90(tmp_path):
    # The SIMT runtime cannot see the size of a kernel's static __shared__ arrays; the build
    # checks them instead: CMakeLists.txt compiles machine code for sm_90 ("90-real"), and there
    # ptxas refuses a kernel with more static shared memory than a block may have (48 KB).
    cmake = (ROOT / "CMakeLists.txt").read_text()
    archs = re.search(r'set\(CMAKE_CUDA_ARCHITECTURES "([^"]*)"', cmake).group(1)
    assert "90-real" in archs.split(";")
    nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc"
                                    if Path("/usr/local/cuda/bin/nvcc").exists() else None)
    if nvcc is None:
        pytest.skip("no nvcc on this machine")
    source = tmp_path / "shared.cu"

    def compile_with(floats):
        source.write_text(
            "__global__ void Tile(float* out) {\n"
            f"  __shared__ float tile[{floats}];\n"
            "  tile[threadIdx.x] = out[threadIdx.x];\n"
            "  __syncthreads();\n"
            "  out[threadIdx.x] = tile[255 - threadIdx.x];\n"
            "}\n")
        return subprocess.run([nvcc, "-arch=sm_90", "-c", str(source), "-o",
                               str(tmp_path / "shared.o")], capture_output=True, text=True)

    assert compile_with(12 * 1024).returncode == 0  # exactly 48 KB
    refused = compile_with(12 * 1024 + 1)
    assert refused.returncode != 0
    assert "too much shared data" in refused.stderr + refused.stdout

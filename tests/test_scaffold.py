"""`opforge new`: the project it writes builds with opforge.build, passes its own tests, `opforge
check` and its benchmark unchanged; and a different op made from it by changing only the marked
lines (softplus: two lines of C++) does too."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import opforge.build
from opforge.tools import scaffold

OPFORGE = str(Path(sys.executable).with_name("opforge"))


def _run(args, cwd, cache, timeout=600):
    env = dict(os.environ, OPFORGE_CACHE=str(cache), TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _assert_project_works(root: Path, name: str, cache: Path) -> None:
    proc = _run([sys.executable, "-m", "pytest", f"test_{name}.py", "-q", "-p", "no:cacheprovider"], root, cache)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    proc = _run([OPFORGE, "check", f"{name}:{name}"], root, cache)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert re.search(r"9 checks: 9 passed, 0 failed", proc.stdout), proc.stdout
    bad_inputs = next(line for line in proc.stdout.splitlines() if line.startswith("PASS bad_inputs"))
    assert "vague" not in bad_inputs, proc.stdout  # every malformed call's error names its argument
    proc = _run([sys.executable, f"bench_{name}.py", "--size", "4096", "--repeats", "3"], root, cache)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert name in proc.stdout and "py_function" in proc.stdout and "machine:" in proc.stdout, proc.stdout


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


def test_cli_writes_the_project_and_refuses_to_overwrite(tmp_path):
    proc = subprocess.run([OPFORGE, "new", "my_op", "--dir", str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    names = sorted(p.name for p in (tmp_path / "my_op").iterdir())
    assert names == sorted(f.format(name="my_op") for f in scaffold.FILES)
    again = subprocess.run([OPFORGE, "new", "my_op", "--dir", str(tmp_path)], capture_output=True, text=True)
    assert again.returncode == 2 and "exists" in again.stderr
    bad = subprocess.run([OPFORGE, "new", "My-Op", "--dir", str(tmp_path)], capture_output=True, text=True)
    assert bad.returncode == 2 and "snake_case" in bad.stderr


def test_the_scaffold_builds_and_passes_its_tests_check_and_benchmark_unchanged(tmp_path, cache):
    scaffold.new_project("scaled_square", str(tmp_path))
    _assert_project_works(tmp_path / "scaled_square", "scaled_square", cache)


def test_softplus_from_the_scaffold_with_two_lines_of_cpp(tmp_path, cache):
    """A user's own op, y = scale * log1p(exp(x)) with dy/dx = scale * sigmoid(x), made from the
    scaffold by changing what is marked YOUR MATHS: two lines of C++ (the formulas), the NumPy
    reference, the benchmark's TensorFlow version and the forward test's tolerance."""
    name = "softplus_op"
    root = tmp_path / name
    scaffold.new_project(name, str(tmp_path))
    element = root / f"{name}_element.h"
    cpp = element.read_text()
    changed = cpp.replace("  return scale * x * x;", "  return scale * std::log1p(std::exp(x));")
    changed = changed.replace("  return C(2) * scale * x * g;", "  return scale * g / (C(1) + std::exp(-x));")
    # Two lines of C++ changed, nothing added.
    assert changed.count("\n") == cpp.count("\n")
    assert sum(a != b for a, b in zip(cpp.splitlines(), changed.splitlines())) == 2
    element.write_text(changed)
    python = root / f"{name}.py"
    py = python.read_text()
    py = py.replace("    return (np.asarray(scale, x.dtype) * x * x).astype(x.dtype)",
                    "    return (np.asarray(scale, x.dtype) * np.log1p(np.exp(x))).astype(x.dtype)")
    python.write_text(py)
    bench = root / f"bench_{name}.py"
    bench.write_text(bench.read_text().replace("lambda: scale * x * x,", "lambda: scale * tf.math.softplus(x),"))
    # The scaffold's forward test is bit for bit against NumPy in the same order; softplus's
    # exp/log1p may differ from NumPy's by an ulp, so the user relaxes that one line too.
    test = root / f"test_{name}.py"
    test.write_text(test.read_text().replace(
        "    np.testing.assert_array_equal(tf.cast(y, tf.float64), tf.cast(tf.cast(expected, dtype), tf.float64))",
        "    np.testing.assert_allclose(tf.cast(y, tf.float64), tf.cast(tf.cast(expected, dtype), tf.float64),"
        " rtol={'float16': 1e-3, 'bfloat16': 8e-3, 'float32': 1e-6}.get(dtype.name, 1e-14))"))
    _assert_project_works(root, name, cache)


@pytest.mark.skipif(not opforge.build.cuda_sim_available(),
                    reason="no CUDA toolkit headers: the cuda_sim build needs them (not a GPU, not nvcc)")
@pytest.mark.parametrize("bug,expected", [
    # a wrong index: each thread reads the mirrored element
    (("    y[i] = Num<T>::From(Value(Num<T>::To(x[i]), scale));",
      "    y[i] = Num<T>::From(Value(Num<T>::To(x[n - 1 - i]), scale));"),
     r"FAIL cuda_sim: .*output 0 differs by"),
    # a barrier the block's first thread never reaches
    (("       i += int64_t(blockDim.x) * gridDim.x) {{\n    y[i]".replace("{{", "{"),
      "       i += int64_t(blockDim.x) * gridDim.x) {\n    if (threadIdx.x == 0) return;\n    __syncthreads();\n    y[i]"),
     r"FAIL cuda_sim: .*ForwardKernel.*__syncthreads"),
], ids=["wrong index", "divergent barrier"])
def test_cuda_sim_check_finds_a_bug_planted_in_the_scaffolds_cuda_kernel(tmp_path, cache, bug, expected):
    """`opforge check --cuda-sim` runs the scaffold's CUDA kernel on the CPU against its CPU
    kernel: a kernel bug planted in my_op.cu fails it, with what went wrong, on a machine without
    a GPU (the unchanged kernel passes: the scaffold's own tests run the same check)."""
    name = "planted_op"
    scaffold.new_project(name, str(tmp_path))
    cu = tmp_path / name / f"{name}.cu"
    text = cu.read_text()
    assert text.count(bug[0]) == 1, bug[0]
    cu.write_text(text.replace(bug[0], bug[1]))
    proc = _run([OPFORGE, "check", "--cuda-sim", "--checks", "ops", f"{name}:{name}"], tmp_path / name, cache)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert re.search(expected, proc.stdout), proc.stdout

"""The `opforge` command: doctor, verify and bench run and say what they should."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import opforge
import opforge.tools.bench
from helpers import package_copy, run_python

CLI = str(Path(sys.executable).parent / "opforge")


def _run(*args, timeout=600):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=timeout, env=env)


def test_doctor_reports_build_and_kernels():
    proc = _run("doctor")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    import tensorflow as tf

    assert f"TensorFlow running:   {tf.__version__}" in out
    assert f"TensorFlow built for: {tf.__version__}" in out
    assert "_GLIBCXX_USE_CXX11_ABI" in out
    for name in opforge.ops.OP_NAMES:
        assert name in out
    import re

    assert re.search(r"Opforge>ElementMul\s+CPU: .*int64", out)


def test_doctor_exits_non_zero_when_the_library_cannot_load(tmp_path):
    package_copy(tmp_path, tf_version="1.15.0")  # `import opforge` only warns; doctor says why
    proc = run_python(
        """
        import sys
        from opforge.tools import cli
        sys.exit(cli.main(["doctor"]))
        """,
        cwd=tmp_path, env_extra={"PYTHONPATH": str(tmp_path)},
    )
    assert proc.returncode == 1
    assert "cannot be loaded" in proc.stdout and "1.15.0" in proc.stdout


def test_verify_json_all_rows_within_tolerance():
    proc = _run("verify", "--json", "--size", "4096", "--repeats", "3")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = json.loads(proc.stdout)
    assert [r["op"] for r in rows] == [spec.name for spec in opforge.ops.SPECS]
    for r in rows:
        assert r["ok"] and r["forward_error"] <= r["forward_tolerance"]
        spec = next(s for s in opforge.ops.SPECS if s.name == r["op"])
        if spec.differentiable:
            assert r["gradient_error"] <= r["gradient_tolerance"] <= 1e-5
        else:
            assert r["gradient_error"] is None
        assert r["speed_ratio"] > 0


def test_bench_runs_every_speed_case_of_every_spec_at_the_size_asked():
    proc = _run("bench", "--size", "4096", "--repeats", "1", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = json.loads(proc.stdout)
    # Every case, but those shown only at their default size (a second size of the same case).
    import tensorflow as tf

    expected = [s.name for s in opforge.ops.SPECS for case in s.speed if case.setup(4096, tf.float32) is not None]
    assert [r["op"] for r in rows] == expected
    # Shown at their default size only: the 1M py_function cases and the GEMM-vs-matmul case.
    assert sum(len(s.speed) for s in opforge.ops.SPECS) - len(expected) == 3
    assert {r["op"] for r in rows} == {spec.name for spec in opforge.ops.SPECS}
    cases = [r["case"] for r in rows]
    assert any("py_function" in c for c in cases) and any("broadcast" in c for c in cases)
    # --size honoured everywhere: no case at its default size (4M elements, model batches 8, 16).
    assert not any(d in c for c in cases for d in ("4194304", "[8, ", "[16, ", "[2048")), cases
    for r in rows:
        assert any(k.startswith("ratio_vs_") for k in r)
        assert r["machine"] == opforge.tools.bench.machine() and "cores" in r["machine"]


def test_bench_and_verify_select_ops_and_reject_bad_sizes():
    proc = _run("bench", "resize_bilinear", "--size", "4096", "--repeats", "1", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert {r["op"] for r in json.loads(proc.stdout)} == {"resize", "resize_bilinear", "resize_bilinear_grad"}
    proc = _run("verify", "leaky_relu_with_mask", "--size", "1024", "--repeats", "1", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [r["op"] for r in json.loads(proc.stdout)] == ["leaky_relu_with_mask"]
    proc = _run("bench", "--size", "0")
    assert proc.returncode == 2 and "--size" in proc.stderr


def test_bench_rejects_unknown_op():
    proc = _run("bench", "no_such_op")
    assert proc.returncode == 2
    assert "unknown op" in proc.stdout

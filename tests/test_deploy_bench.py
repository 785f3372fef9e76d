"""`opforge bench deploy`: the detector and its post-processing in ONNX Runtime and LiteRT against
TensorFlow, run at a tiny size with one interleaved round so that it cannot rot (its figures are
for the benchmark, not for a test)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("tf2onnx")

import opforge.tools.bench  # noqa: E402
import opforge.lite  # noqa: E402
import opforge.onnx  # noqa: E402

CLI = str(Path(sys.executable).parent / "opforge")
needs_libraries = pytest.mark.skipif(
    not (opforge.onnx.library_path(must_exist=False).is_file() and opforge.lite.library_path(must_exist=False).is_file()),
    reason="libopforge_ort.so or libopforge_lite.so not built (opforge doctor says why)")


def _run(*args, timeout=300):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([CLI, "bench", "deploy", *args], capture_output=True, text=True, timeout=timeout, env=env)


@needs_libraries
def test_deploy_bench_runs_every_case_and_the_runtimes_agree():
    proc = _run("--size", "64", "--repeats", "1", "--threads", "2", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["machine"] == opforge.tools.bench.machine()
    assert report["threads"] == 2 and report["size"] == 64 and report["failures"] == []
    cases = [r["case"] for r in report["rows"]]
    assert cases == ["detector 64px, batch 1", "detector 64px, batch 8",
                     "YoloPostprocess alone, batch 1", "floor (x[0,0,0,0] + 1 of the maps), batch 1",
                     "YoloPostprocess alone, batch 8", "floor (x[0,0,0,0] + 1 of the maps), batch 8"]
    for r in report["rows"]:
        for key in ("tf_ms", "ort_ms", "lite_ms", "ratio_ort", "ratio_lite"):
            assert r[key] > 0, (r["case"], key)
    for r in report["rows"][:3]:  # the checked cases: detections exist, counts and classes equal
        assert "ORT:" in r["check"] and "LiteRT:" in r["check"] and "DIFFERENT" not in r["check"], r["check"]
        assert "ORT: 0 detections" not in r["check"], r["check"]


def test_deploy_bench_rejects_a_bad_size():
    proc = _run("--size", "33")
    assert proc.returncode == 2 and "multiple of 32" in proc.stderr

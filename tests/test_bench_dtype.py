"""`opforge bench --dtype bfloat16`, the machine line's AVX512-BF16 / AMX, and `opforge yolo bench
--policy mixed_bfloat16`: every speed case really runs in the dtype asked for, ops without that
kernel are left out with a line saying so, and the headers say what ran. No timing assertions."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tensorflow as tf

import opforge
import opforge._machine
import opforge.tools.bench
from opforge.ops.spec import float_output_dtypes

CLI = str(Path(sys.executable).parent / "opforge")
BF16 = tf.bfloat16


def _run(*args, timeout=300):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=timeout, env=env)


def test_bench_bfloat16_rows_are_bfloat16_and_count_two_byte_elements():
    proc = _run("bench", "leaky_relu", "--dtype", "bfloat16", "--size", "4096", "--repeats", "2", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = json.loads(proc.stdout)
    assert {r["op"] for r in rows} == {"leaky_relu", "leaky_relu_with_mask"}
    for r in rows:
        assert r["dtype"] == "bfloat16", r
        assert "bfloat16 [4096]" in r["case"] and "float32" not in r["case"], r
        assert "AVX512-BF16:" in r["machine"] and "AMX:" in r["machine"]
    cases = {(r["op"], r["case"].split(" bfloat16")[0]): r for r in rows}
    # bytes_moved / seconds: 2 bytes an element (forward: read x, write y; gradient: 3 tensors).
    for (op, case), per_element in ((("leaky_relu", "forward"), 2), (("leaky_relu", "gradient"), 3),
                                    (("leaky_relu_with_mask", "forward"), 3)):
        r = cases[(op, case)]
        moved = r["opforge_GBps"] * 1e9 * r["opforge_ms"] / 1e3
        assert moved == pytest.approx(per_element * 2 * 4096, rel=1e-6), (op, case, moved)
        assert "ratio_vs_tf" in r and ("ratio_vs_copy" in r) == (op == "leaky_relu"), r
    # The py_function rival stays, on bfloat16 NumPy arrays.
    assert any("ratio_vs_py_function" in r for r in rows)


def test_leaky_relu_candidates_compute_in_bfloat16():
    spec = next(s for s in opforge.ops.SPECS if s.name == "leaky_relu")
    run = spec.speed[0].setup(4096, BF16)
    assert run.candidates["opforge"]().dtype == BF16
    assert run.candidates["tf"]().dtype == BF16
    assert run.bytes_moved == 2 * 2 * 4096
    assert "bfloat16" in run.label
    # float32 as before.
    run = spec.speed[0].setup(4096, tf.float32)
    assert run.candidates["opforge"]().dtype == tf.float32 and run.bytes_moved == 2 * 4 * 4096


_BF16_CASES = [(spec, i) for spec in opforge.ops.SPECS if BF16 in spec.dtypes
               for i, speed in enumerate(spec.speed) if speed.dtypes is None or BF16 in speed.dtypes]


@pytest.mark.parametrize("spec, index", _BF16_CASES, ids=[f"{s.name}-{i}" for s, i in _BF16_CASES])
def test_every_bfloat16_speed_case_computes_in_bfloat16(spec, index):
    """What `opforge bench --dtype bfloat16` checks before timing a case (a setup that ignored its
    dtype would time float32 under a bfloat16 label): every candidate that returns float tensors
    returns bfloat16 ones where the op itself does."""
    run = spec.speed[index].setup(4096, BF16)
    if run is None:  # shown only at its default size
        pytest.skip("a default-size-only case")
    opforge.tools.bench.check_dtype(spec, run, BF16)
    ours = float_output_dtypes(run.candidates["opforge"]())
    case = next(c for c in spec.cases if c.dtypes is None or BF16 in c.dtypes)
    if BF16 in float_output_dtypes(spec.call(spec.op, case, case.tensors(BF16))):
        assert BF16 in ours, (spec.name, run.label, ours)


def test_a_setup_that_ignores_its_dtype_is_caught():
    from opforge.ops.spec import SpeedRun

    spec = next(s for s in opforge.ops.SPECS if s.name == "leaky_relu")
    x = tf.random.normal([64])  # float32, whatever was asked for
    run = SpeedRun("forward [64]", {"opforge": lambda: opforge.ops.leaky_relu(x), "tf": lambda: tf.nn.leaky_relu(x)})
    with pytest.raises(RuntimeError, match="set up in bfloat16.*returns float32.*speed_normal"):
        opforge.tools.bench.check_dtype(spec, run, BF16)


def test_bench_bfloat16_leaves_out_ops_without_a_bfloat16_kernel():
    proc = _run("bench", "griffin_lim", "yolo_targets", "--dtype", "bfloat16", "--size", "4096", "--repeats", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("machine: ") and "AVX512-BF16: " in lines[0] and "AMX: " in lines[0], lines[0]
    assert lines[1] == "dtype: bfloat16"
    assert "skipped in bfloat16: griffin_lim has no bfloat16 kernel" in lines
    assert "skipped in bfloat16: yolo_targets has no bfloat16 kernel" in lines
    assert "opforge ms" not in proc.stdout  # nothing run, in float32 or otherwise
    proc = _run("bench", "--dtype", "float16")
    assert proc.returncode == 2 and "--dtype" in proc.stderr


def test_bench_bfloat16_json_lists_what_it_left_out(capsys):
    assert opforge.tools.bench.run(["mfcc_to_mel"], 4096, 1, True, "bfloat16") == 0
    assert json.loads(capsys.readouterr().out) == [
        {"op": "mfcc_to_mel", "dtype": "bfloat16", "machine": opforge.tools.bench.machine(),
         "skipped": "skipped in bfloat16: mfcc_to_mel has no bfloat16 kernel"}]


def test_machine_line_says_avx512_bf16_and_amx(monkeypatch):
    line = opforge.tools.bench.machine()
    assert "cores" in line and "; AVX512-BF16: " in line and ", AMX: " in line
    model, flags = opforge.tools.bench.cpu_flags()
    assert ("AVX512-BF16: yes" in line) == ("avx512_bf16" in flags)
    for flags, expected in (({"avx2", "avx512f", "avx512_bf16"}, "AVX512-BF16: yes, AMX: no"),
                            ({"avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16"}, "AVX512-BF16: yes, AMX: yes"),
                            ({"avx2"}, "AVX512-BF16: no, AMX: no")):
        monkeypatch.setattr(opforge._machine, "cpu_flags", lambda flags=flags: ("Some CPU", flags))
        assert expected in opforge.tools.bench.machine()


def test_dtype_policy_is_set_and_restored():
    import keras

    from opforge.tools import yolo_bench as bench

    before = keras.config.dtype_policy().name
    with pytest.raises(RuntimeError):
        with bench.dtype_policy("mixed_bfloat16") as policy:
            assert policy.compute_dtype == "bfloat16" and policy.variable_dtype == "float32"
            assert keras.layers.Dense(2).compute_dtype == "bfloat16"
            raise RuntimeError("restored all the same")
    assert keras.config.dtype_policy().name == before


def test_yolo_bench_under_mixed_bfloat16_says_so_and_computes_in_bfloat16():
    proc = _run("yolo", "bench", "infer", "--size", "96", "--repeats", "2", "--policy", "mixed_bfloat16")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("machine: ") and "AVX512-BF16: " in lines[0] and "AMX: " in lines[0]
    assert lines[1] == "policy: mixed_bfloat16"
    rows = [line for line in lines if line.startswith("infer YoloV3Tiny 96")]
    assert len(rows) == 2 and all("layers compute in bfloat16" in r for r in rows), proc.stdout
    proc = _run("yolo", "bench", "--policy", "mixed_float16")
    assert proc.returncode == 2 and "--policy" in proc.stderr


def test_rivals_that_cannot_run_here_are_named_not_timed():
    # TensorFlow's bfloat16 convolutions refuse under ONEDNN_MAX_CPU_ISA=AVX2: the rival is left
    # out with its error's first line; opforge's own candidate is never excused.
    import types

    import tensorflow as tf

    from opforge.tools import bench

    def refuses():
        raise tf.errors.InvalidArgumentError(None, None, "could not create a primitive\nmore")

    run = types.SimpleNamespace(candidates={"opforge": lambda: 1, "tf": refuses, "copy": lambda: 2})
    assert bench.rivals_refused(run, tf) == {"tf": "could not create a primitive"}
    run = types.SimpleNamespace(candidates={"opforge": refuses, "tf": lambda: 1})
    assert bench.rivals_refused(run, tf) == {}

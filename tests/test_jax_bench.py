"""`opforge bench --jax` (opforge.tools.jax_bench): opforge.jax's ops against the same maths in
jax.numpy under jax.jit. A tiny run prints the machine line and rows with a ratio and a bits
column; every op of opforge.jax has a row. No timing assertions."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

pytest.importorskip("jax")
pytest.importorskip("opforge.jax")  # the XLA FFI handlers (libopforge_ffi.so)

from opforge.tools import cli, jax_bench  # noqa: E402


def test_every_op_of_opforge_jax_has_a_row():
    ops = {c.op for c in jax_bench.cases()}
    assert set(jax_bench.op_functions()) <= ops, set(jax_bench.op_functions()) - ops
    assert "leaky_relu" in jax_bench.op_functions() and "targets" not in jax_bench.op_functions()
    # Where JAX has no counterpart the row says so; everywhere else a rival is timed.
    alone = {"combined_non_max_suppression", "yolo_postprocess", "yolo_targets", "mel_to_stft"}
    grads = {c.op for c in jax_bench.cases() if c.grad}
    assert {"leaky_relu", "swish", "conv2d_transpose", "fused_conv2d_bias_leaky_relu"} <= grads
    assert not alone & grads


def test_tiny_run_prints_machine_ratio_and_bits(capsys):
    assert jax_bench.run(["leaky_relu_grad", "yolo_targets"], size=4096, repeats=2) == 0
    out = capsys.readouterr().out
    assert re.search(r"^machine: .*AVX512-BF16: (yes|no), AMX: ", out, re.M), out
    assert "dtype: float32" in out and "same bits" in out
    # op, case, opforge ms, jnp ms, ratio "1.23x", then the bits ("yes" or "no ...").
    row = re.search(r"^leaky_relu_grad +g, x \[1, 52, 52, 256\] +[\d.]+ +[\d.]+ +[\d.]+x +(yes|no)", out, re.M)
    assert row, out
    assert re.search(r"^yolo_targets .* - +- +no jnp rival", out, re.M), out


def test_cli_option_json_rows(capsys):
    assert cli.build_parser().parse_args(["bench", "--jax"]).jax
    assert cli.main(["bench", "--jax", "element_mul", "--size", "4096", "--repeats", "2", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["op"] for r in rows} == {"element_mul", "element_mul [grad]"}
    for r in rows:
        assert r["dtype"] == "float32" and "AVX512-BF16:" in r["machine"], r
        assert r["ratio_vs_jnp"] > 0 and r["same_bits"].startswith(("yes", "da ", "no")), r
        assert np.isclose(r["ratio_vs_jnp"], r["jnp_ms"] / r["opforge_ms"])
    # a * b broadcasting gives tf.multiply's bits: one rounding an element.
    assert all(r["same_bits"] == "yes" for r in rows if r["op"] == "element_mul")


def test_bad_arguments(capsys):
    assert jax_bench.run(["no_such_op"], None, 2) == 2
    assert "unknown op(s) no_such_op" in capsys.readouterr().out
    assert cli.main(["bench", "--jax", "--xla", "leaky_relu"]) == 2
    assert "--jax" in capsys.readouterr().out

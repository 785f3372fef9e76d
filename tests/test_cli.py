"""The `opforge` command: doctor, verify and bench run and say what they should; every argument
has a help line; a YOLO --model is the training's folder or the model.keras in it, and anything
else is one line, not a traceback."""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

import opforge
import opforge.tools.bench
from helpers import package_copy, run_python
from opforge.tools import cli, doctor

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
    assert re.search(r"Opforge>ElementMul\s+CPU: .*int64", out)
    # Why there are no CUDA kernels, where there are none: the real reason, not always "no nvcc".
    from opforge import _build_info as b

    line = next(line for line in out.splitlines() if "CUDA kernels:" in line)
    if not b.CUDA_VERSION and not tf.test.is_built_with_cuda():
        assert f"TensorFlow {doctor.tensorflow_package()} {b.TF_VERSION} is built without CUDA" in line, line
        assert "make build TF_PACKAGE=tensorflow" in line and "nvcc" not in line, line


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


# --- doctor: why no CUDA kernels were compiled --------------------------------------------------


def _build_info(cuda_version="", tf_is_cuda=False):
    return types.SimpleNamespace(CUDA_VERSION=cuda_version, CUDA_ARCHS="75-virtual;90-real" if cuda_version else "",
                                 TF_IS_CUDA_BUILD=tf_is_cuda, TF_VERSION="2.21.0")


def test_doctor_names_a_cpu_only_tensorflow_as_the_reason_whatever_nvcc_there_is():
    # CMakeLists.txt (OPFORGE_CUDA=AUTO) compiles no CUDA against a CPU-only TensorFlow, nvcc or not.
    for nvcc in ("/usr/local/cuda/bin/nvcc", ""):
        line = doctor.cuda_kernels(_build_info(), "2.21.0", package="tensorflow-cpu", nvcc=nvcc)
        assert line == ("not compiled: TensorFlow tensorflow-cpu 2.21.0 is built without CUDA (the GPU binding "
                        "needs the CUDA wheel: make build TF_PACKAGE=tensorflow)")
    # The package is named only when the running TensorFlow is the one built against.
    line = doctor.cuda_kernels(_build_info(), "2.20.0")
    assert line.startswith("not compiled: TensorFlow 2.21.0 is built without CUDA"), line


def test_doctor_says_no_nvcc_only_against_a_cuda_tensorflow():
    assert doctor.cuda_kernels(_build_info(tf_is_cuda=True), "2.21.0", nvcc="") == \
        "not compiled (no nvcc at build time)"
    line = doctor.cuda_kernels(_build_info(tf_is_cuda=True), "2.21.0", nvcc="/usr/local/cuda/bin/nvcc")
    assert "no nvcc at build time" in line and "nvcc is on PATH now, /usr/local/cuda/bin/nvcc" in line, line
    assert doctor.cuda_kernels(_build_info("12.9.86", True), "2.21.0") == \
        "compiled with nvcc 12.9.86 for 75-virtual;90-real, static CUDA runtime"


def test_the_running_tensorflow_package_is_named():
    import tensorflow as tf

    assert doctor.tensorflow_package() == ("tensorflow" if tf.test.is_built_with_cuda() else "tensorflow-cpu")


# --- every argument has a help line --------------------------------------------------------------


def _without_help(parser: argparse.ArgumentParser, words):
    """`opforge ... ARGUMENT` for every argument and subcommand of `parser`'s tree without help."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            if not action.help:
                yield " ".join(words + ["COMMAND"])
            helped = {choice.dest for choice in action._choices_actions if choice.help}
            for name, child in action.choices.items():
                if name not in helped:
                    yield " ".join(words + [name])
                yield from _without_help(child, words + [name])
        elif not action.help or action.help == argparse.SUPPRESS:
            yield " ".join(words + [action.option_strings[-1] if action.option_strings else action.dest])


def test_every_argument_of_every_subcommand_has_a_help_line():
    parser = cli.build_parser()
    assert not list(_without_help(parser, ["opforge"]))
    # The walk reaches the leaves: `opforge yolo export --model` and `opforge verify --repeats`.
    yolo = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["yolo"]
    export = next(a for a in yolo._actions if isinstance(a, argparse._SubParsersAction)).choices["export"]
    assert "model.keras" in next(a.help for a in export._actions if a.dest == "model")


@pytest.mark.parametrize("words", [
    ("bench", "gpu"),
    ("gpu-bench",),
    ("bench", "paths"),
    ("bench", "deploy"),
])
def test_every_argument_of_a_delegated_subcommand_has_a_help_line(words, monkeypatch):
    """`bench gpu`, `bench paths`, `bench deploy` parse their own options, in their own modules."""
    assert words in cli.DELEGATED

    class Parsed(Exception):
        pass

    def parse_args(self, args=None, namespace=None):
        raise Parsed(self)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_args)
    with pytest.raises(Parsed) as caught:
        cli.main(list(words))
    assert not list(_without_help(caught.value.args[0], ["opforge", *words]))


# --- yolo --model: the folder or the model.keras in it --------------------------------------------


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory):
    """What `opforge yolo train` writes, untrained: model.keras (YOLO-tiny, 64 px, 2 classes) and
    history.json, plus a 64 x 64 image to detect in."""
    import numpy as np
    import tensorflow as tf

    from opforge.models import app

    folder = tmp_path_factory.mktemp("yolo") / "run"
    folder.mkdir()
    app.build_model("tiny", 2, 64).save(folder / "model.keras")
    (folder / "history.json").write_text(json.dumps({"loss": [1.0], "val_map50": [], "seconds": 1.0,
                                                     "class_names": ["a", "b"], "input_size": 64, "kind": "tiny"}))
    image = np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)
    tf.io.write_file(str(folder.parent / "image.png"), tf.io.encode_png(image))
    return folder


def test_model_is_the_folder_or_the_model_keras_in_it(model_folder, tmp_path, capsys):
    assert cli.trained_folder(str(model_folder)) == model_folder
    assert cli.trained_folder(str(model_folder / "model.keras")) == model_folder
    image = str(model_folder.parent / "image.png")
    for model in (model_folder, model_folder / "model.keras"):
        out = tmp_path / f"{model.name}.png"
        assert cli.main(["yolo", "detect", image, "--model", str(model), "--out", str(out), "--score", "0.5"]) == 0
        assert out.exists() and f"{image}: " in capsys.readouterr().out


@pytest.mark.parametrize("command", ["detect", "eval", "export"])
@pytest.mark.parametrize("case", ["missing", "missing.keras", "other.keras", "history.json", "empty folder",
                                  "folder without history.json"])
def test_a_wrong_model_is_one_line_naming_the_path(command, case, model_folder, tmp_path, capsys):
    if case == "other.keras":
        (tmp_path / "other.keras").write_bytes((model_folder / "model.keras").read_bytes()[:100])
        path = tmp_path / "other.keras"
    elif case == "history.json":
        path = model_folder / "history.json"
    elif case == "empty folder":
        path = tmp_path
    elif case == "folder without history.json":
        (tmp_path / "model.keras").write_bytes(b"")
        path = tmp_path
    else:
        path = tmp_path / case
    images = [str(model_folder.parent / "image.png")] if command == "detect" else []
    assert cli.main(["yolo", command, *images, "--model", str(path), "--out", str(tmp_path / "out")]
                    if command != "eval" else ["yolo", command, "--model", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith(f"opforge yolo {command}: --model {path}: "), err
    assert err.rstrip().endswith("expected a folder written by `opforge yolo train` (model.keras, history.json) "
                                 "or the model.keras in it"), err
    assert not (tmp_path / "out").exists()


def test_a_wrong_model_from_the_command_line_is_one_line_and_no_traceback(tmp_path):
    proc = _run("yolo", "export", "--model", str(tmp_path / "demo_out" / "model.keras"), "--format", "tflite",
                timeout=300)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    # TensorFlow's C++ logging writes before absl is initialised, whatever TF_CPP_MIN_LOG_LEVEL says.
    ours = [line for line in proc.stderr.splitlines()
            if not re.match(r"WARNING: All log messages before absl|[IWEF]\d{4} \d\d:\d\d:", line)]
    assert ours == [
        f"opforge yolo export: --model {tmp_path}/demo_out/model.keras: not found; expected a folder written by "
        "`opforge yolo train` (model.keras, history.json) or the model.keras in it"], proc.stderr

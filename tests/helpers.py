"""What the tests share: child processes (fresh interpreters, bad inputs that must not crash
the test process), the fresh-process saving check, exact comparison and special values."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Dict

import numpy as np
import tensorflow as tf

from opforge.ops.spec import Sample, bits_equal, max_error  # noqa: F401  (re-exported for the tests)

TESTS_DIR = Path(__file__).resolve().parent


def run_python(code: str, cwd=None, timeout: float = 300, env_extra=None) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh Python process (the installed opforge, not the source tree)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(TESTS_DIR))
    env.update(env_extra or {})
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=cwd or TESTS_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def package_copy(tmp_path: Path, tf_version: str = "", junk_library: bool = False) -> Path:
    """A copy of the installed opforge package under `tmp_path` (run a child with
    `env_extra={"PYTHONPATH": str(tmp_path)}`), broken on purpose: `_build_info` naming another
    TensorFlow version, or a library file that is not a library."""
    import opforge

    copy = tmp_path / "opforge"
    shutil.copytree(Path(opforge.__file__).resolve().parent, copy,
                    ignore=shutil.ignore_patterns("__pycache__"))
    if tf_version:
        info = (copy / "_build_info.py").read_text().splitlines()
        (copy / "_build_info.py").write_text("\n".join(
            f'TF_VERSION = "{tf_version}"' if line.startswith("TF_VERSION") else line for line in info))
    if junk_library:
        (copy / "_opforge_ops.so").write_bytes(b"not a library")
    return copy


CHILD_CASES_RUNNER = """
import json, sys, traceback
import numpy as np
import tensorflow as tf
import opforge
from opforge.ops._common import lib
cases = json.loads(sys.stdin.read())
for name, code in cases.items():
    print("START " + name, flush=True)
    result = {"name": name}
    try:
        exec(code, {"tf": tf, "np": np, "opforge": opforge, "lib": lib})
        result["error"] = None
    except Exception as exc:  # the test decides which errors are right
        result["error"] = type(exc).__name__
        result["message"] = str(getattr(exc, "message", None) or exc)
    print("RESULT " + json.dumps(result), flush=True)
"""


def run_cases_in_child(cases: Dict[str, str], timeout: float = 600, crashes_are_results: bool = False
                       ) -> Dict[str, dict]:
    """Runs each snippet in one child process and returns {name: {error, message}}.

    A crash of the child (a segfault, an abort) fails with the name of the case that was
    running, so that no bad input can take down the test process itself. With
    `crashes_are_results` (TensorFlow's own functions, some of which abort on a bad input), a
    crash is that case's result instead (error "crash", the end of stderr as message) and a new
    child runs the cases after it.
    """
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    results: Dict[str, dict] = {}
    pending = dict(cases)
    while pending:
        proc = subprocess.run(
            [sys.executable, "-c", CHILD_CASES_RUNNER],
            input=json.dumps(pending),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            cwd=TESTS_DIR,
        )
        started = None
        for line in proc.stdout.splitlines():
            if line.startswith("START "):
                started = line[6:]
            elif line.startswith("RESULT "):
                r = json.loads(line[7:])
                results[r["name"]] = r
                pending.pop(r["name"], None)
                started = None
        if proc.returncode == 0:
            break
        if not crashes_are_results or started is None:
            raise AssertionError(
                f"child process died (exit code {proc.returncode}) while running case {started!r}\n"
                f"stderr tail:\n{proc.stderr[-3000:]}"
            )
        results[started] = {"name": started, "error": "crash", "message": proc.stderr[-1500:]}
        pending.pop(started)
    return results


def assert_round_trip_in_fresh_process(model, x: np.ndarray, tmp_path: Path, op: str,
                                       setup: str = "") -> None:
    """Saves `model` as `.keras` and as a SavedModel, loads both in a fresh process (after
    only `import opforge` and the `setup` lines, which import any custom model classes) and
    asserts that both give `model(x)` bit for bit and that the SavedModel's graph runs `op`."""
    expected = model(x).numpy()
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "expected.npy", expected)
    model.save(tmp_path / "model.keras")
    model.export(str(tmp_path / "saved"), verbose=False)
    spec = [None] + list(x.shape[1:])
    proc = run_python(
        f"""
        import numpy as np, tensorflow as tf, keras
        import opforge
        # `import opforge` registers the ops, gradients and layers (no register_all())
        {setup}
        x = np.load(r"{tmp_path}/x.npy"); expected = np.load(r"{tmp_path}/expected.npy")
        k = keras.models.load_model(r"{tmp_path}/model.keras")(x).numpy()
        sm = tf.saved_model.load(r"{tmp_path}/saved")  # held: serve() needs its variables
        s = sm.serve(tf.constant(x)).numpy()
        graph = sm.serve.get_concrete_function(tf.TensorSpec({spec})).graph.as_graph_def()
        ops = {{n.op for f in graph.library.function for n in f.node_def}} | {{n.op for n in graph.node}}
        print("KERAS_EQUAL", np.array_equal(k, expected))
        print("SAVEDMODEL_EQUAL", np.array_equal(s, expected))
        print("USES_OP", {op!r} in ops)
        """
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "KERAS_EQUAL True" in proc.stdout, proc.stdout
    assert "SAVEDMODEL_EQUAL True" in proc.stdout, proc.stdout
    assert "USES_OP True" in proc.stdout, proc.stdout


def check_bad_input(results: Dict[str, dict], case: str, error: str, fragments) -> None:
    """Asserts that bad-input case `case` (run by run_cases_in_child) raised `error` with a
    message that contains every fragment (the argument's name, what was given...)."""
    result = results[case]
    assert result["error"] == error, result
    for fragment in fragments:
        assert fragment in result["message"], (fragment, result["message"])


def special_values(shape, dtype, seed=0) -> tf.Tensor:
    """Random values (standard normal x 4) with opforge.ops.spec.SPECIAL_VALUES first: 0, -0, +-inf,
    NaN, tiny and half-overflowing values."""
    return Sample(tuple(shape), seed=seed, scale=4, specials=True).make(dtype)

"""`opforge fuzz`: malformed calls of every op, drawn from its spec, run in child processes.

Each call starts from one of the spec's own cases (forward or gradient) and breaks it one way:
an input's rank, a dimension (0, one more, 2^31 or 2^40 with an empty partner), its dtype, an
input replaced by a Python value (None, a string, a nested list, a scalar), an attribute of the
wrong type or out of range (negative, 0, huge, NaN, inf, a string, None, a list of the wrong
length), an unknown keyword, or special values (inf, NaN) in every input; in eager mode or
inside tf.function with every dimension unknown (the shape functions' turn). A new op is fuzzed
by adding its spec.

Every outcome is one of:
- ok: the op accepted the call (a malformed-looking call may be legal);
- clear: an error that names the op and the argument ("<Op>: <argument> must be ..., got ...")
  or TensorFlow's own argument errors that name the argument;
- vague: any other exception (a bare AttributeError, OverflowError, KeyError, an error that
  names no argument, TensorFlow's positional "input #1(zero-based)");
- crash: the child process died (a signal, an abort);
- hang: a call ran past the time limit.

Calls run in batches in a child process; a crash or hang costs only the call that caused it
(the child is restarted after it). The draw is deterministic in (seed, op, index).
"""
from __future__ import annotations

import dataclasses
import json
import os
import random
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from opforge.tools import _child as child_io

# "<Op>: <argument> must be ..." (opforge's messages), or an argument named in quotes.
CLEAR_ERROR = re.compile(r"\b[A-Z][A-Za-z0-9]+: [a-z_][^:]*? (must|does not|cannot|is not) "
                         r"|(argument|Input|attr) '\w+'|\b[a-z_]+ must (be|have) ")
VAGUE_ERROR = re.compile(r"zero-based|Shape must be rank|Dimensions must be equal|object has no attribute|"
                         r"unhashable|not subscriptable|Traceback")
# Exceptions a malformed call may raise when the message is clear (OverflowError: a Python int
# beyond the float range as a float argument, TensorFlow's class for it too).
CLEAR_TYPES = {"InvalidArgumentError", "ValueError", "TypeError", "OverflowError", "NotImplementedError",
               "UnimplementedError", "OutOfRangeError", "ResourceExhaustedError"}

MUTATIONS = ("rank", "dimension", "empty_huge", "dtype", "python_value", "attr", "unknown_kwarg",
             "specials", "graph_unknown")
WRONG_DTYPES = ("int8", "uint8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64",
                "bool", "complex64", "string")
WRONG_ATTR_VALUES: Tuple[Any, ...] = (
    None, "", "x", -1, 0, 2**31, 2**63, -(2**63), 10**400, float("nan"), float("inf"), -1.5, 0.5, True,
    [], [0], [1, 1, 1], [-1, -1], [2**31, 2**31], [[1, 2], [3]], (1.5, 2.5), {"a": 1}, b"SAME",
)
WRONG_PYTHON_INPUTS: Tuple[Any, ...] = (None, "x", 3, 2.5, [], [[1, 2], [3]], True, b"\x00", {"a": 1})


@dataclass
class Outcome:
    op: str
    index: int
    call: str
    kind: str  # ok, clear, vague, crash, hang
    error: str = ""
    message: str = ""


def _spec_by_name():
    import opforge

    return {spec.name: spec for spec in opforge.ops.SPECS}


def draw_call(spec, index: int, seed: int):
    """The index-th malformed call of `spec`: (description, thunk). Deterministic."""
    import numpy as np
    import tensorflow as tf

    rng = random.Random(f"{seed}:{spec.name}:{index}")
    cases = list(spec.cases) + list(spec.gradient_cases)
    case = rng.choice(cases)
    dtypes = [d for d in spec.dtypes if case.dtypes is None or d in case.dtypes]
    dtype = rng.choice(dtypes)
    arrays = [s.make(dtype).numpy() for s in case.inputs]
    inputs: List[Any] = [tf.constant(a) for a in arrays]
    attrs: Dict[str, Any] = dict(case.attrs)
    mutation = rng.choice(MUTATIONS)
    where = rng.randrange(len(inputs)) if inputs else 0
    note = ""
    graph = False
    if mutation == "rank" and inputs:
        a = arrays[where]
        if a.ndim and rng.random() < 0.5:
            inputs[where] = tf.constant(a[..., 0] if a.shape[-1] else np.zeros(a.shape[:-1], a.dtype))
        else:
            inputs[where] = tf.constant(a[..., None])
        note = f"input {where} rank {a.ndim} -> {inputs[where].shape.rank}"
    elif mutation == "dimension" and inputs and arrays[where].ndim:
        a = arrays[where]
        d = rng.randrange(a.ndim)
        shape = list(a.shape)
        shape[d] = rng.choice([0, shape[d] + 1, max(shape[d] - 1, 0), 1])
        inputs[where] = tf.constant(np.resize(a, shape) if np.prod(shape) else np.zeros(shape, a.dtype))
        note = f"input {where} shape {list(a.shape)} -> {shape}"
    elif mutation == "empty_huge" and inputs and arrays[where].ndim:
        # No elements, but huge sizes around the zero: products of sizes that overflow, outputs
        # whose shapes cannot exist.
        a = arrays[where]
        shape = list(a.shape)
        zero = rng.randrange(len(shape))
        shape[zero] = 0
        others = [d for d in range(len(shape)) if d != zero]
        for d in rng.sample(others, rng.randint(1, len(others))) if others else []:
            shape[d] = rng.choice([2**31 - 1, 2**31, 2**40, 2**62])
        # TensorFlow itself refuses a shape whose sizes other than 0 multiply past 2^63.
        while np.prod([float(v) for v in shape if v]) >= 2.0**63:
            shape[max(others, key=lambda d: shape[d])] //= 2**20
        inputs[where] = tf.zeros(shape, a.dtype)
        note = f"input {where} shape {shape}"
    elif mutation == "dtype" and inputs:
        name = rng.choice(WRONG_DTYPES)
        a = arrays[where]
        if name == "string":
            inputs[where] = tf.constant(np.full(a.shape, "x", dtype=object)) if a.size < 10000 else tf.constant("x")
        else:
            inputs[where] = tf.cast(tf.constant(np.nan_to_num(a.astype(np.float64)) if a.dtype.kind == "f" else a),
                                    getattr(tf, name))
        note = f"input {where} as {name}"
    elif mutation == "python_value" and inputs:
        value = rng.choice(WRONG_PYTHON_INPUTS)
        inputs[where] = value
        note = f"input {where} = {value!r}"
    elif mutation == "attr" and attrs:
        key = rng.choice(sorted(attrs))
        value = rng.choice(WRONG_ATTR_VALUES)
        attrs[key] = value
        note = f"{key}={value!r}"[:80]
    elif mutation == "unknown_kwarg":
        attrs["not_an_argument"] = 1
        note = "not_an_argument=1"
    elif mutation == "specials":
        special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan])
        for i, a in enumerate(arrays):
            if a.dtype.kind == "f" and a.size:
                flat = a.astype(np.float64).reshape(-1).copy()
                flat[: min(flat.size, 5)] = special[: min(flat.size, 5)]
                inputs[i] = tf.cast(tf.constant(flat.reshape(a.shape)), inputs[i].dtype)
        note = "inf/NaN in every float input"
    else:
        mutation = "graph_unknown"
        graph = True
        # One input of another rank, every dimension unknown, inside tf.function.
        if inputs and rng.random() < 0.7:
            a = arrays[where]
            rank = max(a.ndim + rng.choice([-1, 1]), 0)
            inputs[where] = tf.zeros([1] * rank, a.dtype)
            note = f"tf.function, input {where} as rank {rank}, dims unknown"
        else:
            note = "tf.function, dims unknown"
    description = f"{spec.name} [{case.name}] {dtype.name} {mutation}: {note}"
    call_case = dataclasses.replace(case, attrs=attrs)

    def thunk():
        if not graph:
            return spec.call(spec.op, call_case, inputs)
        signature = [tf.TensorSpec([None] * x.shape.rank, x.dtype) for x in inputs]
        fn = tf.function(lambda *xs: spec.call(spec.op, call_case, xs), input_signature=signature)
        return fn(*inputs)

    return description, thunk


def classify(exc: BaseException) -> Tuple[str, str, str]:
    """(kind, error type, message) of an exception a malformed call raised."""
    name = type(exc).__name__
    message = str(getattr(exc, "message", None) or exc)
    if name in CLEAR_TYPES and CLEAR_ERROR.search(message) and not VAGUE_ERROR.search(message):
        return "clear", name, message
    return "vague", name, message


def _child(seed: int, todo: List[Tuple[str, int]]) -> None:
    """Runs calls, printing START and RESULT lines (the parent reads them)."""
    import tensorflow as tf

    tf.get_logger().setLevel("ERROR")
    specs = _spec_by_name()
    # The fuzzer's own test makes one call crash or hang: "op:index:crash" or "op:index:hang".
    self_test = os.environ.get("OPFORGE_FUZZ_SELF_TEST", "")
    for op, index in todo:
        print("START " + json.dumps([op, index]), flush=True)
        if self_test == f"{op}:{index}:crash":
            os.abort()
        if self_test == f"{op}:{index}:hang":
            time.sleep(10**6)
        description = ""
        try:
            description, thunk = draw_call(specs[op], index, seed)
            thunk()
            kind, error, message = "ok", "", ""
        except Exception as exc:  # noqa: BLE001: classifying every error is the point
            kind, error, message = classify(exc)
        print("RESULT " + json.dumps({"op": op, "index": index, "call": description, "kind": kind,
                                      "error": error, "message": message[:400]}), flush=True)


def run(calls_per_op: int = 200, seed: int = 0, timeout: float = 60.0, ops: Optional[List[str]] = None,
        batch: int = 100, verbose: bool = False) -> Tuple[List[Outcome], Dict[str, Dict[str, int]]]:
    """Runs `calls_per_op` malformed calls of every op (or of `ops`) in child processes; returns
    the outcomes that were not ok or clear, and counts per op and kind."""
    names = [s for s in _spec_by_name() if not ops or s in ops]
    todo = [(op, i) for op in names for i in range(calls_per_op)]
    counts = {op: {"ok": 0, "clear": 0, "vague": 0, "crash": 0, "hang": 0} for op in names}
    bad: List[Outcome] = []
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    while todo:
        chunk, todo = todo[:batch], todo[batch:]
        proc = subprocess.Popen([sys.executable, "-c", f"from opforge.tools.fuzz import _child; import json, sys; "
                                 f"_child({seed}, json.loads(sys.stdin.readline()))"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        proc.stdin.write((json.dumps(chunk) + "\n").encode())
        proc.stdin.close()
        done, started = set(), None

        def on_line(line: str) -> Optional[str]:
            nonlocal started
            if line.startswith("START "):
                started = tuple(json.loads(line[6:]))
                return child_io.START
            if line.startswith("RESULT "):
                r = json.loads(line[7:])
                done.add((r["op"], r["index"]))
                counts[r["op"]][r["kind"]] += 1
                if r["kind"] not in ("ok", "clear"):
                    bad.append(Outcome(**r))
                if verbose:
                    print(f"{r['kind']:6s} {r['call']}" + (f"\n       {r['error']}: {r['message'][:200]}"
                                                           if r["kind"] != "ok" else ""))
                started = None
                return child_io.DONE
            return None

        hung, stderr_tail = child_io.pump(proc, timeout, on_line)
        stderr = stderr_tail.decode(errors="replace")
        if started is not None and started not in done:
            op, index = started
            kind = "hang" if hung else "crash"
            counts[op][kind] += 1
            description = draw_description(op, index, seed)
            bad.append(Outcome(op, index, description, kind, f"exit code {proc.returncode}", stderr[-600:]))
        elif not done:
            raise RuntimeError(f"the fuzz child process ran no call (exit code {proc.returncode}):\n{stderr}")
        # The rest of the chunk goes back in line (after a crash or hang, in a fresh child).
        todo = [c for c in chunk if c not in done and c != started] + todo
    return bad, counts


def draw_description(op: str, index: int, seed: int) -> str:
    """The description of a call, drawn again in a child (the parent never imports TensorFlow)."""
    code = (f"from opforge.tools.fuzz import _spec_by_name, draw_call\n"
            f"print(draw_call(_spec_by_name()[{op!r}], {index}, {seed})[0])")
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                             env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
        return out.stdout.strip().splitlines()[-1] if out.stdout.strip() else f"{op} #{index}"
    except (subprocess.SubprocessError, OSError):
        return f"{op} #{index}"


def main(calls_per_op: int, seed: int, timeout: float, ops: Optional[List[str]], verbose: bool) -> int:
    """`opforge fuzz`: prints a table of outcomes per op and every crash, hang and vague error;
    exits 1 if there is any."""
    start = time.monotonic()
    bad, counts = run(calls_per_op, seed, timeout, ops, verbose=verbose)
    print(f"{'op':32s} {'calls':>6s} {'ok':>6s} {'clear':>6s} {'vague':>6s} {'crash':>6s} {'hang':>6s}")
    total = {k: 0 for k in ("ok", "clear", "vague", "crash", "hang")}
    for op, c in counts.items():
        print(f"{op:32s} {sum(c.values()):6d} " + " ".join(f"{c[k]:6d}" for k in total))
        for k in total:
            total[k] += c[k]
    print(f"{'all':32s} {sum(total.values()):6d} " + " ".join(f"{total[k]:6d}" for k in total))
    print(f"seed {seed}, {calls_per_op} calls per op, {time.monotonic() - start:.0f} s")
    for o in bad:
        print(f"\n{o.kind.upper()}: {o.call}\n  {o.error}: {o.message[:500]}")
    return 1 if bad else 0

"""`opforge bench`: every speed case of every op spec, opforge against its rivals (the
TensorFlow built-in, the same op written as `tf.py_function` over NumPy, a plain memory copy of
the same bytes), timed interleaved in one process; medians and ratios.

A ratio above 1 means opforge is faster (ratio = other's median / opforge's median). `--size`
sets the element count of every case (cases at model shapes scale their batch to it). The
cases come from `opforge.ops.SPECS`; an op adds no line here.

`--dtype bfloat16` (default float32) sets up every case in bfloat16 (`SpeedCase.setup(size,
dtype)`): the float inputs are bfloat16, opforge and its TensorFlow rival(s) both compute in it
(a TensorFlow op without a bfloat16 kernel, as the NMS, casts to float32 and back, and the label
says so), the `py_function` rivals compute on bfloat16 NumPy arrays, the `copy` rival copies the
bfloat16 bytes, and GB/s counts 2 bytes an element. A case whose op has no bfloat16 kernel (not
in its spec's dtypes: the audio ops, the target assignment) is left out with a line saying so,
never run in float32; a candidate whose outputs are not in the dtype asked for (a setup that
ignored it) stops the run.

`--xla` times something else: each case's opforge call inside tf.function(jit_compile=True)
(row "<op> [xla]") against the same call in a plain tf.function ("graph") and eagerly
("eager"), ratios above 1 meaning faster under XLA. Where an op runs as an FFI custom call
(`opforge doctor` says which), the difference at small sizes is the custom call's overhead against
TensorFlow's kernel launch; at large ones XLA runs the same kernel.

`--jax` times opforge.jax instead (opforge.tools.jax_bench): each op's FFI call under jax.jit
against the same maths in jax.numpy / jax.lax under jax.jit, with a column saying whether the two
give the same bits, and jax.grad rows for the element-wise ops and the convolutions; ratios above
1 mean the FFI call is faster. Ops JAX has no counterpart of are timed alone ("no jnp rival").

Every benchmark's header starts with `machine()`: the CPU model, its vector extensions, and
whether it has AVX512-BF16 and AMX (what bfloat16 figures depend on). `opforge bench paths`,
`bench deploy`, `bench gpu` (its host CPU), `yolo bench` and `audio bench` print the same line.
"""
from __future__ import annotations

import json
import os
import sys
import textwrap
from typing import Dict, List, Optional, Sequence, Set, Tuple

from opforge.ops.spec import SpeedCase, SpeedRun
from opforge.tools.timing import interleaved
from opforge._machine import cpu_flags, machine  # noqa: F401  (opforge.tools.bench.machine, as before)

Row = Dict[str, object]


def row(op: str, run: SpeedRun, medians: Dict[str, float], dtype: str = "float32") -> Row:
    result: Row = {"op": op, "case": run.label, "dtype": dtype}
    base = medians["opforge"]
    for name, seconds in medians.items():
        result[f"{name}_ms"] = seconds * 1e3
        if name != "opforge":
            result[f"ratio_vs_{name}"] = seconds / base
        if run.bytes_moved:
            result[f"{name}_GBps"] = run.bytes_moved / seconds / 1e9
    return result


def format_rows(rows: List[Row]) -> str:
    lines = []
    width = max([22] + [len(str(r["op"])) + 2 for r in rows])
    header = f"{'op':<{width}}{'case':<60}{'opforge ms':>11}  vs others (median ratio, >1 = opforge faster)"
    lines.append(header)
    lines.append("-" * len(header))
    for r in rows:
        others = []
        for key, value in r.items():
            if key.startswith("ratio_vs_"):
                name = key[len("ratio_vs_"):]
                others.append(f"{name} {r[name + '_ms']:.3f} ms = {value:.2f}x")
        gbps = [f"{k[:-5]} {v:.1f}" for k, v in r.items() if k.endswith("_GBps")]
        line = f"{r['op']:<{width}}{r['case']:<60}{r['opforge_ms']:>11.3f}  " + "; ".join(others)
        if gbps:
            line += "  [GB/s: " + ", ".join(gbps) + "]"
        lines.append(line)
    return "\n".join(lines)




DTYPES = ("float32", "bfloat16")


def skip_reason(spec, speed: SpeedCase, index: int, dtype) -> Optional[str]:
    """Why a speed case cannot run in `dtype` (a tf.DType), or None: its op has no kernel of that
    dtype (not in the spec's dtypes), or the case itself runs only in others (`SpeedCase.dtypes`)."""
    if dtype not in spec.dtypes:
        return f"skipped in {dtype.name}: {spec.name} has no {dtype.name} kernel"
    if speed.dtypes is not None and dtype not in speed.dtypes:
        return (f"skipped in {dtype.name}: {spec.name} speed case {index} runs only in "
                f"{', '.join(d.name for d in speed.dtypes)}")
    return None


def check_dtype(spec, run: SpeedRun, dtype) -> None:
    """Raises if a candidate of a run set up in `dtype` computes in another float dtype: where the
    op's own outputs (on the spec's first case of that dtype) include `dtype`, every candidate
    returning float tensors must too (a `copy` rival returns none)."""
    from opforge.ops.spec import float_output_dtypes

    case = next(c for c in spec.cases if c.dtypes is None or dtype in c.dtypes)
    if dtype not in float_output_dtypes(spec.call(spec.op, case, case.tensors(dtype))):
        return  # outputs in another dtype by design (resize: float32 for every input)
    for name, fn in run.candidates.items():
        found = float_output_dtypes(fn())
        if found and dtype not in found:
            raise RuntimeError(
                f"opforge bench: {spec.name} case {run.label!r} was set up in {dtype.name}, but its {name!r} "
                f"candidate returns {', '.join(sorted(d.name for d in found))}: its SpeedCase.setup must make "
                "its float inputs in the dtype it is given (opforge.ops.spec.speed_normal)")


def rivals_refused(r, tf) -> Dict[str, str]:
    """The rivals of a case that raise when called once (TensorFlow's bfloat16 convolutions under
    ONEDNN_MAX_CPU_ISA=AVX2: oneDNN has no AVX2 bfloat16 kernel), with the first line of their
    error; opforge's own candidate is never excused."""
    refused = {}
    for name, fn in list(r.candidates.items()):
        if name == "opforge":
            continue
        try:
            fn()
        except tf.errors.OpError as exc:
            refused[name] = (exc.message or str(exc)).strip().splitlines()[0][:200]
    return refused


def xla_candidates(run: SpeedRun, tf) -> SpeedRun:
    """The run's opforge call under XLA ("opforge", compiled once here), in a tf.function without
    XLA ("graph") and eagerly ("eager")."""
    call = tf.autograph.experimental.do_not_convert(run.candidates["opforge"])
    compiled = tf.function(call, jit_compile=True)
    graph = tf.function(call)
    compiled(), graph()  # trace and compile outside the timing
    return SpeedRun(run.label, {"opforge": compiled, "graph": graph, "eager": call}, run.bytes_moved)


def run(ops: List[str], size: Optional[int], repeats: int, as_json: bool, dtype: str = "float32",
        plot_path: Optional[str] = None, sources: Sequence[str] = (), xla: bool = False, jax: bool = False) -> int:
    """`opforge bench`: times the ops' speed cases and prints the rows (or `as_json`); with
    `plot_path`, also draws them as a chart (`plot`). With `sources` (files that `--json` wrote)
    nothing is timed: their rows are drawn. With `jax`, opforge.jax against jnp
    (opforge.tools.jax_bench)."""
    if jax:
        if xla or plot_path or sources:
            print("opforge bench --jax: --xla, --plot and --from are for the TensorFlow rows; give them without --jax")
            return 2
        from opforge.tools import jax_bench

        return jax_bench.run(ops, size, repeats, as_json, dtype)
    if sources:
        if not plot_path:
            print("opforge bench: --from needs --plot PATH (the chart to draw from those files)")
            return 2
        try:
            print(f"wrote {plot_path}: {plot(load_rows(list(sources)), plot_path)}")
        except (OSError, ValueError) as exc:
            print(f"opforge bench --plot: {exc}")
            return 2
        return 0
    import tensorflow as tf

    from opforge.ops import SPECS

    known = {s.name for s in SPECS} | {s.group for s in SPECS}
    unknown = [op for op in ops if op not in known]
    if unknown:
        print(f"opforge bench: unknown op(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return 2
    if dtype not in DTYPES:
        print(f"opforge bench: --dtype must be one of {', '.join(DTYPES)}, got {dtype}")
        return 2
    tf_dtype = tf.as_dtype(dtype)
    rows: List[Row] = []
    skipped: List[Row] = []
    for spec in SPECS:
        if ops and spec.name not in ops and spec.group not in ops:
            continue
        for index, speed in enumerate(spec.speed):
            reason = skip_reason(spec, speed, index, tf_dtype)
            if reason is not None:
                if not any(s["op"] == spec.name and s["skipped"] == reason for s in skipped):
                    skipped.append({"op": spec.name, "dtype": dtype, "skipped": reason})
                continue
            r = speed.setup(size, tf_dtype)
            if r is None:  # a case shown only at its default size
                continue
            refused = rivals_refused(r, tf)
            if refused:
                for name, message in refused.items():
                    del r.candidates[name]
                    skipped.append({"op": spec.name, "dtype": dtype, "skipped":
                                    f"not timed against {name} in {dtype}: {spec.name} {r.label}: "
                                    f"it cannot run here ({message})"})
                if len(r.candidates) < 2:
                    continue
            if tf_dtype != tf.float32:
                check_dtype(spec, r, tf_dtype)
            name = spec.name
            if xla:
                r = xla_candidates(r, tf)
                name = f"{spec.name} [xla]"
            medians = interleaved(r.candidates, min(repeats, speed.max_repeats or repeats))
            rows.append(row(name, r, medians, dtype))
    if as_json:
        print(json.dumps([dict(r, machine=machine()) for r in rows + skipped], indent=2))
    else:
        print(f"machine: {machine()}")
        print(f"dtype: {dtype}")
        if xla:
            print("under XLA: [xla] rows time tf.function(jit_compile=True); ratios > 1 = faster under XLA")
        if rows:
            print(format_rows(rows))
        for s in skipped:
            print(s["skipped"])
    if plot_path and rows:
        what = plot([dict(r, machine=machine()) for r in rows], plot_path)
        print(f"wrote {plot_path}: {what}", file=sys.stderr if as_json else sys.stdout)
    return 0


def load_rows(paths: List[str]) -> List[Row]:
    """The rows of one or more `opforge bench --json` files (float32 and bfloat16, or two CPUs)."""
    rows: List[Row] = []
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
            raise ValueError(f"{path}: not the output of `opforge bench --json` (a list of rows)")
        rows.extend(data)
    return rows


def _series_name(r: Row) -> str:
    cpu = str(r.get("machine", "unknown CPU")).split(",")[0]
    capped = " (capped)" if "capped:" in str(r.get("machine", "")) else ""
    return f"{r.get('dtype', 'float32')}, {cpu}{capped}"


def _case_name(r: Row) -> str:
    """The case's whole name less its dtype and rival (the legend says the dtype): cases that share
    a long prefix (three NMS thresholds) stay three bars."""
    label = " ".join(w for w in str(r["case"]).split() if w not in DTYPES)
    label = label.split(" (rival:")[0]
    return f"{r['op']}: {label}"


def plot(rows: List[Row], path: str) -> str:
    """A chart of opforge's speed against TensorFlow's (`ratio_vs_tf`: TensorFlow's median time
    over opforge's, so > 1 is faster) for every timed row, one bar a series (dtype and CPU), written
    to `path` (PNG or SVG, by its suffix). Returns what it drew, in a line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    timed = [r for r in rows if "ratio_vs_tf" in r]
    if not timed:
        raise ValueError("no row has a TensorFlow rival (ratio_vs_tf) to plot")
    series: List[str] = []
    cases: List[str] = []
    value: Dict[Tuple[str, str], float] = {}
    for r in timed:
        s, c = _series_name(r), _case_name(r)
        if s not in series:
            series.append(s)
        if c not in cases:
            cases.append(c)
        value[(s, c)] = float(r["ratio_vs_tf"])
    height = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(10, 0.3 * len(cases) * max(1, len(series) * 0.7) + 1.5))
    for k, s in enumerate(series):
        ys = [i + k * height for i, c in enumerate(cases) if (s, c) in value]
        xs = [value[(s, c)] for c in cases if (s, c) in value]
        ax.barh(ys, xs, height=height, label=s)
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_yticks([i + 0.4 - height / 2 for i in range(len(cases))])
    ax.set_yticklabels([textwrap.fill(c, 64, subsequent_indent="  ") for c in cases], fontsize=7)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("TensorFlow's time / opforge's (log scale; right of 1 is faster than TensorFlow)")
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=90, bbox_inches="tight")  # the long case names are never clipped
    plt.close(fig)
    return f"{len(cases)} cases in {len(series)} series ({'; '.join(series)})"

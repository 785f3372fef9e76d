"""`opforge bench`: every speed case of every op spec, opforge against its rivals (the
TensorFlow built-in, the same op written as `tf.py_function` over NumPy, a plain memory copy of
the same bytes), timed interleaved in one process; medians and ratios.

A ratio above 1 means opforge is faster (ratio = other's median / opforge's median). `--size`
sets the element count of every case (cases at model shapes scale their batch to it). The
cases come from `opforge.ops.SPECS`; an op adds no line here.
"""
from __future__ import annotations

import json
import os
from typing import Dict, List, Optional

from opforge.spec import SpeedRun
from opforge.timing import interleaved

Row = Dict[str, object]


def row(op: str, run: SpeedRun, medians: Dict[str, float]) -> Row:
    result: Row = {"op": op, "case": run.label}
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


def machine() -> str:
    """The CPU model and the vector extensions that matter here (figures hold for this CPU)."""
    model, flags = "unknown CPU", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and model == "unknown CPU":
                    model = value.strip()
                elif key.strip() == "flags" and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    isa = [name for name in ("avx", "avx2", "fma", "avx512f", "avx512_bf16", "amx_tile") if name in flags]
    line = f"{model}, {os.cpu_count()} cores, {' '.join(isa) or 'no AVX'}"
    caps = [f"{var}={os.environ[var]}" for var in ("OPFORGE_MAX_ISA", "ONEDNN_MAX_CPU_ISA") if os.environ.get(var)]
    if caps:
        line += f" (capped: {' '.join(caps)})"
    return line


def run(ops: List[str], size: Optional[int], repeats: int, as_json: bool) -> int:
    from opforge.ops import SPECS

    known = {s.name for s in SPECS} | {s.group for s in SPECS}
    unknown = [op for op in ops if op not in known]
    if unknown:
        print(f"opforge bench: unknown op(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return 2
    rows: List[Row] = []
    for spec in SPECS:
        if ops and spec.name not in ops and spec.group not in ops:
            continue
        for speed in spec.speed:
            r = speed.setup(size)
            if r is None:  # a case shown only at its default size
                continue
            rows.append(row(spec.name, r, interleaved(r.candidates, min(repeats, speed.max_repeats or repeats))))
    if as_json:
        print(json.dumps([dict(r, machine=machine()) for r in rows], indent=2))
    else:
        print(f"machine: {machine()}")
        print(format_rows(rows))
    return 0

"""`opforge verify`: one row per op spec with its agreement with the reference and its speed.

- forward: max |opforge - reference| over the spec's dtypes, cases (shapes, attrs) and special
  values (NaN compares equal to NaN);
- gradient: max |opforge's gradient - float64 numerical gradient| (tf.test.compute_gradient);
- speed: the reference's median time / opforge's median time on the spec's first speed case,
  interleaved (>1: opforge faster).

The rows come from `opforge.ops.SPECS`; an op adds no line here.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from typing import List, Optional

from opforge.ops.spec import OpSpec, forward_error, gradient_error
from opforge.tools.timing import interleaved


@dataclass
class Row:
    op: str
    reference: str
    forward_error: float
    forward_tolerance: float  # the largest of the dtypes' tolerances
    forward_within: bool  # every dtype within its own tolerance
    gradient_error: float  # NaN for an op without a gradient
    gradient_tolerance: float
    speed_ratio: float
    speed_case: str

    @property
    def ok(self) -> bool:
        no_gradient = math.isnan(self.gradient_error)
        return self.forward_within and (no_gradient or self.gradient_error <= self.gradient_tolerance)


def verify(spec: OpSpec, size: Optional[int], repeats: int) -> Row:
    grad = max((gradient_error(spec, case) for case in spec.gradient_cases), default=0.0)
    if not spec.differentiable:
        grad = math.nan
    ratio, label = math.nan, "-"
    import tensorflow as tf

    runs = ((speed, speed.setup(size, tf.float32)) for speed in spec.speed)
    speed, run = next(((s, r) for s, r in runs if r is not None), (None, None))
    if run is not None:
        medians = interleaved(run.candidates, min(repeats, speed.max_repeats or repeats))
        rival = next(name for name in run.candidates if name != "opforge")
        ratio, label = medians[rival] / medians["opforge"], run.label
    error, within = forward_error(spec)
    tolerance = max(spec.tolerance(d) for d in spec.dtypes)
    return Row(spec.name, spec.reference_name, error, tolerance, within, grad, spec.gradient_tolerance,
               ratio, label)


def format_rows(rows: List[Row]) -> str:
    op_width = max(len(r.op) for r in rows) + 2
    ref_width = max(len(r.reference) for r in rows) + 2
    case_width = max(len(r.speed_case) for r in rows) + 2
    header = (
        f"{'op':<{op_width}}{'reference':<{ref_width}}{'forward err':>12}{'(tol)':>8}"
        f"{'grad err':>10}{'(tol)':>8}{'speed vs ref':>14}  {'speed case':<{case_width}}{'status':>7}"
    )
    lines = [header, "-" * len(header)]
    for r in rows:
        lines.append(
            f"{r.op:<{op_width}}{r.reference:<{ref_width}}{r.forward_error:>12.3g}"
            f"{r.forward_tolerance:>8.0e}"
            + (f"{'none':>10}{'':>8}" if math.isnan(r.gradient_error) else
               f"{r.gradient_error:>10.2g}{r.gradient_tolerance:>8.0e}")
            + f"{r.speed_ratio:>13.2f}x  {r.speed_case:<{case_width}}{'ok' if r.ok else 'FAIL':>7}"
        )
    lines.append(
        "forward err: max |opforge - reference| over dtypes, attrs, shapes and NaN/inf inputs "
        "(tolerance 0: bit-exact); grad err: max |C++ gradient - float64 numerical gradient| "
        "('none': no gradient, by design); "
        "speed: reference median / opforge median, interleaved, on the op's first speed case."
    )
    return "\n".join(lines)


def run(as_json: bool, size: Optional[int] = None, repeats: int = 30, ops: Optional[List[str]] = None) -> int:
    from opforge.ops import SPECS

    specs = [s for s in SPECS if not ops or s.name in ops or s.group in ops]
    if ops and not specs:
        print(f"opforge verify: unknown op(s) {', '.join(ops)}; known: {', '.join(s.name for s in SPECS)}")
        return 2
    rows = [verify(spec, size, repeats) for spec in specs]
    if as_json:
        # JSON has no NaN: an op without a gradient reports null.
        print(json.dumps([dict(asdict(r), ok=r.ok, gradient_error=None if math.isnan(r.gradient_error)
                               else r.gradient_error) for r in rows], indent=2))
    else:
        from opforge._machine import machine

        print(f"machine: {machine()}")
        print(format_rows(rows))
    return 0 if all(r.ok for r in rows) else 1

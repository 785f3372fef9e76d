"""The speed figures the README and the op table quote for the Xeon are the benchmark's own rows
(docs/data/bench-float32.json and bench-bfloat16.json, which `make docs-images` writes and draws):
every number of the form `A / B` in the Xeon column is, rounded as written, a ratio of that op in
float32 (A) and in bfloat16 (B), and "(float32, float64 only)" stands where the bfloat16 run left
the op out. So the front page cannot drift from the data beside its chart."""
import json
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DATA = ROOT / "docs" / "data"
NUMBER = r"\d+(?:\.\d+)?"
SPAN = rf"{NUMBER}(?:-{NUMBER})?"
PAIR = re.compile(rf"({SPAN})x(?: librosa)? / (?:({SPAN})x|(\(float32, float64 only\)))")


def rows(dtype):
    return json.loads((DATA / f"bench-{dtype}.json").read_text())


def ratios(dtype):
    out = {}
    for r in rows(dtype):
        value = r.get("ratio_vs_tf", r.get("ratio_vs_librosa"))
        if value is not None:
            out.setdefault(r["op"], []).append(value)
    return out


def skipped(dtype):
    return {r["op"] for r in rows(dtype) if "skipped" in r}


def readme_cells():
    """(op, Xeon cell) of the README's op table."""
    return [(m.group(1), m.group(2)) for m in
            re.finditer(r"^\| \[`(\w+)`\]\([^)]*\) \|.*\| ([^|]+) \|$", (ROOT / "README.md").read_text(), re.M)]


def table_cells():
    """(op, Xeon cell) of docs/ops/index.md: the column the header names the Xeon's."""
    lines = (ROOT / "docs" / "ops" / "index.md").read_text().splitlines()
    header = next(l for l in lines if l.startswith("| op |"))
    column = next(i for i, c in enumerate(header.split(" | ")) if "Intel Xeon" in c)
    out = []
    for line in lines:
        if line.startswith("| `") or line.startswith("| gradient of"):
            name = "resize_bilinear_grad" if line.startswith("| gradient of") else re.match(r"\| `(\w+)", line).group(1)
            out.append((name, line.split(" | ")[column]))
    return out


def matches(quoted: str, values) -> bool:
    decimals = len(quoted.split(".")[1]) if "." in quoted else 0
    return any(abs(v - float(quoted)) <= 0.5 * 10 ** -decimals + 1e-9 for v in values)


def problems(op, cell):
    found = PAIR.findall(cell)
    if not found:
        return [f"{op}: no 'float32 / bfloat16' figure in {cell!r}"]
    out = []
    f32, b16 = ratios("float32"), ratios("bfloat16")
    for left, right, only in found:
        for n in left.split("-"):
            if not matches(n, f32.get(op, [])):
                out.append(f"{op}: {n}x (float32) is no row of bench-float32.json: {sorted(f32.get(op, []))}")
        if only:
            if op not in skipped("bfloat16"):
                out.append(f"{op}: says float32 and float64 only, but the bfloat16 run timed it")
        else:
            for n in right.split("-"):
                if not matches(n, b16.get(op, [])):
                    out.append(f"{op}: {n}x (bfloat16) is no row of bench-bfloat16.json: {sorted(b16.get(op, []))}")
    return out


@pytest.mark.parametrize("where, cells", [("README.md", readme_cells), ("docs/ops/index.md", table_cells)])
def test_every_xeon_figure_is_a_row_of_the_data(where, cells):
    quoted = cells()
    assert len(quoted) >= 19, quoted
    assert {op for op, _ in quoted} >= set(ratios("float32")), "an op of the data has no row"
    bad = [p for op, cell in quoted for p in problems(op, cell)]
    assert not bad, f"{where}:\n" + "\n".join(bad)


def test_a_figure_that_is_not_in_the_data_is_caught():
    op, value = "leaky_relu_with_mask", ratios("float32")["leaky_relu_with_mask"][0]
    assert problems(op, f"{value:.2f}x / (float32, float64 only)") == [
        f"{op}: says float32 and float64 only, but the bfloat16 run timed it"]
    assert problems(op, f"{value + 0.5:.2f}x / {ratios('bfloat16')[op][0]:.2f}x")
    assert not problems(op, f"{value:.2f}x / {ratios('bfloat16')[op][0]:.2f}x")


def test_the_data_is_from_the_cpu_the_readme_names():
    """Both runs come from one machine, and it is the one the README and the op table name
    (a rerun of `make docs-images` elsewhere must rename the column, not borrow it)."""
    machines = {r["machine"] for dtype in ("float32", "bfloat16") for r in rows(dtype)}
    assert len(machines) == 1, machines
    (machine,) = machines
    assert "Xeon" in machine and "avx512f" in machine and "AVX512-BF16: yes, AMX: yes" in machine, machine
    assert "Intel Xeon with AVX-512, AVX512-BF16 and AMX" in (ROOT / "README.md").read_text()
    assert "Intel Xeon with AVX-512, AVX512-BF16 and AMX" in (ROOT / "docs" / "ops" / "index.md").read_text()

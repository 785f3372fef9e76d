"""`opforge bench --plot PATH`: the chart of the speed ratios, drawn from a run or from the rows
that `--json` wrote (`--from`, repeatable); a file that is not such rows exits 2 and says why."""
from __future__ import annotations

import json

import pytest

from opforge.tools import bench, cli

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def float32_rows(tmp_path_factory):
    """Real rows: the leaky_relu group timed at 4096 elements, three repeats."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert bench.run(["leaky_relu"], 4096, 3, True) == 0
    rows = json.loads(out.getvalue())
    path = tmp_path_factory.mktemp("bench") / "float32.json"
    path.write_text(json.dumps(rows))
    return path, rows


def test_plot_from_json_rows_draws_one_bar_a_case(float32_rows, tmp_path, capsys):
    path, rows = float32_rows
    timed = [r for r in rows if "ratio_vs_tf" in r]
    # leaky_relu forward and gradient, leaky_relu_with_mask (the group)
    assert len(timed) == 3 and all(r["ratio_vs_tf"] > 0 for r in timed)
    png = tmp_path / "bench.png"
    assert cli.main(["bench", "--plot", str(png), "--from", str(path)]) == 0
    assert png.read_bytes()[:8] == PNG_MAGIC
    out = capsys.readouterr().out
    assert f"wrote {png}: 3 cases in 1 series (float32, " in out, out


def test_two_files_are_two_series_and_svg_by_suffix(float32_rows, tmp_path, capsys):
    path, rows = float32_rows
    other = tmp_path / "bfloat16.json"
    other.write_text(json.dumps([dict(r, dtype="bfloat16") for r in rows]))
    svg = tmp_path / "bench.svg"
    assert cli.main(["bench", "--plot", str(svg), "--from", str(path), "--from", str(other)]) == 0
    assert svg.read_text().lstrip().startswith(("<?xml", "<svg"))
    assert "3 cases in 2 series (float32, " in capsys.readouterr().out


def test_plot_while_timing_writes_the_chart_too(tmp_path, capsys):
    png = tmp_path / "run.png"
    assert bench.run(["swish"], 4096, 3, False, "float32", str(png)) == 0
    assert png.read_bytes()[:8] == PNG_MAGIC
    assert f"wrote {png}: 2 cases in 1 series" in capsys.readouterr().out


@pytest.mark.parametrize("content, says", [
    ('{"op": "leaky_relu"}', "not the output of `opforge bench --json`"),
    ("[1, 2]", "not the output of `opforge bench --json`"),
    ("not json", "Expecting value"),
    ('[{"op": "mfcc_to_mel", "skipped": "no bfloat16 kernel"}]', "no row has a TensorFlow rival"),
])
def test_a_file_that_is_not_bench_rows_exits_2_and_says_why(tmp_path, capsys, content, says):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    png = tmp_path / "never.png"
    assert cli.main(["bench", "--plot", str(png), "--from", str(bad)]) == 2
    out = capsys.readouterr().out
    assert out.startswith("opforge bench --plot: ") and says in out, out
    assert not png.exists()


def test_a_missing_file_and_from_without_plot_exit_2(tmp_path, capsys):
    assert cli.main(["bench", "--plot", str(tmp_path / "x.png"), "--from", str(tmp_path / "none.json")]) == 2
    assert "No such file" in capsys.readouterr().out
    assert cli.main(["bench", "--from", str(tmp_path / "none.json")]) == 2
    assert "--from needs --plot PATH" in capsys.readouterr().out


def test_cases_that_share_a_long_prefix_stay_apart(tmp_path):
    """Three NMS cases whose names differ only after 60 characters are three bars, not one."""
    base = "B=8, 10647 boxes x 80 classes, score_threshold 0.01, and a long tail that matters"
    rows = [{"op": "combined_non_max_suppression", "case": f"{base} {tail} (rival: tf)", "dtype": "float32",
             "ratio_vs_tf": ratio, "machine": "Some CPU, 2 cores"}
            for tail, ratio in (("hard", 2.0), ("hard, padded", 2.1), ("soft-NMS sigma 0.5", 170.0))]
    assert bench.plot(rows, str(tmp_path / "nms.png")) == "3 cases in 1 series (float32, Some CPU)"

"""The Python fuzz target (`opforge fuzz`, opforge/tools/fuzz.py): malformed calls of every op drawn
from its spec, each op's batch in child processes. A short run here (the long one is
`make fuzz-python`): no crash, no hang and no vague error. And the fuzzer itself: a crash or a
hang costs one call, is reported with the call that caused it, and the other calls still run."""
import os

import tensorflow as tf

import opforge
from opforge.tools import fuzz


def test_short_fuzz_run_finds_no_crash_hang_or_vague_error():
    bad, counts = fuzz.run(calls_per_op=40, seed=11, timeout=120)
    assert set(counts) == {spec.name for spec in opforge.ops.SPECS}
    assert all(sum(c.values()) == 40 for c in counts.values()), counts
    # Most malformed calls are refused, and clearly.
    assert sum(c["clear"] for c in counts.values()) > 0.4 * 40 * len(counts)
    assert not bad, "\n".join(f"{o.kind}: {o.call}\n  {o.error}: {o.message}" for o in bad)


def test_a_crash_or_hang_costs_one_call_and_names_it(monkeypatch):
    monkeypatch.setenv("OPFORGE_FUZZ_SELF_TEST", "leaky_relu:3:crash")
    bad, counts = fuzz.run(calls_per_op=8, seed=1, ops=["leaky_relu"], batch=5)
    assert counts["leaky_relu"]["crash"] == 1 and sum(counts["leaky_relu"].values()) == 8
    assert [o.index for o in bad] == [3] and bad[0].call.startswith("leaky_relu [")
    monkeypatch.setenv("OPFORGE_FUZZ_SELF_TEST", "element_mul:1:hang")
    bad, counts = fuzz.run(calls_per_op=3, seed=1, ops=["element_mul"], timeout=3)
    assert counts["element_mul"]["hang"] == 1 and sum(counts["element_mul"].values()) == 3
    assert bad[0].kind == "hang" and bad[0].index == 1


def test_classification_of_errors():
    named = tf.errors.InvalidArgumentError(None, None, "LeakyRelu: alpha must be a number, got '0.3'")
    assert fuzz.classify(named)[0] == "clear"
    positional = tf.errors.InvalidArgumentError(
        None, None, "cannot compute Opforge>ElementMul as input #1(zero-based) was expected to be a float tensor")
    assert fuzz.classify(positional)[0] == "vague"
    assert fuzz.classify(AttributeError("'NoneType' object has no attribute 'startswith'"))[0] == "vague"
    assert fuzz.classify(OverflowError("int too large to convert to float"))[0] == "vague"
    assert fuzz.classify(OverflowError("LeakyRelu: alpha must be a number within the float range, got 1000..."))[0] == "clear"
    generic = ValueError("Shape must be rank 4 but is rank 5 for '{{node Opforge>Conv2DTranspose}}'")
    assert fuzz.classify(generic)[0] == "vague"


def test_calls_are_drawn_deterministically():
    spec = next(s for s in opforge.ops.SPECS if s.name == "conv2d_transpose")
    assert [fuzz.draw_call(spec, i, 5)[0] for i in range(20)] == [fuzz.draw_call(spec, i, 5)[0] for i in range(20)]
    assert os.environ.get("OPFORGE_FUZZ_SELF_TEST") is None


def test_the_committed_seed_corpus_is_what_make_corpus_writes(tmp_path):
    """cc/fuzz/corpus holds exactly the seeds cc/fuzz/make_corpus.py writes (names and bytes), so
    rewriting it loses nothing and a seed added by hand is caught here."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "cc" / "fuzz"
    subprocess.run([sys.executable, str(root / "make_corpus.py"), str(tmp_path)], check=True, capture_output=True)

    def files(base):
        return {p.relative_to(base).as_posix(): p.read_bytes() for p in base.rglob("*") if p.is_file()}

    written, committed = files(tmp_path), files(root / "corpus")
    assert sorted(set(committed) - set(written)) == [], "seeds make_corpus.py does not write"
    assert sorted(set(written) - set(committed)) == [], "seeds make_corpus.py writes that are not committed"
    assert [name for name in written if written[name] != committed[name]] == []

"""The drop-ins against the TensorFlow functions they replace, on bad input: every bad input of a
spec whose op replaces a TensorFlow function (`OpSpec.replaces`) is made to both, eagerly, while
tracing and when run, and opforge must raise the exception class TensorFlow raises (the rule is
`class_problem`). Its own file so that pytest-xdist runs it beside tests/test_specs.py."""
from __future__ import annotations

import pytest
import tensorflow as tf

import opforge
from helpers import run_cases_in_child

SPECS = opforge.ops.SPECS


# --- bad inputs against TensorFlow's own function: the exception class it raises ----------------

def _in_tf_function(code: str, phase: str) -> str:
    """`code` as the body of a tf.function of no arguments, only traced ("trace": what the
    shape functions and the Python wrapper refuse while the graph is built) or traced and run
    ("run": what the kernels refuse)."""
    fn = (f"tf.function(lambda: eval({code!r}, {{'tf': tf, 'np': np, 'opforge': opforge, 'lib': lib}}), "
          "autograph=False)")
    return fn + (".get_concrete_function()" if phase == "trace" else "()")


TF_PAIRS = [(spec, name) for spec in SPECS for name, bad in spec.bad_inputs.items() if spec.tensorflow_code(bad)]
PHASES = ("eager", "trace", "run")


@pytest.fixture(scope="module")
def tf_class_results():
    """Every bad input of a drop-in, made to opforge and to TensorFlow's function, eagerly and in
    tf.function; a call that aborts TensorFlow (some do) is recorded as "crash"."""
    cases = {}
    for spec, name in TF_PAIRS:
        for who, code in (("opforge", spec.bad_inputs[name].code), ("tf", spec.tensorflow_code(spec.bad_inputs[name]))):
            for phase in PHASES:
                cases[f"{spec.name}: {name} | {phase} | {who}"] = code if phase == "eager" else _in_tf_function(code, phase)
    return run_cases_in_child(cases, timeout=1200, crashes_are_results=True)


def _is_kernel_error(name) -> bool:
    """An error of TensorFlow's runtime (a kernel's InvalidArgumentError, oneDNN's AbortedError),
    not one its Python code or a shape function raised before any kernel ran."""
    cls = getattr(tf.errors, name or "", None)
    return isinstance(cls, type) and issubclass(cls, tf.errors.OpError)


def class_problem(ours: dict, theirs: dict) -> str:
    """Why opforge's errors for a bad call are not a drop-in for TensorFlow's ("" where they
    are). `ours` and `theirs` map a phase (eager, trace, run) to the error class's name (None: no
    error). Where TensorFlow refuses the call before a kernel runs (its Python code, an argument
    conversion, a shape function), opforge raises the same class in the same phase. Where only
    TensorFlow's kernel refuses it, opforge's kernel raises InvalidArgumentError (or TensorFlow's
    class), or, inside tf.function, its shape function refuses it earlier, with the ValueError
    TensorFlow's own shape functions raise. Where TensorFlow accepts the call, or aborts the
    process, opforge still refuses it, with any class."""
    for phase in PHASES:
        if ours[phase] == "crash":
            return f"opforge crashed ({phase})"
    if ours["eager"] is None or (ours["trace"] is None and ours["run"] is None):
        return "opforge accepted the call"
    if theirs["eager"] not in (None, "crash"):
        allowed = {theirs["eager"], "InvalidArgumentError"} if _is_kernel_error(theirs["eager"]) else {theirs["eager"]}
        if ours["eager"] not in allowed:
            return f"eagerly: TensorFlow raises {theirs['eager']}, opforge {ours['eager']}"
    if theirs["trace"] not in (None, "crash"):
        if ours["trace"] != theirs["trace"]:
            return f"in tf.function: TensorFlow raises {theirs['trace']} while tracing, opforge {ours['trace']}"
    elif theirs["run"] not in (None, "crash"):
        if _is_kernel_error(theirs["run"]):
            earlier = ours["trace"] == "ValueError"
            later = ours["trace"] is None and ours["run"] in (theirs["run"], "InvalidArgumentError")
            if not (earlier or later):
                return (f"in tf.function: TensorFlow's kernel raises {theirs['run']}, opforge "
                        f"{ours['trace']} while tracing, {ours['run']} when run")
        elif theirs["run"] not in (ours["trace"], ours["run"]):
            return f"in tf.function: TensorFlow raises {theirs['run']}, opforge {ours['trace'] or ours['run']}"
    return ""


@pytest.mark.parametrize("spec,name", TF_PAIRS, ids=[f"{s.name}: {n}" for s, n in TF_PAIRS])
def test_bad_input_raises_the_class_tensorflow_raises(tf_class_results, spec, name):
    """The drop-ins (leaky_relu, swish, element_mul, conv2d_transpose, resize, resize_bilinear,
    combined_non_max_suppression) against the TensorFlow function each replaces: for every bad
    input, eagerly and in tf.function, the exception class TensorFlow raises (class_problem)."""
    ours, theirs = ({phase: tf_class_results[f"{spec.name}: {name} | {phase} | {who}"]["error"] for phase in PHASES}
                    for who in ("opforge", "tf"))
    problem = class_problem(ours, theirs)
    assert not problem, f"{problem}\nopforge: {ours}\nTensorFlow: {theirs}"


def test_class_rule_catches_a_drifting_op():
    """The rule above fails where a drop-in drifts: InvalidArgumentError where TensorFlow's Python
    raises TypeError, a run-time error where TensorFlow's shape function raises ValueError, an
    accepted call; and lets opforge refuse earlier than TensorFlow's kernel."""
    ok = {"eager": "InvalidArgumentError", "trace": None, "run": "InvalidArgumentError"}
    assert class_problem({"eager": "InvalidArgumentError", "trace": "InvalidArgumentError", "run": "InvalidArgumentError"},
                         {"eager": "TypeError", "trace": "TypeError", "run": "TypeError"})
    assert class_problem(ok, {"eager": "InvalidArgumentError", "trace": "ValueError", "run": "ValueError"})
    assert class_problem({"eager": None, "trace": None, "run": None}, {"eager": None, "trace": None, "run": None})
    assert class_problem({"eager": "crash", "trace": None, "run": "InvalidArgumentError"}, ok)
    assert not class_problem(ok, ok)
    assert not class_problem({"eager": "InvalidArgumentError", "trace": "ValueError", "run": "ValueError"}, ok)
    assert not class_problem(ok, {"eager": "AbortedError", "trace": None, "run": "crash"})


def test_every_drop_in_is_compared_with_the_function_it_replaces():
    """`replaces` names a TensorFlow function that takes the wrapper's arguments (as many
    required ones, the same defaults where the names are shared), and each drop-in has bad inputs
    that TensorFlow's function is run on, so a new drop-in cannot skip the comparison."""
    import inspect

    drop_ins = [spec for spec in SPECS if spec.replaces]
    assert {s.name for s in drop_ins} >= {"leaky_relu", "conv2d_transpose", "combined_non_max_suppression"}
    for spec in drop_ins:
        theirs = inspect.signature(eval(spec.replaces, {"tf": tf}))
        ours = inspect.signature(spec.op)
        required = [p for p in ours.parameters.values() if p.default is inspect.Parameter.empty]
        assert len(required) == len([p for p in theirs.parameters.values() if p.default is inspect.Parameter.empty]), spec.name
        for pname, p in ours.parameters.items():
            if pname in theirs.parameters and p.default is not inspect.Parameter.empty:
                assert p.default == theirs.parameters[pname].default, (spec.name, pname)
        compared = [n for s, n in TF_PAIRS if s is spec]
        assert len(compared) >= 3, f"{spec.name}: only {compared} are compared with {spec.replaces}"

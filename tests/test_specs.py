"""The checks every op gets from its spec (`SPECS` in python/opforge/ops/<op>.py): forward against
the reference in every dtype, gradients against float64 numerical ones, eager against
tf.function, the shape function against the runtime shape, every bad input in a child process,
the same bits for any thread count and across runs, and a SavedModel that loads in a fresh
process. A new op gets all of them by writing its spec; op-specific tests stay in
tests/test_<op>.py."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import re

import numpy as np
import pytest
import tensorflow as tf

import opforge
from opforge.ops.spec import OpSpec, Sample, determinism_outputs, forward_errors, gradient_error
from helpers import bits_equal, check_bad_input, max_error, run_cases_in_child, run_python

SPECS = opforge.ops.SPECS
BY_NAME = {spec.name: spec for spec in SPECS}
ids = [spec.name for spec in SPECS]


def _float_dtype(spec):
    return tf.float32 if tf.float32 in spec.dtypes else spec.dtypes[0]


def test_every_op_has_a_complete_spec():
    assert len(BY_NAME) == len(SPECS), "spec names must be unique"
    for spec in SPECS:
        assert spec.cases and spec.bad_inputs and spec.speed, spec.name
        assert bool(spec.gradient_cases) == spec.differentiable, spec.name
        assert spec.op.__doc__, spec.name
    for module in opforge.ops.MODULES:
        assert module.OP_NAMES and all(n.startswith("Opforge>") for n in module.OP_NAMES)
        assert module.SPECS, module.__name__


def test_samples_and_tolerances():
    scalar = Sample((), seed=1, specials=True).make(tf.float32)
    assert scalar.shape == () and scalar.numpy() == 0.0  # the first special value, shape () too
    spec = OpSpec("t", tf.identity, tf.identity, "tf.identity", (tf.float16, tf.float32), (),
                  forward_tolerance={"float16": 1e-3, "float32": 0.0})
    assert spec.tolerance(tf.float16) == 1e-3 and spec.tolerance(tf.float32) == 0.0


def test_comparisons_the_checks_rest_on():
    assert max_error(np.float32(1.0), np.float32(1.5)) == 0.5  # 0-d arrays too
    assert max_error([np.nan, 1.0, np.inf], [np.nan, 1.0, np.inf]) == 0.0
    assert max_error([1.0, np.nan], [1.0, 2.0]) == np.inf
    assert max_error([1.0], [1.0, 2.0]) == np.inf
    assert bits_equal(np.float32([np.nan, 0.0]), np.float32([-np.nan, 0.0]))
    assert not bits_equal(np.float32([0.0]), np.float32([-0.0]))
    assert not bits_equal(np.float32([1.0]), np.float64([1.0]))


def test_registered_kernels_match_the_specs_dtypes():
    """Every CPU kernel an op module registers is exercised by one of its specs in that dtype,
    and every dtype a spec runs in has a kernel (nothing registered goes untested)."""
    from tensorflow.python.framework import dtypes, kernels

    opforge.load_library()
    for module in opforge.ops.MODULES:
        spec_dtypes = {d.name for spec in module.SPECS for d in spec.dtypes}
        registered = set()
        for name in module.OP_NAMES:
            for kernel in kernels.get_registered_kernels_for_op(name).kernel:
                if kernel.device_type != "CPU":
                    continue
                for constraint in kernel.constraint:
                    if constraint.name == "T":
                        registered |= {dtypes.as_dtype(t).name for t in constraint.allowed_values.list.type}
        assert registered == spec_dtypes, (module.__name__, registered ^ spec_dtypes)


@pytest.mark.parametrize("spec", SPECS, ids=ids)
def test_forward_matches_reference(spec, device):
    for dtype, case, ours, theirs in forward_errors(spec):
        where = f"{spec.name} {case.name} {dtype.name}"
        assert len(ours) == len(theirs), where
        for o, t in zip(ours, theirs):
            assert o.dtype == t.dtype and o.shape == t.shape, where
            if spec.tolerance(dtype) == 0:
                assert bits_equal(o.numpy(), t.numpy()), where
            else:
                assert max_error(o, t) <= spec.tolerance(dtype), where


@pytest.mark.parametrize(
    "spec,case", [(s, c) for s in SPECS for c in s.gradient_cases],
    ids=[f"{s.name}-{c.name}" for s in SPECS for c in s.gradient_cases],
)
def test_gradient_matches_float64_numerical(spec, case, device):
    assert gradient_error(spec, case) <= spec.gradient_tolerance


@pytest.mark.parametrize("spec", SPECS, ids=ids)
def test_eager_and_tf_function_agree(spec, device):
    dtype = _float_dtype(spec)
    for case in spec.cases:
        tensors = case.tensors(dtype)
        eager = spec.call(spec.op, case, tensors)
        graph = tf.function(lambda *xs: spec.call(spec.op, case, xs))(*tensors)
        assert len(eager) == len(graph) > 0
        for e, g in zip(eager, graph):
            assert bits_equal(e.numpy(), g.numpy()), case.name


@pytest.mark.parametrize("spec", SPECS, ids=ids)
def test_shape_function_agrees_with_runtime(spec):
    """With every input shape known, the static output shapes are the runtime ones; with only the
    ranks known, they are compatible with them (and keep what they claim)."""
    dtype = _float_dtype(spec)
    for case in spec.cases:
        tensors = case.tensors(dtype)
        runtime = [t.shape for t in spec.call(spec.op, case, tensors)]
        for known in (True, False):
            signature = [tf.TensorSpec(t.shape if known else [None] * t.shape.rank, t.dtype) for t in tensors]
            fn = tf.function(lambda *xs: spec.call(spec.op, case, xs), input_signature=signature)
            static = [t.shape for t in fn.get_concrete_function().structured_outputs]
            assert len(static) == len(runtime)
            for s, r in zip(static, runtime):
                if known:
                    assert s == r, (case.name, s, r)
                else:
                    assert s.is_compatible_with(r), (case.name, s, r)


GENERIC_SHAPE_ERROR = re.compile(r"Shape must be|Dimensions must be equal|Incompatible shapes|"
                                 r"must be rank|zero-based")
# "<Op>: <argument> must be <expected>, got <given>" (or "... does not fit ...").
NAMED_ERROR = re.compile(r"\b[A-Z][A-Za-z0-9]+: [a-z_][^:]*? (must|does not) ")


def _wrong_signatures(tensors):
    """Signatures that change one input: its rank (one more or one less, every dimension
    unknown), or one known dimension (one larger), the others as they are."""
    for i, t in enumerate(tensors):
        base = [tf.TensorSpec(x.shape, x.dtype) for x in tensors]
        for rank in sorted({t.shape.rank + 1, max(t.shape.rank - 1, 0)} - {t.shape.rank}):
            yield f"input {i} as rank {rank}", base[:i] + [tf.TensorSpec([None] * rank, t.dtype)] + base[i + 1:]
        for d in range(t.shape.rank):
            shape = list(t.shape)
            shape[d] += 1
            yield f"input {i} {shape}", base[:i] + [tf.TensorSpec(shape, t.dtype)] + base[i + 1:]


@pytest.mark.parametrize("spec", SPECS, ids=ids)
def test_graph_mode_shape_errors_name_the_argument(spec):
    """Inside tf.function, an input of the wrong rank or size is refused when the graph is built,
    by the shape function, with the kernels' message (op, argument, expected, given), never
    TensorFlow's generic 'Shape must be rank 4 but is rank 5 for {{node ...}}'."""
    dtype = _float_dtype(spec)
    refused = 0
    for case in spec.cases[:3]:
        for label, signature in _wrong_signatures(case.tensors(dtype)):
            fn = tf.function(lambda *xs: spec.call(spec.op, case, xs), input_signature=signature)
            try:
                fn.get_concrete_function()
            except (ValueError, TypeError, tf.errors.InvalidArgumentError) as exc:
                message = str(exc)
                where = f"{spec.name} {case.name}: {label}: {message[:600]}"
                assert not GENERIC_SHAPE_ERROR.search(message), where
                assert NAMED_ERROR.search(message), where
                refused += 1
    if any(len(case.inputs) > 1 for case in spec.cases):  # an op of one input may take any shape
        assert refused > 0, f"{spec.name}: no wrong shape was refused"


# --- inf and NaN: the exact answer, forward and gradient ------------------------------------------

def _float_sample(sample):
    return sample.dtype is None or tf.as_dtype(sample.dtype).is_floating


def _with_specials(case, index):
    """The case with SPECIAL_VALUES (0, -0, +-inf, NaN, tiny, huge) at the start of input
    `index`."""
    inputs = tuple(dataclasses.replace(s, specials=True) if i == index else s for i, s in enumerate(case.inputs))
    return dataclasses.replace(case, inputs=inputs)


def _special_mismatch(actual, expected, tolerance):
    """Where actual and expected differ: NaN where the other is not, a different infinity, or
    finite values further apart than `tolerance` relative to the largest finite expected value."""
    a = np.asarray(actual, np.float64)
    e = np.asarray(expected, np.float64)
    if a.shape != e.shape:
        return f"shapes {a.shape} and {e.shape}"
    nan = np.isnan(a) != np.isnan(e)
    inf = (np.isinf(a) | np.isinf(e)) & ~np.isnan(a) & ~np.isnan(e) & (a != e)
    finite = np.isfinite(a) & np.isfinite(e)
    scale = max(1.0, float(np.abs(e[finite]).max())) if finite.any() else 1.0
    far = finite & (np.abs(np.where(finite, a - e, 0)) > tolerance * scale)
    if nan.any() or inf.any() or far.any():
        first = np.argwhere(nan | inf | far)[0]
        return (f"{int(nan.sum())} NaN, {int(inf.sum())} inf and {int(far.sum())} finite mismatches; first at "
                f"{tuple(first)}: {a[tuple(first)]} against {e[tuple(first)]}")
    return None


# Relative to the largest finite expected value: batch statistics over values from 1e-30 to 7e4
# lose digits in any summation order.
SPECIAL_TOLERANCE = {"float32": 2e-6, "float64": 1e-9}
GRADIENT_SPECIAL_TOLERANCE = 1e-9


@pytest.mark.parametrize("spec", SPECS, ids=ids)
def test_inf_and_nan_give_the_exact_answer(spec):
    """Every op's forward with inf, NaN, -0, tiny and huge values in every float input equals
    the exact answer: the reference where it is exact, else the spec's exact_reference (the
    convolutions as direct sums: padding adds nothing, never 0 x inf). NaN exactly where the
    answer is NaN, the same infinities, finite values to round-off."""
    reference = spec.exact_reference or spec.reference
    checked = 0
    for dtype in (tf.float32, tf.float64):
        if dtype not in spec.dtypes:
            continue
        for case in spec.cases:
            if case.dtypes is not None and dtype not in case.dtypes:
                continue
            for index in [i for i, s in enumerate(case.inputs) if _float_sample(s)]:
                special = _with_specials(case, index)
                tensors = special.tensors(dtype)
                where = f"{spec.name} {case.name} {dtype.name}, specials in input {index}"
                try:
                    ours = spec.call(spec.op, special, tensors)
                except tf.errors.InvalidArgumentError as exc:
                    # An input that must be finite (anchors): refused with a message naming it.
                    assert NAMED_ERROR.search(exc.message) and "finite" in exc.message, (where, exc.message)
                    continue
                theirs = spec.call(reference, special, tensors)
                for k, (o, t) in enumerate(zip(ours, theirs)):
                    if not o.dtype.is_floating:
                        continue
                    problem = _special_mismatch(o, t, SPECIAL_TOLERANCE[dtype.name])
                    assert problem is None, f"{where}, output {k}: {problem}"
                checked += 1
    assert checked > 0, f"{spec.name}: no case runs in float32 or float64"


@pytest.mark.parametrize("spec", [s for s in SPECS if s.differentiable], ids=[s.name for s in SPECS if s.differentiable])
def test_inf_and_nan_give_the_exact_gradient(spec):
    """The gradient (float64) with inf and NaN in each input in turn, and in the upstream
    gradient, equals TensorFlow's autodiff of the exact reference. Output `gradient_output` gets a
    drawn upstream gradient and the other float outputs zeros, on both sides: what TensorFlow's
    tape hands an op's gradient for the outputs a loss does not use (so 0 x NaN is NaN on both)."""
    reference = spec.exact_reference or spec.reference
    for case in spec.gradient_cases:
        floats = [i for i, s in enumerate(case.inputs) if _float_sample(s)]
        for where in [("input", i) for i in floats] + [("upstream", None)]:
            special = _with_specials(case, where[1]) if where[0] == "input" else case
            tensors = special.tensors(tf.float64)
            wrt = [i for i, s in enumerate(case.inputs) if s.differentiable]
            grads = []
            if where[0] == "input":
                try:
                    spec.call(spec.op, case, tensors)
                except tf.errors.InvalidArgumentError as exc:
                    # An input that must be finite (anchors): refused with a message naming it.
                    assert NAMED_ERROR.search(exc.message) and "finite" in exc.message, (where, exc.message)
                    continue
            for fn in (spec.op, reference):
                with tf.GradientTape() as tape:
                    for i in wrt:
                        tape.watch(tensors[i])
                    outs = [o for o in spec.call(fn, case, tensors)]
                targets = [o for o in outs if o.dtype.is_floating]
                target = outs[spec.gradient_output]
                upstream = [Sample(tuple(o.shape), seed=7, specials=where[0] == "upstream").make(o.dtype)
                            if o is target else tf.zeros_like(o) for o in targets]
                grads.append(tape.gradient(targets, [tensors[i] for i in wrt], output_gradients=upstream))
            assert any(t is not None for t in grads[1]), (
                f"{spec.name}: the reference has no TensorFlow gradient; give the spec an exact_reference in TF ops")
            for i, o, t in zip(wrt, *grads):
                if t is None:  # an input the reference takes outside the tape (a Keras weight)
                    continue
                o = tf.zeros_like(tensors[i]) if o is None else tf.convert_to_tensor(o)
                problem = _special_mismatch(o, t, GRADIENT_SPECIAL_TOLERANCE)
                assert problem is None, f"{spec.name} {case.name}, specials in the {where}, d/d input {i}: {problem}"


# --- bad inputs: every spec's table, in one child process ----------------------------------------

BAD = [(spec, name) for spec in SPECS for name in spec.bad_inputs]


@pytest.fixture(scope="module")
def bad_input_results():
    return run_cases_in_child({f"{s.name}: {n}": s.bad_inputs[n].code for s, n in BAD})


@pytest.mark.parametrize("spec,name", BAD, ids=[f"{s.name}: {n}" for s, n in BAD])
def test_bad_input_raises_clear_error(bad_input_results, spec, name):
    bad = spec.bad_inputs[name]
    check_bad_input(bad_input_results, f"{spec.name}: {name}", bad.error, bad.fragments)


# --- the same bits for any thread count and run ---------------------------------------------------

THREAD_SCRIPT = """
import hashlib, json
import tensorflow as tf
tf.config.threading.set_intra_op_parallelism_threads({threads})
import opforge
from opforge.ops.spec import determinism_outputs
hashes = {{}}
for spec in opforge.ops.SPECS:
    runs = [determinism_outputs(spec) for _ in range(2)]
    digests = [hashlib.sha256(b"".join(t.numpy().tobytes() for t in r)).hexdigest() for r in runs]
    hashes[spec.name] = digests[0] if digests[0] == digests[1] else "differs between runs"
print("HASHES " + json.dumps(hashes))
"""


def test_identical_results_with_one_and_two_threads_and_across_runs():
    results = []
    for threads in (1, 2):
        proc = run_python(THREAD_SCRIPT.format(threads=threads))
        assert proc.returncode == 0, proc.stderr[-3000:]
        line = next(l for l in proc.stdout.splitlines() if l.startswith("HASHES "))
        results.append(json.loads(line[7:]))
    assert set(results[0]) == {spec.name for spec in SPECS}
    assert "differs between runs" not in results[0].values(), results[0]
    assert results[0] == results[1]


def test_determinism_outputs_include_gradients():
    # The thread check above is only as good as what it hashes: outputs and gradients.
    for spec in SPECS:
        case = spec.determinism_case or spec.cases[-1]
        outputs = spec.call(spec.op, case, case.tensors(_float_dtype(spec)))
        if spec.differentiable:
            assert len(determinism_outputs(spec)) > len(outputs), spec.name
        else:
            assert len(determinism_outputs(spec)) == len(outputs), spec.name


@pytest.mark.parametrize("spec", [s for s in SPECS if not s.differentiable],
                         ids=[s.name for s in SPECS if not s.differentiable])
def test_ops_without_gradient_say_so(spec):
    """An op without a gradient is registered with tf.no_gradient: a tape gives None, not an
    error and not zeros."""
    case = spec.determinism_case or spec.cases[-1]
    tensors = case.tensors(_float_dtype(spec))
    floats = [t for t in tensors if t.dtype.is_floating]
    with tf.GradientTape() as tape:
        tape.watch(floats)
        outputs = [o for o in spec.call(spec.op, case, tensors) if o.dtype.is_floating]
    assert outputs and all(g is None for g in tape.gradient(outputs, floats)), spec.name


# --- SavedModel round trip in a fresh process ------------------------------------------------------


def _caller(spec, case):
    return lambda *xs: spec.call(spec.op, case, xs)


def test_savedmodel_round_trip_in_fresh_process(tmp_path):
    """Each op, in a tf.function saved as a SavedModel, loads after only `import opforge` in a
    fresh process and gives the same bits."""
    expected = {}
    for spec in SPECS:
        case = spec.cases[-1] if spec.determinism_case is None else spec.determinism_case
        tensors = case.tensors(_float_dtype(spec))
        module = tf.Module()
        module.f = tf.function(_caller(spec, case),
                               input_signature=[tf.TensorSpec(t.shape, t.dtype) for t in tensors])
        tf.saved_model.save(module, str(tmp_path / spec.name))
        np.savez(tmp_path / f"{spec.name}.npz", *[t.numpy() for t in tensors])
        expected[spec.name] = hashlib.sha256(
            b"".join(t.numpy().tobytes() for t in module.f(*tensors))).hexdigest()
    proc = run_python(
        f"""
        import hashlib, json, numpy as np, tensorflow as tf
        import opforge
        # `import opforge` registers the ops, gradients and layers (no register_all())
        out = {{}}
        for name in {sorted(expected)!r}:
            loaded = tf.saved_model.load(r"{tmp_path}/" + name)
            inputs = np.load(r"{tmp_path}/" + name + ".npz")
            args = [tf.constant(inputs["arr_%d" % i]) for i in range(len(inputs.files))]
            results = loaded.f(*args)
            results = results if isinstance(results, (list, tuple)) else [results]
            ops = {{n.op for n in loaded.f.get_concrete_function().graph.as_graph_def().node}}
            uses = any(o.startswith("Opforge>") for o in ops) or any(
                n.op.startswith("Opforge>") for f in loaded.f.get_concrete_function().graph.as_graph_def().library.function
                for n in f.node_def)
            out[name] = [hashlib.sha256(b"".join(t.numpy().tobytes() for t in results)).hexdigest(), uses]
        print("RESULTS " + json.dumps(out))
        """
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(l for l in proc.stdout.splitlines() if l.startswith("RESULTS "))
    loaded = json.loads(line[8:])
    for name, digest in expected.items():
        assert loaded[name] == [digest, True], name

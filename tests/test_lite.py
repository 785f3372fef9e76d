"""opforge in LiteRT: the delegate plugin libopforge_lite.so (common/lite_delegate.cc) and
opforge.lite. Every spec's float32 forward cases run through a converted model whose opforge ops
are custom ops, and give TensorFlow's bits (the same C++ core); the plugin links nothing of
TensorFlow, exports only its three symbols, claims exactly the opforge nodes, and fails loudly
(unresolved custom ops without it, missing ops named, the core's messages on bad shapes)."""
from __future__ import annotations

import os
import re
import subprocess

import numpy as np
import pytest
import tensorflow as tf

import opforge
from helpers import bits_equal

lite = pytest.importorskip("opforge.lite")
LIB = lite.library_path(must_exist=False)
pytestmark = pytest.mark.skipif(not LIB.is_file(), reason=f"{LIB.name} was not built (no LiteRT adapter in this build)")

FORWARD_OPS = tuple(name for name in opforge.ops.OP_NAMES if "Grad" not in name)  # the ops a model holds


def _lib_ops():
    return lite._library_op_names(LIB) or set()


def _run(it, inputs):
    runner = it.get_signature_runner()
    return runner(**inputs)


# --- the library ------------------------------------------------------------------------------


def test_library_links_nothing_of_tensorflow_and_exports_three_symbols():
    ldd = subprocess.run(["ldd", str(LIB)], capture_output=True, text=True).stdout
    assert "tensorflow" not in ldd and "tflite" not in ldd.lower() and "litert" not in ldd.lower(), ldd
    nm = subprocess.run(["nm", "-D", "--defined-only", str(LIB)], capture_output=True, text=True, check=True)
    symbols = {line.split()[-1] for line in nm.stdout.splitlines() if line.strip()}
    assert symbols == {"tflite_plugin_create_delegate", "tflite_plugin_destroy_delegate", "OpforgeLiteOpNames"}


def test_library_runs_every_forward_op():
    names = _lib_ops()
    assert set(FORWARD_OPS) <= names, set(FORWARD_OPS) - names
    assert names <= set(opforge.ops.OP_NAMES)


# --- one small model: FC -> LeakyRelu -> MUL/ADD -> Swish, batch dynamic ---------------------


class _Model(tf.Module):
    def __init__(self):
        rng = np.random.default_rng(0)
        self.w = tf.constant(rng.standard_normal((8, 256)).astype(np.float32))

    @tf.function(input_signature=[tf.TensorSpec([None, 8], tf.float32, name="x")])
    def __call__(self, x):
        h = opforge.ops.leaky_relu(tf.matmul(x, self.w), alpha=0.3)
        return {"y": opforge.ops.swish(h * 2.0 + 1.0)}


@pytest.fixture(scope="module")
def small():
    model = _Model()
    return model, lite.convert(model.__call__, standard_ops=False)


def test_custom_ops_in_the_model(small):
    _, content = small
    assert lite.custom_op_names(content) == ["Opforge>LeakyRelu", "Opforge>Swish"]


def test_without_the_delegate_the_model_fails_on_an_unresolved_custom_op(small):
    _, content = small
    with pytest.raises(RuntimeError, match="unresolved custom op: Opforge>LeakyRelu"):
        tf.lite.Interpreter(model_content=content).allocate_tensors()


def test_delegate_claims_the_opforge_nodes_and_checks_the_layout(small, capfd):
    _, content = small
    delegate = tf.lite.experimental.load_delegate(str(LIB), {"debug": "1"})
    it = tf.lite.Interpreter(model_content=content, experimental_delegates=[delegate],
                             experimental_op_resolver_type=tf.lite.experimental.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    err = capfd.readouterr().err
    assert "claimed 2 node(s)" in err, err
    sizes = re.search(r"sizeof\(TfLiteNode\)=(\d+) \(compiled (\d+)\), sizeof\(TfLiteRegistration\)=(\d+) "
                      r"\(compiled (\d+)", err)
    assert sizes and sizes[1] == sizes[2] and sizes[3] == sizes[4], err
    assert re.search(r"probe: (\d+)/\1 tensors sane", err), err
    it.allocate_tensors()
    ops = [op["op_name"] for op in it._get_ops_details()]
    assert ops.count("DELEGATE") == 2, ops  # the two opforge nodes, nothing else (no XNNPACK here)


@pytest.mark.parametrize("threads", [1, 2])
def test_batch_resizes_give_tensorflows_bits(small, threads):
    model, content = small
    it = lite.interpreter(model_content=content, num_threads=threads)
    index = it.get_input_details()[0]["index"]
    rng = np.random.default_rng(threads)
    for batch in (4, 1, 300, 4):
        it.resize_tensor_input(index, [batch, 8])
        it.allocate_tensors()
        # Large values: swish of the negative ones is denormal, flushed to -0 as in TensorFlow.
        x = (rng.standard_normal((batch, 8)) * 20).astype(np.float32)
        y = _run(it, {"x": x})["y"]
        want = model(tf.constant(x))["y"].numpy()
        assert y.shape == (batch, 256) and bits_equal(y, want), batch


def test_same_bits_for_one_and_two_threads(small):
    _, content = small
    x = np.random.default_rng(5).standard_normal((512, 8)).astype(np.float32)  # 128K elements: split
    outs = []
    for threads in (1, 2):
        it = lite.interpreter(model_content=content, num_threads=threads)
        it.resize_tensor_input(it.get_input_details()[0]["index"], [512, 8])
        it.allocate_tensors()
        outs.append(_run(it, {"x": x})["y"])
    assert bits_equal(outs[0], outs[1])


def test_missing_op_is_named_with_the_version(small):
    _, content = small
    renamed = content.replace(b"Opforge>Swish", b"Opforge>Swisx")
    with pytest.raises(lite.MissingOpsError, match=rf"Opforge>Swisx.*opforge {re.escape(opforge.__version__)}|"
                                                   rf"opforge {re.escape(opforge.__version__)}.*Opforge>Swisx"):
        lite.interpreter(model_content=renamed)


def test_bad_shapes_report_the_cores_message():
    fn = tf.function(lambda a, b: {"p": opforge.ops.element_mul(a, b)},
                     input_signature=[tf.TensorSpec([None, 3], tf.float32, name="a"),
                                      tf.TensorSpec([None, 3], tf.float32, name="b")])
    it = lite.interpreter(model_content=lite.convert(fn, standard_ops=False))
    a, b = (d["index"] for d in sorted(it.get_input_details(), key=lambda d: d["name"]))
    it.resize_tensor_input(a, [2, 3])
    it.resize_tensor_input(b, [4, 3])
    with pytest.raises(RuntimeError, match="ElementMul"):
        it.allocate_tensors()


def test_standard_ops_give_builtins():
    fn = tf.function(lambda x: {"y": opforge.ops.leaky_relu(x, alpha=0.1)},
                     input_signature=[tf.TensorSpec([2, 3], tf.float32, name="x")])
    content = lite.convert(fn)
    assert lite.custom_op_names(content) == []
    it = lite.interpreter(model_content=content)
    it.allocate_tensors()
    x = np.float32([[-1, 0, 2], [3, -4, 5]])
    np.testing.assert_array_equal(_run(it, {"x": x})["y"], tf.nn.leaky_relu(x, 0.1).numpy())


# --- every spec's float32 forward cases -------------------------------------------------------

MAX_CASES = 2  # per spec: the file stays fast; the core's own tests cover the rest


def _lite_specs():
    names = _lib_ops() if LIB.is_file() else set()
    for spec in opforge.ops.SPECS:
        if tf.float32 not in spec.dtypes:
            continue
        cases = [c for c in spec.cases if c.dtypes is None or tf.float32 in c.dtypes]
        yield pytest.param(spec, cases[:MAX_CASES], names, id=spec.name)


def _opforge_ops(concrete):
    return {op.type for op in concrete.graph.get_operations() if op.type.startswith("Opforge>")}


def _model_fn(spec, case, tensors):
    """The case as a function of its float inputs, returning {"o00": ..., "o01": ...}."""

    def fn(*args):
        it = iter(args)
        full = [next(it) if t.dtype.is_floating else t for t in tensors]
        return {f"o{k:02d}": o for k, o in enumerate(spec.call(spec.op, case, full))}

    return fn


@pytest.mark.parametrize("spec, cases, names", list(_lite_specs()))
def test_spec_forward_cases_give_tensorflows_bits(spec, cases, names):
    ran = 0
    for case in cases:
        tensors = case.tensors(tf.float32)
        # Float inputs are the model's inputs (so that the converter cannot fold the op away);
        # integer ones (sizes, shapes) stay constants, as in a real model.
        feeds = {f"i{k}": t for k, t in enumerate(tensors) if t.dtype.is_floating}
        if any(t.shape.num_elements() == 0 for t in feeds.values()):
            continue  # LiteRT's converter drops empty inputs

        fn = _model_fn(spec, case, tensors)
        signature = [tf.TensorSpec(t.shape, t.dtype, name=n) for n, t in feeds.items()]
        concrete = tf.function(fn, input_signature=signature).get_concrete_function()
        used = _opforge_ops(concrete)
        if not used or not used <= names:
            pytest.skip(f"{spec.name}: no LiteRT kernel for {sorted(used - names) or 'any op'}")
        want = {k: v.numpy() for k, v in fn(*feeds.values()).items()}
        again = {k: v.numpy() for k, v in fn(*feeds.values()).items()}
        if not all(bits_equal(want[k], again[k]) for k in want):
            continue  # a fresh seed per call (Griffin-Lim's seed=-1)
        content = lite.convert(concrete, standard_ops=False)  # traced above, with opforge's ops
        assert set(lite.custom_op_names(content)) == used, (case.name, lite.custom_op_names(content))
        it = lite.interpreter(model_content=content, num_threads=2)
        it.allocate_tensors()
        got = _run(it, {n: t.numpy() for n, t in feeds.items()})
        for key in want:
            assert got[key].shape == want[key].shape and bits_equal(got[key], want[key]), (case.name, key)
        ran += 1
    if not ran:
        pytest.skip(f"{spec.name}: no float32 case LiteRT can take")


def test_missing_attribute_is_named():
    fn = tf.function(lambda x: {"y": opforge.ops.leaky_relu(x, alpha=0.1)},
                     input_signature=[tf.TensorSpec([2, 3], tf.float32, name="x")])
    damaged = lite.convert(fn, standard_ops=False).replace(b"alpha", b"alphb")  # the flexbuffer key
    it = lite.interpreter(model_content=damaged)
    with pytest.raises(RuntimeError, match="Opforge>LeakyRelu: attribute alpha is missing"):
        it.allocate_tensors()


def test_float16_runs_as_in_tensorflow():
    fn = tf.function(lambda x: {"y": opforge.ops.leaky_relu(x, alpha=0.1)},
                     input_signature=[tf.TensorSpec([2, 3], tf.float16, name="x")])
    it = lite.interpreter(model_content=lite.convert(fn, standard_ops=False))
    it.allocate_tensors()
    x = np.float16([[-1, 2, 3], [4, -5, 6]])
    assert bits_equal(_run(it, {"x": x})["y"], fn(x)["y"].numpy())


def test_the_same_delegate_runs_in_ai_edge_litert(small):
    """The path rests on LiteRT's external-delegate C ABI, which both TensorFlow's interpreter and
    the standalone LiteRT package (ai_edge_litert) load: the same library, the same bits."""
    litert = pytest.importorskip("ai_edge_litert.interpreter")
    model, content = small
    x = np.random.default_rng(3).standard_normal((5, 8)).astype(np.float32)
    it = litert.Interpreter(model_content=content, experimental_delegates=[litert.load_delegate(str(LIB))],
                            num_threads=2)
    runner = it.get_signature_runner()
    got = runner(x=x)["y"]
    assert bits_equal(got, model(tf.constant(x))["y"].numpy())


def test_clipped_identity_stays_opforge_in_litert(tmp_path):
    """TFLite has no builtin for ClipByValue (the forward's standard form): with standard_ops=True
    the op stays opforge's custom op, which the delegate runs, instead of an unresolvable one."""
    fn = tf.function(lambda x: opforge.ops.clipped_identity(x, -1.0, 1.0),
                     input_signature=[tf.TensorSpec([3, 4], tf.float32)])
    content = lite.convert(fn)
    assert lite.custom_op_names(content) == ["Opforge>ClippedIdentity"]
    x = np.float32([[np.nan, -3, -1, 0], [0.5, 1, 2, np.inf], [-np.inf, 1e-3, -0.0, 7]])
    runner = lite.interpreter(model_content=content).get_signature_runner()
    got = next(iter(runner(**{next(iter(runner.get_input_details())): x}).values()))
    assert bits_equal(got, fn(tf.constant(x)).numpy())

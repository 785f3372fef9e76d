"""Every op spec's forward cases through ONNX Runtime, bit for bit with TensorFlow.

Each case is traced as TensorFlow runs it (the spec's op inside a graph); every opforge op of that
graph then runs again alone, as an `opforge`-domain ONNX node (the node `opforge.onnx.export`
writes, built by `opforge.onnx.node_from_tf_op`), in ONNX Runtime with libopforge_ort.so, on the
inputs TensorFlow gave it. Both runtimes run the same op struct and core (cc/ops/<op>/<op>_op.h),
so the outputs must be the same bits. A new op is covered by writing its spec and its
registration line in cc/ops/<op>/<op>_ort.cc; an op TensorFlow registers that the ONNX Runtime
library lacks fails here.
"""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import opforge
import opforge.onnx as oo
from helpers import bits_equal

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

LIBRARY = oo.library_path(must_exist=False)
pytestmark = pytest.mark.skipif(not LIBRARY.exists(), reason=f"{LIBRARY} not built (opforge doctor says why)")

SPECS = opforge.ops.SPECS
# ONNX Runtime has no complex tensors in custom ops; its element types by TensorFlow dtype.
ONNX_TYPES = {
    tf.float16: onnx.TensorProto.FLOAT16, tf.bfloat16: onnx.TensorProto.BFLOAT16,
    tf.float32: onnx.TensorProto.FLOAT, tf.float64: onnx.TensorProto.DOUBLE,
    tf.int8: onnx.TensorProto.INT8, tf.uint8: onnx.TensorProto.UINT8, tf.int16: onnx.TensorProto.INT16,
    tf.uint16: onnx.TensorProto.UINT16, tf.int32: onnx.TensorProto.INT32, tf.uint32: onnx.TensorProto.UINT32,
    tf.int64: onnx.TensorProto.INT64, tf.uint64: onnx.TensorProto.UINT64, tf.bool: onnx.TensorProto.BOOL,
}
# numpy has no bfloat16: ONNX Runtime takes its bits as uint16 through OrtValue.
MAX_CASES = None  # every case


def _library_ops():
    return oo._library_op_types(LIBRARY)


def _traced(spec, case, tensors):
    """The opforge ops of the case's graph, with their input and output values in TensorFlow."""
    signature = [tf.TensorSpec(t.shape, t.dtype) for t in tensors]
    wrapped = tf.compat.v1.wrap_function(lambda *xs: spec.call(spec.op, case, list(xs)), signature)
    ops = [op for op in wrapped.graph.get_operations() if op.type.startswith("Opforge>")]
    fetches = [t for op in ops for t in (*op.inputs, *op.outputs)]
    if not fetches:
        return []
    values = wrapped.prune(feeds=wrapped.inputs, fetches=fetches)(*tensors)
    out, k = [], 0
    for op in ops:
        n_in, n_out = len(op.inputs), len(op.outputs)
        out.append((op, values[k:k + n_in], values[k + n_in:k + n_in + n_out]))
        k += n_in + n_out
    return out


def _ort_value(value: tf.Tensor):
    if value.dtype == tf.bfloat16:
        bits = np.asarray(tf.bitcast(value, tf.uint16).numpy())
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(bits, onnx.TensorProto.BFLOAT16)
    return ort.OrtValue.ortvalue_from_numpy(np.asarray(value.numpy()))


def _run_in_ort(op, inputs, outputs):
    names_in = [f"in{i}" for i in range(len(inputs))]
    names_out = [f"out{i}" for i in range(len(outputs))]
    node = oo.node_from_tf_op(op, names_in, names_out)
    graph = onnx.helper.make_graph(
        [node], "case",
        [onnx.helper.make_tensor_value_info(n, ONNX_TYPES[v.dtype], list(v.shape)) for n, v in zip(names_in, inputs)],
        [onnx.helper.make_tensor_value_info(n, ONNX_TYPES[v.dtype], None) for n, v in zip(names_out, outputs)])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17),
                                                         onnx.helper.make_opsetid(oo.DOMAIN, oo.DOMAIN_VERSION)])
    options = ort.SessionOptions()
    options.register_custom_ops_library(str(LIBRARY))
    options.intra_op_num_threads = 2
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    feeds = {n: _ort_value(v) for n, v in zip(names_in, inputs)}
    binding = session.io_binding()
    for n, v in feeds.items():
        binding.bind_ortvalue_input(n, v)
    bf16 = {}  # numpy has no bfloat16: those outputs land in uint16 buffers ONNX Runtime fills
    for n, expected in zip(names_out, outputs):
        if expected.dtype == tf.bfloat16:
            bf16[n] = np.zeros(expected.shape, np.uint16)
            binding.bind_ortvalue_output(n, ort.OrtValue.ortvalue_from_numpy_with_onnx_type(
                bf16[n], onnx.TensorProto.BFLOAT16))
        else:
            binding.bind_output(n)
    session.run_with_iobinding(binding)
    results = []
    for n, value in zip(names_out, binding.get_outputs()):
        results.append(tf.bitcast(tf.constant(bf16[n]), tf.bfloat16).numpy() if n in bf16 else value.numpy())
    return results


def _dtypes(spec):
    return [d for d in spec.dtypes if d in ONNX_TYPES]


@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_forward_cases_in_onnx_runtime_are_tensorflows_bits(spec):
    library_ops = _library_ops()
    ran = 0
    for dtype in _dtypes(spec):
        cases = [c for c in spec.cases if c.dtypes is None or dtype in c.dtypes][:MAX_CASES]
        for case in cases:
            tensors = case.tensors(dtype)
            for op, inputs, outputs in _traced(spec, case, tensors):
                name = op.type.split(">", 1)[-1]
                assert name in library_ops, f"{op.type} has no ONNX Runtime kernel (cc/ops/*/*_ort.cc)"
                if any(v.dtype not in ONNX_TYPES for v in (*inputs, *outputs)):
                    continue  # complex: ONNX Runtime has no complex custom-op tensors
                got = _run_in_ort(op, inputs, outputs)
                for i, (g, e) in enumerate(zip(got, outputs)):
                    assert g.shape == tuple(e.shape), (spec.name, case.name, dtype.name, i)
                    assert bits_equal(g, e.numpy()), f"{spec.name} [{case.name}] {dtype.name} output {i}"
                ran += 1
    assert ran, f"{spec.name}: no case ran through ONNX Runtime"


def test_every_tensorflow_op_has_an_onnx_runtime_kernel():
    """Every op TensorFlow registers (OP_NAMES) is in the ONNX Runtime library: adding an op to
    TensorFlow without its ONNX Runtime line fails here."""
    names = {n.split(">", 1)[-1] for n in opforge.ops.OP_NAMES}
    assert names <= _library_ops(), sorted(names - _library_ops())


def test_bad_input_is_an_onnx_runtime_error_naming_the_argument():
    """The core's message, naming the argument, comes back as ONNX Runtime's error: no crash."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(f"""
        import numpy as np, onnx, onnxruntime as ort
        from onnx import helper, TensorProto
        def session(node, inputs):
            g = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, t, None) for n, t in inputs],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
            m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("opforge", 1)])
            o = ort.SessionOptions(); o.register_custom_ops_library({str(LIBRARY)!r})
            return ort.InferenceSession(m.SerializeToString(), o, providers=["CPUExecutionProvider"])
        F = TensorProto.FLOAT
        s = session(helper.make_node("LeakyReluGrad", ["g", "x"], ["y"], domain="opforge", alpha=0.2),
                    [("g", F), ("x", F)])
        try:
            s.run(None, {{"g": np.ones([2, 3], np.float32), "x": np.ones([3, 2], np.float32)}})
        except Exception as e:
            print("ERROR1", e)
        s = session(helper.make_node("ResizeBilinear", ["x", "size"], ["y"], domain="opforge",
                                     align_corners=0, half_pixel_centers=1), [("x", F), ("size", TensorProto.INT32)])
        try:
            s.run(None, {{"x": np.ones([1, 4, 4], np.float32), "size": np.int32([8, 8])}})
        except Exception as e:
            print("ERROR2", e)
        try:
            session(helper.make_node("LeakyRelu", ["x"], ["y"], domain="opforge", alpha=float("nan")), [("x", F)])
        except Exception as e:
            print("ERROR3", e)
        try:
            session(helper.make_node("LeakyRelu", ["x"], ["y"], domain="opforge"), [("x", F)])
        except Exception as e:
            print("ERROR4", e)
        print("alive")
        """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    out = run.stdout
    assert "alive" in out
    line1 = next(l for l in out.splitlines() if l.startswith("ERROR1"))
    assert "INVALID_ARGUMENT" in line1 and "gradients" in line1 and "[2, 3]" in line1 and "[3, 2]" in line1
    line2 = next(l for l in out.splitlines() if l.startswith("ERROR2"))
    assert "images" in line2 and "4-D" in line2, line2
    line3 = next(l for l in out.splitlines() if l.startswith("ERROR3"))
    assert "alpha" in line3 and "finite" in line3, line3
    line4 = next(l for l in out.splitlines() if l.startswith("ERROR4"))
    assert "alpha" in line4 and "missing" in line4, line4

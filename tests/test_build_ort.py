"""opforge.build's ONNX Runtime library: one op struct, built for TensorFlow (`cpp_source`) and for
ONNX Runtime (`ort_source`), exported with opforge.onnx and run in ONNX Runtime with TensorFlow's
bits and the core's error messages; the second load reuses the cache.

One cold build for the whole file (its own cache, no precompiled header); the compiler is a
wrapper that logs each compile and link, so the tests count compiler runs.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import opforge.build

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")
pytest.importorskip("tf2onnx", reason="tf2onnx (opforge.onnx.export) is not installed")
if opforge.build.ort_include_path() is None:
    pytest.skip("this opforge was installed without ONNX Runtime's headers", allow_module_level=True)

import onnx  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

import opforge.onnx as ox  # noqa: E402

# The op struct, shared by both runtimes: no TensorFlow header.
OP_STRUCT = r"""
#include <Eigen/Core>
#include "common/op_call.h"

namespace {
using opforge::Status;

struct ShiftScaleParams {
  float factor = 1;
  int64_t size = 0;
};

struct ShiftScaleOp {
  static constexpr opforge::OpSignature kSignature{
      "OrtTest>ShiftScale", "x: T", "y: T",
      "T: {half, bfloat16, float, double}; factor: float = 2.0"};
  using Params = ShiftScaleParams;
  ShiftScaleParams attrs;
  Status Init(opforge::AttrReader& reader) {
    reader.Read("factor", &attrs.factor);
    if (!(attrs.factor > 0)) return opforge::InvalidArgument("ShiftScale", "factor", "positive", attrs.factor);
    return Status::Ok();
  }
  Status Validate(opforge::OpCall& call, Params* p) const {
    if (call.shape(0).empty()) {
      return opforge::InvalidArgument("ShiftScale", "x", "a tensor of rank at least 1", "a scalar");
    }
    *p = attrs;
    p->size = call.NumElements(0);
    call.Output(0, call.shape(0), {0});
    return Status::Ok();
  }
  template <typename T>
  void Cpu(const Params& p, const opforge::OpCall& call, const opforge::Parallel& parallel) const {
    using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
    const T* x = call.in<T>(0);
    T* y = call.out<T>(0);
    const C f = static_cast<C>(p.factor);
    parallel.For(p.size, opforge::kCostElementwise, [=](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) y[i] = static_cast<T>(static_cast<C>(x[i]) * f + C(0.1));
    });
  }
};
}  // namespace
"""

TF_BINDING = r"""
#include "common/tf_kernel.h"

OPFORGE_REGISTER_OP(ShiftScaleOp).SetShapeFn(tensorflow::shape_inference::UnchangedShape);
OPFORGE_REGISTER_KERNELS(Name(ShiftScaleOp::kSignature.name), ShiftScaleOp, OPFORGE_FLOAT_TYPES,
                         OPFORGE_NO_TYPES)
"""

ORT_REGISTRATION = r"""
#include "common/ort_kernel.h"
OPFORGE_ORT_KERNELS(ShiftScale, ShiftScaleOp, OPFORGE_FLOAT_TYPES)
"""

WRAPPER = """#!/bin/sh
case "$*" in
  *--version*|-v|-dumpversion) ;;
  *) echo "$$ $*" >> "$OPFORGE_TEST_CXX_LOG" ;;
esac
exec g++ "$@"
"""


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("opforge_build_ort")
    wrapper = root / "cxx"
    wrapper.write_text(WRAPPER)
    wrapper.chmod(0o755)
    values = {"OPFORGE_CACHE": str(root / "cache"), "CXX": str(wrapper),
              "OPFORGE_TEST_CXX_LOG": str(root / "cxx.log"), "OPFORGE_BUILD_PCH": "0"}
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    yield values
    shutil.rmtree(root / "cache", ignore_errors=True)
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def compiler_runs(env) -> int:
    try:
        return len(Path(env["OPFORGE_TEST_CXX_LOG"]).read_text().splitlines())
    except FileNotFoundError:
        return 0


@pytest.fixture(scope="module")
def lib(env):
    """The op built cold for both runtimes (opforge's helpers included)."""
    import time

    started = time.perf_counter()
    module = opforge.build.load_inline("shift_scale", [OP_STRUCT, TF_BINDING],
                                       ort_source=[OP_STRUCT, ORT_REGISTRATION])
    print(f"cold build of shift_scale for TensorFlow and ONNX Runtime: {time.perf_counter() - started:.1f} s")
    return module


def _model(op_type: str, shape, attrs, elem=TensorProto.FLOAT) -> onnx.ModelProto:
    node = helper.make_node(op_type, ["x"], ["y"], domain="orttest", **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", elem, shape)],
                              [helper.make_tensor_value_info("y", elem, shape)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("orttest", 1)])


def test_the_ort_library_has_no_tensorflow_and_exports_only_its_entry_points(env, lib):
    path = opforge.build.ort_library_path(lib)
    assert path.is_file()
    assert path.name.startswith("libshift_scale_ort_") and path.suffix == ".so"
    meta = json.loads((path.parent / "build.json").read_text())
    assert meta["ort_library"] == path.name and meta["ort_domain"] == "orttest"
    # Same cache entry as the TensorFlow library; the entry point of the path form gives the same.
    assert (path.parent / meta["library"]).is_file()
    assert opforge.build.ort_library_path(path.parent / meta["library"]) == path
    needed = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True).stdout
    assert "tensorflow" not in needed and "onnxruntime" not in needed, needed
    exported = subprocess.run(["nm", "-D", "--defined-only", str(path)], capture_output=True, text=True).stdout
    names = sorted(line.split()[-1] for line in exported.splitlines() if line.strip())
    assert names == ["OpforgeOrtApiVersion", "OpforgeOrtDomain", "OpforgeOrtOpNames", "RegisterCustomOps"]
    # Its compiles see Eigen and nothing else of TensorFlow's include directory.
    tf_include = tf.sysconfig.get_include()
    ort_compiles = [c for c in meta["compile_commands"] if any("OPFORGE_ORT_DOMAIN" in f for f in c)]
    assert ort_compiles and all(tf_include not in c for cmd in ort_compiles for c in cmd)


@pytest.mark.parametrize("dtype", [tf.float32, tf.float64], ids=lambda d: d.name)
def test_exported_op_runs_in_onnx_runtime_with_tensorflows_bits(env, lib, dtype, tmp_path):
    @tf.function(input_signature=[tf.TensorSpec([None, 6], dtype, name="x")])
    def f(x):
        return lib.ort_test_shift_scale(x, factor=1.7)

    proto = ox.export(f, tmp_path / "f.onnx", standard_ops=False)
    nodes = [(n.domain, n.op_type) for n in proto.graph.node]
    assert nodes == [("orttest", "ShiftScale")], nodes
    assert {o.domain for o in proto.opset_import} >= {"orttest"}
    assert "opforge" not in {o.domain for o in proto.opset_import}
    session = ox.session(tmp_path / "f.onnx", libraries=[lib])
    x = np.random.default_rng(0).standard_normal((9, 6)).astype(dtype.as_numpy_dtype)
    x[0] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-310 if dtype == tf.float64 else 1e-40]
    (y,) = session.run(None, {"x": x})
    expected = f(x).numpy()
    assert y.dtype == expected.dtype and y.shape == expected.shape
    np.testing.assert_array_equal(y.view(np.uint8), expected.view(np.uint8))


def test_bad_input_in_onnx_runtime_gives_the_cores_message(env, lib):
    message = "ShiftScale: x must be a tensor of rank at least 1, got a scalar"
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        lib.ort_test_shift_scale(tf.constant(1.0))
    quiet = {"log_severity_level": 4}  # ONNX Runtime's own log of the failure
    session = ox.session(_model("ShiftScale", [], {"factor": 2.0}), libraries=[opforge.build.ort_library_path(lib)],
                         **quiet)
    with pytest.raises(Exception, match=message) as info:
        session.run(None, {"x": np.array(1.0, np.float32)})
    assert "INVALID_ARGUMENT" in str(info.value)
    # An attribute the core refuses, when ONNX Runtime builds the kernel.
    with pytest.raises(Exception, match="ShiftScale: factor must be positive, got -1"):
        ox.session(_model("ShiftScale", [2], {"factor": -1.0}), libraries=[lib], **quiet)


def test_session_names_the_missing_library_and_op(env, lib, tmp_path):
    with pytest.raises(ox.MissingOpsError, match=r"domain 'orttest'.*libraries=\[.*libshift_scale_ort_"):
        ox.session(_model("ShiftScale", [2], {"factor": 2.0}))
    with pytest.raises(ox.MissingOpsError, match=r"orttest\.NoSuchOp.*They register: ShiftScale"):
        ox.session(_model("NoSuchOp", [2], {}), libraries=[lib])


def test_user_op_and_opforge_op_in_one_session(env, lib, tmp_path):
    import opforge.ops

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def f(x):
        return opforge.ops.leaky_relu(lib.ort_test_shift_scale(x, factor=0.5), alpha=0.3)

    proto = ox.export(f, tmp_path / "g.onnx", standard_ops=False)
    assert sorted((n.domain, n.op_type) for n in proto.graph.node) == [("opforge", "LeakyRelu"),
                                                                        ("orttest", "ShiftScale")]
    session = ox.session(tmp_path / "g.onnx", libraries=[lib])
    x = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_array_equal(session.run(None, {"x": x})[0].view(np.uint32), f(x).numpy().view(np.uint32))


CHILD = """
import sys
import numpy as np
import opforge.build, opforge.onnx as ox
sys.path.insert(0, sys.argv[1])
from test_build_ort import OP_STRUCT, TF_BINDING, ORT_REGISTRATION, _model
lib = opforge.build.load_inline("shift_scale", [OP_STRUCT, TF_BINDING], ort_source=[OP_STRUCT, ORT_REGISTRATION])
sess = ox.session(_model("ShiftScale", [3], {"factor": 2.0}), libraries=[lib])
print("RESULT", sess.run(None, {"x": np.array([1, 2, 3], np.float32)})[0].tolist())
print("ORT", opforge.build.ort_library_path(lib))
"""


def test_second_load_reuses_the_cache_for_both_libraries(env, lib):
    before = compiler_runs(env)
    ort_path = opforge.build.ort_library_path(lib)
    # In this process, through the cache (not the loaded-module memo) ...
    path = opforge.build.build_library("shift_scale", cpp_source=[OP_STRUCT, TF_BINDING],
                                       ort_source=[OP_STRUCT, ORT_REGISTRATION])
    assert opforge.build.ort_library_path(path) == ort_path
    # ... and in a new process, which loads both and runs the op in ONNX Runtime.
    proc = subprocess.run([sys.executable, "-c", CHILD, str(Path(__file__).parent)],
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "RESULT [2.0999999046325684, 4.099999904632568, 6.099999904632568]" in proc.stdout, proc.stdout
    assert f"ORT {ort_path}" in proc.stdout
    assert compiler_runs(env) == before  # no compile, no link
    # A changed ONNX Runtime source is another cache entry (both libraries rebuilt there).
    other = opforge.build._plan("shift_scale", (), (), (), (), (), None, [OP_STRUCT, TF_BINDING], None, (),
                                [OP_STRUCT, ORT_REGISTRATION, "// changed"])
    assert other.key != opforge.build._plan("shift_scale", (), (), (), (), (), None, [OP_STRUCT, TF_BINDING],
                                            None, (), [OP_STRUCT, ORT_REGISTRATION]).key


def test_a_tensorflow_header_in_the_ort_library_fails_with_the_reason(env):
    with pytest.raises(opforge.build.BuildError, match="without TensorFlow's headers") as info:
        opforge.build.build_library("ort_with_tf", cpp_source="int opforge_test_nothing = 0;\n",
                                    ort_source='#include "tensorflow/core/framework/op.h"\n')
    assert "tensorflow/core/framework/op.h" in info.value.first_error


BAD_SIGNATURE = r"""
#include <Eigen/Core>
#include "common/op_call.h"

// A signature TensorFlow takes and ONNX cannot express: an output list before a fixed output.
struct ListsFirstOp {
  static constexpr opforge::OpSignature kSignature{"OrtBad>ListsFirst", "x: T", "y: n * T; z: T",
                                                   "T: {float}; n: int >= 1"};
  using Params = int;
  opforge::Status Init(opforge::AttrReader&) { return opforge::Status::Ok(); }
  opforge::Status Validate(opforge::OpCall&, Params*) const {
    return opforge::Status::Invalid("ListsFirst has no kernel: its signature is what is tested");
  }
  template <typename T>
  void Cpu(const Params&, const opforge::OpCall&, const opforge::Parallel&) const {}
};
"""


def test_a_signature_onnx_cannot_express_fails_registration_naming_the_op(env, lib):
    """The ONNX Runtime skeleton reads each op's signature when the library registers: one it
    cannot express fails RegisterCustomOps with the op and the reason, never a wrong kernel."""
    import onnxruntime as ort

    path = opforge.build.build_library(
        "lists_first", cpp_source=[BAD_SIGNATURE, '#include "common/tf_kernel.h"\n'
                                   "OPFORGE_REGISTER_OP(ListsFirstOp);\n"],
        ort_source=[BAD_SIGNATURE, '#include "common/ort_kernel.h"\n'
                    "OPFORGE_ORT_KERNELS(ListsFirst, ListsFirstOp, OPFORGE_FLOAT_TYPES)\n"])
    options = ort.SessionOptions()
    with pytest.raises(Exception, match="opforge: OrtBad>ListsFirst: an output list before a fixed "
                                        "output has no ONNX form"):
        options.register_custom_ops_library(str(opforge.build.ort_library_path(path)))


def test_domains_and_argument_errors():
    assert opforge.build.ort_domain(["Custom>A", "Custom>AGrad"], "m") == "custom"
    assert opforge.build.ort_domain(["AddOne"], "add_one") == "add_one"
    with pytest.raises(ValueError, match="several namespaces"):
        opforge.build.ort_domain(["A>X", "B>Y"], "m")
    with pytest.raises(ValueError, match="domain of opforge's own"):
        opforge.build.ort_domain(["Opforge>Mine"], "m")
    with pytest.raises(ValueError, match="ort_source"):
        opforge.build.build_library("m", cpp_source="", ort_sources=["x_ort.cc"])
    with pytest.raises(ValueError, match="ort_sources"):
        opforge.build.build_library("m", sources=["x.cc"], ort_source="")
    with pytest.raises(ValueError, match="built with ONNX Runtime sources"):
        opforge.build.ort_library_path("/nonexistent/m_0123.so")

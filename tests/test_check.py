"""`opforge check`: passes on every opforge op, and fails, on the right check, on ops broken on
purpose (a wrong shape function, a wrong gradient, an abort on empty input, a result that
depends on the thread count, a result that changes every call), compiled in the test with
`opforge.build.load_inline` as a user would."""
from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import opforge
from opforge.tools import check as opcheck

CLI = str(Path(sys.executable).parent / "opforge")

BROKEN_OPS_CC = r"""
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

using namespace tensorflow;  // NOLINT: a user's small op file
using shape_inference::InferenceContext;

#define FLOAT_OP(name, shape_fn) \
  REGISTER_OP(name).Input("x: T").Output("y: T").Attr("T: {float, double}").SetShapeFn(shape_fn)

FLOAT_OP("CheckGoodScale", shape_inference::UnchangedShape);
// Broken: claims a vector of all the elements, while the kernel keeps the input's shape.
FLOAT_OP("CheckWrongShape", [](InferenceContext* c) {
  c->set_output(0, c->Vector(c->NumElements(c->input(0))));
  return absl::OkStatus();
});
FLOAT_OP("CheckWrongGrad", shape_inference::UnchangedShape);  // x^2; the Python gradient forgets the 2
FLOAT_OP("CheckCrash", shape_inference::UnchangedShape);      // x + 1; aborts on an empty input
FLOAT_OP("CheckHang", shape_inference::UnchangedShape);       // x + 1; never returns on an empty input
FLOAT_OP("CheckRandom", shape_inference::UnchangedShape);     // x + the number of earlier calls
FLOAT_OP("CheckThreadSum", shape_inference::ScalarShape);     // sum(x), one partial sum per thread

enum Mode { kScale, kIdentity, kSquare, kCrash, kHang, kRandom };

template <typename T, int kMode>
class ElementOp : public OpKernel {
 public:
  explicit ElementOp(OpKernelConstruction* c) : OpKernel(c) {}
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    Tensor* y = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &y));
    auto in = x.flat<T>();
    auto out = y->flat<T>();
    if (kMode == kCrash && in.size() == 0) std::abort();  // the bug: nothing guards it
    while (kMode == kHang && in.size() == 0) std::this_thread::sleep_for(std::chrono::seconds(1));
    static std::atomic<int> calls{0};
    const T add = kMode == kRandom ? T(calls++) : T(0);
    for (int64_t i = 0; i < in.size(); ++i) {
      const T v = in(i);
      out(i) = kMode == kScale ? v * T(2) : kMode == kSquare ? v * v : (kMode == kCrash || kMode == kHang) ? v + T(1) : v + add;
    }
  }
};

// The bug: the rounding depends on the size of the intra-op thread pool.
template <typename T>
class ThreadSum : public OpKernel {
 public:
  explicit ThreadSum(OpKernelConstruction* c) : OpKernel(c) {}
  void Compute(OpKernelContext* ctx) override {
    auto in = ctx->input(0).flat<T>();
    const int64_t parts = std::max(1, ctx->device()->tensorflow_cpu_worker_threads()->num_threads);
    const int64_t n = in.size();
    T total = T(0);
    for (int64_t p = 0; p < parts; ++p) {
      T part = T(0);
      for (int64_t i = n * p / parts; i < n * (p + 1) / parts; ++i) part += in(i);
      total += part;
    }
    Tensor* y = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &y));
    y->scalar<T>()() = total;
  }
};

#define REGISTER(name, T, ...) \
  REGISTER_KERNEL_BUILDER(Name(name).Device(DEVICE_CPU).TypeConstraint<T>("T"), __VA_ARGS__)
#define REGISTER_ALL(T)                                  \
  REGISTER("CheckGoodScale", T, ElementOp<T, kScale>);    \
  REGISTER("CheckWrongShape", T, ElementOp<T, kIdentity>); \
  REGISTER("CheckWrongGrad", T, ElementOp<T, kSquare>);   \
  REGISTER("CheckCrash", T, ElementOp<T, kCrash>);        \
  REGISTER("CheckHang", T, ElementOp<T, kHang>);          \
  REGISTER("CheckRandom", T, ElementOp<T, kRandom>);      \
  REGISTER("CheckThreadSum", T, ThreadSum<T>);
REGISTER_ALL(float)
REGISTER_ALL(double)
"""

# The library's loader: opforge.build.load_inline, cached in $OPFORGE_CACHE.
LIB_MODULE = '''
from pathlib import Path

SOURCE = Path(__file__).with_name("check_ops.cc").read_text()


def load():
    from opforge.build import load_inline

    return load_inline("opforge_check_test_ops", SOURCE)
'''

# What a user writes: the library, gradients, wrappers and CHECK_INPUTS.
USER_MODULE = '''
import numpy as np
import tensorflow as tf

from check_ops_lib import load

lib = load()


@tf.RegisterGradient("CheckGoodScale")
def _scale_grad(op, g):
    return 2 * g


@tf.RegisterGradient("CheckWrongShape")
def _identity_grad(op, g):
    return g


@tf.RegisterGradient("CheckWrongGrad")
def _square_grad(op, g):
    return g * op.inputs[0]  # the bug: d(x^2)/dx is 2x


@tf.RegisterGradient("CheckCrash")
def _crash_grad(op, g):
    return g


@tf.RegisterGradient("CheckHang")
def _hang_grad(op, g):
    return g


@tf.RegisterGradient("CheckRandom")
def _random_grad(op, g):
    return g


@tf.RegisterGradient("CheckThreadSum")
def _sum_grad(op, g):
    return tf.ones_like(op.inputs[0]) * g


def good_scale(x):
    return lib.check_good_scale(x)


def wrong_shape(x):
    return lib.check_wrong_shape(x)


def wrong_grad(x):
    return lib.check_wrong_grad(x)


def crash(x):
    return lib.check_crash(x)


def hang(x):
    return lib.check_hang(x)


def random_result(x):
    return lib.check_random(x)


def thread_sum(x):
    return lib.check_thread_sum(x)


def no_custom_op(x):
    return tf.nn.relu(x) * 2


_x = np.random.default_rng(0).standard_normal((3, 5))
_calls = [(_x.astype(np.float32),), (_x[0].astype(np.float64),)]
CHECK_INPUTS = {name: _calls for name in ("good_scale", "wrong_shape", "wrong_grad", "crash", "hang", "random_result")}
# A small call for the numerical gradient, a large one for determinism (the call with most elements).
CHECK_INPUTS["thread_sum"] = [(_x.reshape(-1).astype(np.float32),),
                              (np.random.default_rng(1).standard_normal(200_000).astype(np.float32),)]
'''

USER_TARGETS = ("good_scale", "wrong_shape", "wrong_grad", "crash", "random_result", "thread_sum")


def _env(extra=None):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.update(extra or {})
    return env


@pytest.fixture(scope="module")
def user_ops(tmp_path_factory):
    """A folder with the broken ops' source, their loader and a user module, and its cache
    (built here once, so the CLI and its children load it from the cache)."""
    folder = tmp_path_factory.mktemp("user_ops")
    (folder / "check_ops.cc").write_text(BROKEN_OPS_CC)
    (folder / "check_ops_lib.py").write_text(LIB_MODULE)
    (folder / "check_ops_user.py").write_text(USER_MODULE)
    env = {"OPFORGE_CACHE": str(folder / "cache"), "PYTHONPATH": str(folder)}
    with open("/tmp/opforge-build.lock", "w") as lock:  # the shared machine's one-compile-at-a-time lock
        fcntl.flock(lock, fcntl.LOCK_EX)
        proc = subprocess.run([sys.executable, "-c", "import check_ops_lib; check_ops_lib.load()"],
                              capture_output=True, text=True, env=_env(env), timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return folder, env


def _check_cli(*args, env=None, timeout=600):
    return subprocess.run([CLI, "check", *args], capture_output=True, text=True, env=_env(env), timeout=timeout)


@pytest.fixture(scope="module")
def user_results(user_ops):
    """`opforge check --json` on every user target, in one call (the children are shared)."""
    folder, env = user_ops
    proc = _check_cli(*[f"check_ops_user:{t}" for t in USER_TARGETS], "--json", "--timeout", "30", env=env)
    results = json.loads(proc.stdout)
    by_target = {}
    for r in results:
        by_target.setdefault(r["target"].split(":")[1], {})[r["check"]] = r
    return proc, by_target


def test_every_opforge_op_passes():
    proc = _check_cli("--fuzz-calls", "8")
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert not [line for line in lines if line.startswith("FAIL")]
    for spec in opforge.ops.SPECS:
        assert f"{spec.name}:" in lines
    # Every check ran for every op (an op without a gradient passes on its tf.no_gradient).
    for check in opcheck.CHECKS:
        assert sum(line.startswith(f"PASS {check}:") for line in lines) == len(opforge.ops.SPECS), check


def test_a_correct_user_op_passes(user_results):
    _, results = user_results
    good = results["good_scale"]
    assert set(good) == set(opcheck.CHECKS)
    assert {r["status"] for c, r in good.items() if c != "jit_compile"} == {"PASS"}, good
    # A TensorFlow kernel without an XLA kernel: nothing to compare under XLA, said so.
    assert good["jit_compile"]["status"] == "SKIP" and "CheckGoodScale has no XLA kernel" in \
        good["jit_compile"]["detail"] and "OPFORGE_REGISTER_XLA_FFI_OP" in good["jit_compile"]["detail"]
    assert "CheckGoodScale" in good["ops"]["detail"] and ".so" in good["ops"]["detail"]
    assert "CheckGoodScale T CPU: float32,float64 (all allowed); GPU: none" in good["kernels"]["detail"]
    # The fresh process loads only the library it found, not the module.
    assert "import" not in good["savedmodel"]["detail"] and ".so" in good["savedmodel"]["detail"]


@pytest.mark.parametrize("target,failing", [
    ("wrong_shape", "shape"),
    ("wrong_grad", "gradient"),
    ("crash", "bad_inputs"),
    ("random_result", "determinism"),
    ("thread_sum", "determinism"),
])
def test_a_broken_op_fails_its_check(user_results, target, failing):
    proc, results = user_results
    assert proc.returncode == 1
    result = results[target][failing]
    assert result["status"] == "FAIL", result
    if target == "crash":
        assert "crash" in result["detail"] and "empty" in result["detail"]
    if target == "thread_sum":
        # The same bits over runs within a process; only the thread count changes them.
        assert "1 and 2" in result["detail"]
        assert results[target]["eager_vs_function"]["status"] == "PASS"
        assert results[target]["gradient"]["status"] == "PASS"
    if target in ("wrong_shape", "wrong_grad", "crash"):  # the one broken thing fails, the rest pass
        others = {c: r["status"] for c, r in results[target].items() if c not in (failing, "jit_compile")}
        assert set(others.values()) == {"PASS"}, others


def test_a_hang_fails_and_the_child_is_restarted(user_ops):
    folder, env = user_ops
    proc = _check_cli("check_ops_user:hang", "--checks", "ops,bad_inputs", "--timeout", "3", env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    line = next(line for line in proc.stdout.splitlines() if line.startswith("FAIL bad_inputs:"))
    assert "hang on argument 0 empty: no result after 3 s" in line
    assert "2 hang" in line and "5 ok" in line  # the calls after each hang ran in a fresh child


def test_text_output_and_exit_code(user_ops):
    folder, env = user_ops
    proc = _check_cli("check_ops_user:wrong_grad", "--checks", "ops,gradient,kernels", env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "check_ops_user:wrong_grad:"
    assert lines[1].startswith("PASS ops: CheckWrongGrad from ")
    assert lines[2].startswith("FAIL gradient: registered for CheckWrongGrad; float64 numerical gradient")
    assert lines[3].startswith("PASS kernels: CheckWrongGrad T CPU: float32,float64 (all allowed)")
    assert "1 target, 3 checks: 2 passed, 1 failed, 0 skipped" in lines[-1]


def test_inputs_option_and_the_default_input(user_ops):
    folder, env = user_ops
    proc = _check_cli("check_ops_user:no_custom_op", "--checks", "ops", env=env)
    assert proc.returncode == 1 and "FAIL ops: no custom op in the traced graph" in proc.stdout, proc.stdout
    assert "no sample inputs given: tried one float32[4, 8] argument" in proc.stdout  # not in CHECK_INPUTS
    proc = _check_cli("check_ops_user:good_scale", "--inputs", "float64[2,3]", "--checks", "ops,shape,gradient",
                      env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "sample inputs given" in proc.stdout


def test_unknown_target_is_a_usage_error():
    proc = _check_cli("no_such_op")
    assert proc.returncode == 2 and "unknown target 'no_such_op'" in proc.stderr
    proc = _check_cli("no_such_module_xyz:f")
    assert proc.returncode == 2 and "cannot import" in proc.stderr


def test_python_api_on_a_function_object_and_a_cpp_op_name():
    import tensorflow as tf

    results = opcheck.check(opforge.ops.leaky_relu, checks=["ops", "shape", "eager_vs_function"])
    assert [(r.check, r.status) for r in results] == [("ops", "PASS"), ("shape", "PASS"),
                                                      ("eager_vs_function", "PASS")]
    assert "Opforge>LeakyRelu" in results[0].detail
    # A C++ op name checks the specs that run it.
    targets = opcheck.resolve("Opforge>LeakyReluWithMask")
    assert [t.spec.name for t in targets] == ["leaky_relu_with_mask"]
    # A lambda: sample inputs given, the bad-input check skipped (a child cannot import it).
    x = np.ones([2, 3], np.float32)
    results = opcheck.check(lambda t: opforge.ops.leaky_relu(t, 0.1), [(x,)], checks=["ops", "bad_inputs"])
    assert [(r.check, r.status) for r in results] == [("ops", "PASS"), ("bad_inputs", "SKIP")]
    # No custom op: says so.
    results = opcheck.check(tf.nn.relu, [(x,)], checks=["ops"])
    assert results[0].status == "FAIL" and "no custom op" in results[0].detail


def test_input_specs_parse():
    call = opcheck.parse_inputs(["float32[2,3]", "int64[4]", "float64[]"])
    assert [(a.dtype.name, a.shape.as_list()) for a in call.args] == [("float32", [2, 3]), ("int64", [4]),
                                                                       ("float64", [])]
    with pytest.raises(opcheck.TargetError, match="float32"):
        opcheck.parse_inputs(["float32(2,3)"])

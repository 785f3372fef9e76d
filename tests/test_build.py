"""opforge.build: a user's op compiled at run time against the running TensorFlow, cached.

Every test shares one cache (a temporary OPFORGE_CACHE), so opforge's helpers and the
precompiled header are built once; tests that need a cold build use a module name of their own.
The compiler is a wrapper around g++ that logs each compile and link (not `--version`), so the
tests count compiler runs, and that sleeps when told to, so a build can be killed mid-compile.
"""
from __future__ import annotations

import fcntl
import json
import re
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import opforge
import opforge.build

ADD_ONE = r"""
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

REGISTER_OP("AddOne")
    .Attr("T: {float, double}")
    .Input("x: T")
    .Output("y: T")
    .SetShapeFn([](::tensorflow::shape_inference::InferenceContext* c) {
      c->set_output(0, c->input(0));
      return absl::OkStatus();
    });

template <typename T>
class AddOneOp : public tensorflow::OpKernel {
 public:
  explicit AddOneOp(tensorflow::OpKernelConstruction* c) : OpKernel(c) {}
  void Compute(tensorflow::OpKernelContext* c) override {
    const tensorflow::Tensor& x = c->input(0);
    tensorflow::Tensor* y = nullptr;
    OP_REQUIRES_OK(c, c->allocate_output(0, x.shape(), &y));
    auto in = x.flat<T>();
    auto out = y->flat<T>();
    for (int64_t i = 0; i < in.size(); ++i) out(i) = in(i) + T(INCREMENT);
  }
};
REGISTER_KERNEL_BUILDER(Name("AddOne").Device(tensorflow::DEVICE_CPU).TypeConstraint<float>("T"),
                        AddOneOp<float>);
REGISTER_KERNEL_BUILDER(Name("AddOne").Device(tensorflow::DEVICE_CPU).TypeConstraint<double>("T"),
                        AddOneOp<double>);
"""


def add_one(increment: int = 1, tag: str = "", op: str = "AddOne") -> str:
    """AddOne's source; `tag` makes otherwise identical sources differ (another cache entry), `op`
    renames the op (for a second op in this process)."""
    return f"// {tag}\n#define INCREMENT {increment}\n" + ADD_ONE.replace('"AddOne"', f'"{op}"')


# An op on opforge's installed helpers: TfKernel, opforge::Parallel, the validation message format,
# ShapeFn and a dtype list.
SCALE = r"""
#include "common/tf_kernel.h"

namespace {
using opforge::Parallel;
using opforge::Status;

struct ScaleParams {
  float factor = 1;
  int64_t size = 0;
};

Status ValidateScale(const ScaleParams& p) {
  if (!(p.factor > 0)) return opforge::InvalidArgument("Scale", "factor", "positive", p.factor);
  return Status::Ok();
}

struct ScaleOp {
  using Params = ScaleParams;
  ScaleParams attrs;
  Status Init(opforge::AttrReader& reader) {
    reader.Read("factor", &attrs.factor);
    return ValidateScale(attrs);
  }
  Status Validate(opforge::OpCall& call, Params* p) const {
    *p = attrs;
    p->size = call.NumElements(0);
    call.Output(0, call.shape(0), {0});
    return Status::Ok();
  }
  template <typename T>
  void Cpu(const Params& p, const opforge::OpCall& call, const Parallel& parallel) const {
    const T* x = call.in<T>(0);
    T* y = call.out<T>(0);
    const T factor = static_cast<T>(p.factor);
    parallel.For(p.size, opforge::kCostElementwise, [=](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) y[i] = x[i] * factor;
    });
  }
};
}  // namespace

REGISTER_OP("OpforgeTest>Scale")
    .Attr("T: {float, double, int32, int64}")
    .Attr("factor: float = 2.0")
    .Input("x: T")
    .Output("y: T")
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) -> absl::Status {
      opforge::ShapeFn fn(c, "Scale");
      tensorflow::shape_inference::ShapeHandle x;
      TF_RETURN_IF_ERROR(fn.RankAtLeast(0, "x", 1, &x));
      c->set_output(0, x);
      return absl::OkStatus();
    });

#define SCALE_TYPES(X, ...) X(float, __VA_ARGS__) X(double, __VA_ARGS__) \
                            X(int32_t, __VA_ARGS__) X(int64_t, __VA_ARGS__)
OPFORGE_REGISTER_KERNELS(Name("OpforgeTest>Scale"), ScaleOp, SCALE_TYPES, OPFORGE_NO_TYPES)
"""

WRAPPER = """#!/bin/sh
# g++, logging each compile and link; sleeps first when $OPFORGE_TEST_SLEEP_ON is in the arguments.
case "$*" in
  *--version*|-v|-dumpversion) ;;
  *) echo "$$ $*" >> "$OPFORGE_TEST_CXX_LOG" ;;
esac
if [ -n "$OPFORGE_TEST_SLEEP_ON" ]; then
  case "$*" in *"$OPFORGE_TEST_SLEEP_ON"*) sleep 120 ;; esac
fi
exec g++ "$@"
"""


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """OPFORGE_CACHE and CXX (the logging wrapper) for this process and its children."""
    root = tmp_path_factory.mktemp("opforge_build")
    wrapper = root / "cxx"
    wrapper.write_text(WRAPPER)
    wrapper.chmod(0o755)
    values = {"OPFORGE_CACHE": str(root / "cache"), "CXX": str(wrapper),
              "OPFORGE_TEST_CXX_LOG": str(root / "cxx.log")}
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    yield values
    shutil.rmtree(root / "cache", ignore_errors=True)  # the precompiled header alone is ~390 MB
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def compiles(env, name: str) -> int:
    """How many times the compiler compiled a source of module `name`."""
    try:
        lines = Path(env["OPFORGE_TEST_CXX_LOG"]).read_text().splitlines()
    except FileNotFoundError:
        return 0
    return sum(1 for line in lines if " -c " in line and f"/{name}-" in line)


def entry_of(env, name: str) -> Path:
    entries = sorted(Path(env["OPFORGE_CACHE"]).glob(f"{name}-*"), key=lambda p: p.stat().st_mtime)
    assert entries, f"no cache entry for {name}"
    return entries[-1]


CHILD_LOAD = """
import sys, time
import tensorflow as tf
import opforge.build
source = open(sys.argv[1]).read()
t0 = time.perf_counter()
lib = opforge.build.load_inline(sys.argv[2], source)
t1 = time.perf_counter()
print("RESULT", lib.add_one(tf.constant([1.0, 2.0])).numpy().tolist(), flush=True)
print("SECONDS", t1 - t0, flush=True)
"""


def child(env, tmp_path, name: str, source: str, extra=None, **kwargs) -> subprocess.Popen:
    src = tmp_path / f"{name}_{abs(hash(source))}.cc"
    src.write_text(source)
    return subprocess.Popen(
        [sys.executable, "-c", CHILD_LOAD, str(src), name],
        env=dict(os.environ, **env, TF_CPP_MIN_LOG_LEVEL="2", **(extra or {})),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


def finish(proc: subprocess.Popen, timeout: float = 300):
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-4000:]
    result = json.loads(out.split("RESULT ")[1].splitlines()[0])
    return result, float(out.split("SECONDS ")[1].split()[0]), err


@pytest.fixture(scope="module")
def add_one_lib(env):
    """AddOne built cold in this process, with its gradient registered in Python."""
    started = time.perf_counter()
    lib = opforge.build.load_inline("add_one", add_one(1))
    seconds = time.perf_counter() - started
    print(f"cold build of add_one (helpers and precompiled header included): {seconds:.1f} s")

    @tf.RegisterGradient("AddOne")
    def _add_one_grad(op, grad):
        return [grad]

    return lib


def test_cold_build_runs_with_shape_function_and_gradient(env, add_one_lib):
    x = tf.constant([[1.0, -2.0, 3.5]])
    np.testing.assert_array_equal(add_one_lib.add_one(x).numpy(), [[2.0, -1.0, 4.5]])
    assert add_one_lib.add_one(tf.constant([1.0], tf.float64)).dtype == tf.float64

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
    def f(t):
        y = add_one_lib.add_one(t)
        assert y.shape.as_list() == [None, 3]  # the shape function kept the known size
        return y

    np.testing.assert_array_equal(f(x).numpy(), [[2.0, -1.0, 4.5]])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.reduce_sum(add_one_lib.add_one(x) * 3.0)
    np.testing.assert_array_equal(tape.gradient(y, x).numpy(), [[3.0, 3.0, 3.0]])
    assert compiles(env, "add_one") == 1
    entry = entry_of(env, "add_one")
    meta = json.loads((entry / "build.json").read_text())
    assert meta["environment"]["tf_version"] == tf.__version__
    assert meta["op_names"] == ["AddOne"]
    assert (entry / "lock").is_file() and (entry / "src" / "add_one.cc").is_file()
    assert not list(entry.glob("tmp-*"))


def test_same_sources_again_return_the_loaded_module(env, add_one_lib):
    assert opforge.build.load_inline("add_one", add_one(1)) is add_one_lib
    assert compiles(env, "add_one") == 1


def test_cached_load_in_a_new_process_is_fast_and_runs_no_compiler(env, add_one_lib, tmp_path):
    log = Path(env["OPFORGE_TEST_CXX_LOG"])
    before = log.read_text()
    result, seconds, _ = finish(child(env, tmp_path, "add_one", add_one(1)))
    assert result == [2.0, 3.0]
    assert log.read_text() == before, "the cached load ran the compiler"
    assert seconds < 1.0, seconds


def test_changed_source_rebuilds_and_the_old_op_cannot_be_replaced(env, add_one_lib, tmp_path):
    # In this process AddOne exists: the changed source is refused before compiling, and says why.
    with pytest.raises(opforge.build.OpConflictError) as info:
        opforge.build.load_inline("add_one", add_one(2))
    message = str(info.value)
    assert "'AddOne'" in message and "already registered in this process" in message
    assert "process-global and permanent" in message
    assert "rename the op" in message and "restart the Python process" in message
    assert compiles(env, "add_one") == 1
    # A fresh process builds the changed source and runs it.
    result, _, _ = finish(child(env, tmp_path, "add_one", add_one(2)))
    assert result == [3.0, 4.0]
    assert compiles(env, "add_one") == 2
    assert len(list(Path(env["OPFORGE_CACHE"]).glob("add_one-*"))) == 2


def test_an_op_tensorflow_already_has_is_refused():
    source = ADD_ONE.replace('"AddOne"', '"Relu"')
    with pytest.raises(opforge.build.OpConflictError, match="by TensorFlow itself or another library"):
        opforge.build.load_inline("my_relu", source)


def test_two_processes_build_once(env, tmp_path):
    source = add_one(1, tag="parallel")
    procs = [child(env, tmp_path, "add_one_par", source) for _ in range(2)]
    results = [finish(p) for p in procs]
    assert [r[0] for r in results] == [[2.0, 3.0]] * 2
    assert compiles(env, "add_one_par") == 1
    builds = (entry_of(env, "add_one_par") / "builds.log").read_text()
    assert builds.count(" build (") == 1, builds


def test_a_killed_build_leaves_no_lock_that_hangs_the_next(env, tmp_path):
    name = "add_one_killed"
    source = add_one(1, tag="killed")
    proc = child(env, tmp_path, name, source, extra={"OPFORGE_TEST_SLEEP_ON": f"/{name}-"},
                 start_new_session=True)
    deadline = time.monotonic() + 240
    while compiles(env, name) == 0:  # the wrapper is asleep inside the compile of the source
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "the build never started"
        time.sleep(0.2)
    entry = entry_of(env, name)
    assert list(entry.glob("tmp-*")), "the killed build had no temporary directory"
    with open(entry / "lock") as lock:  # the builder holds the entry's lock while it compiles
        with pytest.raises(BlockingIOError):
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.killpg(proc.pid, signal.SIGKILL)  # the builder, its compiler and the sleeping wrapper
    proc.wait()
    assert not list(entry.glob("*.so")) and not (entry / "build.json").exists()
    started = time.monotonic()
    result, _, _ = finish(child(env, tmp_path, name, source), timeout=240)
    assert result == [2.0, 3.0]
    assert time.monotonic() - started < 200
    assert not list(entry.glob("tmp-*")), "the killed build's leftovers were not cleaned"


def test_compile_error_names_the_first_error_and_the_command(env):
    source = add_one(1, tag="broken", op="AddOneBroken").replace("out(i) = in(i)", "out(i) = in(i) +* undefined_name")
    with pytest.raises(opforge.build.BuildError) as info:
        opforge.build.load_inline("add_one_broken", source)
    error = info.value
    assert isinstance(error, opforge.LoadError)
    assert "error:" in error.first_error and "add_one_broken.cc:" in error.first_error
    message = str(error)
    assert f"First error:\n    {error.first_error}" in message
    cxx = str(Path(env["CXX"]).resolve())
    assert "Command:\n    " + cxx in message and " -c " in message
    assert "-std=c++17" in message and "-fPIC" in message and "_GLIBCXX_USE_CXX11_ABI" in message
    assert "Full compiler output:" in message and error.output.strip() in message
    assert error.command[0] == cxx and error.returncode != 0


def test_missing_symbol_fails_at_link_time(env):
    source = add_one(1, tag="unlinked", op="AddOneUnlinked").replace(
        "template <typename T>\nclass AddOneOp", "float NobodyDefinesThis(float);\ntemplate <typename T>\nclass AddOneOp"
    ).replace("out(i) = in(i) + T(INCREMENT)", "out(i) = T(NobodyDefinesThis(float(in(i))))")
    with pytest.raises(opforge.build.BuildError) as info:
        opforge.build.load_inline("add_one_unlinked", source)
    message = str(info.value)
    assert "NobodyDefinesThis(float)" in info.value.first_error
    assert "link" in message and "-Wl,--no-undefined" in message and "-shared" in message


def test_entry_recorded_for_another_tensorflow_is_not_reused(env, capfd):
    name = "add_one_version"
    source = add_one(1, tag="version")
    library = opforge.build.build_library(name, cpp_source=source)
    assert compiles(env, name) == 1
    meta_path = library.parent / "build.json"
    meta = json.loads(meta_path.read_text())
    meta["environment"]["tf_version"] = "2.0.0"
    meta_path.write_text(json.dumps(meta))
    capfd.readouterr()
    again = opforge.build.build_library(name, cpp_source=source)
    err = capfd.readouterr().err
    assert "built for TensorFlow '2.0.0'" in err and f"'{tf.__version__}'" in err, err
    assert "Rebuilding" in err
    assert compiles(env, name) == 2 and again == library
    assert json.loads(meta_path.read_text())["environment"]["tf_version"] == tf.__version__


def test_installed_helpers_parallel_and_validation_message(env):
    assert all(Path(p).is_dir() for p in opforge.build.include_paths())
    lib = opforge.build.load_inline("scale", SCALE)
    big = np.arange(1 << 20, dtype=np.float32)  # large enough for Parallel to split
    np.testing.assert_array_equal(lib.opforge_test_scale(big, factor=3.0).numpy(), big * 3)
    for dtype in (np.float64, np.int32, np.int64):
        x = np.arange(7, dtype=dtype)
        np.testing.assert_array_equal(lib.opforge_test_scale(x).numpy(), x * 2)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"Scale: factor must be positive, got -1"):
        lib.opforge_test_scale(big, factor=-1.0)

    @tf.function(input_signature=[tf.TensorSpec(None, tf.float32)])
    def f(t):
        return lib.opforge_test_scale(tf.reshape(t, []))

    with pytest.raises(ValueError, match=r"Scale: x must be at least 1-D, got rank 0, shape \[\]"):
        f.get_concrete_function()
    # The helpers were compiled once into this cache (and would be reused by the next module).
    shared = list((Path(env["OPFORGE_CACHE"]) / "_shared").iterdir())
    assert shared and all((s / "tf_glue.o").is_file() for s in shared)


def test_load_from_files_tracks_included_headers(env, tmp_path):
    (tmp_path / "increment.h").write_text("#define INCREMENT 5\n")
    src = tmp_path / "add_five.cc"
    src.write_text('#include "increment.h"\n' + ADD_ONE.replace('"AddOne"', '"AddFive"'))
    first = opforge.build.build_library("add_five", [src])
    assert compiles(env, "add_five") == 1
    assert opforge.build.build_library("add_five", [src]) == first
    assert compiles(env, "add_five") == 1
    (tmp_path / "increment.h").write_text("#define INCREMENT 6\n")
    opforge.build.build_library("add_five", [src])
    assert compiles(env, "add_five") == 2
    lib = opforge.build.load("add_five", [src])
    assert lib.add_five(tf.constant([1.0])).numpy().tolist() == [7.0]


def test_cuda_sources_without_nvcc_say_so(env, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvcc on PATH
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setattr(opforge.build, "_cuda_home", lambda: None)
    with pytest.raises(opforge.build.BuildError, match="no nvcc was found"):
        opforge.build.build_library("cuda_op", cpp_source=ADD_ONE, cuda_source="__global__ void k() {}")


CUDA_SOURCE = r"""
#include "common/status.h"
__global__ void AddOneKernel(const float* x, float* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] + 1.0f;
}
opforge::Status AddOneGpu(const float* x, float* y, int n, void* stream) {
  AddOneKernel<<<(n + 255) / 256, 256, 0, static_cast<cudaStream_t>(stream)>>>(x, y, n);
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? opforge::Status::Ok() : opforge::Status::Internal(cudaGetErrorString(e));
}
"""


@pytest.mark.skipif(opforge.build._cuda_home() is None, reason="skipped: no nvcc")
def test_cuda_sources_compile_with_nvcc_and_link_the_static_runtime(env):
    """Compiles and links only (the GPU kernel is registered with TensorFlow only in a CUDA
    TensorFlow, and runs only on a GPU): the C++ side calls the .cu entry point, so the link
    (-Wl,--no-undefined) proves the two meet and cudart is linked in statically."""
    cpp = add_one(1, tag="cuda").replace(
        "template <typename T>\nclass AddOneOp",
        "opforge::Status AddOneGpu(const float*, float*, int, void*);\n"
        "void* volatile keep = reinterpret_cast<void*>(&AddOneGpu);\ntemplate <typename T>\nclass AddOneOp")
    cpp = '#include "common/status.h"\n' + cpp
    library = opforge.build.build_library(
        "add_one_cuda", cpp_source=cpp, cuda_source=CUDA_SOURCE,
        extra_cflags={"nvcc": ["-gencode=arch=compute_90,code=sm_90"]})
    assert library.is_file()
    meta = json.loads((library.parent / "build.json").read_text())
    assert meta["environment"]["nvcc_version"]
    assert "-lcudart_static" in meta["link_command"]
    assert any(c[0].endswith("nvcc") for c in meta["compile_commands"])
    dynamic = subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True).stdout
    assert "libcudart" not in dynamic  # static runtime: no shared libcudart needed
    # ... linked ahead of TensorFlow's libraries (whose CUDA wheel exports its own runtime) and
    # hidden: no CUDA runtime symbol left undefined, none exported.
    link = meta["link_command"]
    assert link.index("-lcudart_static") < link.index(tf.sysconfig.get_link_flags()[-1])
    assert "-Wl,--exclude-libs,libcudart_static.a" in link
    undefined = subprocess.run(["nm", "-D", "--undefined-only", str(library)], capture_output=True,
                               text=True).stdout
    assert not re.search(r" U (__cuda|cuda[A-Z])", undefined), undefined
    exported = subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True,
                              text=True).stdout
    assert not re.search(r" [TW] (__cuda|cuda[A-Z])", exported), exported


def test_abi_flag_other_than_tensorflows_is_refused_with_the_reason(env):
    abi = next(f.split("=")[1] for f in tf.sysconfig.get_compile_flags() if "_GLIBCXX_USE_CXX11_ABI" in f)
    other = "0" if abi == "1" else "1"
    with pytest.raises(opforge.build.BuildError) as info:
        opforge.build.build_library("add_one_abi", cpp_source=ADD_ONE,
                                    extra_cflags=[f"-D_GLIBCXX_USE_CXX11_ABI={other}"])
    message = str(info.value)
    assert f"_GLIBCXX_USE_CXX11_ABI={abi}" in message and "std::string" in message
    assert "tf.sysconfig" in message
    assert compiles(env, "add_one_abi") == 0


def test_load_failure_explains_an_undefined_symbol(env):
    """What a library that cannot load says (opforge.build links with -Wl,--no-undefined, so this
    takes a library missing at run time): the symbol demangled, and the ABI when it is __cxx11."""
    plan = opforge.build._plan("x", (), (), (), (), (), None, cpp_source="")
    message = opforge.build._explain_load_failure(
        plan, "x.so: undefined symbol: _ZN10tensorflow8internal7MyThingERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE")
    assert "tensorflow::internal::MyThing(std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > const&)" in message
    assert "_GLIBCXX_USE_CXX11_ABI" in message

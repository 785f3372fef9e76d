"""`opforge new NAME [--dir DIR]`: a user's op project that builds with `opforge.build`, passes
`opforge check` and its own tests unchanged, and says where the user's maths goes.

The op it writes is complete and real: `y = scale * x * x` with its gradient
`dx = 2 * scale * x * dy`, over half, bfloat16, float32 and float64, with a shape function, a
validated attribute, a C++ gradient op, CUDA kernels (compiled against a CUDA TensorFlow), a
Python wrapper, tests against NumPy and a benchmark. The op struct (`<name>_op.h`, no TensorFlow
header) runs in TensorFlow (`<name>_tf.cc`) and in ONNX Runtime (`<name>_ort.cc`, one
registration line per op): both libraries are built by `opforge.build.load`, and the tests run
the exported op in ONNX Runtime against TensorFlow, bit for bit. Every place to change for another op is
marked `YOUR MATHS` (the C++ element formulas, the NumPy reference) or `YOUR ATTRIBUTES`.
"""
from __future__ import annotations

import keyword
import re
from pathlib import Path
from typing import Dict, List, Optional

__all__ = ["new_project", "camel_case", "FILES"]

# The C++ namespace of users' ops in TensorFlow's registry ("Custom>MyOp").
OP_NAMESPACE = "Custom"


def camel_case(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_") if part)


def _check_name(name: str) -> None:
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name) or keyword.iskeyword(name) or name.endswith("_"):
        raise ValueError(f"opforge new: NAME must be a snake_case Python identifier (letters, digits, "
                         f"underscores; starting with a letter), got {name!r}")


# --- the files ---------------------------------------------------------------------------------
# Placeholders: {name} (snake_case), {Name} (CamelCase), {op} (the registered op name),
# {fn} (the function tf.load_op_library generates for it). Literal braces are doubled.

_HEADER = '''\
// {Name}: the framework-free core of the op (no TensorFlow header): its parameters, their check,
// and the kernels. The element formulas are in {name}_element.h, shared by the CPU and CUDA code.
#ifndef {GUARD}_H_
#define {GUARD}_H_

#include <cstdint>
#include <vector>

#include "common/dtype.h"
#include "common/parallel.h"
#include "common/status.h"

namespace {name} {{

struct Params {{
  float scale = 1.0f;  // YOUR ATTRIBUTES: one field per attribute of REGISTER_OP ({name}_tf.cc)
  int64_t size = 0;    // the number of elements
}};

// The attributes' check, with the message format users see:
// "<Op>: <argument> must be <expected>, got <given>".
opforge::Status Validate(const Params& params);
// The gradient op's inputs must have one shape.
opforge::Status ValidateGrad(const Params& params, const std::vector<int64_t>& gradients,
                             const std::vector<int64_t>& x);

// y[i] = Value(x[i]); dx[i] = Backprop(g[i], x[i]) (see {name}_element.h).
template <typename T>
void Forward(const Params& params, const T* x, T* y, const opforge::Parallel& parallel);
template <typename T>
void Backward(const Params& params, const T* g, const T* x, T* dx, const opforge::Parallel& parallel);

// The CUDA kernels ({name}.cu), asynchronous on `stream` (a cudaStream_t).
opforge::Status ForwardGpu(opforge::DType dtype, const Params& params, const void* x, void* y,
                           void* stream);
opforge::Status BackwardGpu(opforge::DType dtype, const Params& params, const void* g,
                            const void* x, void* dx, void* stream);

}}  // namespace {name}

#endif  // {GUARD}_H_
'''

_ELEMENT = '''\
// {Name}'s element formulas, compiled for the CPU ({name}_cpu.cc) and the GPU ({name}.cu), so the
// two compute the same bits. Half and bfloat16 compute in float (Compute<T>) and round once.
#ifndef {GUARD}_ELEMENT_H_
#define {GUARD}_ELEMENT_H_

#include <cmath>  // std::exp, std::log1p, std::tanh... for your maths (host and device)

#if defined(__CUDACC__)
#define {GUARD}_HD __host__ __device__ __forceinline__
#else
#define {GUARD}_HD inline
#endif

namespace {name} {{

// YOUR MATHS: the forward formula, y = f(x).
template <typename C>
{GUARD}_HD C Value(C x, C scale) {{
  return scale * x * x;
}}

// YOUR MATHS: its derivative times the incoming gradient, dx = f'(x) * g.
template <typename C>
{GUARD}_HD C Backprop(C g, C x, C scale) {{
  return C(2) * scale * x * g;
}}

}}  // namespace {name}

#endif  // {GUARD}_ELEMENT_H_
'''

_CPU = '''\
// {Name} on the CPU: the attribute check and the parallel loops (framework-free; the binding
// backs opforge::Parallel with TensorFlow's intra-op thread pool).
#include <Eigen/Core>
#include <cmath>
#include <type_traits>

#include "{name}.h"
#include "{name}_element.h"

namespace {name} {{

using opforge::InvalidArgument;
using opforge::Status;

Status Validate(const Params& params) {{
  // YOUR ATTRIBUTES: check each one; the message names it, what was expected and what was given.
  if (!std::isfinite(params.scale)) {{
    return InvalidArgument("{Name}", "scale", "a finite number", params.scale);
  }}
  return Status::Ok();
}}

Status ValidateGrad(const Params& params, const std::vector<int64_t>& gradients,
                    const std::vector<int64_t>& x) {{
  OPFORGE_RETURN_IF_ERROR(Validate(params));
  if (gradients != x) {{
    return InvalidArgument("{Name}Grad", "gradients", "the shape of x " + opforge::ShapeString(x),
                           opforge::ShapeString(gradients));
  }}
  return Status::Ok();
}}

// Half and bfloat16 compute in float; float and double in themselves.
template <typename T>
using Compute = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <typename T>
void Forward(const Params& params, const T* x, T* y, const opforge::Parallel& parallel) {{
  const Compute<T> scale = static_cast<Compute<T>>(params.scale);
  parallel.For(params.size, opforge::kCostElementwise, [=](int64_t begin, int64_t end) {{
    for (int64_t i = begin; i < end; ++i) {{
      y[i] = static_cast<T>(Value(static_cast<Compute<T>>(x[i]), scale));
    }}
  }});
}}

template <typename T>
void Backward(const Params& params, const T* g, const T* x, T* dx, const opforge::Parallel& parallel) {{
  const Compute<T> scale = static_cast<Compute<T>>(params.scale);
  parallel.For(params.size, opforge::kCostElementwise, [=](int64_t begin, int64_t end) {{
    for (int64_t i = begin; i < end; ++i) {{
      dx[i] = static_cast<T>(
          Backprop(static_cast<Compute<T>>(g[i]), static_cast<Compute<T>>(x[i]), scale));
    }}
  }});
}}

#define {GUARD}_INSTANTIATE_(T, ...)                                                   \\
  template void Forward<T>(const Params&, const T*, T*, const opforge::Parallel&); \\
  template void Backward<T>(const Params&, const T*, const T*, T*, const opforge::Parallel&);
OPFORGE_FLOAT_TYPES({GUARD}_INSTANTIATE_)

}}  // namespace {name}
'''

_CUDA = '''\
// {Name} on the GPU: one thread per element (grid-stride), the formulas of {name}_element.h.
// Compiled by opforge.build with nvcc against a CUDA TensorFlow, and with the C++ compiler for
// opforge's SIMT runtime under cuda_sim=True (`opforge check --cuda-sim`: these kernels run on
// the CPU and are compared with the CPU kernels): so launches are written
// OPFORGE_LAUNCH(grid, block, shared_bytes, stream, Kernel<...>)(args...), which is
// Kernel<...><<<grid, block, shared_bytes, stream>>>(args...) under nvcc.
#include "common/cuda_util.cuh"
#include "{name}.h"
#include "{name}_element.h"

namespace {name} {{
namespace {{

using opforge::cuda::Num;  // half and bfloat16 compute in float, rounding once

template <typename T, typename C>
__global__ void ForwardKernel(const T* x, T* y, int64_t n, C scale) {{
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(blockDim.x) * gridDim.x) {{
    y[i] = Num<T>::From(Value(Num<T>::To(x[i]), scale));
  }}
}}

template <typename T, typename C>
__global__ void BackwardKernel(const T* g, const T* x, T* dx, int64_t n, C scale) {{
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(blockDim.x) * gridDim.x) {{
    dx[i] = Num<T>::From(Backprop(Num<T>::To(g[i]), Num<T>::To(x[i]), scale));
  }}
}}

template <typename Launch>
opforge::Status Dispatch(opforge::DType dtype, Launch launch) {{
  switch (dtype) {{
    case opforge::DType::kHalf: return launch(__half(), 0.0f);
    case opforge::DType::kBFloat16: return launch(__nv_bfloat16(), 0.0f);
    case opforge::DType::kFloat: return launch(0.0f, 0.0f);
    case opforge::DType::kDouble: return launch(0.0, 0.0);
    default: return opforge::cuda::UnsupportedDType("{Name}", dtype);
  }}
}}

}}  // namespace

opforge::Status ForwardGpu(opforge::DType dtype, const Params& p, const void* x, void* y,
                           void* stream) {{
  if (p.size == 0) return opforge::Status::Ok();
  return Dispatch(dtype, [&](auto t, auto c) {{
    using T = decltype(t);
    OPFORGE_LAUNCH(opforge::cuda::Blocks(p.size), opforge::cuda::kThreads, 0,
                   static_cast<cudaStream_t>(stream), ForwardKernel<T, decltype(c)>)(
        static_cast<const T*>(x), static_cast<T*>(y), p.size, static_cast<decltype(c)>(p.scale));
    return opforge::cuda::LaunchStatus("{Name}");
  }});
}}

opforge::Status BackwardGpu(opforge::DType dtype, const Params& p, const void* g, const void* x,
                            void* dx, void* stream) {{
  if (p.size == 0) return opforge::Status::Ok();
  return Dispatch(dtype, [&](auto t, auto c) {{
    using T = decltype(t);
    OPFORGE_LAUNCH(opforge::cuda::Blocks(p.size), opforge::cuda::kThreads, 0,
                   static_cast<cudaStream_t>(stream), BackwardKernel<T, decltype(c)>)(
        static_cast<const T*>(g), static_cast<const T*>(x), static_cast<T*>(dx), p.size,
        static_cast<decltype(c)>(p.scale));
    return opforge::cuda::LaunchStatus("{Name}Grad");
  }});
}}

}}  // namespace {name}
'''

_OP = '''\
// {Name}'s op structs: what every runtime's skeleton runs (common/op_call.h): the signature, the
// attributes, the validation and the outputs of one call, and the core calls. No TensorFlow
// header: the same structs run in TensorFlow ({name}_tf.cc), in ONNX Runtime ({name}_ort.cc) and
// under XLA ({name}_xla.cc). Each struct's kSignature (common/op_signature.h) is the op's one
// description: its name, inputs, outputs and attrs in REGISTER_OP's syntax, ';' between items;
// every runtime's registration reads it.
#ifndef {GUARD}_OP_H_
#define {GUARD}_OP_H_

#include "common/op_call.h"
#include "{name}.h"

namespace {name} {{

struct Attrs {{
  using Params = {name}::Params;
  // YOUR ATTRIBUTES (REGISTER_OP's attr syntax), the same for both ops.
  static constexpr char kAttrs[] =
      "scale: float = 1.0; T: {{half, bfloat16, float, double}} = DT_FLOAT";
  Params attrs;
  opforge::Status Init(opforge::AttrReader& reader) {{
    reader.Read("scale", &attrs.scale);  // YOUR ATTRIBUTES
    return Validate(attrs);
  }}
}};

struct ForwardOp : Attrs {{
  static constexpr opforge::OpSignature kSignature{{"{op}", "x: T", "y: T", kAttrs}};
  opforge::Status Validate(opforge::OpCall& call, Params* params) const {{
    *params = attrs;
    params->size = call.NumElements(0);
    call.Output(0, call.shape(0), {{0}});  // may reuse the input's buffer
    return opforge::Status::Ok();
  }}
  template <typename T>
  void Cpu(const Params& p, const opforge::OpCall& call, const opforge::Parallel& parallel) const {{
    Forward<T>(p, call.in<T>(0), call.out<T>(0), parallel);
  }}
  opforge::Status Gpu(opforge::DType dtype, const Params& p, const opforge::OpCall& call,
                      void* stream) const {{
    return ForwardGpu(dtype, p, call.in(0), call.out(0), stream);
  }}
}};

struct BackwardOp : Attrs {{
  static constexpr opforge::OpSignature kSignature{{"{op}Grad", "gradients: T; x: T",
                                                    "backprops: T", kAttrs}};
  opforge::Status Validate(opforge::OpCall& call, Params* params) const {{
    *params = attrs;
    OPFORGE_RETURN_IF_ERROR(ValidateGrad(*params, call.shape(0), call.shape(1)));
    params->size = call.NumElements(0);
    call.Output(0, call.shape(0), {{0}});
    return opforge::Status::Ok();
  }}
  template <typename T>
  void Cpu(const Params& p, const opforge::OpCall& call, const opforge::Parallel& parallel) const {{
    Backward<T>(p, call.in<T>(0), call.in<T>(1), call.out<T>(0), parallel);
  }}
  opforge::Status Gpu(opforge::DType dtype, const Params& p, const opforge::OpCall& call,
                      void* stream) const {{
    return BackwardGpu(dtype, p, call.in(0), call.in(1), call.out(0), stream);
  }}
}};

}}  // namespace {name}

#endif  // {GUARD}_OP_H_
'''

_BINDING = '''\
// {Name}'s TensorFlow binding: the ops (their signatures are the op structs' kSignature in
// {name}_op.h; the shape functions and docs are here) and one registration line per op for the
// structs of {name}_op.h, which opforge's TfKernel runs.
#include "common/tf_kernel.h"
#include "{name}_op.h"

namespace {name} {{
namespace {{

OPFORGE_REGISTER_OP(ForwardOp)
    .SetShapeFn(tensorflow::shape_inference::UnchangedShape)
    .Doc("y = scale * x * x, element-wise.");  // YOUR MATHS (the op's one-line description)

OPFORGE_REGISTER_OP(BackwardOp)
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {{
      tensorflow::shape_inference::ShapeHandle out;
      TF_RETURN_IF_ERROR(opforge::ShapeFn(c, "{Name}Grad")
                             .MergeInput(0, "gradients", c->input(1), "the shape of x", &out));
      c->set_output(0, out);
      return absl::OkStatus();
    }})
    .Doc("backprops = gradients * d{Name}/dx.");

OPFORGE_REGISTER_KERNELS(Name(ForwardOp::kSignature.name), ForwardOp, OPFORGE_FLOAT_TYPES,
                         OPFORGE_FLOAT_TYPES)
OPFORGE_REGISTER_KERNELS(Name(BackwardOp::kSignature.name), BackwardOp, OPFORGE_FLOAT_TYPES,
                         OPFORGE_FLOAT_TYPES)

}}  // namespace
}}  // namespace {name}
'''

_ORT = '''\
// {Name} in ONNX Runtime: the op structs of {name}_op.h, the ones TensorFlow runs, registered as
// ONNX op types of the domain "{domain}" (common/ort_kernel.h). opforge.build compiles this, the
// core ({name}_cpu.cc) and opforge's ONNX Runtime skeleton into lib{name}_ort_<key>.so, without
// TensorFlow. Each line: an identifier, the struct and its element types; the ONNX op type (the
// TensorFlow op's name without "{namespace}>") and the inputs' and outputs' types come from the
// struct's kSignature.
#include "common/ort_kernel.h"
#include "{name}_op.h"

namespace {name} {{

OPFORGE_ORT_KERNELS({Name}, ForwardOp, OPFORGE_FLOAT_TYPES)
OPFORGE_ORT_KERNELS({Name}Grad, BackwardOp, OPFORGE_FLOAT_TYPES)

}}  // namespace {name}
'''

_XLA = '''\
// {Name} under XLA (tf.function(jit_compile=True), Keras's jit_compile): the op structs of
// {name}_op.h, the ones TensorFlow runs, as XLA FFI custom calls (common/tf_xla_ffi.h). Each
// OPFORGE_FFI_KERNELS line defines a handler (a C function XLA calls: no TensorFlow in it, so
// any XLA host can call it; the custom-call target is the struct's kSignature name, and each
// call is checked against that signature); each OPFORGE_REGISTER_XLA_FFI_OP line makes
// TensorFlow's XLA compile the op into a call to it, after checking the call with the op
// struct's Validate (after the struct, name the inputs whose values Validate reads: they must
// be compile-time constants under XLA). The same kernels as without XLA: the same bits.
#include "common/tf_xla_ffi.h"
#include "{name}_op.h"

namespace {name} {{

OPFORGE_FFI_KERNELS({namespace}{Name}, ForwardOp, OPFORGE_FLOAT_TYPES)
OPFORGE_FFI_KERNELS({namespace}{Name}Grad, BackwardOp, OPFORGE_FLOAT_TYPES)
// XLA:GPU's handlers, in a build against TensorFlow's CUDA wheel (elsewhere these lines are empty)
OPFORGE_FFI_GPU_KERNELS({namespace}{Name}, ForwardOp, OPFORGE_FLOAT_TYPES)
OPFORGE_FFI_GPU_KERNELS({namespace}{Name}Grad, BackwardOp, OPFORGE_FLOAT_TYPES)
OPFORGE_REGISTER_XLA_FFI_OP({namespace}{Name}, ForwardOp)
OPFORGE_REGISTER_XLA_FFI_OP({namespace}{Name}Grad, BackwardOp)

}}  // namespace {name}
'''

_PYTHON = '''\
"""{name}: a TensorFlow op in C++, built with opforge.build (`opforge new {name}`).

    import {name}
    y = {name}.{name}(x, scale=2.0)

The C++ library is compiled against the running TensorFlow on first use and cached (a rebuild
happens only when a source, a flag, TensorFlow or the compiler changes).
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np
import tensorflow as tf

import opforge.build
from opforge.tools.check import Call

HERE = Path(__file__).resolve().parent
OP_NAME = "{op}"
_module = None


def library():
    """The compiled op library (built or loaded from the cache on first use)."""
    global _module
    if _module is None:
        # The CUDA kernels: with nvcc against a CUDA TensorFlow; for opforge's SIMT runtime (on
        # the CPU) when cuda_sim is asked for (OPFORGE_CUDA_SIM=1, as `opforge check --cuda-sim`
        # sets, or cuda_sim=True here).
        use_cuda = tf.test.is_built_with_cuda() or opforge.build.cuda_sim_requested()
        cuda = [str(HERE / "{name}.cu")] if use_cuda else []
        # The ONNX Runtime library is built beside it, from the same op struct ({name}_op.h),
        # where this opforge has ONNX Runtime's headers (see ort_library).
        ort = [str(HERE / "{name}_ort.cc")] if opforge.build.ort_include_path() else []
        # The XLA kernels (jit_compile=True), where this TensorFlow lets ops have them.
        xla = [str(HERE / "{name}_xla.cc")] if opforge.build.xla_available() else []
        _module = opforge.build.load("{name}", [str(HERE / "{name}_cpu.cc"), str(HERE / "{name}_tf.cc")] + xla,
                                     cuda_sources=cuda, include_dirs=[str(HERE)], ort_sources=ort)
    return _module


def ort_library() -> Optional[str]:
    """The op's ONNX Runtime custom-op library (domain "{domain}"), for running a model exported
    with opforge.onnx.export: `opforge.onnx.session(path, libraries=[{name}.ort_library()])`.
    None where this opforge was installed without ONNX Runtime's headers."""
    try:
        return str(opforge.build.ort_library_path(library()))
    except ValueError:
        return None


def {name}(x, scale: float = 1.0, name: Optional[str] = None) -> tf.Tensor:
    """y = scale * x * x, element-wise (YOUR MATHS: say what your op computes).

    Args:
      x: a half, bfloat16, float32 or float64 tensor.
      scale: a finite number (YOUR ATTRIBUTES).
    """
    # The exception classes TensorFlow's own functions raise for the same mistakes, so callers
    # catch this op's errors where they catch TensorFlow's; the C++ checks raise
    # InvalidArgumentError for the values.
    try:
        x = tf.convert_to_tensor(x)
    except (TypeError, ValueError) as exc:
        raise type(exc)(_message("x", "a tensor or a value convertible to one", repr(x)[:60])) from None
    if isinstance(scale, bool) or not isinstance(scale, (int, float, np.number)):
        raise TypeError(_message("scale", "a number", repr(scale)[:60]))  # YOUR ATTRIBUTES
    return library().{fn}(x, scale=float(scale), name=name)


def _message(argument: str, expected: str, given: str) -> str:
    """The error format of the C++ checks: "<Op>: <argument> must be <expected>, got <given>"."""
    return f"{Name}: {{argument}} must be {{expected}}, got {{given}}"


@tf.RegisterGradient(OP_NAME)
def _gradient(op, grad):
    return library().{fn}_grad(grad, op.inputs[0], scale=op.get_attr("scale"))


def reference(x, scale: float = 1.0) -> np.ndarray:
    """YOUR MATHS: the same function in NumPy, what the tests compare against."""
    x = np.asarray(x)
    return (np.asarray(scale, x.dtype) * x * x).astype(x.dtype)


# What `opforge check {name}:{name}` calls the function with: a small call (the numerical
# gradient) and one large enough to be split across threads (determinism, SavedModel).
CHECK_INPUTS = {{
    "{name}": [
        Call(np.linspace(-3, 3, 24, dtype=np.float32).reshape(4, 6), scale=0.5),
        Call(np.random.default_rng(0).standard_normal((64, 4096)).astype(np.float32), scale=0.5),
    ],
}}
'''

_TEST = '''\
"""Tests of {name}: forward against the NumPy reference, float64 numerical gradients, the shape
function, a bad attribute's message, the CUDA kernels against the CPU kernels on opforge's SIMT
runtime (no GPU needed), and ONNX Runtime. Run: python -m pytest test_{name}.py"""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import opforge.build
import {name} as op

DTYPES = [tf.float16, tf.bfloat16, tf.float32, tf.float64]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_forward_matches_the_reference(dtype):
    x = tf.cast(tf.constant(np.random.default_rng(0).standard_normal((3, 5, 7))), dtype)
    y = op.{name}(x, scale=0.75)
    expected = op.reference(x.numpy().astype(np.float64 if dtype == tf.float64 else np.float32), 0.75)
    assert y.dtype == dtype and y.shape == x.shape
    # The same operations in the same order, rounded once to the dtype: the same bits.
    np.testing.assert_array_equal(tf.cast(y, tf.float64), tf.cast(tf.cast(expected, dtype), tf.float64))


def test_gradient_matches_a_float64_numerical_gradient():
    x = tf.constant(np.random.default_rng(1).standard_normal((4, 3)))
    theoretical, numerical = tf.test.compute_gradient(lambda t: op.{name}(t, scale=1.5), [x])
    np.testing.assert_allclose(theoretical[0], numerical[0], rtol=1e-6, atol=1e-6)


def test_shape_function_keeps_known_dimensions():
    @tf.function(input_signature=[tf.TensorSpec([None, 4, None])])
    def f(x):
        y = op.{name}(x)
        assert y.shape.as_list() == [None, 4, None], y.shape
        return y

    assert f(tf.ones([2, 4, 3])).shape == (2, 4, 3)


def test_bad_arguments_are_named():
    with pytest.raises(tf.errors.InvalidArgumentError, match="{Name}: scale must be a finite number, got nan"):
        op.{name}(tf.ones([2]), scale=float("nan"))
    with pytest.raises(TypeError, match="{Name}: scale must be a number, got 'big'"):
        op.{name}(tf.ones([2]), scale="big")
    with pytest.raises(ValueError, match="{Name}: x must be a tensor"):
        op.{name}(None)


def test_cuda_kernels_match_the_cpu_kernels_on_the_simt_runtime():
    """{name}.cu's kernels run on the CPU by opforge's SIMT runtime (every CUDA thread a fiber,
    with checks of barriers, warp intrinsics, launch limits and block order), compared with the
    CPU kernels on CHECK_INPUTS: `opforge check --cuda-sim`, in a child process (it builds the op
    for the SIMT runtime, which this process, holding the ordinary build, cannot load)."""
    if not opforge.build.cuda_sim_available():
        pytest.skip("no CUDA toolkit headers here: the cuda_sim build needs them (not a GPU, not nvcc)")
    here = Path(__file__).resolve().parent
    code = ("import sys; from opforge.tools import check; "
            "sys.exit(check.main(['{name}:{name}'], checks=['ops'], cuda_sim=True))")
    run = subprocess.run([sys.executable, "-c", code], cwd=here, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0 and "PASS cuda_sim" in run.stdout, run.stdout + run.stderr[-3000:]


def test_runs_under_xla_with_the_same_bits():
    """jit_compile=True ({name}_xla.cc): the forward and the gradient run as XLA custom calls to
    the same kernels, so they give the bits they give without XLA."""
    if not opforge.build.xla_available():
        pytest.skip("this TensorFlow lets custom ops have no XLA kernel (no libtensorflow_cc.so.2)")
    x = tf.constant(np.random.default_rng(3).standard_normal((6, 9)).astype(np.float32))

    def forward_and_gradient(v):
        with tf.GradientTape() as tape:
            tape.watch(v)
            y = op.{name}(v, scale=0.75)
        return y, tape.gradient(y, v, output_gradients=tf.ones_like(y) * 0.5)

    for expected, got in zip(forward_and_gradient(x), tf.function(forward_and_gradient, jit_compile=True)(x)):
        np.testing.assert_array_equal(got.numpy().view(np.uint32), expected.numpy().view(np.uint32))


@pytest.mark.parametrize("dtype", [tf.float32, tf.float64], ids=lambda d: d.name)
def test_runs_in_onnx_runtime_with_tensorflows_bits(dtype, tmp_path):
    """The same op struct in ONNX Runtime ({name}_ort.cc): a tf.function using the op, exported
    with opforge.onnx (the op as a node of the domain "{domain}"), gives TensorFlow's bits."""
    pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")
    pytest.importorskip("tf2onnx", reason="tf2onnx (opforge.onnx.export) is not installed")
    import opforge.onnx

    library = op.ort_library()
    if library is None:
        pytest.skip("this opforge was installed without ONNX Runtime's headers (no ONNX Runtime library)")

    @tf.function(input_signature=[tf.TensorSpec([None, 7], dtype, name="x")])
    def f(x):
        return op.{name}(x, scale=0.75)

    path = tmp_path / "{name}.onnx"
    model = opforge.onnx.export(f, path, standard_ops=False)
    assert [(n.domain, n.op_type) for n in model.graph.node] == [("{domain}", "{Name}")]
    session = opforge.onnx.session(path, libraries=[library])
    x = np.random.default_rng(2).standard_normal((5, 7)).astype(dtype.as_numpy_dtype)
    (y,) = session.run(None, {{"x": x}})
    expected = f(x).numpy()
    assert y.dtype == expected.dtype and y.shape == expected.shape
    np.testing.assert_array_equal(y.view(np.uint8), expected.view(np.uint8))
'''

_BENCH = '''\
"""Benchmark of {name} against the same maths in TensorFlow ops and in tf.py_function (NumPy),
timed interleaved, medians. Run: python bench_{name}.py [--size N]"""
import argparse

import numpy as np
import tensorflow as tf

from opforge._machine import machine
from opforge.tools.timing import interleaved

import {name} as op


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=1 << 22)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    x = tf.random.normal([args.size])
    scale = 0.5
    candidates = {{
        "{name}": lambda: op.{name}(x, scale=scale),
        "tf ops": lambda: scale * x * x,  # YOUR MATHS: the same function in TensorFlow ops
        "py_function": lambda: tf.py_function(lambda t: op.reference(t.numpy(), scale), [x], tf.float32),
    }}
    medians = interleaved(candidates, repeats=args.repeats)
    print(f"machine: {{machine()}}")
    print(f"{{args.size}} float32 elements, median of {{args.repeats}} interleaved rounds")
    for name, seconds in medians.items():
        ratio = seconds / medians["{name}"]
        print(f"  {{name:12s}} {{seconds * 1e3:8.3f}} ms  ({{ratio:.2f}}x the time of {name})")


if __name__ == "__main__":
    main()
'''

_README = '''\
# {name}

A TensorFlow op in C++ made with `opforge new {name}`: `y = scale * x * x` and its gradient,
until you change the maths.

| file | what it is | what you change |
|---|---|---|
| `{name}_element.h` | the element formulas, shared by CPU and GPU | **YOUR MATHS**: `Value`, `Backprop` |
| `{name}.h`, `{name}_cpu.cc` | the core: parameters, their check, parallel loops | **YOUR ATTRIBUTES** |
| `{name}_op.h` | the op structs every runtime runs: attributes, checks, outputs | **YOUR ATTRIBUTES** |
| `{name}_tf.cc` | the TensorFlow binding: ops, shape functions, kernels | the op's attributes |
| `{name}_ort.cc` | the ONNX Runtime registration: one line per op | nothing, for an element-wise op |
| `{name}_xla.cc` | XLA (jit_compile=True): the op structs as FFI custom calls, two lines per op | nothing, for an element-wise op |
| `{name}.cu` | CUDA kernels (built against a CUDA TensorFlow) | nothing, for an element-wise op |
| `{name}.py` | the wrapper, the gradient, the NumPy reference | `reference`, the docstring |
| `test_{name}.py`, `bench_{name}.py` | tests (ONNX Runtime too) and a benchmark | the benchmark's TensorFlow version |

`{name}.library()` builds the TensorFlow library and, beside it, the ONNX Runtime one (from the same
op structs); to run the op outside TensorFlow:

    opforge.onnx.export(f, "f.onnx", standard_ops=False)      # the op: node "{domain}.{Name}"
    sess = opforge.onnx.session("f.onnx", libraries=[{name}.ort_library()])

    python -c "import {name}; print({name}.{name}([1.0, 2.0], scale=3.0))"   # builds, then runs
    opforge check {name}:{name}                                            # the op's self-check
    python -m pytest test_{name}.py
    python bench_{name}.py
'''

FILES: Dict[str, str] = {
    "{name}.h": _HEADER,
    "{name}_element.h": _ELEMENT,
    "{name}_cpu.cc": _CPU,
    "{name}.cu": _CUDA,
    "{name}_op.h": _OP,
    "{name}_tf.cc": _BINDING,
    "{name}_ort.cc": _ORT,
    "{name}_xla.cc": _XLA,
    "{name}.py": _PYTHON,
    "test_{name}.py": _TEST,
    "bench_{name}.py": _BENCH,
    "README.md": _README,
}


def new_project(name: str, directory: Optional[str] = None, force: bool = False) -> List[Path]:
    """Writes the project `name` into `directory/name` (default: ./name); returns the files."""
    _check_name(name)
    root = Path(directory or ".") / name
    if root.exists() and any(root.iterdir()) and not force:
        raise FileExistsError(f"opforge new: {root} exists and is not empty (use --force to overwrite)")
    root.mkdir(parents=True, exist_ok=True)
    values = dict(name=name, Name=camel_case(name), op=f"{OP_NAMESPACE}>{camel_case(name)}",
                  fn=f"{OP_NAMESPACE.lower()}_{name}", GUARD=f"{name.upper()}",
                  namespace=OP_NAMESPACE, domain=OP_NAMESPACE.lower())
    written = []
    for pattern, template in FILES.items():
        path = root / pattern.format(**values)
        path.write_text(template.format(**values))
        written.append(path)
    return written

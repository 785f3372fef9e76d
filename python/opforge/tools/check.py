"""`opforge check`: TensorFlow's counterpart of PyTorch's `opcheck`, for opforge's ops and yours.

    opforge check leaky_relu                 # an opforge op (spec name or C++ op name)
    opforge check my_package.ops:my_relu     # MODULE:FUNCTION, the function behind your op
    opforge check                            # every opforge op

    from opforge.tools.check import check
    results = check(my_relu, [(np.ones([2, 3], np.float32),)])

"The op behind the function" is found by tracing the function in a `tf.function` graph on its
first sample call and collecting the op types TensorFlow itself does not define (not in
`tf.raw_ops`: `tf.load_op_library` ops, opforge's `Opforge>...`). One line per check:

- ops: the custom ops found, and the library files that registered them;
- shape: static output shapes inside `tf.function` against the runtime shapes, with every input
  shape known (opforge ops: equal; other ops: compatible, a less defined shape is a warning),
  the batch (first) dimension unknown, and every dimension unknown (compatible);
- gradient: every custom op with a float input or output has a gradient registered
  (`tf.RegisterGradient`, or `tf.no_gradient` on purpose), and the function's gradient agrees
  with a float64 numerical one (`tf.test.compute_gradient`, relative to the Jacobian's largest
  entry; float32 where the function does not run in float64) on the first 3 sample calls of at
  most 4096 float input elements; opforge ops use their spec's gradient cases and tolerance;
- kernels: the CPU and GPU kernels registered per dtype (`get_registered_kernels_for_op`)
  against the dtypes the op's definition allows; an allowed dtype without a CPU kernel fails;
- eager_vs_function: every sample call gives the same bits eagerly and inside `tf.function`;
- jit_compile: every sample call inside `tf.function(jit_compile=True)` against the same call
  without XLA, outputs and the gradients of sum(output^2)/2: the same bits pass (an op run as an
  XLA FFI custom call: `OPFORGE_REGISTER_XLA_FFI_OP`, which `opforge new` scaffolds); where XLA
  rounds otherwise (an HLO lowering, or TensorFlow ops in the function or its gradient, which
  XLA compiles itself) it passes with a warning saying by how much; a compilation that fails
  fails with TensorFlow's reason; an op with no XLA kernel at all is skipped, with a line saying
  so and how to give it one;
- bad_inputs: malformed calls in a child process (restarted after a crash): for opforge ops
  the spec's bad-input table (the error and message fragments it promises) and calls drawn by
  `opforge.tools.fuzz` (a vague error fails, see its rules); for other functions, each tensor
  argument of the first sample call with another rank, empty, empty beside a 2^31 dimension,
  inf/NaN, of another dtype, None, and of another rank inside `tf.function` with unknown
  dimensions: a crash or hang fails, an error that names no argument is a warning;
- determinism: the outputs, and the gradients of sum(output^2)/2, are the same bits over
  repeated runs, in child processes with 1 and with 2 intra-op threads;
- savedmodel: the function saved as a SavedModel loads in a fresh process that only loads the
  op's library (opforge ops: `import opforge`), runs the custom op and gives the same bits;
- cuda_sim (with `--cuda-sim`, or checks=[..., "cuda_sim"]): the op's CUDA kernels, run on the
  CPU by opforge's SIMT runtime (`opforge.cuda_sim`), against its CPU kernels, outputs and the
  gradients of sum(output^2)/2, on every sample call: the same bits pass; within
  `cuda_sim_tolerance` of the largest CPU value passes with a warning saying by how much (a CUDA
  maths function rounds otherwise than the host's); more, or a launch the runtime stops (a
  barrier not every thread reaches, a warp intrinsic a lane misses, a launch past an H200's
  limits, results that depend on the block order), fails. A sample call in a dtype without a
  GPU kernel is skipped. `--cuda-sim` sets OPFORGE_CUDA_SIM=1 before the target is imported, so
  that `opforge.build.load(..., cuda_sources=[...])` builds the op's library for the SIMT runtime
  (cuda_sim=True); for opforge's own ops it loads their cuda_sim library (`make cuda-sim`).

Sample inputs of a function, first found wins:
1. `sample_inputs=` of `check()` (the CLI's `--inputs`);
2. the `@opforge.tools.check.sample_inputs(...)` decorator on the function;
3. a module-level `CHECK_INPUTS = {"function_name": calls}` in the function's module (`calls`
   may also be a callable returning them);
4. none: one float32 [4, 8] argument (a one-argument function), and the `ops` line says so.

`calls` is a list of calls; each call is a tuple of positional arguments, a `Call(*args,
**kwargs)`, or a single array (a one-argument call). Arrays (NumPy or tensors) are the tensor
inputs; other values (Python numbers, strings) are passed as they are and held fixed. The first
call is traced to find the op and is the base of the malformed calls; the call with the most
elements is the determinism and SavedModel call: make it large enough to be split across
threads, and keep a small call (at most 4096 float elements) for the numerical gradient.
`--inputs float32[2,3] int64[3]` makes one call of standard normal (integers: -5..5) values of
those dtypes and shapes.

The child processes import the function's module (bad inputs) or load the libraries found in
`ops` (SavedModel); a function the child cannot import (a lambda, a function defined inside
another) gets its bad-input check skipped: define it at module level.
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import os
import pickle
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from opforge.tools import _child as child_io

CHECKS = ("ops", "shape", "gradient", "kernels", "eager_vs_function", "jit_compile", "bad_inputs", "determinism",
          "savedmodel")
# Run when asked for (`--cuda-sim`): they need a build of the op for them.
OPTIONAL_CHECKS = ("cuda_sim",)
CUDA_SIM_TOLERANCE = 1e-5
DEFAULT_SHAPE = (4, 8)
MAX_JACOBIAN_INPUTS = 4096  # float input elements of a call whose numerical gradient is checked
INPUT_SPEC = re.compile(r"^\s*([a-z]+[0-9]*)\s*\[\s*([0-9,\s]*)\]\s*$")


@dataclass
class Result:
    """One check of one target: status PASS, FAIL or SKIP, what was found, and warnings (an
    unhelpful error message of a user's op, a shape less defined than it could be...)."""

    target: str
    check: str
    status: str
    detail: str
    warnings: List[str] = field(default_factory=list)

    def line(self) -> str:
        text = f"{self.status} {self.check}: {self.detail}"
        return text + "".join(f"\n     warning: {w}" for w in self.warnings)


class Call:
    """One sample call: `Call(x, y, alpha=0.3)`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args = tuple(args)
        self.kwargs = dict(kwargs)

    def __repr__(self) -> str:
        parts = [_describe(a) for a in self.args] + [f"{k}={_describe(v)}" for k, v in self.kwargs.items()]
        return f"({', '.join(parts)})"


def sample_inputs(*calls: Any) -> Callable:
    """Decorator: the sample calls `opforge check` uses for this function (see the module
    docstring for what a call is). `calls` may also be one callable that returns them."""

    def mark(fn):
        fn.__opforge_check_inputs__ = calls[0] if len(calls) == 1 and callable(calls[0]) else list(calls)
        return fn

    return mark


class TargetError(ValueError):
    """A target that names nothing checkable (unknown op, module or function)."""


# --- targets -------------------------------------------------------------------------------------


@dataclass
class _Target:
    label: str
    function: Callable
    calls: List[Call]
    inputs_note: str
    spec: Any = None  # an opforge OpSpec
    importable: Optional[str] = None  # "module:qualname" a child can import
    libraries: List[str] = field(default_factory=list)
    imports: List[str] = field(default_factory=list)
    ops: List[str] = field(default_factory=list)
    grad_ops: List[str] = field(default_factory=list)
    gradient_output: int = 0


def _is_array(x) -> bool:
    import tensorflow as tf

    return isinstance(x, (np.ndarray, np.generic, tf.Tensor)) and not isinstance(x, tf.RaggedTensor)


def _describe(x) -> str:
    if _is_array(x):
        dtype = getattr(x.dtype, "name", str(x.dtype))
        return f"{dtype}{list(np.shape(x))}"
    text = repr(x)
    return text if len(text) < 40 else text[:37] + "..."


def _as_call(item) -> Call:
    if isinstance(item, Call):
        return item
    if isinstance(item, (tuple, list)):
        return Call(*item)
    return Call(item)


def parse_inputs(specs: Sequence[str], seed: int = 0) -> Call:
    """`["float32[2,3]", "int64[3]"]` -> one Call of random values of those dtypes and shapes."""
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    args = []
    for text in specs:
        m = INPUT_SPEC.match(text)
        if not m:
            raise TargetError(f"--inputs must look like float32[2,3], got {text!r}")
        try:
            dtype = tf.as_dtype(m.group(1))
        except TypeError:
            raise TargetError(f"--inputs: unknown dtype {m.group(1)!r} in {text!r}") from None
        shape = [int(d) for d in m.group(2).replace(" ", "").split(",") if d]
        if dtype.is_integer:
            values = rng.integers(-5, 6, size=shape)
        elif dtype == tf.bool:
            values = rng.random(shape) < 0.5
        else:
            values = rng.standard_normal(shape)
        args.append(tf.cast(tf.constant(values), dtype))
    return Call(*args)


def _float_dtype(spec):
    import tensorflow as tf

    return tf.float32 if tf.float32 in spec.dtypes else spec.dtypes[0]


def _spec_target(spec, label: Optional[str] = None) -> _Target:
    dtype = _float_dtype(spec)
    calls = [Call(*case.tensors(dtype), **dict(case.attrs)) for case in spec.cases
             if case.dtypes is None or dtype in case.dtypes]
    case = spec.determinism_case or spec.cases[-1]
    determinism = Call(*case.tensors(dtype), **dict(case.attrs))
    return _Target(label or spec.name, spec.op, calls + [determinism],
                   f"spec {spec.name}: {len(calls)} cases in {dtype.name}", spec=spec,
                   imports=["opforge"], gradient_output=spec.gradient_output)


def _importable_name(fn) -> Optional[str]:
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    if not module or not qualname or "<" in qualname or module == "__main__":
        return None
    try:
        obj = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError):
        return None
    return f"{module}:{qualname}"


def _user_calls(fn, module, given) -> Tuple[List[Call], str]:
    if given is not None:
        return [_as_call(c) for c in given], "sample inputs given"
    calls = getattr(fn, "__opforge_check_inputs__", None)
    where = "@sample_inputs"
    if calls is None and module is not None:
        table = getattr(module, "CHECK_INPUTS", None)
        name = getattr(fn, "__name__", "")
        if isinstance(table, dict) and name in table:
            calls, where = table[name], f"{module.__name__}.CHECK_INPUTS[{name!r}]"
    if calls is None:
        import tensorflow as tf

        x = tf.constant(np.random.default_rng(0).standard_normal(DEFAULT_SHAPE), tf.float32)
        return [Call(x)], (f"no sample inputs given: tried one float32{list(DEFAULT_SHAPE)} argument "
                           "(give CHECK_INPUTS, @sample_inputs or --inputs)")
    if callable(calls):
        calls = calls()
    return [_as_call(c) for c in calls], f"{len(calls)} calls from {where}"


def _function_target(fn, label: str, given=None) -> _Target:
    import opforge

    for spec in opforge.ops.SPECS:
        if spec.op is fn and given is None:
            return _spec_target(spec, label)
    module = sys.modules.get(getattr(fn, "__module__", "") or "")
    calls, note = _user_calls(fn, module, given)
    if not calls:
        raise TargetError(f"{label}: no sample calls")
    return _Target(label, fn, calls, note, importable=_importable_name(fn))


def resolve(target, sample_inputs=None) -> List[_Target]:
    """The targets a TARGET names: MODULE:FUNCTION, a spec name, a C++ op name (every spec of
    its module that runs it) or an op module's name (its specs); a function object."""
    import opforge

    if callable(target) and not isinstance(target, str):
        return [_function_target(target, getattr(target, "__qualname__", repr(target)), sample_inputs)]
    specs = {spec.name: spec for spec in opforge.ops.SPECS}
    if ":" in target:
        module_name, _, attr = target.partition(":")
        # As `python -m` does: a module in the current directory is importable (the `opforge`
        # console script does not put it on sys.path); the children inherit the path.
        if os.getcwd() not in sys.path and "" not in sys.path:
            sys.path.insert(0, os.getcwd())
        try:
            obj = importlib.import_module(module_name)
        except ImportError as exc:
            raise TargetError(f"{target}: cannot import {module_name}: {exc}") from None
        for part in attr.split("."):
            if not hasattr(obj, part):
                raise TargetError(f"{target}: {module_name} has no attribute {attr!r}")
            obj = getattr(obj, part)
        if not callable(obj):
            raise TargetError(f"{target}: {attr} is not callable")
        return [_function_target(obj, target, sample_inputs)]
    if target in specs:
        return [_spec_target(specs[target])]
    for module in opforge.ops.MODULES:
        if target in module.OP_NAMES:
            found = [s for s in module.SPECS if target in _custom_ops(_spec_target(s))[0]]
            return [_spec_target(s, f"{target} ({s.name})") for s in (found or module.SPECS)]
        if module.__name__.rsplit(".", 1)[-1] == target:
            return [_spec_target(s) for s in module.SPECS]
    raise TargetError(f"unknown target {target!r}: give MODULE:FUNCTION, an opforge op ({', '.join(specs)}) "
                      "or a C++ op name such as Opforge>LeakyRelu")


# --- tracing and calls -----------------------------------------------------------------------------


def _split(call: Call):
    """(tensor inputs, rebuild(xs) -> (args, kwargs)): the arrays of the positional arguments
    are the tensor inputs; everything else is held fixed."""
    import tensorflow as tf

    positions = [i for i, a in enumerate(call.args) if _is_array(a)]
    tensors = [tf.convert_to_tensor(call.args[i]) for i in positions]

    def rebuild(xs):
        args = list(call.args)
        for i, x in zip(positions, xs):
            args[i] = x
        return args, call.kwargs

    return tensors, rebuild


def _flat(out) -> list:
    import tensorflow as tf

    return [t for t in tf.nest.flatten(out) if isinstance(t, tf.Tensor)]


def _caller(fn, rebuild):
    def call(*xs):
        args, kwargs = rebuild(xs)
        return fn(*args, **kwargs)

    return call


def _graph_op_types(concrete) -> List[str]:
    graph_def = concrete.graph.as_graph_def()
    types = [n.op for n in graph_def.node]
    types += [n.op for f in graph_def.library.function for n in f.node_def]
    return list(dict.fromkeys(types))


def is_custom_op(op_type: str) -> bool:
    """An op TensorFlow does not define itself: namespaced (`Opforge>LeakyRelu`) or without a
    `tf.raw_ops` entry (what `tf.load_op_library` registers)."""
    import tensorflow as tf

    return ">" in op_type or not hasattr(tf.raw_ops, op_type)


def _custom_ops(target: _Target) -> Tuple[List[str], str]:
    import tensorflow as tf

    call = target.calls[0]
    tensors, rebuild = _split(call)
    signature = [tf.TensorSpec(t.shape, t.dtype) for t in tensors]
    concrete = tf.function(_caller(target.function, rebuild), input_signature=signature).get_concrete_function()
    types = _graph_op_types(concrete)
    return [t for t in types if is_custom_op(t)], ", ".join(types)


def _gradient_ops(target: _Target) -> List[str]:
    """The custom ops the gradient of the first sample call runs that its forward does not
    (`Opforge>LeakyReluGrad`); none where no gradient is registered."""
    import tensorflow as tf

    tensors, rebuild = _split(target.calls[0])
    floats = [i for i, t in enumerate(tensors) if t.dtype.is_floating]
    fn = _caller(target.function, rebuild)

    def grads(*xs):
        with tf.GradientTape() as tape:
            tape.watch([xs[i] for i in floats])
            outputs = [o for o in _flat(fn(*xs)) if o.dtype.is_floating]
        return [g for g in tape.gradient(outputs, [xs[i] for i in floats]) if g is not None]

    if not floats:
        return []
    try:
        signature = [tf.TensorSpec(t.shape, t.dtype) for t in tensors]
        concrete = tf.function(grads, input_signature=signature).get_concrete_function()
    except Exception:  # noqa: BLE001: no gradient registered; the gradient check says so
        return []
    return [t for t in _graph_op_types(concrete) if is_custom_op(t) and t not in target.ops]


def libraries_defining(op_types: Iterable[str]) -> Dict[str, List[str]]:
    """{op type: the shared libraries mapped into this process whose bytes hold the op's name}:
    the files `tf.load_op_library` loaded it from (TensorFlow keeps no record of them)."""
    import tensorflow as tf

    tf_dir = str(Path(tf.__file__).resolve().parent)
    wanted = {op: op.encode() + b"\0" for op in op_types}
    found: Dict[str, List[str]] = {op: [] for op in wanted}
    try:
        maps = Path("/proc/self/maps").read_text().splitlines()
    except OSError:
        return found
    paths = dict.fromkeys(line.split(None, 5)[5] for line in maps if len(line.split(None, 5)) == 6)
    for path in paths:
        if (not path.startswith("/") or ".so" not in path or path.startswith(tf_dir)
                or path.startswith(("/lib/", "/lib64/", "/usr/lib/x86_64-linux-gnu/", "/usr/lib64/"))):
            continue
        try:
            if os.path.getsize(path) > 1 << 30:
                continue
            data = Path(path).read_bytes()
        except OSError:
            continue
        for op, needle in wanted.items():
            if needle in data:
                found[op].append(path)
    return found


# --- the in-process checks ---------------------------------------------------------------------------


def _signatures(tensors, kind: str):
    import tensorflow as tf

    out = []
    for t in tensors:
        shape = t.shape
        if kind == "known":
            out.append(tf.TensorSpec(shape, t.dtype))
        elif kind == "batch unknown":
            out.append(tf.TensorSpec([None] + list(shape[1:]) if shape.rank else shape, t.dtype))
        else:
            out.append(tf.TensorSpec([None] * shape.rank, t.dtype))
    return out


def _check_shape(target: _Target) -> Result:
    import tensorflow as tf

    strict = target.spec is not None
    problems, warnings, checked = [], [], 0
    for call in target.calls[:-1] if strict else target.calls:
        tensors, rebuild = _split(call)
        fn = _caller(target.function, rebuild)
        try:
            runtime = [t.shape for t in _flat(fn(*tensors))]
        except Exception as exc:  # noqa: BLE001
            problems.append(f"{call!r} fails eagerly: {type(exc).__name__}: {_first_line(exc)}")
            continue
        for kind in ("known", "batch unknown", "all unknown"):
            try:
                concrete = tf.function(fn, input_signature=_signatures(tensors, kind)).get_concrete_function()
            except Exception as exc:  # noqa: BLE001
                text = f"{call!r} with {kind} dims cannot be traced: {type(exc).__name__}: {_first_line(exc)}"
                (problems if strict else warnings).append(text)
                continue
            static = [t.shape for t in _flat(concrete.structured_outputs)]
            if len(static) != len(runtime):
                problems.append(f"{call!r} {kind}: {len(static)} static outputs, {len(runtime)} at run time")
                continue
            for k, (s, r) in enumerate(zip(static, runtime)):
                if not s.is_compatible_with(r):
                    problems.append(f"{call!r} {kind} dims: output {k} static {s} vs runtime {r}")
                elif kind == "known" and s != r:
                    text = f"{call!r} with every input shape known: output {k} static {s}, runtime {r}"
                    (problems if strict else warnings).append(text)
                elif kind == "all unknown" and s.rank is None:
                    warnings.append(f"{call!r} with unknown dims: output {k} has unknown rank")
            checked += 1
    if problems:
        return Result(target.label, "shape", "FAIL", "; ".join(problems[:3]) + _more(problems), warnings[:3])
    return Result(target.label, "shape", "PASS",
                  f"{checked} traces (known, batch unknown, all unknown dims) compatible with the runtime shapes"
                  + (", equal where every shape is known" if strict else ""), warnings[:3])


def _first_line(exc) -> str:
    text = str(getattr(exc, "message", None) or exc).strip().splitlines()
    return (text[0] if text else "")[:300]


def _more(items) -> str:
    return f" (+{len(items) - 3} more)" if len(items) > 3 else ""


def _gradient_registrations(ops: Sequence[str]) -> Tuple[List[str], List[str], List[str]]:
    from tensorflow.python.framework import ops as tf_ops

    registered, none, missing = [], [], []
    for op in ops:
        try:
            (registered if tf_ops.gradient_registry.lookup(op) is not None else none).append(op)
        except LookupError:
            missing.append(op)
    return registered, none, missing


def _has_float_io(op_type: str) -> bool:
    from tensorflow.python.framework import op_def_registry

    op_def = op_def_registry.get(op_type)
    if op_def is None:
        return True
    floats = {1, 2, 19, 14, 8, 18}  # float, double, half, bfloat16, complex64, complex128
    type_attrs = {a.name: a for a in op_def.attr if a.type == "type"}
    for arg in list(op_def.input_arg) + list(op_def.output_arg):
        if arg.type in floats:
            return True
        attr = type_attrs.get(arg.type_attr)
        if attr is not None:
            allowed = set(attr.allowed_values.list.type)
            if not allowed or allowed & floats:
                return True
    return False


def _check_gradient(target: _Target, tolerance: float) -> Result:
    import tensorflow as tf
    from opforge.ops.spec import gradient_error, max_error

    registered, none, missing = _gradient_registrations(target.ops)
    missing = [op for op in missing if _has_float_io(op)]
    reg = (f"registered for {', '.join(registered) or 'none'}"
           + (f"; tf.no_gradient for {', '.join(none)}" if none else ""))
    if missing:
        return Result(target.label, "gradient", "FAIL",
                      f"no gradient registered for {', '.join(missing)} (tf.RegisterGradient, or tf.no_gradient "
                      f"where the maths has none); {reg}")
    spec = target.spec
    if spec is not None:
        if not spec.differentiable:
            return Result(target.label, "gradient", "PASS", f"{reg}; the spec says not differentiable")
        errors = [(gradient_error(spec, case), case.name) for case in spec.gradient_cases]
        worst = max(errors)
        status = "PASS" if worst[0] <= spec.gradient_tolerance else "FAIL"
        return Result(target.label, "gradient", status,
                      f"{reg}; float64 numerical gradient of {len(errors)} cases: max error {worst[0]:.3g} "
                      f"({worst[1]}) against tolerance {spec.gradient_tolerance:g}")
    if not registered:
        return Result(target.label, "gradient", "PASS" if none else "SKIP",
                      f"{reg}; no numerical check" if none else "no custom op to differentiate")
    worst, checked, notes, large = 0.0, 0, [], 0
    for call in target.calls:
        if checked == 3:
            break
        tensors, rebuild = _split(call)
        floats = [i for i, t in enumerate(tensors) if t.dtype.is_floating]
        if not floats:
            continue
        if sum(int(np.size(tensors[i])) for i in floats) > MAX_JACOBIAN_INPUTS:
            large += 1  # a numerical Jacobian costs two calls per input element
            continue
        for dtype, delta, tol in ((tf.float64, 1e-6, tolerance), (tf.float32, 1e-3, 2e-2)):
            xs = [tf.cast(t, dtype) if i in floats else t for i, t in enumerate(tensors)]

            def f(*fx, xs=xs):
                args = list(xs)
                for i, x in zip(floats, fx):
                    args[i] = x
                return _flat(_caller(target.function, rebuild)(*args))[target.gradient_output]

            try:
                theoretical, numerical = tf.test.compute_gradient(f, [xs[i] for i in floats], delta=delta)
            except Exception as exc:  # noqa: BLE001
                notes.append(f"{dtype.name}: {type(exc).__name__}: {_first_line(exc)}")
                continue
            scale = max([1.0] + [float(np.max(np.abs(n))) for n in numerical if np.size(n)])
            error = max((max_error(t, n) for t, n in zip(theoretical, numerical)), default=0.0) / scale
            if error > tol:
                return Result(target.label, "gradient", "FAIL",
                              f"{reg}; {dtype.name} numerical gradient of {call!r}: relative error {error:.3g} "
                              f"> {tol:g}")
            if dtype != tf.float64:
                notes.append(f"{call!r} checked in float32 only (tolerance {tol:g})")
            worst, checked = max(worst, error), checked + 1
            break
    if not checked:
        if notes:
            return Result(target.label, "gradient", "FAIL",
                          f"{reg}; the numerical gradient could not be computed: {'; '.join(notes[:2])}")
        why = (f"every sample call has more than {MAX_JACOBIAN_INPUTS} float input elements (add a small one)"
               if large else "no float input to differentiate")
        return Result(target.label, "gradient", "SKIP", f"{reg}; no numerical check: {why}")
    return Result(target.label, "gradient", "PASS",
                  f"{reg}; numerical gradient of {checked} call{'s' if checked != 1 else ''}: max relative error {worst:.3g}", notes[:2])


def kernel_dtypes(op_type: str) -> Dict[str, Dict[str, Optional[set]]]:
    """{device: {type attr: dtype names}} of the registered kernels (None: any dtype)."""
    from tensorflow.python.framework import dtypes, kernels, op_def_registry

    op_def = op_def_registry.get(op_type)
    type_attrs = [a.name for a in op_def.attr if a.type == "type"] if op_def else []
    out: Dict[str, Dict[str, Optional[set]]] = {}
    for kernel in kernels.get_registered_kernels_for_op(op_type).kernel:
        device = out.setdefault(kernel.device_type, {a: set() for a in type_attrs})
        constrained = {c.name: c for c in kernel.constraint}
        for attr in type_attrs:
            if attr not in constrained:
                device[attr] = None
            elif device[attr] is not None:
                device[attr] |= {dtypes.as_dtype(t).name for t in constrained[attr].allowed_values.list.type}
    return out


def _check_kernels(target: _Target) -> Result:
    from tensorflow.python.framework import dtypes, op_def_registry

    parts, problems = [], []
    for op in target.ops + target.grad_ops:
        op_def = op_def_registry.get(op)
        if op_def is None:
            problems.append(f"{op} is not registered")
            continue
        registered = kernel_dtypes(op)
        if "CPU" not in registered:
            problems.append(f"{op} has no CPU kernel")
        devices = sorted(registered, key=lambda d: (d != "CPU", d != "GPU", d))
        for attr in (a for a in op_def.attr if a.type == "type"):
            allowed = {dtypes.as_dtype(t).name for t in attr.allowed_values.list.type}
            cpu = registered.get("CPU", {}).get(attr.name, set())
            texts = []
            for device in devices:
                have = registered[device].get(attr.name)
                text = "any" if have is None else ",".join(sorted(have)) or "none"
                if device != "CPU" and have == cpu:
                    text = "same"
                elif have is not None and have == allowed:
                    text += " (all allowed)"
                texts.append(f"{device}: {text}")
            if "GPU" not in registered:
                texts.append("GPU: none")
            parts.append(f"{op} {attr.name} " + "; ".join(texts))
            if allowed and cpu is not None and allowed - cpu:
                problems.append(f"{op} {attr.name}: no CPU kernel for {', '.join(sorted(allowed - cpu))}, "
                                "which the op definition allows")
        if not any(a.type == "type" for a in op_def.attr):
            parts.append(f"{op} kernels: " + ", ".join(devices or ["none"]))
    if problems:
        return Result(target.label, "kernels", "FAIL", "; ".join(problems))
    return Result(target.label, "kernels", "PASS", " | ".join(parts) or "no custom op")


def _check_eager_vs_function(target: _Target) -> Result:
    import tensorflow as tf
    from opforge.ops.spec import bits_equal

    calls = target.calls[:-1] if target.spec is not None else target.calls
    for call in calls:
        tensors, rebuild = _split(call)
        fn = _caller(target.function, rebuild)
        eager = _flat(fn(*tensors))
        graph = _flat(tf.function(fn)(*tensors))
        if len(eager) != len(graph):
            return Result(target.label, "eager_vs_function", "FAIL",
                          f"{call!r}: {len(eager)} outputs eagerly, {len(graph)} in tf.function")
        for k, (e, g) in enumerate(zip(eager, graph)):
            if not bits_equal(e.numpy(), g.numpy()):
                return Result(target.label, "eager_vs_function", "FAIL", f"{call!r}: output {k} differs")
    return Result(target.label, "eager_vs_function", "PASS", f"{len(calls)} calls, the same bits")


def _check_jit_compile(target: _Target) -> Result:
    import tensorflow as tf
    from opforge.ops.spec import bits_equal, max_error

    calls = target.calls[:-1] if target.spec is not None else target.calls
    worst = 0.0
    for call in calls:
        tensors, rebuild = _split(call)
        fn = _caller(target.function, rebuild)
        wrt = [i for i, t in enumerate(tensors) if tf.as_dtype(t.dtype).is_floating]

        def outputs_and_gradients(*args):
            args = list(args)
            with tf.GradientTape() as tape:
                for i in wrt:
                    tape.watch(args[i])
                outs = _flat(fn(*args))
                loss = [tf.reduce_sum(tf.square(tf.cast(o, tf.float64))) / 2 for o in outs if o.dtype.is_floating]
            grads = tape.gradient(loss, [args[i] for i in wrt]) if loss and wrt else []
            return outs + [g for g in grads if g is not None]

        inputs = [tf.convert_to_tensor(t) for t in tensors]
        expected = tf.function(outputs_and_gradients)(*inputs)
        try:
            got = tf.function(outputs_and_gradients, jit_compile=True)(*inputs)
        except (tf.errors.OpError, ValueError, TypeError) as exc:
            reason = _first_line(exc)
            if re.search(r"No registered '[^']+' OpKernel for XLA_CPU_JIT|has no XLA kernel", str(exc)):
                # Nothing to compare: say so, and how to add one.
                missing = re.search(r"No registered '([^']+)'|(Opforge>\w+)", str(exc))
                op = next((g for g in (missing.groups() if missing else ()) if g), "the op")
                return Result(target.label, "jit_compile", "SKIP",
                              f"{op} has no XLA kernel, so the function cannot run under "
                              "tf.function(jit_compile=True) (nor in a Keras model compiled with XLA): register "
                              "its op struct as an XLA FFI custom call (OPFORGE_REGISTER_XLA_FFI_OP, "
                              "common/tf_xla_ffi.h; `opforge new` scaffolds it)")
            return Result(target.label, "jit_compile", "FAIL", f"{call!r}: {reason}")
        if len(expected) != len(got):
            return Result(target.label, "jit_compile", "FAIL",
                          f"{call!r}: {len(expected)} outputs and gradients without XLA, {len(got)} with")
        for e, g in zip(expected, got):
            if not bits_equal(e.numpy(), g.numpy()):
                scale = float(np.max(np.abs(e.numpy().astype(np.float64)))) if e.dtype.is_floating and e.shape.num_elements() else 0.0
                worst = max(worst, max_error(g, e) / (scale or 1.0))
    what = f"{len(calls)} calls, outputs and gradients"
    if worst:
        return Result(target.label, "jit_compile", "PASS", f"{what}: under XLA within {worst:.1e} of the largest value",
                      [f"not the same bits under XLA (within {worst:.1e} of the largest value): an HLO lowering "
                       "or TensorFlow ops around the op (a gradient written in them) round otherwise under XLA; an FFI "
                       "custom call (OPFORGE_REGISTER_XLA_FFI_OP) runs the op's own kernel"])
    return Result(target.label, "jit_compile", "PASS", f"{what}: the same bits under XLA")


def _outputs_and_gradients(fn, wrt, counts):
    """fn's outputs and the gradients of sum(output^2)/2 (float outputs, in float64) for the
    inputs `wrt` (an empty tensor where one is None); counts["outputs"] is set while tracing."""
    import tensorflow as tf

    def with_grads(*xs):
        with tf.GradientTape() as tape:
            tape.watch([xs[i] for i in wrt])
            outputs = _flat(fn(*xs))
            counts["outputs"] = len(outputs)
            floats = [o for o in outputs if o.dtype.is_floating]
            if not wrt or not floats:
                return outputs
            loss = tf.add_n([tf.reduce_sum(tf.cast(o, tf.float64) ** 2) / 2 for o in floats])
        try:
            grads = tape.gradient(loss, [xs[i] for i in wrt])
        except LookupError:  # no gradient registered: the forward alone
            return outputs
        return outputs + [tf.zeros([0], xs[i].dtype) if g is None else g for i, g in zip(wrt, grads)]

    return with_grads


def _one_line(exc) -> str:
    """A TensorFlow error's message on one line, without "Graph execution error:"."""
    text = " ".join(getattr(exc, "message", str(exc)).split())
    return text.removeprefix("Graph execution error: ")


def _check_cuda_sim(target: _Target, tolerance: float) -> Result:
    import tensorflow as tf
    from tensorflow.python.framework import kernels

    from opforge import cuda_sim

    if target.spec is not None:  # opforge's own ops: their cuda_sim library, beside opforge's
        try:
            cuda_sim.load_opforge_kernels()
        except FileNotFoundError as exc:
            return Result(target.label, "cuda_sim", "SKIP", str(exc))
    ops = list(dict.fromkeys(list(target.ops) + list(target.grad_ops)))
    labelled = {op: [k for k in kernels.get_registered_kernels_for_op(op).kernel if k.label == cuda_sim.LABEL]
                for op in ops}
    missing = [op for op in target.ops if not labelled[op]]
    if missing:
        return Result(target.label, "cuda_sim", "FAIL",
                      f"no cuda_sim kernel is registered for {', '.join(missing)}: build the op's library with its "
                      "cuda_sources and cuda_sim=True (opforge.build.load; `opforge check --cuda-sim` sets "
                      "OPFORGE_CUDA_SIM=1, which does it for every load with cuda_sources), and register its GPU "
                      "kernels with OPFORGE_REGISTER_KERNELS")
    sim_ops = [op for op in ops if labelled[op]]
    compared, skipped, warnings, exact = 0, [], [], True
    for call in target.calls:
        tensors, rebuild = _split(call)
        fn = _caller(target.function, rebuild)
        wrt = [i for i, t in enumerate(tensors) if t.dtype.is_floating]
        counts: Dict[str, int] = {}
        with_grads = _outputs_and_gradients(fn, wrt, counts)
        cpu = [t.numpy() for t in tf.function(with_grads)(*tensors)]
        try:
            gpu = [t.numpy() for t in cuda_sim.function(with_grads, sim_ops)(*tensors)]
        except (tf.errors.NotFoundError, tf.errors.InvalidArgumentError) as exc:
            if "OpKernel" not in exc.message:  # a kernel's own error, not a missing kernel
                return Result(target.label, "cuda_sim", "FAIL", f"{call!r}: {type(exc).__name__}: {_one_line(exc)}")
            skipped.append(f"{call!r}: {_first_line(exc)}")
            continue
        except tf.errors.OpError as exc:
            return Result(target.label, "cuda_sim", "FAIL", f"{call!r}: {type(exc).__name__}: {_one_line(exc)}")
        compared += 1
        n_out = counts["outputs"]
        for k, (g, c) in enumerate(zip(gpu, cpu)):
            what = f"output {k}" if k < n_out else f"the gradient of input {wrt[k - n_out]}"
            if g.shape != c.shape or g.dtype != c.dtype:
                return Result(target.label, "cuda_sim", "FAIL",
                              f"{call!r}: {what}: {g.dtype}{list(g.shape)} on the GPU path, {c.dtype}{list(c.shape)} on the CPU")
            if _digest([g]) == _digest([c]):
                continue
            exact = False
            gf, cf = g.astype(np.float64), c.astype(np.float64)
            same = (gf == cf) | (np.isnan(gf) & np.isnan(cf))
            finite = np.isfinite(cf)
            peak = float(np.max(np.abs(cf[finite]))) if finite.any() else 0.0
            with np.errstate(invalid="ignore"):
                diff = np.where(same, 0.0, np.abs(gf - cf))
            worst = float(np.nanmax(np.where(np.isnan(diff), np.inf, diff))) if diff.size else 0.0
            if not (worst <= tolerance * max(peak, np.finfo(np.float64).tiny)):
                at = np.unravel_index(int(np.argmax(np.where(np.isnan(diff), np.inf, diff))), diff.shape)
                return Result(target.label, "cuda_sim", "FAIL",
                              f"{call!r}: {what} differs by {worst:.3g} (the CPU's largest value {peak:.3g}, "
                              f"allowed {tolerance:g} of it): at {list(map(int, at))} the GPU path gives "
                              f"{float(gf[at]):.9g}, the CPU {float(cf[at]):.9g}")
            warnings.append(f"{call!r}: {what} within {worst / max(peak, 1e-300):.2g} of the CPU's largest value, "
                            "not the same bits")
    if not compared:
        return Result(target.label, "cuda_sim", "SKIP", "no sample call in a dtype with a GPU kernel: "
                      + "; ".join(skipped[:2]))
    note = f"; skipped {len(skipped)} (no GPU kernel for their dtype)" if skipped else ""
    how = "the same bits" if exact else f"within {tolerance:g} of the largest value"
    return Result(target.label, "cuda_sim", "PASS",
                  f"{', '.join(sim_ops)} on the SIMT runtime against the CPU kernels: {compared} calls, outputs and "
                  f"gradients, {how}{note}", warnings[:3])


# --- the SavedModel and what the children run ------------------------------------------------------


def _digest(tensors) -> str:
    """sha256 of the outputs' bytes, every NaN made the same NaN (a vector path and a scalar
    tail may make different NaN payloads)."""
    h = hashlib.sha256()
    for t in tensors:
        a = np.asarray(t.numpy() if hasattr(t, "numpy") else t)
        if a.dtype.kind == "f" or a.dtype.name == "bfloat16":
            a = np.where(np.isnan(a.astype(np.float32)), np.array(np.nan, a.dtype), a)
        h.update(a.tobytes())
    return h.hexdigest()


def _determinism_call(target: _Target) -> Call:
    if target.spec is not None:
        return target.calls[-1]
    return max(target.calls, key=lambda c: sum(int(np.size(t)) for t in _split(c)[0]))


def _save(target: _Target, folder: Path) -> Tuple[Dict[str, Any], List[str]]:
    """Saves f (outputs) and f_grad (outputs and gradients) of the determinism call; returns
    what the parent computed (digests) and notes."""
    import tensorflow as tf

    call = _determinism_call(target)
    tensors, rebuild = _split(call)
    fn = _caller(target.function, rebuild)
    spec = target.spec
    if spec is not None:
        case_inputs = (spec.determinism_case or spec.cases[-1]).inputs
        wrt = [i for i, (t, s) in enumerate(zip(tensors, case_inputs)) if s.differentiable and t.dtype.is_floating]
    else:
        wrt = [i for i, t in enumerate(tensors) if t.dtype.is_floating]
    signature = [tf.TensorSpec(t.shape, t.dtype) for t in tensors]

    def with_grads(*xs):
        with tf.GradientTape() as tape:
            tape.watch([xs[i] for i in wrt])
            outputs = _flat(fn(*xs))
        target_out = outputs[min(target.gradient_output, len(outputs) - 1)]
        if not wrt or not target_out.dtype.is_floating:
            return outputs
        grads = tape.gradient(target_out, [xs[i] for i in wrt], output_gradients=target_out)
        return outputs + [g for g in grads if g is not None]

    module = tf.Module()
    module.f = tf.function(fn, input_signature=signature)
    notes = []
    try:
        module.f_grad = tf.function(with_grads, input_signature=signature)
        module.f_grad.get_concrete_function()
    except Exception as exc:  # noqa: BLE001: an op without a gradient (LookupError) still saves
        del module.f_grad
        notes.append(f"forward only (gradient: {type(exc).__name__}: {_first_line(exc)})")
    tf.saved_model.save(module, str(folder / "saved"))
    np.savez(folder / "inputs.npz", *[t.numpy() for t in tensors])
    expected = {"f": _digest(_flat(module.f(*tensors)))}
    if hasattr(module, "f_grad"):
        expected["f_grad"] = [_digest(_flat(module.f_grad(*tensors))) for _ in range(2)]
    expected["call"] = repr(call)
    return expected, notes


MUTATIONS = ("rank+1", "rank-1", "empty", "empty_huge", "inf_nan", "dtype_int32", "dtype_float64",
             "dtype_bool", "dtype_string", "none", "graph_rank+1")


def _mutate(a: np.ndarray, mutation: str):
    """(value, rank of an unknown-dims graph signature or None) of one malformed argument; value
    None: the mutation does not apply, "NONE": the argument is None."""
    import tensorflow as tf

    if mutation == "rank+1":
        return tf.constant(a[..., None]), None
    if mutation == "rank-1":
        if a.ndim == 0:
            return None, None
        return tf.constant(a[..., 0] if a.shape[-1] else np.zeros(a.shape[:-1], a.dtype)), None
    if mutation == "empty":
        if a.ndim == 0:
            return tf.zeros([0], a.dtype), None
        return tf.zeros([0] + list(a.shape[1:]), a.dtype), None
    if mutation == "empty_huge":
        if a.ndim < 2:
            return tf.zeros([0, 2**31], a.dtype), None
        shape = [0] + list(a.shape[1:])
        shape[-1] = 2**31
        return tf.zeros(shape, a.dtype), None
    if mutation == "inf_nan":
        if a.dtype.kind not in "fc" or not a.size:
            return None, None
        flat = a.astype(np.float64).reshape(-1).copy()
        special = np.array([np.nan, np.inf, -np.inf, -0.0])[: flat.size]
        flat[: special.size] = special
        return tf.cast(tf.constant(flat.reshape(a.shape)), tf.as_dtype(a.dtype)), None
    if mutation.startswith("dtype_"):
        name = mutation[6:]
        if a.dtype.name == name:
            return None, None
        if name == "string":
            return tf.constant(np.full(a.shape, "x", dtype=object)), None
        values = np.nan_to_num(a.astype(np.float64)) if a.dtype.kind in "fc" else a
        return tf.cast(tf.constant(values), getattr(tf, name)), None
    if mutation == "none":
        return "NONE", None
    if mutation == "graph_rank+1":
        return tf.zeros([1] * (a.ndim + 1), a.dtype), a.ndim + 1
    raise ValueError(mutation)


def _load_function(name: str):
    module_name, _, qualname = name.partition(":")
    obj = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _child() -> None:
    """Runs the tasks of a JSON list on stdin, printing START and RESULT lines (see _run_tasks)."""
    threads = int(os.environ.get("OPFORGE_CHECK_THREADS", "0"))
    import tensorflow as tf

    tf.get_logger().setLevel("ERROR")
    if threads:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
    tasks = json.loads(sys.stdin.readline())
    done_setup: set = set()
    saved: Dict[str, Any] = {}
    for task in tasks:
        print("START " + json.dumps(task["id"]), flush=True)
        result: Dict[str, Any] = {"id": task["id"], "kind": "ok", "error": "", "message": ""}
        try:
            for name in task.get("imports", []):
                if ("import", name) not in done_setup:
                    importlib.import_module(name)
                    done_setup.add(("import", name))
            for path in task.get("libraries", []):
                if ("lib", path) not in done_setup:
                    tf.load_op_library(path)
                    done_setup.add(("lib", path))
            print("CALLING", flush=True)  # the time limit counts from here: imports are not the call
            result.update(_child_task(task, saved))
        except Exception as exc:  # noqa: BLE001: the parent judges every error
            from opforge.tools.fuzz import classify

            kind, error, message = classify(exc)
            result.update(kind=kind, error=error, message=message[:600])
        print("RESULT " + json.dumps(result), flush=True)


def _child_task(task: Dict[str, Any], saved: Dict[str, Any]) -> Dict[str, Any]:
    import tensorflow as tf

    kind = task["kind"]
    if kind == "saved":
        loaded = tf.saved_model.load(task["path"] + "/saved")
        saved[task["path"]] = loaded  # held: its functions need it alive
        data = np.load(task["path"] + "/inputs.npz")
        xs = [tf.constant(data[f"arr_{i}"]) for i in range(len(data.files))]
        concrete = loaded.f.get_concrete_function(*[tf.TensorSpec(x.shape, x.dtype) for x in xs])
        out = {"f": _digest(_flat(loaded.f(*xs))), "ops": [t for t in _graph_op_types(concrete) if is_custom_op(t)]}
        if hasattr(loaded, "f_grad"):
            out["f_grad"] = [_digest(_flat(loaded.f_grad(*xs))) for _ in range(2)]
        return out
    if kind == "exec":
        from opforge.ops._common import lib
        import opforge

        exec(task["code"], {"tf": tf, "np": np, "opforge": opforge, "lib": lib})  # noqa: S102
        return {"kind": "ok"}
    if kind == "fuzz":
        from opforge.tools.fuzz import _spec_by_name, draw_call

        description, thunk = draw_call(_spec_by_name()[task["spec"]], task["index"], task["seed"])
        print("CALL " + json.dumps([task["id"], description]), flush=True)
        thunk()
        return {"kind": "ok", "call": description}
    if kind == "mutate":
        fn = _load_function(task["function"])
        with open(task["base"], "rb") as f:
            args, kwargs = pickle.load(f)
        value, rank = _mutate(np.asarray(args[task["arg"]]), task["mutation"])
        args = list(args)
        args[task["arg"]] = None if isinstance(value, str) and value == "NONE" else value
        args = [tf.constant(a) if isinstance(a, np.ndarray) else a for a in args]
        if rank is None:
            _flat(fn(*args, **kwargs))
        else:
            positions = [i for i, a in enumerate(args) if isinstance(a, tf.Tensor)]
            signature = [tf.TensorSpec([None] * args[i].shape.rank, args[i].dtype) for i in positions]

            def graph(*xs):
                full = list(args)
                for i, x in zip(positions, xs):
                    full[i] = x
                return fn(*full, **kwargs)

            tf.function(graph, input_signature=signature)(*[args[i] for i in positions])
        return {"kind": "ok"}
    raise ValueError(f"unknown task kind {kind}")


def _child_env(threads: int) -> Dict[str, str]:
    path = [p if p else os.getcwd() for p in sys.path]
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", OPFORGE_CHECK_THREADS=str(threads),
                PYTHONPATH=os.pathsep.join(dict.fromkeys(path)))


def _exit_reason(returncode: int) -> str:
    import signal

    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            pass
    return f"exit code {returncode}"


_LOG_NOISE = re.compile(r"^(WARNING: All log messages|[IW]\d{4} |To enable the following|\s*$)")


def _stderr_tail(text: str, lines: int = 4) -> str:
    """The last lines of a child's stderr, without TensorFlow's start-up log lines."""
    kept = [line for line in text.splitlines() if not _LOG_NOISE.match(line)]
    return " | ".join(kept[-lines:])[-800:]


def _run_tasks(tasks: List[Dict[str, Any]], threads: int, timeout: float) -> Dict[str, Dict[str, Any]]:
    """Runs tasks in a child process, a fresh one after each crash or hang; returns {id: result}
    where a crash is {"kind": "crash"} and a hang {"kind": "hang"}, with the stderr tail."""
    results: Dict[str, Dict[str, Any]] = {}
    calls: Dict[str, str] = {}
    todo = list(tasks)
    while todo:
        proc = subprocess.Popen([sys.executable, "-c", "from opforge.tools.check import _child; _child()"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=_child_env(threads))
        proc.stdin.write((json.dumps(todo) + "\n").encode())
        proc.stdin.close()
        started = None

        def on_line(line: str) -> Optional[str]:
            nonlocal started
            if line.startswith("START "):
                started = json.loads(line[6:])
                return child_io.START
            if line == "CALLING":
                return child_io.PROGRESS
            if line.startswith("CALL "):
                task_id, description = json.loads(line[5:])
                calls[task_id] = description
            elif line.startswith("RESULT "):
                r = json.loads(line[7:])
                results[r["id"]] = r
                started = None
                return child_io.DONE
            return None

        hung, stderr_tail = child_io.pump(proc, timeout, on_line)
        stderr = _stderr_tail(stderr_tail.decode(errors="replace"))
        if started is not None and started not in results:
            error = f"no result after {timeout:g} s" if hung else _exit_reason(proc.returncode)
            results[started] = {"id": started, "kind": "hang" if hung else "crash", "call": calls.get(started, ""),
                                "error": error, "message": stderr}
        elif not any(t["id"] in results for t in todo):
            for t in todo:
                results[t["id"]] = {"id": t["id"], "kind": "crash", "error": f"exit code {proc.returncode}",
                                    "message": "the child process ran no task: " + stderr}
        todo = [t for t in todo if t["id"] not in results]
    return results


# --- putting it together -----------------------------------------------------------------------------


def _setup(target: _Target, fresh: bool) -> Dict[str, List[str]]:
    """What a child loads: opforge's ops `import opforge`; other ops the libraries found (a fresh
    process's minimum, for the SavedModel), else the function's module."""
    if target.spec is not None:
        return {"imports": ["opforge"], "libraries": []}
    if fresh and target.libraries:
        return {"imports": [], "libraries": list(target.libraries)}
    module = (target.importable or "").partition(":")[0]
    return {"imports": ([module] if module else []) + list(target.imports), "libraries": list(target.libraries)}


def _bad_input_tasks(target: _Target, index: int, folder: Path, fuzz_calls: int, seed: int):
    spec = target.spec
    tasks = []
    setup = _setup(target, fresh=False)
    if spec is not None:
        for name, bad in spec.bad_inputs.items():
            tasks.append(dict(setup, id=f"{index}:table:{name}", kind="exec", code=bad.code))
        for i in range(fuzz_calls):
            tasks.append(dict(setup, id=f"{index}:fuzz:{i}", kind="fuzz", spec=spec.name, index=i, seed=seed))
        return tasks
    if target.importable is None:
        return None
    call = target.calls[0]
    args = [a.numpy() if hasattr(a, "numpy") else a for a in call.args]
    base = folder / "base.pkl"
    with open(base, "wb") as f:
        pickle.dump((args, call.kwargs), f)
    for i, a in enumerate(args):
        if not isinstance(a, np.ndarray):
            continue
        for mutation in MUTATIONS:
            if _mutate(a, mutation)[0] is None:
                continue
            tasks.append(dict(setup, id=f"{index}:mutate:{i}:{mutation}", kind="mutate",
                              function=target.importable, base=str(base), arg=i, mutation=mutation))
    return tasks


def _judge_bad_inputs(target: _Target, index: int, tasks, results) -> Result:
    spec = target.spec
    fails, warnings = [], []
    counts: Dict[str, int] = {}
    for task in tasks:
        r = results[task["id"]]
        what = task["id"].split(":", 1)[1]
        if task["kind"] == "fuzz" and r.get("call"):
            what = r["call"]
        elif task["kind"] == "mutate":
            what = f"argument {task['arg']} {task['mutation']}"
        counts[r["kind"]] = counts.get(r["kind"], 0) + 1
        text = ": ".join(part for part in (f"{r['kind']} on {what}", r["error"], r["message"][:200]) if part)
        if r["kind"] in ("crash", "hang"):
            fails.append(text)
        elif task["kind"] == "exec":
            bad = spec.bad_inputs[task["id"].split(":", 2)[2]]
            missing = [fr for fr in bad.fragments if fr not in r["message"]]
            if r["error"] != bad.error or missing:
                fails.append(f"{what}: expected {bad.error} with {list(bad.fragments)}, got "
                             f"{r['error'] or 'no error'}: {r['message'][:200]}")
        elif r["kind"] == "vague":
            (fails if spec is not None else warnings).append(text)
    summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
    notes = ([f"unhelpful error (names no argument): {w}" for w in warnings[:3]]
             + ([f"... and {len(warnings) - 3} more"] if len(warnings) > 3 else []))
    if fails:
        return Result(target.label, "bad_inputs", "FAIL",
                      f"{len(tasks)} malformed calls in a child process ({summary}); " + "; ".join(fails[:3])
                      + _more(fails), notes)
    return Result(target.label, "bad_inputs", "PASS",
                  f"{len(tasks)} malformed calls in a child process: {summary}"
                  + (" (spec table and opforge.tools.fuzz draws)" if spec is not None else ""), notes)


def _judge_saved(target: _Target, expected, notes, one, two) -> Tuple[Result, Result]:
    setup = _setup(target, fresh=True)
    loads = ", ".join(setup["libraries"] or [f"import {m}" for m in setup["imports"]]) or "nothing"
    label = target.label
    results = {}
    for name, r in (("1 thread", one), ("2 threads", two)):
        if r["kind"] != "ok":
            results[name] = f"{r['kind']}: {r['error']}: {r['message'][-300:]}"
    if "1 thread" in results or "2 threads" in results:
        problem = "; ".join(f"{k}: {v}" for k, v in results.items())
        saved = Result(label, "savedmodel", "FAIL", f"loading in a fresh process ({loads}) failed: {problem}")
        det = Result(label, "determinism", "FAIL", f"the child could not run the saved function: {problem}")
        return det, saved
    if expected.get("f_grad"):
        runs = {"this process": expected["f_grad"], "1 thread": one.get("f_grad") or [None],
                "2 threads": two.get("f_grad") or [None]}
        what = "outputs and gradients"
    else:
        runs = {"this process": [expected["f"]], "1 thread": [one["f"]], "2 threads": [two["f"]]}
        what = "outputs"
    unsteady = [name for name, run in runs.items() if len(set(run)) != 1]
    deterministic = not unsteady and len({run[0] for run in runs.values()}) == 1
    if deterministic:
        det = Result(label, "determinism", "PASS",
                     f"{what} of {expected['call']}: the same bits over 2 runs here and in children with 1 and 2 "
                     "intra-op threads", notes)
    elif unsteady:
        det = Result(label, "determinism", "FAIL",
                     f"{what} of {expected['call']} differ between 2 runs ({', '.join(unsteady)})", notes)
    else:
        det = Result(label, "determinism", "FAIL",
                     f"{what} of {expected['call']} differ between this process and the children with 1 and 2 "
                     "intra-op threads", notes)
    uses = set(one.get("ops", [])) & set(target.ops)
    if not uses:
        saved = Result(label, "savedmodel", "FAIL",
                       f"the loaded function runs none of {', '.join(target.ops)} (ops: {one.get('ops')})")
    elif one["f"] != expected["f"]:
        status = "FAIL" if deterministic else "PASS"
        saved = Result(label, "savedmodel", status,
                       f"loads in a fresh process ({loads}) and runs {', '.join(sorted(uses))}, but its outputs differ"
                       + ("" if deterministic else " (not deterministic: see determinism)"))
    else:
        saved = Result(label, "savedmodel", "PASS",
                       f"loads in a fresh process ({loads}), runs {', '.join(sorted(uses))}, the same bits")
    return det, saved


def check_targets(targets: Sequence[_Target], checks: Optional[Sequence[str]] = None, timeout: float = 60.0,
                  fuzz_calls: int = 20, seed: int = 0, gradient_tolerance: float = 1e-6,
                  cuda_sim_tolerance: float = CUDA_SIM_TOLERANCE) -> List[Result]:
    """Runs the checks on resolved targets; the child processes are shared by all targets (one
    with 1 intra-op thread, one with 2, restarted after a crash)."""
    wanted = set(checks or CHECKS)
    unknown = wanted - set(CHECKS + OPTIONAL_CHECKS)
    if unknown:
        raise TargetError(f"unknown checks {sorted(unknown)}; the checks are {', '.join(CHECKS + OPTIONAL_CHECKS)}")
    out: Dict[int, List[Result]] = {}
    one_tasks, two_tasks, bad_tasks, saved_info = [], [], {}, {}
    with tempfile.TemporaryDirectory(prefix="opforge-check-") as tmp:
        for index, target in enumerate(targets):
            results = out.setdefault(index, [])
            try:
                target.ops, types = _custom_ops(target)
            except Exception as exc:  # noqa: BLE001
                results.append(Result(target.label, "ops", "FAIL",
                                      f"tracing {target.calls[0]!r} in tf.function failed: {type(exc).__name__}: "
                                      f"{_first_line(exc)} ({target.inputs_note})"))
                continue
            if not target.ops:
                results.append(Result(target.label, "ops", "FAIL",
                                      f"no custom op in the traced graph (ops: {types}; {target.inputs_note})"))
                continue
            target.grad_ops = _gradient_ops(target) if wanted & {"ops", "kernels", "cuda_sim"} else []
            libs = libraries_defining(target.ops) if target.spec is None else {}
            target.libraries = list(dict.fromkeys(p for op in target.ops for p in libs.get(op, [])))
            where = f" from {', '.join(target.libraries)}" if target.libraries else ""
            grads = f" (gradient: {', '.join(target.grad_ops)})" if target.grad_ops else ""
            if "ops" in wanted:
                results.append(Result(target.label, "ops", "PASS",
                                      f"{', '.join(target.ops)}{grads}{where}; {target.inputs_note}"))
            steps = (("shape", lambda: _check_shape(target)),
                     ("gradient", lambda: _check_gradient(target, gradient_tolerance)),
                     ("kernels", lambda: _check_kernels(target)),
                     ("eager_vs_function", lambda: _check_eager_vs_function(target)),
                     ("jit_compile", lambda: _check_jit_compile(target)),
                     ("cuda_sim", lambda: _check_cuda_sim(target, cuda_sim_tolerance)))
            for name, run in steps:
                if name in wanted:
                    try:
                        results.append(run())
                    except Exception as exc:  # noqa: BLE001: a check that cannot run is a failure
                        results.append(Result(target.label, name, "FAIL", f"{type(exc).__name__}: {_first_line(exc)}"))
            folder = Path(tmp) / str(index)
            folder.mkdir()
            if wanted & {"determinism", "savedmodel"}:
                try:
                    expected, notes = _save(target, folder)
                    saved_info[index] = (expected, notes)
                    task = dict(_setup(target, fresh=True), kind="saved", path=str(folder))
                    one_tasks.append(dict(task, id=f"{index}:saved"))
                    two_tasks.append(dict(task, id=f"{index}:saved"))
                except Exception as exc:  # noqa: BLE001
                    for name in ("determinism", "savedmodel"):
                        if name in wanted:
                            results.append(Result(target.label, name, "FAIL",
                                                  f"saving failed: {type(exc).__name__}: {_first_line(exc)}"))
            if "bad_inputs" in wanted:
                tasks = _bad_input_tasks(target, index, folder, fuzz_calls, seed)
                if tasks is None:
                    results.append(Result(target.label, "bad_inputs", "SKIP",
                                          "the function cannot be imported in a child process (define it at module "
                                          "level, or check it as MODULE:FUNCTION)"))
                else:
                    bad_tasks[index] = tasks
                    two_tasks.extend(tasks)
        one = _run_tasks(one_tasks, 1, timeout) if one_tasks else {}
        two = _run_tasks(two_tasks, 2, timeout) if two_tasks else {}
    for index, target in enumerate(targets):
        results = out[index]
        if index in saved_info:
            det, saved = _judge_saved(target, *saved_info[index], one[f"{index}:saved"], two[f"{index}:saved"])
            results += [r for r in (det, saved) if r.check in wanted]
        if index in bad_tasks:
            results.append(_judge_bad_inputs(target, index, bad_tasks[index], two))
        results.sort(key=lambda r: (CHECKS + OPTIONAL_CHECKS).index(r.check))
    return [r for index in range(len(targets)) for r in out[index]]


def check(function, sample_inputs: Optional[Sequence[Any]] = None, *, checks: Optional[Sequence[str]] = None,
          timeout: float = 60.0, fuzz_calls: int = 20, gradient_tolerance: float = 1e-6,
          cuda_sim_tolerance: float = CUDA_SIM_TOLERANCE) -> List[Result]:
    """Checks the op behind `function` (a callable, "MODULE:FUNCTION", an opforge spec name or
    a C++ op name); returns one Result per check. `sample_inputs`: a list of calls (see the
    module docstring); `checks`: a subset of CHECKS; `timeout`: seconds one call in a child may
    take before it is a hang; `fuzz_calls`: opforge.tools.fuzz draws per opforge op;
    `gradient_tolerance`: the float64 numerical gradient's relative tolerance for functions
    without a spec; `cuda_sim_tolerance`: the cuda_sim check's (relative to the largest CPU
    value). The cuda_sim check runs only when `checks` names it, against a library built with
    cuda_sim=True (see the module docstring)."""
    return check_targets(resolve(function, sample_inputs), checks, timeout, fuzz_calls,
                         gradient_tolerance=gradient_tolerance, cuda_sim_tolerance=cuda_sim_tolerance)


def main(targets: Sequence[str], as_json: bool = False, inputs: Sequence[str] = (),
         checks: Optional[Sequence[str]] = None, timeout: float = 60.0, fuzz_calls: int = 20,
         cuda_sim: bool = False, cuda_sim_tolerance: float = CUDA_SIM_TOLERANCE) -> int:
    """`opforge check`: prints one line per check (or JSON); 1 if any check fails, 2 for a
    target that names nothing. `cuda_sim`: add the cuda_sim check, and build the targets' op
    libraries for it (OPFORGE_CUDA_SIM=1, set before they are imported)."""
    if cuda_sim:
        os.environ["OPFORGE_CUDA_SIM"] = "1"
        checks = list(dict.fromkeys(list(checks or CHECKS) + ["cuda_sim"]))
    import opforge

    start = time.monotonic()
    try:
        given = [parse_inputs(inputs)] if inputs else None
        resolved = [t for name in (targets or [s.name for s in opforge.ops.SPECS]) for t in resolve(name, given)]
        results = check_targets(resolved, checks, timeout, fuzz_calls, cuda_sim_tolerance=cuda_sim_tolerance)
    except TargetError as exc:
        print(f"opforge check: {exc}", file=sys.stderr)
        return 2
    failed = [r for r in results if r.status == "FAIL"]
    if as_json:
        print(json.dumps([dataclasses.asdict(r) for r in results], indent=1))
    else:
        label = None
        for r in results:
            if r.target != label:
                label = r.target
                print(f"{label}:")
            print(r.line())
        counts = {s: sum(r.status == s for r in results) for s in ("PASS", "FAIL", "SKIP")}
        print(f"{len(resolved)} target{'s' if len(resolved) != 1 else ''}, {len(results)} checks: {counts['PASS']} passed, {counts['FAIL']} failed, "
              f"{counts['SKIP']} skipped ({time.monotonic() - start:.0f} s)")
    return 1 if failed else 0

"""opforge's GPU kernels through the TensorFlow binding, against opforge's own CPU kernels.

What users run: the op placed on /GPU:0 inside TensorFlow, which launches it on TensorFlow's
compute stream with TensorFlow's allocator, hands it host-memory inputs where the op declares
HostMemory, and lets it write into an input's buffer in a graph. For every op with a GPU kernel
(opforge.ops.OP_NAMES minus CPU_ONLY) and every dtype its spec lists that has a GPU kernel (read
from TensorFlow's kernel registry), the GPU results are compared with the CPU kernel's on the
same inputs, forward and gradient (tf.GradientTape), with inf, -inf, NaN and -0.0 in the
upstream gradients and in the forward inputs, on the spec's cases plus empty batches, sizes past
the 2^16-block grid (grid-stride loops), past 2^31 elements, graphs that forward buffers, and
host-memory inputs made on the device.

How the two must agree (what each op's CUDA test, cc/ops/<op>/<op>_cuda_test.cc, documents):
- the same bits (a NaN matching any NaN: CUDA returns the canonical NaN where x86 keeps an
  operand's payload) for every op by default: element-wise ops, element_mul with its broadcast
  gradients, resize and its gradient, the fused batch norm, the target assignment;
- swish: within 8 eps (|cpu| + m) (CUDA's exp against Eigen's logistic), as its CUDA test;
- yolo_decode: a few ulps of the compute type relative to the terms' magnitudes, and class
  indices that differ only on ties within that, as its CUDA test;
- conv2d_transpose: integer-valued data sums exactly, so the values must be equal; random data
  within 4 gamma_n S + u_T (|gpu| + |cpu|), gamma_n = n u / (1 - n u) for n terms summed in the
  compute type (u = 2^-24 for float, half and bfloat16, which accumulate in float; 2^-53 for
  double), S the sum of the terms' magnitudes (the op itself on |inputs| in float64), u_T one
  rounding to the element type; the factor 4: two summation orders (2) and the CPU's Winograd
  transforms, whose +-1 coefficients at most double the magnitudes summed (2);
- bias_leaky_relu's bias gradient is TensorFlow's reduce_sum on each device (not opforge's):
  within 2 gamma_n(u_T) S;
- mfcc_to_mel, griffin_lim: their CUDA tests' bounds (the device's cos and cuFFT's rounding);
  mel_to_stft: the spec's forward tolerance (the distance it allows the CPU from the exact
  minimiser).

Every test runs twice (the `gpu_device` fixture): on the GPU, and on "cuda_sim", where the same
GPU kernels (TfKernel's GPU path, the op structs' Gpu methods and their CUDA kernels, compiled for
the SIMT runtime) run on the CPU inside TensorFlow, in a tf.function whose opforge nodes select
the kernel label "cuda_sim" (opforge.cuda_sim); the CPU reference then runs in a tf.function too.
The cases sized past a GPU's grid and past 2^31 elements, the memory statistics and the
benchmark are the GPU's alone (the SIMT runtime's CUDA tests, `make cuda-test`, run the
grid-stride loops at its own small grid). Without a GPU the GPU half skips ("skipped: no GPU").
OPFORGE_TEST_DEVICE=CPU runs it with the "GPU" side on /CPU:0: a dry run, the CPU against itself,
that passes trivially but runs every line (except the two that need a GPU's memory statistics or
a dtype without a GPU kernel).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.framework import kernels as tf_kernels

import opforge
from opforge import cuda_sim
from opforge.ops._common import lib
from opforge.ops.spec import Case, OpSpec, Sample

ops = opforge.ops
GPU_OP_NAMES = tuple(name for name in ops.OP_NAMES if name not in ops.CPU_ONLY)
_MODULES = {module.__name__.rsplit(".", 1)[-1]: module for module in ops.MODULES}
# The specs of op modules with at least one GPU op.
GPU_SPECS = tuple(s for s in ops.SPECS if set(_MODULES[s.group].OP_NAMES) - set(ops.CPU_ONLY))
BY_NAME = {s.name: s for s in GPU_SPECS}

# The special values every backward input gets (the upstream gradients and, in one variant, the
# forward inputs): what IEEE arithmetic treats apart.
IEEE_SPECIALS = (0.0, -0.0, math.inf, -math.inf, math.nan)
# More elements than 2^16 blocks of 256 threads cover: every kernel's grid-stride loop runs.
GRID_STRIDE = 65536 * 256 + 1031

# Per dtype: machine epsilon, smallest normal, smallest subnormal.
_EPS = {"float16": 2.0**-10, "bfloat16": 2.0**-7, "float32": 2.0**-23, "float64": 2.0**-52}
_TINY = {"float16": 2.0**-14, "bfloat16": 2.0**-126, "float32": 2.0**-126, "float64": 2.0**-1022}
_DENORM = {"float16": 2.0**-24, "bfloat16": 2.0**-133, "float32": 2.0**-149, "float64": 2.0**-1074}


# --- fixtures --------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def no_soft_placement(request):
    """Soft placement off while a test runs on the device: an op without a kernel there then
    raises instead of running on the CPU unseen (only for tests that use gpu_device)."""
    if "gpu_device" not in request.fixturenames:
        yield
        return
    before = tf.config.get_soft_device_placement()
    tf.config.set_soft_device_placement(False)
    try:
        yield
    finally:
        tf.config.set_soft_device_placement(before)


# The pseudo-device of the SIMT runtime: /CPU:0, the opforge nodes labelled "cuda_sim".
SIM = "cuda_sim"
SIM_KIND = "CUDA_SIM"


def _device_type(device: str) -> str:
    return SIM_KIND if device == SIM else tf.DeviceSpec.from_string(device).device_type


def _is_gpu(device: str) -> bool:
    return _device_type(device) == "GPU"


def _tf_device(device: str) -> str:
    """The TensorFlow device a test's tensors live on."""
    return "/CPU:0" if device == SIM else device


def _skip_on_sim(device: str, why: str) -> None:
    if device == SIM:
        pytest.skip(f"GPU only: {why}")


def _run(device: str, fn: Callable, *args, graph: bool = False):
    """fn(*args) on `device`: eagerly there (in a tf.function with `graph`), or, on SIM, in a
    tf.function whose GPU ops run their cuda_sim kernels."""
    with tf.device(_tf_device(device)):
        if device == SIM:
            return cuda_sim.function(fn, GPU_OP_NAMES)(*args)
        return tf.function(fn, autograph=False)(*args) if graph else fn(*args)


# --- the kernel registry: which dtypes run on the device -------------------------------------------

_REGISTRY: Dict[tuple, list] = {}


def _kernels(op: str) -> list:
    """The KernelDefs registered for `op` (opforge's library loaded first, so that its are; read
    again once the cuda_sim library has added its own)."""
    key = (op, str(cuda_sim._loaded))
    if key not in _REGISTRY:
        lib()
        _REGISTRY[key] = list(tf_kernels.get_registered_kernels_for_op(op).kernel)
    return _REGISTRY[key]


def _satisfies(node, kernel) -> bool:
    """Whether a NodeDef's type attrs meet a KernelDef's constraints."""
    for constraint in kernel.constraint:
        allowed = constraint.allowed_values.list.type
        if allowed and (constraint.name not in node.attr or node.attr[constraint.name].type not in allowed):
            return False
    return True


def _device_kernels(op: str, device_type: str) -> list:
    """The kernels of `op` a device kind runs: SIM_KIND's are the CPU kernels labelled cuda_sim,
    the others' the device's unlabelled ones."""
    if device_type == SIM_KIND:
        return [k for k in _kernels(op) if k.device_type == "CPU" and k.label == cuda_sim.LABEL]
    return [k for k in _kernels(op) if k.device_type == device_type and not k.label]


def _has_kernel(node, device_type: str) -> bool:
    return any(_satisfies(node, k) for k in _device_kernels(node.op, device_type))


def _opforge_nodes(fn: Callable, tensors: Sequence) -> list:
    """The opforge NodeDefs a call builds when traced (its gradient too, if `fn` takes one);
    `tensors` may be tf.TensorSpecs (tracing needs no data)."""
    graph = tf.function(fn).get_concrete_function(*tensors).graph.as_graph_def()
    nodes = list(graph.node) + [n for f in graph.library.function for n in f.node_def]
    return [n for n in nodes if n.op.startswith("Opforge>")]


def _differentiable(dtype: tf.DType) -> bool:
    return dtype.is_floating or dtype.is_complex


def _wrt(case: Case, tensors) -> List[int]:
    """The inputs gradients are taken for: differentiable samples of a float or complex dtype."""
    return [i for i, (s, t) in enumerate(zip(case.inputs, tensors)) if s.differentiable and _differentiable(t.dtype)]


def _forward_fn(spec: OpSpec, case: Case) -> Callable:
    return lambda *xs: spec.call(spec.op, case, list(xs))


def _gradient_fn(spec: OpSpec, case: Case, wrt: List[int]) -> Callable:
    def fn(*xs):
        xs = list(xs)
        with tf.GradientTape() as tape:
            for i in wrt:
                tape.watch(xs[i])
            out = spec.call(spec.op, case, xs)
        targets = [o for o in out if _differentiable(o.dtype)]
        grads = tape.gradient(targets, [xs[i] for i in wrt]) if targets else []
        return [g for g in grads if g is not None]

    return fn


def _cases(spec: OpSpec) -> Tuple[Case, ...]:
    return tuple(spec.cases) + EXTRA_CASES.get(spec.name, ())


def _first_case(spec: OpSpec, dtype: tf.DType, gradient: bool) -> Optional[Case]:
    for case in _cases(spec):
        if case.dtypes is not None and dtype not in case.dtypes:
            continue
        if gradient and not _wrt(case, _host(case.tensors, dtype)):
            continue
        return case
    return None


@dataclasses.dataclass
class Support:
    """Whether a spec's call in one dtype runs on a device: every opforge op it builds (and its
    gradient builds) has a kernel there; and the nodes that run (for the coverage check)."""

    forward: bool
    gradient: bool
    nodes: list


_SUPPORT: Dict[tuple, Support] = {}


def _support(spec: OpSpec, dtype: tf.DType, device_type: str) -> Support:
    key = (spec.name, dtype.name, device_type)
    if key not in _SUPPORT:
        case = _first_case(spec, dtype, gradient=False)
        forward_nodes = _opforge_nodes(_forward_fn(spec, case), _host(case.tensors, dtype)) if case else []
        forward = bool(forward_nodes) and all(_has_kernel(n, device_type) for n in forward_nodes)
        gradient, nodes = False, forward_nodes if forward else []
        grad_case = _first_case(spec, dtype, gradient=True) if spec.differentiable else None
        if forward and grad_case is not None:
            tensors = _host(grad_case.tensors, dtype)
            gradient_nodes = _opforge_nodes(_gradient_fn(spec, grad_case, _wrt(grad_case, tensors)), tensors)
            gradient = all(_has_kernel(n, device_type) for n in gradient_nodes)
            nodes = nodes + (gradient_nodes if gradient else [])
        _SUPPORT[key] = Support(forward, gradient, nodes)
    return _SUPPORT[key]


def _device_dtypes(spec: OpSpec, device: str, gradient: bool = False) -> List[tf.DType]:
    kind = _device_type(device)
    supported = [(d, _support(spec, d, kind)) for d in spec.dtypes]
    return [d for d, s in supported if (s.gradient if gradient else s.forward)]


# --- inputs ------------------------------------------------------------------------------------


def _host(make: Callable, *args):
    """Tensors made on the host, whatever device scope is active: both devices get the same."""
    with tf.device("/CPU:0"):
        return make(*args)


def _values(shape, dtype: tf.DType, seed: int, integer: bool = False, specials: Optional[str] = "sprinkled",
            fill: Optional[float] = None) -> tf.Tensor:
    """A host tensor of `dtype`: standard normal times 2 (or integers in [-3, 3]), with the IEEE
    special values first (`specials` "head") and also at random positions, 1 in 16
    ("sprinkled"), or none (None)."""
    shape = tuple(int(d) for d in shape)
    n = int(np.prod(shape))
    rng = np.random.default_rng(seed)
    if fill is not None:
        v = np.full(n, fill)
    elif integer:
        v = rng.integers(-3, 4, n).astype(np.float64)
    else:
        v = rng.standard_normal(n) * 2.0
    if specials and n:
        pattern = np.array(IEEE_SPECIALS)
        head = min(n, len(pattern))
        v[:head] = pattern[:head]
        k = n // 16 if specials == "sprinkled" else 0
        v[rng.integers(0, n, k)] = pattern[np.arange(k) % len(pattern)]
    v = v.reshape(shape)
    with tf.device("/CPU:0"):
        if dtype.is_complex:
            v = v + 1j * rng.standard_normal(shape)
        return tf.cast(tf.constant(v), dtype)


def _sprinkled(t: tf.Tensor, seed: int) -> tf.Tensor:
    """`t` with IEEE special values at a few random positions (1 + n / 64; a few, so that sums
    over many elements are not all NaN)."""
    n = int(np.prod(t.shape))
    if n == 0:
        return t
    rng = np.random.default_rng(seed)
    v = t.numpy()
    work = v.astype(np.complex128 if t.dtype.is_complex else np.float64).reshape(-1)
    k = 1 + n // 64
    work[rng.integers(0, n, k)] = np.array(IEEE_SPECIALS)[np.arange(k) % len(IEEE_SPECIALS)]
    with tf.device("/CPU:0"):
        return tf.cast(tf.constant(work.reshape(v.shape)), t.dtype)


def _finite(t: tf.Tensor) -> tf.Tensor:
    """`t` with its infinities and NaNs replaced by ordinary numbers (its zeros kept)."""
    if not (t.dtype.is_floating or t.dtype.is_complex):
        return t
    with tf.device("/CPU:0"):
        return tf.where(tf.math.is_finite(tf.math.real(t) if t.dtype.is_complex else t), t, tf.cast(1.5, t.dtype))


# How each gradient variant makes the upstream gradients (`_values`' specials) and changes the
# forward inputs.
VARIANTS = {
    # every IEEE special once, at the head: most sums stay finite and show their rounding
    "as sampled": ("head", None),
    # nothing special anywhere: sums over many elements (a scalar's gradient) are finite too
    "finite": (None, _finite),
    # specials sprinkled in the upstream gradients and in the forward inputs
    "specials in inputs": ("sprinkled", "sprinkle"),
    # every upstream element -0.0: a sum of negative zeros keeps its sign on both devices or neither
    "negative zeros": (None, None),
}


def _upstreams(outputs: Sequence[np.ndarray], dtypes: Sequence[tf.DType], variant: str, seed: int,
               integer: bool) -> List[tf.Tensor]:
    """One upstream gradient per differentiable output, as the variant says."""
    return [_values(o.shape, d, seed + k, integer=integer, fill=-0.0 if variant == "negative zeros" else None,
                    specials=VARIANTS[variant][0])
            for k, (o, d) in enumerate(zip(outputs, dtypes))]


# --- running on a device ---------------------------------------------------------------------------


def _assert_on(device: str, tensors) -> None:
    """Every tensor was produced on `device` (soft placement is off as well)."""
    want = tf.DeviceSpec.from_string(_tf_device(device))
    for t in tf.nest.flatten(tensors):
        if t is None:
            continue
        got = tf.DeviceSpec.from_string(t.device)
        assert (got.device_type, got.device_index or 0) == (want.device_type, want.device_index or 0), (
            f"a result is on {t.device}, not on {device}")


def _on_device(device: str, tensors: Sequence[tf.Tensor]) -> List[tf.Tensor]:
    """Copies of `tensors` made on `device`, as a user's tensors are."""
    with tf.device(_tf_device(device)):
        return [tf.identity(t) for t in tensors]


def _forward(device: str, spec: OpSpec, case: Case, tensors, graph: bool = False) -> List[np.ndarray]:
    out = _run(device, lambda *xs: list(spec.call(spec.op, case, list(xs))), *_on_device(device, tensors),
               graph=graph)
    _assert_on(device, out)
    return [o.numpy() for o in out]


def _gradients(device: str, spec: OpSpec, case: Case, tensors, wrt, upstreams,
               graph: bool = False) -> List[Optional[np.ndarray]]:
    n = len(tensors)

    def fn(*xs):
        args, ups = list(xs[:n]), list(xs[n:])
        with tf.GradientTape() as tape:
            for i in wrt:
                tape.watch(args[i])
            out = spec.call(spec.op, case, args)
        targets = [o for o in out if _differentiable(o.dtype)]
        grads = tape.gradient(targets, [args[i] for i in wrt], output_gradients=ups)
        # A function returns tensors only: None (no gradient) as an empty marker.
        return [tf.zeros([0], tf.int8, name="none") if g is None else g for g in grads], [g is None for g in grads]

    holder = {}

    def run(*xs):
        grads, missing = fn(*xs)
        holder["missing"] = missing
        return grads

    grads = _run(device, run, *_on_device(device, list(tensors) + list(upstreams)), graph=graph)
    grads = [None if m else g for g, m in zip(grads, holder["missing"])]
    _assert_on(device, grads)
    return [None if g is None else g.numpy() for g in grads]


def _outcome(fn: Callable):
    """(result, None) or (None, the error's type name and message) of a call."""
    try:
        return fn(), None
    except (tf.errors.OpError, ValueError, TypeError) as exc:
        return None, f"{type(exc).__name__}: {getattr(exc, 'message', str(exc))[:200]}"


# --- comparisons ---------------------------------------------------------------------------------


def _f64(a: np.ndarray) -> np.ndarray:
    return np.asarray(a).astype(np.float64)


def _show(v) -> str:
    a = np.asarray(v)
    if a.dtype.kind == "f" or a.dtype.name == "bfloat16":
        bits = a.reshape(1).view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])[0]
        return f"{float(a):.9g} (0x{int(bits):0{2 * a.dtype.itemsize}x})"
    return repr(a.item())


def _report(bad: np.ndarray, gpu: np.ndarray, cpu: np.ndarray, extra: Optional[np.ndarray] = None) -> str:
    where = np.argwhere(bad)
    lines = [f"{len(where)} of {bad.size} elements differ"]
    for idx in where[:6]:
        idx = tuple(int(i) for i in idx)
        line = f"  at {list(idx)}: device {_show(gpu[idx])}, cpu {_show(cpu[idx])}"
        if extra is not None:
            line += f" (allowed {float(np.broadcast_to(extra, bad.shape)[idx]):.3g})"
        lines.append(line)
    return "\n".join(lines)


def same_bits(gpu: np.ndarray, cpu: np.ndarray) -> Optional[str]:
    """None if every element has the same bits (the sign of zero included); a NaN matches any
    NaN. Otherwise a description of the first differences."""
    if gpu.shape != cpu.shape or gpu.dtype != cpu.dtype:
        return f"shape/dtype {gpu.shape} {gpu.dtype} against {cpu.shape} {cpu.dtype}"
    if gpu.size == 0:
        return None
    g, c = np.ascontiguousarray(gpu), np.ascontiguousarray(cpu)
    if g.dtype.kind == "c":  # the real and imaginary parts, as floats
        g, c = g.view(g.real.dtype), c.view(c.real.dtype)
    if g.dtype.kind in "iub":
        bad = g != c
    else:
        unsigned = {2: np.uint16, 4: np.uint32, 8: np.uint64}[g.dtype.itemsize]
        bad = (g.view(unsigned) != c.view(unsigned)) & ~(np.isnan(_f64(g)) & np.isnan(_f64(c)))
    return _report(bad, g, c) if bad.any() else None


def within(gpu: np.ndarray, cpu: np.ndarray, bound, loose: Optional[np.ndarray] = None) -> Optional[str]:
    """None if NaN is where the CPU has NaN, infinities are the CPU's, and finite values differ by
    at most `bound` (an array or a number; a NaN bound, from special inputs, allows any value).
    The sign of zero is not compared. Where `loose` is set (an upstream gradient of inf or NaN
    met a value that is 0 on one device and a few ulps on the other: NaN against inf, or inf of
    either sign), any non-finite result matches any other."""
    if gpu.shape != cpu.shape or gpu.dtype != cpu.dtype:
        return f"shape/dtype {gpu.shape} {gpu.dtype} against {cpu.shape} {cpu.dtype}"
    if gpu.size == 0:
        return None
    g, c = _f64(gpu), _f64(cpu)
    with np.errstate(invalid="ignore", over="ignore"):
        # Equal values (infinities included); both NaN; or both finite and not further apart than
        # the bound (`not >`: a NaN bound allows any value).
        ok = (g == c) | (np.isnan(g) & np.isnan(c)) | (np.isfinite(g) & np.isfinite(c) & ~(np.abs(g - c) > bound))
    if loose is not None:
        ok |= np.broadcast_to(loose, ok.shape) & ~np.isfinite(g) & ~np.isfinite(c)
    return _report(~ok, gpu, cpu, bound) if not ok.all() else None


def _gamma(n: float, u: float) -> float:
    return n * u / (1 - n * u) if n * u < 1 else math.inf


# --- how each op's GPU results must agree with the CPU's ------------------------------------------


@dataclasses.dataclass
class Run:
    """One comparison: the call, its host inputs and upstream gradients, the CPU's results."""

    spec: OpSpec
    case: Case
    dtype: tf.DType
    tensors: List[tf.Tensor]
    wrt: List[int] = dataclasses.field(default_factory=list)
    upstreams: List[tf.Tensor] = dataclasses.field(default_factory=list)
    cpu_forward: List[np.ndarray] = dataclasses.field(default_factory=list)
    cpu_grads: List[Optional[np.ndarray]] = dataclasses.field(default_factory=list)
    cache: dict = dataclasses.field(default_factory=dict)

    def array(self, i: int) -> np.ndarray:
        return self.tensors[i].numpy()


Rule = Callable[[Run, str, int, np.ndarray, np.ndarray], Optional[str]]


def exact_rule(run: Run, kind: str, index: int, gpu: np.ndarray, cpu: np.ndarray) -> Optional[str]:
    return same_bits(gpu, cpu)


def swish_rule(run: Run, kind: str, index: int, gpu: np.ndarray, cpu: np.ndarray) -> Optional[str]:
    """swish_cuda_test.cc's bound: 8 eps (|cpu| + m), m = |x| tiny (forward) or |g| (1 + |x|)."""
    name = gpu.dtype.name if gpu.dtype.name in _EPS else run.dtype.name
    x = np.abs(_f64(run.array(0)))
    if kind == "forward":
        with np.errstate(invalid="ignore", over="ignore"):
            return within(gpu, cpu, 8 * _EPS[name] * (np.abs(_f64(cpu)) + x * _TINY[name]))
    g = _f64(run.upstreams[0].numpy())
    with np.errstate(invalid="ignore", over="ignore"):
        bound = 8 * _EPS[name] * (np.abs(_f64(cpu)) + np.abs(g) * (1 + x))
    return within(gpu, cpu, bound, loose=~np.isfinite(g))


def _yolo_tolerance(dtype_name: str, mag) -> np.ndarray:
    """yolo_decode_cuda_test.cc's Tolerance: a few ulps of the compute type and one rounding to T
    relative to the magnitude, a few of T's subnormals, a little of the compute type's smallest
    normal."""
    ulp_c = 2.0**-52 if dtype_name == "float64" else 2.0**-23
    c_min = 2.0**-1022 if dtype_name == "float64" else 2.0**-126
    with np.errstate(invalid="ignore", over="ignore"):
        return (_EPS[dtype_name] + 16 * ulp_c) * mag + 4 * _DENORM[dtype_name] + c_min * 2.0**-8


def _sigmoid(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


def _yolo_geometry(run: Run):
    attrs = run.case.attrs
    features = run.array(0)
    classes = attrs["num_classes"]
    rows = _f64(features).reshape(-1, 5 + classes)
    size = attrs["input_size"]
    in_h, in_w = (size, size) if isinstance(size, int) else size
    h, w = features.shape[1], features.shape[2]
    sx, sy = in_w / w, in_h / h
    if attrs.get("normalized", False):
        sx, sy = sx / min(in_w, in_h), sy / min(in_w, in_h)
    return rows, classes, sx, sy, float(np.float32(attrs.get("scale_x_y", 1.0)))


def _yolo_near_ties(run: Run) -> np.ndarray:
    """Boxes whose best class score ties with another class's within the tolerance."""
    _, scores, indices, class_scores = run.cpu_forward
    classes = run.case.attrs["num_classes"]
    best = _f64(scores).reshape(-1, 1)
    cs = _f64(class_scores).reshape(-1, classes)
    others = np.arange(classes)[None, :] != indices.reshape(-1, 1)
    with np.errstate(invalid="ignore"):
        close = (cs == best) | (np.abs(cs - best) <= _yolo_tolerance(run.dtype.name, np.abs(best)))
    return ~np.isnan(best[:, 0]) & (close & others).any(axis=1)


def yolo_decode_rule(run: Run, kind: str, index: int, gpu: np.ndarray, cpu: np.ndarray) -> Optional[str]:
    """yolo_decode_cuda_test.cc's checks, ported."""
    name = run.dtype.name
    if kind == "forward" and index == 0:  # boxes: |centre| + |size| on the coordinate's axis
        if "centre" not in run.cache:
            attrs = dict(run.case.attrs, box_format="center_xywh")
            with tf.device("/CPU:0"):
                run.cache["centre"] = _f64(run.spec.op(*run.tensors, **attrs).boxes.numpy()).reshape(-1, 4)
        centre = np.nan_to_num(np.abs(run.cache["centre"]), nan=0.0)
        mx, my = centre[:, 0] + centre[:, 2], centre[:, 1] + centre[:, 3]
        yx = run.case.attrs.get("box_format", "xyxy") == "yxyx"
        first, second = (my, mx) if yx else (mx, my)
        mag = np.stack([first, second, first, second], axis=1).reshape(gpu.shape)
        return within(gpu, cpu, _yolo_tolerance(name, mag))
    if kind == "forward" and index == 2:  # class indices: the CPU's, or a tie within tolerance
        if gpu.shape != cpu.shape:
            return f"shape {gpu.shape} against {cpu.shape}"
        classes = run.case.attrs["num_classes"]
        g, c = gpu.reshape(-1), cpu.reshape(-1)
        differ = np.flatnonzero(g != c)
        if differ.size == 0:
            return None
        if (g[differ] < 0).any() or (g[differ] >= classes).any():
            return f"class indices out of range: {g[differ][:6]}"
        cs = _f64(run.cpu_forward[3]).reshape(-1, classes)
        best = _f64(run.cpu_forward[1]).reshape(-1)
        a, b = cs[differ, g[differ]], cs[differ, c[differ]]
        with np.errstate(invalid="ignore"):
            tie = ~np.isnan(best[differ]) & ((a == b) | (np.abs(a - b) <= _yolo_tolerance(name, np.abs(best[differ]))))
        if tie.all():
            return None
        return _report(np.isin(np.arange(g.size), differ[~tie]).reshape(gpu.shape), gpu, cpu)
    if kind == "forward":  # scores, class scores: relative to themselves
        return within(gpu, cpu, _yolo_tolerance(name, np.abs(_f64(cpu))))
    # The features' gradient: GradMagnitudes of the CUDA test, all three upstreams given.
    rows, classes, sx, sy, scale = _yolo_geometry(run)
    gb = np.abs(_f64(run.upstreams[0].numpy())).reshape(-1, 4).sum(axis=1)
    gs = np.abs(_f64(run.upstreams[1].numpy())).reshape(-1)
    gc = np.abs(_f64(run.upstreams[2].numpy())).reshape(-1, classes)
    indices = run.cpu_forward[2].reshape(-1)
    gc[np.arange(gc.shape[0]), indices] += gs
    sig = _sigmoid(rows)
    c_rows = np.abs(_f64(cpu)).reshape(-1, 5 + classes)
    mag = np.empty_like(rows)
    with np.errstate(invalid="ignore", over="ignore"):
        mag[:, 0] = gb * sx * scale * sig[:, 0]
        mag[:, 1] = gb * sy * scale * sig[:, 1]
        mag[:, 2:4] = c_rows[:, 2:4]
        mag[:, 5:] = gc * sig[:, 4:5] * sig[:, 5:]
        mag[:, 4] = mag[:, 5:].sum(axis=1)
    # Near ties: the GPU may route the score's gradient to the other class (and the objectness's
    # follows); only the box channels are compared there.
    g_rows = np.array(gpu, copy=True).reshape(-1, 5 + classes)
    ties = _yolo_near_ties(run)
    g_rows[ties, 4:] = np.asarray(cpu).reshape(-1, 5 + classes)[ties, 4:]
    # Boxes with an upstream gradient of inf or NaN: a saturated sigmoid (1 - s = 0 on one
    # device, an ulp on the other) gives NaN against inf there.
    special = ~(np.isfinite(gb) & np.isfinite(gs) & np.isfinite(gc).all(axis=1))
    loose = np.repeat(special[:, None], 5 + classes, axis=1).reshape(gpu.shape)
    return within(g_rows.reshape(gpu.shape), cpu, _yolo_tolerance(name, mag.reshape(gpu.shape)), loose)


def _conv_sums(run: Run) -> List[np.ndarray]:
    """The sums of the terms' magnitudes of the forward and of both gradients: the op on |x|,
    |filters| and |upstream| in float64 on the CPU (every term non-negative: no cancellation)."""
    if "sums" not in run.cache:
        with tf.device("/CPU:0"):
            x, f = (tf.abs(tf.cast(t, tf.float64)) for t in run.tensors[:2])
            with tf.GradientTape() as tape:
                tape.watch([x, f])
                y = run.spec.op(x, f, **run.case.attrs)
            g = tf.abs(tf.cast(run.upstreams[0], tf.float64)) if run.upstreams else tf.ones_like(y)
            dx, df = tape.gradient(y, [x, f], output_gradients=g)
            run.cache["sums"] = [y.numpy(), dx.numpy(), df.numpy()]
    return run.cache["sums"]


def conv2d_transpose_rule(run: Run, kind: str, index: int, gpu: np.ndarray, cpu: np.ndarray) -> Optional[str]:
    if all(s.integer_valued for s in run.case.inputs[:2]) and run.cache.get("integer_upstream", True):
        return within(gpu, cpu, 0.0)  # exact sums: equal values (the sign of a zero sum aside)
    name = gpu.dtype.name
    u_c = 2.0**-53 if name == "float64" else 2.0**-24
    x, f = run.tensors[0], run.tensors[1]
    kh, kw, co, ci = (int(d) for d in f.shape)
    which = 0 if kind == "forward" else 1 + run.wrt[index]  # the output, d input, d filters
    # Terms per element: a filter window over the input channels; over the output channels;
    # every input pixel.
    terms = (kh * kw * ci, kh * kw * co, int(np.prod(x.shape)) // max(ci, 1))[which]
    sums = _conv_sums(run)[which]
    with np.errstate(invalid="ignore", over="ignore"):
        bound = (4 * _gamma(terms, u_c) * sums + _EPS[name] / 2 * (np.abs(_f64(gpu)) + np.abs(_f64(cpu)))
                 + 4 * _DENORM[name])
    return within(gpu, cpu, bound)


def bias_leaky_relu_rule(run: Run, kind: str, index: int, gpu: np.ndarray, cpu: np.ndarray) -> Optional[str]:
    if kind == "forward" or run.wrt[index] == 0:
        return same_bits(gpu, cpu)
    # The bias gradient: TensorFlow's reduce_sum of the features' gradient on each device.
    features_grad = np.abs(_f64(run.cpu_grads[run.wrt.index(0)]))
    rows = features_grad.size // max(features_grad.shape[-1], 1)
    sums = features_grad.reshape(-1, features_grad.shape[-1]).sum(axis=0)
    u = _EPS[gpu.dtype.name] / 2
    with np.errstate(invalid="ignore", over="ignore"):
        bound = 2 * _gamma(rows, u) * sums + u * (np.abs(_f64(gpu)) + np.abs(_f64(cpu))) + 4 * _DENORM[gpu.dtype.name]
    return within(gpu, cpu, bound)


# Every other GPU op must give the CPU's bits (also a new op's, until its CUDA test says otherwise).
def mfcc_to_mel_rule(run: Run, kind: str, index: int, gpu: np.ndarray, cpu: np.ndarray) -> Optional[str]:
    """mfcc_to_mel_cuda_test.cc's bound: the basis entries from the device's cos (2 ulp) against
    glibc's, amplified by the lifter, and the sums' rounding, u = 2^-53 (both compute in double):
    forward |d mel| <= 4 ((0.1 ln 10 |dx| + 10 u) |mel| + ulp_T), |dx| <= sum_n (12 a + 2 n_mfcc) u
    |basis[k, n] c[n]|; gradient |d| <= 4 ((12 a + 2 n_mels) u sum_k |basis[k, n] w[k]| + ulp_T)
    with w = g mel 0.1 ln 10."""
    from opforge.ops.mfcc_to_mel import mfcc_basis

    attrs = dict(run.case.attrs)
    c = _f64(run.array(0))
    n_mfcc, n_mels, lifter = c.shape[-2], int(attrs.get("n_mels", 128)), float(attrs.get("lifter", 0) or 0)
    basis = np.abs(mfcc_basis(n_mfcc, n_mels, int(attrs.get("dct_type", 2)), attrs.get("norm", "ortho"), lifter))
    amp = 1.0
    if lifter > 0:
        half = lifter * 0.5 * np.sin(np.pi * np.arange(1, n_mfcc + 1) / lifter)
        amp = float(np.max(1 + np.abs(half) / np.abs(1 + half)))
    u = 2.0**-53
    ulp = _EPS[cpu.dtype.name] * np.abs(_f64(cpu)) if cpu.dtype != np.float64 else 0.0
    with np.errstate(invalid="ignore", over="ignore"):
        if kind == "forward":
            dx = (12 * amp + 2 * n_mfcc) * u * np.matmul(basis, np.abs(c))
            bound = 4 * ((0.1 * np.log(10) * dx + 10 * u) * np.abs(_f64(cpu)) + ulp)
            return within(gpu, cpu, bound)
        w = np.abs(_f64(run.upstreams[0].numpy()) * _f64(run.cpu_forward[0])) * 0.1 * np.log(10)
        bound = 4 * ((12 * amp + 2 * n_mels) * u * np.matmul(basis.T, w) + ulp)
        # A non-finite w[k, t] reaches every coefficient of frame t.
        loose = np.broadcast_to(np.any(~np.isfinite(w), axis=-2, keepdims=True), gpu.shape)
        return within(gpu, cpu, bound, loose=loose)


def griffin_lim_rule(run: Run, kind: str, index: int, gpu: np.ndarray, cpu: np.ndarray) -> Optional[str]:
    """griffin_lim_cuda_test.cc's bounds (cuFFT's rounding against DUCC's, amplified by the
    iterations' normalisation): max |gpu - cpu| <= tol max |cpu|, tol 1e-5 (float32, <= 1
    iteration), 2e-3 (float32, more), 1e-12 (float64, none), 1e-10 (float64, <= 2), 1e-8 (float64)."""
    n_iter = int(run.case.attrs.get("n_iter", 32))
    if cpu.dtype == np.float64:
        tol = 1e-12 if n_iter == 0 else 1e-10 if n_iter <= 2 else 1e-8
    else:
        tol = 1e-5 if n_iter <= 1 else 2e-3
    peak = float(np.max(np.abs(_f64(cpu)))) if cpu.size else 0.0
    return within(gpu, cpu, tol * peak)


def mel_to_stft_rule(run: Run, kind: str, index: int, gpu: np.ndarray, cpu: np.ndarray) -> Optional[str]:
    """The spec's cases have a unique NNLS minimiser, which the spec holds the CPU to within its
    forward tolerance of (scipy's active-set solution); the GPU is held to the same distance from
    the CPU (its solver replays the CPU's, but for the device's pow and rounding)."""
    tol = run.spec.forward_tolerance
    return within(gpu, cpu, tol[cpu.dtype.name] if isinstance(tol, dict) else tol)


RULES: Dict[str, Rule] = {
    "mfcc_to_mel": mfcc_to_mel_rule,
    "griffin_lim": griffin_lim_rule,
    "mel_to_stft": mel_to_stft_rule,
    "swish": swish_rule,
    "yolo_decode": yolo_decode_rule,
    "conv2d_transpose": conv2d_transpose_rule,
    "bias_leaky_relu": bias_leaky_relu_rule,
}


# --- cases beyond the specs' own ------------------------------------------------------------------


def _pair(sa, sb, seed):
    return (Sample(sa, seed=seed, scale=4, specials=True), Sample(sb, seed=seed + 1, scale=4, specials=True))


def _bn(shape, seed):
    c = shape[-1]
    return (Sample(shape, seed=seed), Sample((c,), seed=seed + 1, dtype="float32"),
            Sample((c,), seed=seed + 2, dtype="float32"))


def _conv(name, x, f, out, strides, integer, **attrs):
    samples = (Sample(x, seed=5, scale=3, integer_valued=integer), Sample(f, seed=6, scale=3, integer_valued=integer))
    return Case(name + (" integer-valued" if integer else " random"), samples,
                dict(output_shape=out, strides=strides, **attrs),
                dtypes=None if integer else (tf.float32, tf.float64))


EXTRA_CASES: Dict[str, Tuple[Case, ...]] = {
    "leaky_relu": (Case("empty batch [0, 5]", (Sample((0, 5)),), {"alpha": 0.2}),),
    "leaky_relu_with_mask": (Case("empty batch [0, 3, 2]", (Sample((0, 3, 2)),), {"alpha": 0.1}),),
    "clipped_identity": (Case("empty batch [0, 3]", (Sample((0, 3)),), {"clip_min": -1.0, "clip_max": 1.0}),),
    "swish": (Case("empty batch [0, 7]", (Sample((0, 7)),)),),
    "bias_leaky_relu": (
        Case("empty batch [0, 4, 3]", (Sample((0, 4, 3)), Sample((3,), seed=1)), {"alpha": 0.2}),
        Case("specials in the bias", (Sample((5, 6), seed=2), Sample((6,), seed=3, specials=True)), {"alpha": 0.3}),
    ),
    # Broadcasts over dimensions of size 1 only (nothing is reduced: the gradient is the plain
    # product, -0 included), a real 2-term reduction, an empty operand broadcast to a non-empty
    # gradient (zeros), and a reduction over zero elements.
    "element_mul": (
        Case("[1, 1]*[1]", _pair((1, 1), (1,), 40)),
        Case("[1]*[1, 1, 1]", _pair((1,), (1, 1, 1), 42)),
        Case("[1, 1, 1]*[]", _pair((1, 1, 1), (), 44)),
        Case("[1, 3]*[1, 1, 3]", _pair((1, 3), (1, 1, 3), 46)),
        Case("[2, 1]*[1, 1]", _pair((2, 1), (1, 1), 48)),
        Case("empty batch [0, 1, 3]*[4, 1]", _pair((0, 1, 3), (4, 1), 50)),
        Case("[3, 0]*[1, 1]", _pair((3, 0), (1, 1), 52)),
        Case("[9, 65]*[65] wide", _pair((9, 65), (65,), 54)),
    ),
    "conv2d_transpose": tuple(
        _conv(*c, integer=integer) for integer in (True, False) for c in (
            ("NCHW s2 SAME", (2, 3, 5, 4), (3, 3, 2, 3), [2, 2, 9, 8], 2, ),
            ("NHWC dilation 2", (2, 6, 5, 4), (5, 5, 3, 4), [2, 6, 5, 3], 1),
            ("empty batch NHWC", (0, 5, 5, 2), (3, 3, 4, 2), [0, 10, 10, 4], 2),
        )
    ),
    "fused_batch_norm_leaky_relu": (
        Case("empty batch [0, 3]", _bn((0, 3), 1), dict(epsilon=1e-3, alpha=0.1)),
        Case("specials", (Sample((6, 5, 4), seed=3, specials=True),) + _bn((6, 5, 4), 3)[1:], dict(alpha=0.2)),
    ),
    "resize": (Case("empty batch [0, 5, 7, 3]", (Sample((0, 5, 7, 3)),), dict(size=[11, 4])),),
}
# The NCHW and dilated cases above give data_format / dilations.
EXTRA_CASES["conv2d_transpose"] = tuple(
    dataclasses.replace(c, attrs=dict(c.attrs, data_format="NCHW")) if c.name.startswith("NCHW")
    else dataclasses.replace(c, attrs=dict(c.attrs, dilations=2)) if "dilation" in c.name else c
    for c in EXTRA_CASES["conv2d_transpose"]
)


# --- the generic comparison ------------------------------------------------------------------------


def _compare(device: str, spec: OpSpec, case: Case, dtype: tf.DType, tensors: List[tf.Tensor],
             gradient: bool, variants: Sequence[str], seed: int) -> List[str]:
    """Forward (and, where asked, gradients in each variant) on the device against the CPU; the
    list of failures."""
    rule = RULES.get(spec.name, exact_rule)
    failures: List[str] = []
    where = f"{spec.name} {dtype.name} {case.name}"
    graph = device == SIM  # the reference the same way: a graph's errors are not eager ones
    cpu, cpu_error = _outcome(lambda: _forward("/CPU:0", spec, case, tensors, graph=graph))
    gpu, gpu_error = _outcome(lambda: _forward(device, spec, case, tensors))
    if cpu_error or gpu_error:
        if (cpu_error or "").split(":")[0] != (gpu_error or "").split(":")[0]:
            failures.append(f"{where}: the CPU gives {cpu_error or 'results'}, the device {gpu_error or 'results'}")
        return failures
    run = Run(spec, case, dtype, list(tensors), cpu_forward=cpu)
    if len(gpu) != len(cpu):
        return [f"{where}: {len(gpu)} outputs against {len(cpu)}"]
    for i, (g, c) in enumerate(zip(gpu, cpu)):
        problem = rule(run, "forward", i, g, c)
        if problem:
            failures.append(f"{where} forward output {i}:\n{problem}")
    if not gradient:
        return failures
    integer = all(s.integer_valued for s in case.inputs)
    for v, variant in enumerate(variants):
        args = list(tensors)
        wrt = _wrt(case, args)
        if not wrt:
            break
        change = VARIANTS[variant][1]
        if change is not None:
            args = [(_sprinkled(t, seed + 100 + i) if change == "sprinkle" else change(t)) if i in wrt else t
                    for i, t in enumerate(args)]
            cpu_out = _forward("/CPU:0", spec, case, args, graph=graph)
        else:
            cpu_out = cpu
        outputs = [o for o in cpu_out if _differentiable(tf.as_dtype(o.dtype))]
        ups = _upstreams(outputs, [tf.as_dtype(o.dtype) for o in outputs], variant, seed + 10 * v, integer)
        grun = Run(spec, case, dtype, args, wrt=wrt, upstreams=ups, cpu_forward=cpu_out)
        grun.cache["integer_upstream"] = integer
        cpu_g = _gradients("/CPU:0", spec, case, args, wrt, ups, graph=graph)
        gpu_g = _gradients(device, spec, case, args, wrt, ups)
        grun.cpu_grads = cpu_g
        for k, (g, c) in enumerate(zip(gpu_g, cpu_g)):
            if (g is None) != (c is None):
                failures.append(f"{where} gradient {k} ({variant}): None on one device only")
            elif g is not None:
                problem = rule(grun, "gradient", k, g, c)
                if problem:
                    failures.append(f"{where} gradient of input {wrt[k]} ({variant}):\n{problem}")
    return failures


def _fail(failures: List[str]) -> None:
    if failures:
        pytest.fail(f"{len(failures)} mismatch(es):\n" + "\n".join(failures[:12]), pytrace=False)


GRADIENT_VARIANTS = tuple(VARIANTS)
ids = [s.name for s in GPU_SPECS]


# --- the tests -------------------------------------------------------------------------------------


def test_every_gpu_op_has_device_kernels_and_all_are_exercised(gpu_device):
    """Each op in OP_NAMES minus CPU_ONLY has kernels on the device, and every registered device
    kernel (op and dtype) is run by the comparisons below (a kernel nothing runs is untested);
    every op module with a GPU op has an empty-batch case."""
    kind = _device_type(gpu_device)
    traced = []
    for spec in GPU_SPECS:
        for dtype in spec.dtypes:
            traced += _support(spec, dtype, kind).nodes
    traced += _integer_gradient_nodes(kind)
    problems = []
    for name in GPU_OP_NAMES:
        registered = _device_kernels(name, kind)
        if not registered:
            problems.append(f"{name}: no {kind} kernel registered (is the build's GPU binding missing?)")
        for kernel in registered:
            if not any(n.op == name and _satisfies(n, kernel) for n in traced):
                constraint = {c.name: [tf.as_dtype(t).name for t in c.allowed_values.list.type]
                              for c in kernel.constraint}
                problems.append(f"{name} {kind} kernel {constraint} is run by no comparison")
    for spec in GPU_SPECS:
        if not _device_dtypes(spec, gpu_device):
            problems.append(f"{spec.name}: no dtype of the spec runs on {kind}")
    for group in {s.group for s in GPU_SPECS}:
        if not any(0 in s.shape for spec in GPU_SPECS if spec.group == group for c in _cases(spec)
                   for s in c.inputs):
            problems.append(f"{group}: no case with an empty dimension")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("name", ids)
def test_forward_matches_cpu(gpu_device, name):
    spec = BY_NAME[name]
    dtypes = _device_dtypes(spec, gpu_device)
    assert dtypes, f"no dtype of {name} runs on {gpu_device}"
    failures = []
    for dtype in dtypes:
        for n, case in enumerate(_cases(spec)):
            if case.dtypes is not None and dtype not in case.dtypes:
                continue
            failures += _compare(gpu_device, spec, case, dtype, _host(case.tensors, dtype), False, (), 1000 + n)
    _fail(failures)


@pytest.mark.parametrize("name", [s.name for s in GPU_SPECS if s.differentiable])
def test_gradient_matches_cpu(gpu_device, name):
    """Gradients through the tape, with the IEEE special values in the upstream gradients, in the
    forward inputs, and upstream gradients of negative zeros only."""
    spec = BY_NAME[name]
    dtypes = _device_dtypes(spec, gpu_device, gradient=True)
    assert dtypes, f"the gradient of {name} runs on {gpu_device} in no dtype"
    failures = []
    for dtype in dtypes:
        for n, case in enumerate(_cases(spec) + tuple(spec.gradient_cases)):
            if case.dtypes is not None and dtype not in case.dtypes:
                continue
            tensors = _host(case.tensors, dtype)
            if not _wrt(case, tensors):
                continue
            failures += _compare(gpu_device, spec, case, dtype, tensors, True, GRADIENT_VARIANTS, 2000 + 37 * n)
    _fail(failures)


def _integer_gradient_calls(dtype: tf.DType):
    """The gradient op of element_mul on integers, which no tape reaches (integers have no
    gradient there) but which has kernels: called directly, broadcast and not."""
    shapes = (((5, 7), (5, 7)), ((3, 1, 4), (5, 1)), ((6,), ()))
    for k, (sa, sb) in enumerate(shapes):
        out = np.broadcast_shapes(sa, sb)
        g, a, b = (_host(lambda s=s, i=i: Sample(s, seed=60 + 3 * k + i).make(dtype)) for i, s in
                   enumerate((out, sa, sb)))
        yield f"{list(sa)}*{list(sb)}", (g, a, b)


def _integer_gradient_dtypes(device_type: str) -> List[tf.DType]:
    dtypes = set()
    for kernel in _device_kernels("Opforge>ElementMulGrad", device_type):
        dtypes |= {tf.as_dtype(t) for c in kernel.constraint for t in c.allowed_values.list.type}
    return sorted((d for d in dtypes if d.is_integer), key=lambda d: d.name)


def _integer_gradient_nodes(device_type: str) -> list:
    nodes = []
    for dtype in _integer_gradient_dtypes(device_type):
        for _, tensors in _integer_gradient_calls(dtype):
            nodes += _opforge_nodes(lambda g, a, b: lib().opforge_element_mul_grad(g, a, b), tensors)
    return nodes


def test_integer_gradient_op_matches_cpu(gpu_device):
    integer = _integer_gradient_dtypes(_device_type(gpu_device))
    if not integer:
        pytest.skip(f"ElementMulGrad has no integer kernel on {gpu_device}")
    failures = []
    for dtype in integer:
        for name, tensors in _integer_gradient_calls(dtype):
            results = []
            for device in ("/CPU:0", gpu_device):
                out = _run(device, lambda *xs: list(lib().opforge_element_mul_grad(*xs)), *_on_device(device, tensors))
                _assert_on(device, out)
                results.append([o.numpy() for o in out])
            for k, (c, g) in enumerate(zip(*results)):
                problem = same_bits(g, c)
                if problem:
                    failures.append(f"ElementMulGrad {dtype.name} {name} output {k}:\n{problem}")
    _fail(failures)


# --- past the grid: every kernel's grid-stride loop -------------------------------------------------


def _big(shape, dtype, seed, scale=2.0, integer=False, specials=True) -> tf.Tensor:
    """A large host tensor, quickly: float32 normals (or integers in [-3, 3]), with the IEEE
    special values first where it has many elements and `specials`."""
    n = int(np.prod(shape))
    rng = np.random.default_rng(seed)
    v = (rng.integers(-3, 4, n).astype(np.float32) if integer
         else rng.standard_normal(n, dtype=np.float32) * np.float32(scale))
    if specials and n >= 64:
        v[:len(IEEE_SPECIALS)] = IEEE_SPECIALS
    with tf.device("/CPU:0"):
        return tf.cast(tf.constant(v.reshape(shape)), dtype)


def _large(name: str, dtype: tf.DType, build: bool = True):
    """(spec name, case, host tensors or None) of a call past the grid; `build=False` skips
    making the data (the case alone gives the shapes to trace)."""
    n = GRID_STRIDE
    side = 4099  # rows x columns past the grid, neither a multiple of a vector width
    make: Callable[[], list]
    if name in ("leaky_relu", "leaky_relu_with_mask", "clipped_identity", "swish"):
        attrs = {"leaky_relu": dict(alpha=0.2), "leaky_relu_with_mask": dict(alpha=-0.3),
                 "clipped_identity": dict(clip_min=-1.0, clip_max=1.5, leak=0.1), "swish": {}}[name]
        spec_name, case = name, Case(f"[{n}]", (Sample((n,)),), attrs)
        make = lambda: [_big((n,), dtype, 1, scale=4.0)]  # noqa: E731
    elif name.startswith("element_mul"):
        sa, sb = {"element_mul": ((n,), (n,)), "element_mul row": ((4097, side), (side,)),
                  "element_mul column": ((side, 4097), (side, 1)), "element_mul scalar": ((n,), ())}[name]
        spec_name, case = "element_mul", Case(f"{list(sa)}*{list(sb)}", (Sample(sa), Sample(sb)))
        make = lambda: [_big(sa, dtype, 5), _big(sb, dtype, 6)]  # noqa: E731
    elif name == "bias_leaky_relu":
        spec_name, case = name, Case("[65537, 257]", (Sample((65537, 257)), Sample((257,))), dict(alpha=0.1))
        make = lambda: [_big((65537, 257), dtype, 7), _big((257,), dtype, 8)]  # noqa: E731
    elif name.startswith("conv2d_transpose"):
        if name == "conv2d_transpose":  # an output past the grid
            x, f, out = (1, 1025, 1025, 4), (3, 3, 4, 4), [1, 2050, 2050, 4]
        else:  # a filter of more than 2^20 elements: the filter gradient's loop over the filter
            x, f, out = (1, 4, 4, 768), (3, 3, 512, 768), [1, 8, 8, 512]
        spec_name = "conv2d_transpose"
        case = Case(f"{list(x)}->{out} filter {list(f)}",
                    (Sample(x, integer_valued=True), Sample(f, integer_valued=True)),
                    dict(output_shape=out, strides=2, padding="SAME"))
        # Special values in the input only: one in the filter would reach every output.
        make = lambda: [_big(x, dtype, 9, integer=True), _big(f, dtype, 10, integer=True, specials=False)]  # noqa: E731
    elif name == "fused_batch_norm_leaky_relu":
        spec_name, case = name, Case("[65537, 256]", _bn((65537, 256), 0), dict(alpha=0.1))
        make = lambda: [_big((65537, 256), dtype, 11), _big((256,), tf.float32, 12),  # noqa: E731
                        _big((256,), tf.float32, 13)]
    elif name == "resize_bilinear":
        shape = (1, 2049, 2049, 1)
        spec_name = name
        case = Case("[1, 2049, 2049, 1]->[4100, 4100]", (Sample(shape),),
                    dict(size=[4100, 4100], half_pixel_centers=True))
        make = lambda: [_big(shape, dtype, 14)]  # noqa: E731
    elif name == "resize_bilinear_grad":
        grads, image = (1, 2049, 2049, 1), (1, 4097, 4097, 1)
        spec_name = name
        case = Case("[1, 4097, 4097, 1]<-[1, 2049, 2049, 1]",
                    (Sample(grads, dtype="float32"), Sample(image, differentiable=False)), dict(align_corners=True))
        make = lambda: [_big(grads, tf.float32, 15), _host(lambda: tf.zeros(image, dtype))]  # noqa: E731
    elif name == "yolo_decode":
        shape = (1, 2049, 4097, 2 * 6)  # 16.8M boxes of one class
        spec_name = name
        case = Case("[1, 2049, 4097, 12] A=2 C=1", (Sample(shape), Sample((2, 2), differentiable=False)),
                    dict(num_classes=1, input_size=(416, 832)))
        make = lambda: [_big(shape, dtype, 16),  # noqa: E731
                        _host(lambda: tf.constant([[10.0, 13.0], [33.0, 23.0]], dtype))]
    elif name == "yolo_targets":
        from opforge.ops.yolo_targets import YOLOV3_MASKS, YOLOV3_NORMALIZED_ANCHORS, random_boxes

        spec_name = name
        case = Case(f"[1, {n}] boxes", (Sample((1, n, 4)), Sample((1, n), dtype="int32"), Sample((9, 2))),
                    dict(anchor_masks=YOLOV3_MASKS, grid_sizes=(13, 26, 52)))

        def make():
            boxes, classes = random_boxes(1, n, seed=3, padding=7)
            with tf.device("/CPU:0"):
                return [tf.constant(boxes, dtype), tf.constant(classes, tf.int32),
                        tf.constant(YOLOV3_NORMALIZED_ANCHORS, dtype)]
    else:
        raise KeyError(name)
    return spec_name, case, make() if build else None


LARGE = (
    [(name, dt) for name in ("leaky_relu", "clipped_identity", "swish", "element_mul", "bias_leaky_relu")
     for dt in (tf.float32, tf.float16)]
    + [(name, tf.float32) for name in ("leaky_relu_with_mask", "element_mul row", "element_mul column",
                                       "element_mul scalar", "conv2d_transpose", "conv2d_transpose filter",
                                       "fused_batch_norm_leaky_relu", "resize_bilinear", "resize_bilinear_grad",
                                       "yolo_decode", "yolo_targets")]
)


# Cases whose gradients sum over many elements: also with finite values only (a NaN would make
# every sum NaN on both devices and the comparison empty).
LARGE_REDUCING = {"element_mul", "element_mul row", "element_mul column", "element_mul scalar", "bias_leaky_relu",
                  "conv2d_transpose", "conv2d_transpose filter", "fused_batch_norm_leaky_relu",
                  "resize_bilinear", "resize_bilinear_grad"}


@pytest.mark.parametrize("name,dtype", LARGE, ids=[f"{n}-{d.name}" for n, d in LARGE])
def test_past_the_grid_matches_cpu(gpu_device, name, dtype):
    _skip_on_sim(gpu_device, "sized for a GPU's grid (make cuda-test runs the loops at the SIMT grid)")
    spec_name, case, tensors = _large(name, dtype)
    spec = BY_NAME[spec_name]
    support = _support(spec, dtype, _device_type(gpu_device))
    assert support.forward, f"{spec_name} {dtype.name} has no kernel on {gpu_device}"
    variants = ("as sampled", "finite") if name in LARGE_REDUCING else ("as sampled",)
    _fail(_compare(gpu_device, spec, case, dtype, tensors, support.gradient, variants, 3000))


def _specs_of(case: Case, dtype: tf.DType) -> List[tf.TensorSpec]:
    return [tf.TensorSpec(s.shape, tf.as_dtype(s.dtype) if s.dtype is not None else dtype) for s in case.inputs]


def test_cases_past_the_grid_run_every_gpu_op(gpu_device):
    """The cases past the grid reach every GPU op (forward and gradient ops) on the device."""
    _skip_on_sim(gpu_device, "the cases past the grid are the GPU's")
    kind = _device_type(gpu_device)
    seen = set()
    for name, dtype in LARGE:
        spec_name, case, _ = _large(name, dtype, build=False)
        spec = BY_NAME[spec_name]
        specs = _specs_of(case, dtype)
        nodes = _opforge_nodes(_forward_fn(spec, case), specs)
        if spec.differentiable:
            wrt = [i for i, (s, t) in enumerate(zip(case.inputs, specs))
                   if s.differentiable and _differentiable(t.dtype)]
            nodes += _opforge_nodes(_gradient_fn(spec, case, wrt), specs)
        seen |= {n.op for n in nodes if _has_kernel(n, kind)}
    assert set(GPU_OP_NAMES) <= seen, f"no case past the grid runs {sorted(set(GPU_OP_NAMES) - seen)} on {kind}"


# --- past 2^31 elements --------------------------------------------------------------------------------


def _count_differing_bits(a: tf.Tensor, b: tf.Tensor) -> int:
    """Groups of four float16 elements whose bits differ, counted on the device (the tensors are
    too large to copy; four at a time as one int64, to keep the temporaries small)."""
    a64, b64 = (tf.bitcast(tf.reshape(t, [-1, 4]), tf.int64) for t in (a, b))
    differ = tf.not_equal(a64, b64)
    if not bool(tf.reduce_any(differ).numpy()):
        return 0
    return int(tf.math.count_nonzero(differ).numpy())


def test_past_2_to_the_31_elements(gpu_device):
    """float16 element-wise kernels (the vectorised 16-bit path) over 2^31 + 2^15 elements, 4 GiB
    per tensor: a period of 65537 values tiled, so that every element's expected bits are the
    CPU's result on one period, tiled the same way. NaN-free (its bits may differ by device)."""
    period = 65537  # prime: no vector width or block size divides it
    _skip_on_sim(gpu_device, "4 GiB tensors")
    reps = 32768 if _is_gpu(gpu_device) else 4  # the dry run: the same lines, small (a multiple of 4)
    with tf.device("/CPU:0"):
        rng = np.random.default_rng(31)
        values = rng.standard_normal(period).astype(np.float32) * 3
        values[:4] = (0.0, -0.0, np.inf, -np.inf)
        p = tf.constant(values, tf.float16)
        q = tf.constant(rng.standard_normal(period).astype(np.float32), tf.float16)
        scale = tf.constant([-1.5], tf.float16)
        expected = {"leaky_relu": opforge.ops.leaky_relu(p, 0.2),
                    "leaky_relu_grad": lib().opforge_leaky_relu_grad(q, p, alpha=0.2),
                    "element_mul": opforge.ops.element_mul(p, scale),
                    "element_mul_grad_a": lib().opforge_element_mul_grad(q, p, scale, need_grad_b=False)[0]}
    with tf.device(gpu_device):
        x = tf.tile(p, [reps])
        g = tf.tile(q, [reps])
        assert int(x.shape[0]) == period * reps
        got = {"leaky_relu": lambda: opforge.ops.leaky_relu(x, 0.2),
               "leaky_relu_grad": lambda: lib().opforge_leaky_relu_grad(g, x, alpha=0.2),
               "element_mul": lambda: opforge.ops.element_mul(x, scale),
               "element_mul_grad_a": lambda: lib().opforge_element_mul_grad(g, x, scale, need_grad_b=False)[0]}
        wrong = {}
        for name, fn in got.items():
            y = fn()
            _assert_on(gpu_device, y)
            wrong[name] = _count_differing_bits(y, tf.tile(expected[name], [reps]))
            del y
    assert not any(wrong.values()), f"groups of 4 elements that differ from the CPU's, of {period * reps // 4}: {wrong}"


# --- what the binding adds: host memory, device int32, buffers forwarded in a graph ------------------


def test_host_memory_inputs(gpu_device):
    """output_shape (Conv2DTranspose) and size (ResizeBilinear) are HostMemory inputs: given as
    a list, as int32 and int64 tensors made on the device (int64 lives in device memory there:
    TensorFlow copies it to the host), and computed inside a graph on the device."""
    with tf.device("/CPU:0"):
        x = _values((2, 5, 6, 3), tf.float32, 1, integer=True, specials=False)
        f = _values((4, 4, 5, 3), tf.float32, 2, integer=True, specials=False)
        images = _values((2, 5, 7, 3), tf.float32, 3)
        want_conv = opforge.ops.conv2d_transpose(x, f, [2, 10, 12, 5], 2).numpy()
        want_resize = opforge.ops.resize_bilinear(images, [9, 13], half_pixel_centers=True).numpy()
    with tf.device(_tf_device(gpu_device)):
        xd, fd, imd = _on_device(gpu_device, [x, f, images])
        shape32 = tf.constant([2, 10, 12, 5], tf.int32)
        shape64 = tf.identity(tf.constant([2, 10, 12, 5], tf.int64))
        size32 = tf.constant([9, 13], tf.int32)
    _assert_on(gpu_device, [shape32, shape64, size32])
    conv = lambda x, f, s: opforge.ops.conv2d_transpose(x, f, s, 2)  # noqa: E731
    resize = lambda im, s: opforge.ops.resize_bilinear(im, s, half_pixel_centers=True)  # noqa: E731
    convs = {"list": _run(gpu_device, lambda x, f: conv(x, f, [2, 10, 12, 5]), xd, fd),
             "int32 on the device": _run(gpu_device, conv, xd, fd, shape32),
             "int64 on the device": _run(gpu_device, conv, xd, fd, shape64),
             "computed in a graph": _run(gpu_device, lambda x, f: conv(
                 x, f, tf.cast(tf.shape(x), tf.int64) * tf.constant([1, 2, 2, 0], tf.int64)
                 + tf.constant([0, 0, 0, 5], tf.int64)), xd, fd, graph=True)}
    resizes = {"list": _run(gpu_device, lambda im: resize(im, [9, 13]), imd),
               "int32 on the device": _run(gpu_device, resize, imd, size32),
               "computed in a graph": _run(gpu_device, lambda im: resize(
                   im, tf.shape(im)[1:3] * 2 - tf.constant([1, 1])), imd, graph=True)}
    _assert_on(gpu_device, [convs, resizes])
    failures = []
    for how, y in convs.items():  # integer-valued: exact sums on both devices
        problem = within(y.numpy(), want_conv, 0.0)
        if problem:
            failures.append(f"conv2d_transpose, output_shape as {how}:\n{problem}")
    for how, y in resizes.items():
        problem = same_bits(y.numpy(), want_resize)
        if problem:
            failures.append(f"resize_bilinear, size as {how}:\n{problem}")
    _fail(failures)


def test_yolo_decode_anchors_are_host_memory(gpu_device):
    """yolo_decode's anchors are a HostMemory input on the GPU (checked there, then copied to
    the device on the op's stream, with no wait for the device): given as a list, as a tensor
    made on the device, and computed in a graph on the device, the forward and the gradient are
    the same bits; a NaN or non-positive anchor made on the device is the CPU's error."""
    with tf.device("/CPU:0"):
        features = _values((2, 5, 4, 3 * 7), tf.float32, 5, specials=False)
    rows = [[10.0, 13.0], [16.0, 30.0], [33.0, 23.0]]
    with tf.device(_tf_device(gpu_device)):
        (fd,) = _on_device(gpu_device, [features])
        on_device = tf.identity(tf.constant(rows))
    _assert_on(gpu_device, [on_device])

    def decode_and_grad(f, a):
        with tf.GradientTape() as tape:
            tape.watch(f)
            out = opforge.ops.yolo_decode(f, a, 2, (160, 128))
            loss = tf.reduce_sum(out.boxes) + tf.reduce_sum(out.class_scores)
        return list(out) + [tape.gradient(loss, f)]

    results = {"list": _run(gpu_device, lambda f: decode_and_grad(f, rows), fd),
               "on the device": _run(gpu_device, decode_and_grad, fd, on_device),
               "computed in a graph": _run(gpu_device, lambda f, a: decode_and_grad(f, a * 2.0 / 2.0), fd, on_device,
                                           graph=True)}
    _assert_on(gpu_device, results)
    failures = []
    want = [t.numpy() for t in results["list"]]
    for how, got in results.items():
        for k, (g, w) in enumerate(zip(got, want)):
            problem = same_bits(g.numpy(), w)
            if problem:
                failures.append(f"anchors as {how}, output {k}:\n{problem}")
    for bad, given in (([16.0, float("nan")], "[16, nan]"), ([0.0, 30.0], "[0, 30]")):
        with tf.device(_tf_device(gpu_device)):
            anchors = tf.identity(tf.constant([rows[0], bad, rows[2]]))
        with pytest.raises(tf.errors.InvalidArgumentError) as info:
            _run(gpu_device, lambda f, a: opforge.ops.yolo_decode(f, a, 2, (160, 128)).boxes, fd, anchors, graph=True)
        if f"YoloDecode: anchors[1] must be a finite, positive (width, height), got {given}" not in info.value.message:
            failures.append(f"bad anchors {bad} on the GPU: {info.value.message}")
    _fail(failures)


def test_int32_tensors_in_device_memory(gpu_device):
    """Int32 inputs and outputs that are not HostMemory live in device memory on the GPU:
    yolo_targets' classes made by a device op, yolo_decode's class indices read by device ops
    (a gather takes them from device memory; an int32 add runs on the host, so TensorFlow copies
    them there), in a graph and eagerly; against the CPU."""
    from opforge.ops.yolo_targets import YOLOV3_MASKS, YOLOV3_NORMALIZED_ANCHORS, random_boxes

    boxes, classes = random_boxes(3, 20, seed=9, padding=4)
    with tf.device("/CPU:0"):
        features = _values((2, 5, 4, 3 * 7), tf.float32, 4, specials=False)
        anchors = tf.constant([[10.0, 13.0], [16.0, 30.0], [33.0, 23.0]])
        host = [features, anchors, tf.constant(boxes, tf.float32), tf.constant(classes, tf.float32),
                tf.constant(YOLOV3_NORMALIZED_ANCHORS, tf.float32)]

    def pipeline(features, anchors, boxes, classes_as_float, target_anchors):
        d = opforge.ops.yolo_decode(features, anchors, 2, (160, 128))
        picked = tf.gather(d.class_scores, d.class_indices, batch_dims=2)
        shifted = d.class_indices + 1
        t = opforge.ops.yolo_targets(boxes, tf.cast(classes_as_float, tf.int32), target_anchors, YOLOV3_MASKS,
                                     (13, 26, 52))
        return [d.boxes, d.scores, d.class_indices, picked, shifted] + list(t)

    results = {}
    modes = ("graph",) if gpu_device == SIM else ("eager", "graph")  # cuda_sim runs in graphs only
    for device in ("/CPU:0", gpu_device):
        args = _on_device(device, host)
        for mode in modes:
            results[device, mode] = _run(device, pipeline, *args, graph=mode == "graph")
            _assert_on(device, results[device, mode])
    failures = []
    decode = Case("pipeline", (Sample((2, 5, 4, 21)), Sample((3, 2))), dict(num_classes=2, input_size=(160, 128)))
    for mode in modes:
        cpu, gpu = ([t.numpy() for t in results[d, mode]] for d in ("/CPU:0", gpu_device))
        with tf.device("/CPU:0"):
            cpu_decode = [t.numpy() for t in opforge.ops.yolo_decode(features, anchors, 2, (160, 128))]
        run = Run(BY_NAME["yolo_decode"], decode, tf.float32, host[:2], cpu_forward=cpu_decode)
        for k, (g, c) in enumerate(zip(gpu, cpu)):
            if k < 3:  # boxes, scores, class indices: yolo_decode's own agreement
                problem = yolo_decode_rule(run, "forward", k, g, c)
            elif k == 3:  # the class scores picked by the indices: relative to themselves
                problem = within(g, c, _yolo_tolerance("float32", np.abs(_f64(c))))
            else:  # indices + 1 (random logits: no ties) and the targets
                problem = same_bits(g, c)
            if problem:
                failures.append(f"{mode} output {k}:\n{problem}")
    _fail(failures)


def _chain(x, y, s, bias, ops=lambda op: op):
    """Element-wise GPU ops in a row, each (but the first) free to write into its input's buffer
    (`ops` wraps each op's call)."""
    a = ops(opforge.ops.element_mul)(x, y)
    b = ops(lambda a: opforge.ops.leaky_relu(a, 0.2))(a)
    c = ops(opforge.ops.element_mul)(b, s)  # s broadcast along the rows
    d = ops(lambda c: opforge.ops.clipped_identity(c, -1.5, 1.5, 0.05))(c)
    e = ops(opforge.ops.swish)(d)
    return ops(lambda e, bias: opforge.ops.bias_leaky_relu(e, bias, 0.1))(e, bias)


def _train_chain(x, y, s, bias, upstream):
    """The chain and its gradients (TensorFlow's reduce_sum for the bias is left out: its
    order on the GPU is not fixed)."""
    with tf.GradientTape() as tape:
        tape.watch([x, y, s])
        out = _chain(x, y, s, bias)
    return [out] + tape.gradient(out, [x, y, s], output_gradients=upstream)


@pytest.mark.parametrize("dtype", [tf.float32, tf.float16], ids=["float32", "float16"])
def test_graph_chain_in_place_matches_eager(gpu_device, dtype):
    """In a tf.function TensorFlow hands an op an input buffer nobody else holds, and the op
    writes its output there; eagerly every output is a fresh buffer. The two must give the same
    bits on the device (the same kernels, in place and not)."""
    rows, cols = 257, 1031
    with tf.device("/CPU:0"):
        host = [_values((rows, cols), dtype, 20), _values((rows, cols), dtype, 21), _values((cols,), dtype, 22),
                _values((cols,), dtype, 23, specials=False), _values((rows, cols), dtype, 24)]
    args = _on_device(gpu_device, host)
    if gpu_device == SIM:
        # cuda_sim runs in graphs only: "eager" is each op in a graph of its own (fresh buffers),
        # forward only (the gradient of a function call is built outside the labelled graph).
        step = lambda op: lambda *xs: _run(SIM, op, *xs)  # noqa: E731
        eager = [_chain(*args[:4], ops=step)]
    else:
        eager = _run(gpu_device, _train_chain, *args)
    graph = _run(gpu_device, _train_chain, *args, graph=True)
    forward_only = _run(gpu_device, _chain, *args[:4], graph=True)
    _assert_on(gpu_device, [eager, graph, forward_only])
    failures = []
    pairs = list(zip(eager, graph)) + [(eager[0], forward_only)]
    for k, (e, g) in enumerate(pairs):
        problem = same_bits(g.numpy(), e.numpy())
        if problem:
            failures.append(f"result {k}, graph against eager:\n{problem}")
    _fail(failures)


def test_graph_chain_forwards_buffers_on_the_device(gpu_device):
    """The chain above really runs in place on the GPU: its peak memory is one buffer of the
    tensor's size, not two (TensorFlow forwarded the buffers; without forwarding each op holds
    its input and output at once)."""
    _skip_on_sim(gpu_device, "TensorFlow keeps memory statistics for GPUs only")
    if not _is_gpu(gpu_device):
        pytest.skip("dry run: TensorFlow keeps memory statistics for GPUs only")
    rows, cols = 4096, 4096
    nbytes = rows * cols * 4
    with tf.device(gpu_device):
        x, y = tf.random.normal([rows, cols]), tf.random.normal([rows, cols])
        s, bias = tf.random.normal([cols]), tf.random.normal([cols])
        fn = tf.function(lambda x, y, s, b: tf.reduce_sum(_chain(x, y, s, b)))
        fn(x, y, s, bias).numpy()  # traced and run once: later calls allocate only the chain
        tf.config.experimental.reset_memory_stats("GPU:0")
        before = tf.config.experimental.get_memory_info("GPU:0")["current"]
        fn(x, y, s, bias).numpy()
        peak = tf.config.experimental.get_memory_info("GPU:0")["peak"] - before
    assert peak < 1.5 * nbytes, (
        f"the chain's peak was {peak / 2**20:.0f} MiB for {nbytes / 2**20:.0f} MiB tensors: TensorFlow did not "
        "forward the buffers (so the in-place paths were not run by test_graph_chain_in_place_matches_eager)")


def test_no_silent_fallback_to_the_cpu(gpu_device):
    """With soft placement off (as in every test here), a dtype without a kernel on the device
    is an error, not a CPU run: so a result on the device came from the device's kernel."""
    kind = _device_type(gpu_device)
    registered = {t for k in _device_kernels("Opforge>ElementMul", kind)
                  for c in k.constraint for t in c.allowed_values.list.type}
    # Not int32 or int64: TensorFlow runs small integer ops on the host whatever is asked.
    missing = [d for d in _MODULES["element_mul"].DTYPES
               if d.as_datatype_enum not in registered and d not in (tf.int32, tf.int64)]
    if not missing:
        pytest.skip(f"every dtype of element_mul has a kernel on {gpu_device} (the dry run)")
    with tf.device("/CPU:0"):
        a = tf.ones([1000], missing[0])
    with pytest.raises((tf.errors.NotFoundError, tf.errors.InvalidArgumentError)):
        _run(gpu_device, opforge.ops.element_mul, a, a).numpy()


def test_gpu_benchmark_runs(gpu_device, tmp_path):
    """`opforge bench gpu` on one op, briefly: its rows ran on the device and have the times,
    the ratio and, for the element-wise cases, GB/s of the op, TensorFlow's kernel and the copy."""
    _skip_on_sim(gpu_device, "speed")
    from opforge.tools import gpu_bench

    path = tmp_path / "bench.json"
    rc = gpu_bench.main(["--device", _device_type(gpu_device), "--quick", "--budget", "0.02", "--json", str(path),
                         "leaky_relu"])
    assert rc == 0
    import json

    result = json.loads(path.read_text())
    rows = result["rows"]
    assert rows and all(r["on_device"] for r in rows), rows
    for r in rows:
        assert r["opforge_ms"] > 0 and r["tf_ms"] > 0 and r["ratio_vs_tf"] > 0, r
    copied = [r for r in rows if "copy_ms" in r]
    assert copied and all(r["opforge_GBps"] > 0 and r["copy_GBps"] > 0 for r in copied), rows
    assert {r["dtype"] for r in rows} >= {"float32", "float16"}
    assert result["machine"]["device"] == gpu_device


def test_xla_gpu_custom_calls_same_bits_as_the_gpu_kernels(gpu_device):
    """Under tf.function(jit_compile=True) on the GPU, the ops whose CUDA FFI handlers are
    registered (a CUDA build: `_xla.ffi_gpu_ops()`, common/xla_ffi.h) run those handlers, which
    run the same CUDA kernels as TensorFlow's GPU kernels: the same bits over every case of their
    specs (forward; the gradient ops' handlers are the same skeleton)."""
    from opforge.ops import _xla
    from opforge.ops.spec import bits_equal

    if _device_type(gpu_device) != "GPU":
        pytest.skip("the CUDA handlers run on a GPU only (this is the dry run on the CPU)")
    lib()
    expected_ops = {"Opforge>BiasLeakyRelu", "Opforge>Conv2DTranspose", "Opforge>Swish",
                    "Opforge>ResizeBilinear", "Opforge>FusedBatchNormLeakyRelu", "Opforge>MfccToMel"}
    assert expected_ops <= _xla.ffi_gpu_ops(), sorted(expected_ops - _xla.ffi_gpu_ops())
    groups = {_xla._snake_names.get(op, "") for op in _xla.ffi_gpu_ops()}
    failures = []
    for spec in (s for s in ops.SPECS if s.group in groups):
        for dtype in _device_dtypes(spec, gpu_device):
            for case in spec.cases:
                if case.dtypes is not None and dtype not in case.dtypes:
                    continue
                with tf.device(gpu_device):
                    tensors = [tf.identity(t) for t in case.tensors(dtype)]
                    want = spec.call(spec.op, case, tensors)
                    got = tf.function(lambda *t: spec.call(spec.op, case, t),
                                      jit_compile=True)(*tensors)
                for i, (w, g) in enumerate(zip(want, got)):
                    if not bits_equal(np.asarray(w), np.asarray(g)):
                        failures.append(f"{spec.name} {dtype.name} {case.name} output {i}")
    assert not failures, failures

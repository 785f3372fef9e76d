"""Op specs: everything an op promises, written once beside its wrapper.

Each op module (`opforge/ops/<op>.py`) ends with `SPECS = (OpSpec(...), ...)`: the dtypes, the
reference it is checked against, sample cases (shapes, attrs, edge values), tolerances, gradient
cases, speed cases and the bad inputs with the message fragments they must produce. `opforge
verify`, `opforge bench` and the generic tests (`tests/test_specs.py`) iterate over the specs,
and `opforge.ops.OP_NAMES` (used by `opforge doctor` and `make gpu-build-check`) over the
modules' OP_NAMES, so a new op adds no line to any of them.

This module defines the spec types and the checks every spec gets; it knows no op.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

# The first values of an input made with `specials=True` (float dtypes only).
SPECIAL_VALUES = (0.0, -0.0, math.inf, -math.inf, math.nan, 1e-30, -1e-30, 65504.0, -70000.0)


@dataclass(frozen=True)
class Sample:
    """How to make one input tensor of a case, in the dtype under test.

    Values are standard normal times `scale`, or integers in [-`scale`, `scale`] when
    `integer_valued`; integer dtypes get integers in [-`int_range`, `int_range`] (default: the
    dtype's whole range, so that products wrap); with `specials`, the first elements are
    SPECIAL_VALUES (float dtypes); `away_from_zero` pushes values off a kink (|x| >= that much);
    `values` gives the exact values instead, `fill` one value for all; complex dtypes get an
    imaginary part drawn like the real one. A `dtype` fixes the dtype whatever is under test
    (resize's float32 gradients); `differentiable=False` keeps gradient checks off this input
    (an input that only gives a shape); `ties=False` marks values that must not tie (NMS scores,
    whose tie order TensorFlow leaves unspecified): `specials` then puts in only the special
    values that tie with nothing (inf, -inf, NaN, 65504, -70000), not 0, -0 and +-1e-30.
    """

    shape: Tuple[int, ...]
    seed: int = 0
    scale: float = 1.0
    specials: bool = False
    integer_valued: bool = False
    int_range: Optional[int] = None
    away_from_zero: float = 0.0
    values: Optional[Sequence[Any]] = None
    fill: Optional[float] = None
    dtype: Any = None
    differentiable: bool = True
    ties: bool = True

    def numpy(self, dtype) -> np.ndarray:
        """The values, as a float64, complex128, int64 or uint64 array (before the cast to `dtype`)."""
        if self.values is not None or self.fill is not None:
            x = (np.array(self.values).reshape(self.shape) if self.values is not None
                 else np.full(self.shape, self.fill))
        elif dtype.is_integer:
            info = np.iinfo(dtype.as_numpy_dtype)
            low, high = info.min, info.max
            if self.int_range is not None:
                low, high = max(low, -self.int_range), min(high, self.int_range)
            # uint64's range does not fit NumPy's default int64 draws (the others keep them).
            kind = np.uint64 if dtype.as_numpy_dtype == np.uint64 else np.int64
            return np.random.default_rng(self.seed).integers(low, high, size=self.shape, endpoint=True, dtype=kind)
        else:
            rng = np.random.default_rng(self.seed)
            if self.integer_valued:
                x = rng.integers(-int(self.scale), int(self.scale), self.shape, endpoint=True) * 1.0
            else:
                x = np.asarray(rng.standard_normal(self.shape) * self.scale)  # an array for shape () too
            if self.away_from_zero:
                x = np.where(np.abs(x) < self.away_from_zero, np.where(x < 0, -1, 1) * 2 * self.away_from_zero, x)
        if dtype.is_complex and self.values is None and self.fill is None:
            # An imaginary part of its own (a second draw, so the real part is the real dtypes').
            imag = np.random.default_rng(self.seed + 7919).standard_normal(np.shape(x)) * self.scale
            if self.integer_valued:
                imag = np.round(imag)
            x = x + 1j * imag
        if self.specials and dtype.is_floating:
            x = np.array(x, dtype=np.float64)
            flat = x.reshape(-1)
            values = SPECIAL_VALUES if self.ties else tuple(v for v in SPECIAL_VALUES if abs(v) not in (0, 1e-30))
            n = min(flat.size, len(values))
            flat[:n] = values[:n]
        return x

    def make(self, dtype):
        import tensorflow as tf

        dtype = tf.as_dtype(self.dtype) if self.dtype is not None else dtype
        return tf.cast(tf.constant(self.numpy(dtype)), dtype)


@dataclass(frozen=True)
class Case:
    """One call: the tensor inputs (positional) and keyword arguments of the wrapper; `dtypes`
    narrows the spec's dtypes for this case."""

    name: str
    inputs: Tuple[Sample, ...]
    attrs: Mapping[str, Any] = field(default_factory=dict)
    dtypes: Optional[Tuple[Any, ...]] = None

    def tensors(self, dtype) -> list:
        return [s.make(dtype) for s in self.inputs]


@dataclass(frozen=True)
class BadInput:
    """A call (a Python expression, run in a child process with `tf`, `np`, `opforge` and `lib`
    in scope) and the error it must raise eagerly (`error`, the exception class's name), whose
    message must contain every fragment.

    Where the op replaces a TensorFlow function (the spec's `replaces`), the same call is also
    made to TensorFlow's function, eagerly and inside `tf.function`, and opforge must raise the
    exception class TensorFlow raises wherever TensorFlow refuses the call before a kernel runs
    (a TypeError for a Python value of the wrong type, a ValueError from a shape function...): a
    drop-in's callers catch its errors where they caught TensorFlow's. TensorFlow's call is
    `code` with the wrapper (`opforge.ops.<op>(`) replaced by `replaces`; `tf_code` gives it
    where it is written differently, and `tf_code=""` says that TensorFlow has no such call (an
    argument or a value only opforge takes). See `OpSpec.tensorflow_code`.
    """

    code: str
    fragments: Tuple[str, ...]
    error: str = "InvalidArgumentError"
    tf_code: Optional[str] = None


@dataclass
class SpeedRun:
    """What a speed case times: candidates by name ('opforge' and its rivals: 'tf',
    'py_function', 'copy'...), a label with the shapes, and the bytes an op call moves (at the
    dtype the case was set up in: 2 bytes an element in bfloat16)."""

    label: str
    candidates: Dict[str, Callable[[], object]]
    bytes_moved: Optional[int] = None


@dataclass(frozen=True)
class SpeedCase:
    """`setup(size, dtype)` builds a SpeedRun.

    `size` is the element count asked for on the command line, or None for the case's own
    default; cases at model shapes scale their batch to it (`scaled_batch`). A case that only
    shows a default size (the same op at 1K and at 1M elements) returns None when a size is
    asked for, so that no case runs twice.

    `dtype` (a tf.DType: tf.float32, or tf.bfloat16 under `opforge bench --dtype bfloat16`) is
    the dtype of the case's float inputs: make every float input tensor with `speed_normal` (or
    `tf.cast(..., dtype)` of what it made in float32), so that opforge and its TensorFlow
    rival(s) both compute in it, name it in the label where the label names a dtype, and count
    `bytes_moved` with `dtype.size`. A rival that cannot run in `dtype` casts to float32 and back
    (and says so in the label); a `copy` rival copies the bytes of `dtype`
    (`numpy_copy(n, dtype)`, below). Inputs that are not float values (class ids, the float32
    gradient of a float32-only output) keep their own dtype. `opforge bench` checks that the
    candidates' outputs are in `dtype` where the op's are, so a setup that ignores `dtype` fails
    loudly rather than timing float32 under a bfloat16 label.

    `dtypes`: the float dtypes the case can be set up in (None: its op spec's dtypes); `opforge
    bench` leaves out, with a line saying so, a case asked for in any other dtype. A case with no
    float input (integers only) says `(tf.float32,)`: the default run keeps it, a bfloat16 run
    leaves it out. `max_repeats` caps the rounds of slow cases."""

    setup: Callable[[Optional[int], Any], Optional[SpeedRun]]
    max_repeats: Optional[int] = None
    dtypes: Optional[Tuple[Any, ...]] = None


@dataclass(frozen=True, repr=False)
class OpSpec:
    """One op's promises. `op` and `reference` take the same arguments (a case's tensors, then
    its attrs) and return a tensor or a tuple of tensors.

    - dtypes: the dtypes every case runs in (a Sample with a fixed dtype keeps its own);
    - cases: the forward checks, against `reference` (named `reference_name`); within
      `forward_tolerance` (0: bit for bit), one number or a {dtype name: tolerance} mapping
      (an op exact in float32 but rounded once where TensorFlow rounds twice in half, say);
    - gradient_cases: float64 (unless a Sample fixes its dtype) checks of the C++ gradient against
      a numerical one (`tf.test.compute_gradient`, step `gradient_delta`), of output
      `gradient_output` when the op has several;
    - determinism_case: a call large enough to be split across threads (forward and gradient
      must be the same bits with 1 and 2 intra-op threads); defaults to the last case;
    - speed: the benchmarks (`opforge bench`); the first is verify's speed column;
    - bad_inputs: name -> BadInput;
    - differentiable: False for an op without a gradient (registered with tf.no_gradient: NMS,
      target assignment); it then has no gradient cases;
    - exact_reference: the answer for inputs holding inf and NaN where `reference` is not exact
      there (TensorFlow's convolutions multiply padding as 0 x inf), in TensorFlow ops so that
      its gradient is exact too; None: `reference` is exact (and, for a differentiable op,
      written in TensorFlow ops).
    - replaces: the TensorFlow function `op` is a drop-in for, as code (`"tf.nn.leaky_relu"`),
      which takes the same arguments: every bad input is made to it too and must raise the same
      exception class (BadInput); None for an op TensorFlow has no function for.
    """

    name: str
    op: Callable[..., Any]
    reference: Callable[..., Any]
    reference_name: str
    dtypes: Tuple[Any, ...]
    cases: Tuple[Case, ...]
    forward_tolerance: Union[float, Mapping[str, float]] = 0.0
    gradient_cases: Tuple[Case, ...] = ()
    gradient_tolerance: float = 1e-6
    gradient_delta: float = 1e-6
    gradient_output: int = 0
    determinism_case: Optional[Case] = None
    speed: Tuple[SpeedCase, ...] = ()
    bad_inputs: Mapping[str, BadInput] = field(default_factory=dict)
    differentiable: bool = True
    exact_reference: Optional[Callable[..., Any]] = None
    replaces: Optional[str] = None

    def __repr__(self) -> str:
        return f"OpSpec({self.name!r})"

    @property
    def group(self) -> str:
        """The op module's short name ('resize_bilinear' for its forward and gradient specs)."""
        return self.op.__module__.rsplit(".", 1)[-1]

    def tensorflow_code(self, bad: BadInput) -> Optional[str]:
        """The same call as `bad` to the TensorFlow function the op replaces, or None where there
        is none: the op replaces no TensorFlow function, `bad` says TensorFlow has no such call,
        or `bad` does not call the wrapper (a raw op, another wrapper of the module)."""
        if bad.tf_code is not None:
            return bad.tf_code or None
        wrapper = f"opforge.ops.{self.op.__name__}("
        if self.replaces is None or wrapper not in bad.code:
            return None
        return bad.code.replace(wrapper, f"{self.replaces}(")

    def tolerance(self, dtype) -> float:
        """The forward tolerance of one dtype."""
        if isinstance(self.forward_tolerance, Mapping):
            return self.forward_tolerance[dtype.name]
        return self.forward_tolerance

    def call(self, fn: Callable[..., Any], case: Case, tensors: Sequence[Any]) -> List[Any]:
        """Calls `fn` (the op or the reference) on a case; always returns a list of outputs."""
        out = fn(*tensors, **case.attrs)
        return list(out) if isinstance(out, (tuple, list)) else [out]


# --- the checks every spec gets ------------------------------------------------------------------


def max_error(actual, expected) -> float:
    """max |actual - expected| as float64; NaN equals NaN; different shapes are infinitely off."""
    # .numpy() first: a 0-d EagerTensor's __array__ gives a NumPy scalar, which np.asarray
    # refuses unless a dtype is asked for (and float64 would drop an imaginary part).
    a, e = (np.asarray(x.numpy() if hasattr(x, "numpy") else x) for x in (actual, expected))
    if a.dtype.kind == "c" or e.dtype.kind == "c":  # the worse of the real and imaginary parts
        if a.shape != e.shape:
            return math.inf
        a, e = a.astype(np.complex128), e.astype(np.complex128)
        return max(max_error(a.real, e.real), max_error(a.imag, e.imag))
    a = a.astype(np.float64)
    e = e.astype(np.float64)
    if a.shape != e.shape:
        return math.inf
    same = (a == e) | (np.isnan(a) & np.isnan(e))
    if same.all():
        return 0.0
    # np.where, not item assignment: a - e of 0-d arrays is a NumPy scalar.
    diff = np.where(same, 0.0, np.abs(a - e))
    return float(np.nan_to_num(diff, nan=np.inf).max())


def bits_equal(a, b) -> bool:
    """Exact equality of two arrays of one dtype: every value identical, the sign of zero
    included; any NaN equals any NaN (vectorised and scalar code may make different NaNs)."""
    a = np.asarray(a)
    b = np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind in "iub":
        return bool(np.array_equal(a, b))
    if a.dtype.kind == "c":
        return bits_equal(a.real, b.real) and bits_equal(a.imag, b.imag)
    a64 = a.astype(np.float64)
    b64 = b.astype(np.float64)
    same = (a64 == b64) & (np.signbit(a64) == np.signbit(b64))
    return bool((same | (np.isnan(a64) & np.isnan(b64))).all())


def forward_errors(spec: OpSpec):
    """Yields (dtype, case, outputs, reference outputs) for every dtype and case."""
    import tensorflow as tf

    for dtype in spec.dtypes:
        for case in spec.cases:
            if case.dtypes is not None and dtype not in case.dtypes:
                continue
            tensors = case.tensors(dtype)
            ours = spec.call(spec.op, case, tensors)
            with tf.device("/CPU:0"):  # the claim is TensorFlow's CPU result, on any device
                theirs = spec.call(spec.reference, case, tensors)
            yield dtype, case, ours, theirs


def forward_error(spec: OpSpec) -> Tuple[float, bool]:
    """The largest error against the reference over every dtype, case and output, and whether
    every dtype's error is within its tolerance."""
    worst, within = 0.0, True
    for dtype, _, ours, theirs in forward_errors(spec):
        if len(ours) != len(theirs):
            return math.inf, False
        errors = [max_error(o, t) for o, t in zip(ours, theirs)]
        worst = max([worst] + errors)
        if spec.tolerance(dtype) == 0:  # bit for bit: the sign of zero counts too
            within = within and all(bits_equal(o.numpy(), t.numpy()) for o, t in zip(ours, theirs))
        else:
            within = within and max(errors, default=0.0) <= spec.tolerance(dtype)
    return worst, within


def gradient_error(spec: OpSpec, case: Case) -> float:
    """max |C++ gradient - numerical gradient| of one gradient case (float64 by default)."""
    import tensorflow as tf

    tensors = case.tensors(tf.float64)
    wrt = [i for i, s in enumerate(case.inputs) if s.differentiable]
    if not wrt:
        raise ValueError(f"{spec.name}: gradient case {case.name!r} has no differentiable input")

    def fn(*xs):
        args = list(tensors)
        for i, x in zip(wrt, xs):
            args[i] = x
        return spec.call(spec.op, case, args)[spec.gradient_output]

    theoretical, numerical = tf.test.compute_gradient(
        fn, [tensors[i] for i in wrt], delta=spec.gradient_delta
    )
    return max(max_error(t, n) for t, n in zip(theoretical, numerical))


def determinism_outputs(spec: OpSpec, dtype=None) -> List[Any]:
    """The determinism case's outputs and, where the op is differentiable, the gradients of
    sum(outputs[gradient_output]^2 / 2) with respect to its differentiable inputs."""
    import tensorflow as tf

    case = spec.determinism_case or spec.cases[-1]
    dtype = dtype or (tf.float32 if tf.float32 in spec.dtypes else spec.dtypes[0])
    tensors = case.tensors(dtype)
    wrt = [t for t, s in zip(tensors, case.inputs) if s.differentiable and t.dtype.is_floating]
    with tf.GradientTape() as tape:
        tape.watch(wrt)
        outputs = spec.call(spec.op, case, tensors)
        target = outputs[spec.gradient_output]
    grads = tape.gradient(target, wrt, output_gradients=target) if wrt and target.dtype.is_floating else []
    return outputs + [g for g in grads if g is not None]


def tf_bfloat16_matmul_aborts() -> bool:
    """Whether TensorFlow's bfloat16 matmul would abort the process here (its oneDNN capped by
    ONEDNN_MAX_CPU_ISA to an ISA without bfloat16 kernels throws an uncaught dnnl::error, which no
    Python code can catch): speed cases then time it only where it can run."""
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA", "").strip().upper()
    return cap in ("SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2")


def speed_normal(shape, dtype, seed: Optional[int] = None, stddev: float = 1.0):
    """A speed case's float input: `tf.random.normal(shape, stddev=stddev, seed=seed)` drawn in
    float32 (the same values whatever the dtype) and cast to `dtype` (no op for float32)."""
    import tensorflow as tf

    return tf.cast(tf.random.normal(shape, stddev=stddev, seed=seed), dtype)


def float_output_dtypes(outputs) -> set:
    """The float dtypes among a call's outputs (tensors, nested in lists, tuples, namedtuples)."""
    import tensorflow as tf

    return {t.dtype for t in tf.nest.flatten(outputs)
            if isinstance(t, (tf.Tensor, tf.Variable)) and t.dtype.is_floating}


def elementwise_speed(label: str, make: Callable, default: int = 1 << 22,
                      elements_moved: Optional[int] = None, only_default: bool = False) -> SpeedCase:
    """A speed case over `n` elements (`size`, or `default`) of the dtype asked for: `make(x, g)`
    gets two random [n] tensors in that dtype and returns the candidates (a rival that needs the
    dtype takes `x.dtype`); `elements_moved` (the elements an opforge call reads and writes per
    element of x: 2 for y = f(x), 3 for a gradient) adds GB/s, at the dtype's size;
    `only_default`: a second size of a case, skipped when a size is asked for."""

    def setup(size, dtype):
        if size and only_default:
            return None
        n = size or default
        x = speed_normal([n], dtype, seed=1)
        g = speed_normal([n], dtype, seed=2)
        moved = None if elements_moved is None else elements_moved * dtype.size * n
        return SpeedRun(f"{label} {dtype.name} [{n}]", make(x, g), moved)

    return SpeedCase(setup)


def scaled_batch(shape: Sequence[int], size: Optional[int]) -> List[int]:
    """A model shape whose batch is scaled so that it holds about `size` elements (at least one
    image); the shape as it is when `size` is None."""
    shape = list(shape)
    if size is not None:
        per_item = int(np.prod(shape[1:]))
        shape[0] = max(1, int(round(size / per_item)))
    return shape

def numpy_copy(n: int, dtype=np.float32) -> Callable[[], None]:
    """A plain memory copy of `n` elements of `dtype` (a NumPy dtype or a tf.DType: a bfloat16
    copy moves 2 bytes an element): the bandwidth a memory-bound op is compared with."""
    dtype = np.dtype(getattr(dtype, "as_numpy_dtype", dtype))
    src = np.random.default_rng(0).standard_normal(n).astype(dtype)
    dst = np.empty_like(src)
    return lambda: np.copyto(dst, src)

"""Broadcasting multiply: `opforge.ops.element_mul` mirrors `tf.multiply`; C++ op `Opforge>ElementMul`."""
from __future__ import annotations

from typing import Optional

import numpy as np
import tensorflow as tf

from opforge._export import STATE as _EXPORT
from opforge.ops._common import check_dtype, dtype_error, lib, to_tensor
from opforge.ops.spec import BadInput, Case, OpSpec, Sample, SpeedCase, SpeedRun, speed_normal
from opforge.ops.spec import numpy_copy

__all__ = ["element_mul"]
OP_NAMES = ("Opforge>ElementMul", "Opforge>ElementMulGrad")

# Every dtype tf.multiply takes on the CPU.
DTYPES = (tf.float16, tf.bfloat16, tf.float32, tf.float64, tf.int8, tf.uint8, tf.int16, tf.uint16, tf.int32,
          tf.uint32, tf.int64, tf.uint64, tf.complex64, tf.complex128)
# The dtypes the gradient op takes (the integers have no gradient on a tape).
GRAD_DTYPES = (tf.float16, tf.bfloat16, tf.float32, tf.float64, tf.int32, tf.int64, tf.complex64, tf.complex128)
_DTYPE_SET = frozenset(DTYPES)


def element_mul(a, b, name: Optional[str] = None) -> tf.Tensor:
    """`a * b` element-wise with NumPy broadcasting, as `tf.multiply(a, b)`.

    Supports every dtype `tf.multiply` takes on the CPU: half, bfloat16, float32, float64, the
    signed and unsigned integers of 8, 16, 32 and 64 bits (wrapping on overflow, as in TensorFlow),
    complex64 and complex128 (the plain formula `(ac - bd) + (ad + bc)i`, which is TensorFlow's
    vectorised kernel's; TensorFlow's scalar tail recovers some infinities from NaN parts, so its
    answer for non-finite complex operands depends on the position; finite ones are bit-exact).
    Python numbers and NumPy arrays are converted to the dtype of the other operand. The
    gradient sums over the dimensions each operand was broadcast along, as TensorFlow's:
    `grad * conj(b)` and `conj(a) * grad`; it is computed by one fused C++ op,
    `Opforge>ElementMulGrad`.

    Raises:
      InvalidArgumentError: unsupported or mismatched dtypes, or shapes that do not broadcast.
    """
    if (
        isinstance(a, tf.Tensor)
        and isinstance(b, tf.Tensor)
        and a.dtype in _DTYPE_SET
        and a.dtype == b.dtype
    ):
        if _EXPORT.standard:  # tracing for export (opforge._export): TensorFlow's op, the same values
            return tf.multiply(a, b, name=name)
        return lib().opforge_element_mul(a, b, name=name)
    if isinstance(a, (tf.Tensor, tf.Variable)) or not isinstance(b, (tf.Tensor, tf.Variable)):
        a = to_tensor("ElementMul", "a", a)
        b = to_tensor("ElementMul", "b", b, dtype_hint=a.dtype)
    else:
        b = to_tensor("ElementMul", "b", b)
        a = to_tensor("ElementMul", "a", a, dtype_hint=b.dtype)
    check_dtype("ElementMul", "a", a, DTYPES)
    if b.dtype != a.dtype:
        raise dtype_error("ElementMul", "b", f"the dtype of a ({a.dtype.name})", b.dtype.name)
    if _EXPORT.standard:
        return tf.multiply(a, b, name=name)
    return lib().opforge_element_mul(a, b, name=name)


@tf.RegisterGradient("Opforge>ElementMul")
def _element_mul_gradient(op, grad):
    a, b = op.inputs
    # The tape says which inputs need no gradient (a constant operand, say); skip their work.
    skip = getattr(op, "skip_input_indices", None) or ()
    need_a, need_b = 0 not in skip, 1 not in skip
    grad_a, grad_b = lib().opforge_element_mul_grad(
        grad, a, b, need_grad_a=need_a, need_grad_b=need_b
    )
    return (grad_a if need_a else None), (grad_b if need_b else None)


@tf.RegisterGradient("Opforge>ElementMulGrad")
def _element_mul_grad_gradient(op, grad_ga, grad_gb):
    # grad_a = R_a(g * b), grad_b = R_b(a * g), R_x summing over x's broadcast dimensions.
    # An output that was skipped (need_grad_x false) contributes nothing.
    g, a, b = op.inputs
    if grad_ga is None or not op.get_attr("need_grad_a"):
        grad_ga = tf.zeros_like(a)
    if grad_gb is None or not op.get_attr("need_grad_b"):
        grad_gb = tf.zeros_like(b)
    m = lib()
    d_g = m.opforge_element_mul(grad_ga, b) + m.opforge_element_mul(a, grad_gb)
    d_a = m.opforge_element_mul_grad(g, a, grad_gb, need_grad_b=False)[0]
    d_b = m.opforge_element_mul_grad(g, grad_ga, b, need_grad_a=False)[1]
    return d_g, d_a, d_b


# --- spec --------------------------------------------------------------------------------------

SHAPE_PAIRS = (
    ((5, 7), (5, 7)),
    ((), ()),
    ((), (6,)),
    ((6,), ()),
    ((3, 1, 4), (5, 1)),
    ((8, 1), (1, 9)),
    ((2, 3, 4, 5), (3, 1, 5)),
    ((1, 1, 3), (2, 1, 1)),
    ((2, 0, 3), (1, 3)),
    ((4, 1), (4, 0)),
    ((1,), (7,)),
    ((2, 1, 3, 1, 2), (1, 4, 1, 5, 1)),
)


def _operands(sa, sb, seed=0):
    return (Sample(sa, seed=seed + 1, scale=4, specials=True),
            Sample(sb, seed=seed + 2, scale=4, specials=True))


def _speed(label: str, shapes, with_gradient: bool = False, rival: str = "tf"):
    """`shapes(n)` gives the two operand shapes for n elements (`size`, default 4M)."""

    def setup(size, dtype):
        n = size or (1 << 22)
        sa, sb = shapes(n)
        a = speed_normal(sa, dtype, seed=4)
        b = speed_normal(sb, dtype, seed=5)
        if rival == "py_function":
            numpy_mul = lambda u, v: u.numpy() * v.numpy()  # noqa: E731 (bfloat16 arrays multiply as bfloat16)
            candidates = {"opforge": lambda: element_mul(a, b),
                          "py_function": lambda: tf.py_function(numpy_mul, [a, b], dtype)}
            return SpeedRun(f"{label} {dtype.name} {sa}", candidates)
        if not with_gradient:
            moved = dtype.size * (2 * int(np.prod(sa)) + int(np.prod(sb)))
            candidates = {"opforge": lambda: element_mul(a, b), "tf": lambda: tf.multiply(a, b),
                          "copy": numpy_copy(int(np.prod(sa)), dtype)}
            return SpeedRun(f"forward {dtype.name} {label} {sa}*{sb}", candidates, moved)

        def grads(fn):
            def run():
                with tf.GradientTape() as tape:
                    tape.watch([a, b])
                    y = fn(a, b)
                return tape.gradient(y, [a, b])

            return run

        return SpeedRun(f"forward+gradient {dtype.name} {label} {sa}*{sb}",
                        {"opforge": grads(element_mul), "tf": grads(tf.multiply)})

    return SpeedCase(setup)


def _side(n):
    return int(round(n ** 0.5))


_SAME = lambda n: ([n], [n])  # noqa: E731
_ROW = lambda n: ([_side(n), _side(n)], [_side(n)])  # noqa: E731
_COLUMN = lambda n: ([_side(n), _side(n)], [_side(n), 1])  # noqa: E731

SPECS = (
    OpSpec(
        name="element_mul",
        replaces="tf.multiply",
        op=element_mul,
        reference=tf.multiply,
        reference_name="tf.multiply",
        dtypes=DTYPES,
        cases=tuple(Case(f"{list(sa)}*{list(sb)}", _operands(sa, sb, i)) for i, (sa, sb) in enumerate(SHAPE_PAIRS)),
        gradient_cases=tuple(
            Case(f"{list(sa)}*{list(sb)}", (Sample(sa, seed=7), Sample(sb, seed=8)))
            for sa, sb in (((4, 5), (4, 5)), ((3, 1, 4), (5, 1)), ((6,), ()), ((2, 0), (1, 1)))
        ),
        gradient_tolerance=1e-8,
        determinism_case=Case("broadcast", (Sample((513, 1, 1031), seed=42), Sample((1, 257, 1), seed=43))),
        speed=(
            _speed("same shape", _SAME),
            _speed("broadcast row", _ROW),
            _speed("broadcast column", _COLUMN),
            _speed("same shape", _SAME, with_gradient=True),
            _speed("broadcast row", _ROW, with_gradient=True),
            _speed("broadcast column", _COLUMN, with_gradient=True),
            SpeedCase(lambda size, dtype: _speed("forward vs py_function", _SAME,
                                                 rival="py_function").setup(size or 1 << 10, dtype)),
            # The same at 1M elements (only at the default sizes: with --size it would be a repeat).
            SpeedCase(lambda size, dtype: None if size else _speed("forward vs py_function", _SAME,
                                                                   rival="py_function").setup(1 << 20, dtype)),
        ),
        bad_inputs={
            "incompatible shapes": BadInput(
                "opforge.ops.element_mul(tf.ones([2, 3]), tf.ones([4, 3]))", ("a", "b", "[2, 3]", "[4, 3]")),
            "dtype mismatch": BadInput(
                "opforge.ops.element_mul(tf.ones([3]), tf.ones([3], tf.int32))", ("b", "float32", "int32")),
            "string": BadInput("opforge.ops.element_mul(tf.constant(['a']), tf.constant(['b']))", ("a", "string")),
            # Under an int32 hint TensorFlow's conversion would wrap 2**40 to 0 without a word.
            "python int beyond int32": BadInput(
                "opforge.ops.element_mul(tf.ones([2], tf.int32), [2**40, 1])", ("b", "int32", "int64")),
            "bool": BadInput("opforge.ops.element_mul(tf.constant([True]), tf.constant([False]))", ("a", "bool")),
            "raw grad uint8": BadInput(
                "lib().opforge_element_mul_grad(tf.ones([3], tf.uint8), tf.ones([3], tf.uint8), tf.ones([3], tf.uint8))",
                ("T", "uint8", "not in the list of allowed values")),
            "raw grad wrong grad shape": BadInput(
                "lib().opforge_element_mul_grad(tf.ones([3, 3]), tf.ones([3, 1]), tf.ones([1, 4]))",
                ("grad", "[3, 4]", "[3, 3]")),
            "raw grad incompatible": BadInput(
                "lib().opforge_element_mul_grad(tf.ones([3]), tf.ones([3]), tf.ones([4]))", ("a", "b", "[3]", "[4]")),
            "raw incompatible": BadInput(
                "lib().opforge_element_mul(tf.ones([5]), tf.ones([2, 3]))", ("a", "b", "[5]", "[2, 3]")),
            # 2^46 floats (256 TiB, more than a 64-bit process can address, so even with
            # overcommit=always nothing is allocated): TensorFlow's allocator refuses, as for
            # tf.multiply.
            "huge broadcast": BadInput(
                "opforge.ops.element_mul(tf.ones([1 << 23, 1]), tf.ones([1, 1 << 23]))", ("OOM",),
                "ResourceExhaustedError"),
            "zero-size incompatible": BadInput(
                "opforge.ops.element_mul(tf.ones([0, 3]), tf.ones([2, 3]))", ("a", "b", "[0, 3]", "[2, 3]")),
        },
    ),
)

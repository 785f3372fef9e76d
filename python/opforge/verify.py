"""`opforge verify`: one row per op with its agreement with the reference and its speed.

- forward: max |opforge - reference| over several dtypes, attr values, shapes and special
  values (NaN compares equal to NaN); the reference is TensorFlow's built-in op;
- gradient: max |opforge's gradient - float64 numerical gradient| (tf.test.compute_gradient);
- speed: TensorFlow's median time / opforge's median time, interleaved (>1: opforge faster).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Callable, List

import numpy as np

from opforge.timing import interleaved


@dataclass
class Row:
    op: str
    reference: str
    forward_error: float
    forward_tolerance: float
    gradient_error: float
    gradient_tolerance: float
    speed_ratio: float
    speed_case: str

    @property
    def ok(self) -> bool:
        return (
            self.forward_error <= self.forward_tolerance
            and self.gradient_error <= self.gradient_tolerance
        )


def max_error(actual, expected) -> float:
    a = np.asarray(actual, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    if a.shape != e.shape:
        return float("inf")
    both_nan = np.isnan(a) & np.isnan(e)
    same = (a == e) | both_nan
    if same.all():
        return 0.0
    diff = np.abs(a - e)
    diff[same] = 0.0
    return float(np.nan_to_num(diff, nan=np.inf).max())


def sample(shape, seed: int, specials: bool = True) -> np.ndarray:
    """Random float64 values; with `specials`, the first six are 0, -0, inf, -inf, NaN, 1e-30."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape) * 3
    if specials and x.size >= 6:
        flat = x.reshape(-1)
        flat[:6] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30]
    return x


def gradient_error(fn: Callable, inputs: List[np.ndarray]) -> float:
    import tensorflow as tf

    theoretical, numerical = tf.test.compute_gradient(
        fn, [tf.constant(v, tf.float64) for v in inputs], delta=1e-6
    )
    return max(max_error(t, n) for t, n in zip(theoretical, numerical))


def _away_from_zero(shape, seed):
    x = sample(shape, seed, specials=False)
    return np.where(np.abs(x) < 0.1, x + np.sign(x + 1e-9) * 0.2, x)


def verify_leaky_relu(speed_size: int, repeats: int) -> List[Row]:
    import tensorflow as tf

    import opforge

    dtypes = [tf.float16, tf.bfloat16, tf.float32, tf.float64]
    fwd = mask_err = 0.0
    for i, dtype in enumerate(dtypes):
        for alpha in (0.0, 0.2, 1.5, -0.3):
            x = tf.cast(sample([7, 33], i), dtype)
            fwd = max(fwd, max_error(opforge.ops.leaky_relu(x, alpha), tf.nn.leaky_relu(x, alpha)))
            y, mask = opforge.ops.leaky_relu_with_mask(x, alpha)
            mask_err = max(
                mask_err,
                max_error(y, tf.nn.leaky_relu(x, alpha)),
                max_error(mask, tf.where(x > 0, tf.ones_like(x), tf.cast(alpha, dtype))),
            )
    xg = _away_from_zero([4, 9], 11)
    grad = max(gradient_error(lambda t: opforge.ops.leaky_relu(t, a), [xg]) for a in (0.2, -0.3, 1.5))
    grad_mask = gradient_error(lambda t: opforge.ops.leaky_relu_with_mask(t, 0.2)[0], [xg])

    x = tf.random.normal([speed_size], seed=1)
    m = interleaved(
        {"opforge": lambda: opforge.ops.leaky_relu(x, 0.2), "tf": lambda: tf.nn.leaky_relu(x, 0.2)},
        repeats,
    )
    m2 = interleaved(
        {
            "opforge": lambda: opforge.ops.leaky_relu_with_mask(x, 0.2),
            "tf": lambda: (tf.nn.leaky_relu(x, 0.2), tf.where(x > 0, 1.0, 0.2)),
        },
        repeats,
    )
    case = f"float32 [{speed_size}]"
    return [
        Row("leaky_relu", "tf.nn.leaky_relu", fwd, 0.0, grad, 1e-6, m["tf"] / m["opforge"], case),
        Row("leaky_relu_with_mask", "tf.nn.leaky_relu, tf.where", mask_err, 0.0, grad_mask, 1e-6,
            m2["tf"] / m2["opforge"], case),
    ]


def verify_element_mul(speed_size: int, repeats: int) -> List[Row]:
    import tensorflow as tf

    import opforge

    dtypes = [tf.float16, tf.bfloat16, tf.float32, tf.float64, tf.int32, tf.int64]
    shapes = [([5, 7], [5, 7]), ([3, 1, 4], [5, 1]), ([], [6]), ([2, 0, 3], [1, 3]), ([8, 1], [1, 9])]
    fwd = 0.0
    for i, dtype in enumerate(dtypes):
        for j, (sa, sb) in enumerate(shapes):
            a = tf.cast(sample(sa, 10 * i + j, specials=dtype.is_floating) * 5, dtype)
            b = tf.cast(sample(sb, 100 + 10 * i + j, specials=dtype.is_floating) * 5, dtype)
            fwd = max(fwd, max_error(opforge.ops.element_mul(a, b), tf.multiply(a, b)))
    grad = max(
        gradient_error(opforge.ops.element_mul, [sample(sa, 7, False), sample(sb, 8, False)])
        for sa, sb in [([4, 5], [4, 5]), ([3, 1, 4], [5, 1]), ([6], [])]
    )
    a = tf.random.normal([speed_size], seed=2)
    b = tf.random.normal([speed_size], seed=3)
    m = interleaved(
        {"opforge": lambda: opforge.ops.element_mul(a, b), "tf": lambda: tf.multiply(a, b)},
        repeats,
    )
    return [
        Row("element_mul", "tf.multiply", fwd, 0.0, grad, 1e-6, m["tf"] / m["opforge"],
            f"float32 [{speed_size}]")
    ]


def verify_resize_bilinear(speed_size: int, repeats: int) -> List[Row]:
    import tensorflow as tf

    import opforge

    modes = [
        dict(align_corners=False, half_pixel_centers=False),
        dict(align_corners=True, half_pixel_centers=False),
        dict(align_corners=False, half_pixel_centers=True),
    ]
    dtypes = [tf.uint8, tf.int32, tf.float16, tf.bfloat16, tf.float32, tf.float64]
    cases = [([2, 5, 7, 3], [11, 4]), ([1, 1, 1, 2], [3, 5]), ([2, 8, 8, 4], [1, 1]),
             ([1, 13, 13, 8], [26, 26]), ([2, 9, 6, 1], [9, 6])]
    fwd = grad_op = 0.0
    for i, dtype in enumerate(dtypes):
        for j, (shape, size) in enumerate(cases):
            for attrs in modes:
                x = tf.cast(sample(shape, 10 * i + j, specials=dtype.is_floating) * 20, dtype)
                fwd = max(fwd, max_error(opforge.ops.resize_bilinear(x, size, **attrs),
                                         tf.raw_ops.ResizeBilinear(images=x, size=size, **attrs)))
                if dtype.is_floating:
                    g = tf.constant(sample([shape[0], *size, shape[3]], 50 + j), tf.float32)
                    grad_op = max(grad_op, max_error(
                        opforge.ops.resize_bilinear_grad(g, x, **attrs),
                        tf.raw_ops.ResizeBilinearGrad(grads=g, original_image=x, **attrs)))
    # The forward is linear and its output float32: a large step gives exact difference
    # quotients up to float32 rounding.
    grad = grad2 = 0.0
    for attrs in modes:
        theoretical, numerical = tf.test.compute_gradient(
            lambda t: opforge.ops.resize_bilinear(t, [7, 5], **attrs),
            [tf.constant(sample([1, 4, 3, 2], 60, specials=False))], delta=0.5)
        grad = max(grad, max_error(theoretical[0], numerical[0]))
        image = tf.zeros([1, 3, 4, 2], tf.float64)
        theoretical, numerical = tf.test.compute_gradient(
            lambda g: opforge.ops.resize_bilinear_grad(g, image, **attrs),
            [tf.constant(sample([1, 6, 5, 2], 61, specials=False), tf.float32)], delta=0.5)
        grad2 = max(grad2, max_error(theoretical[0], numerical[0]))

    x = tf.random.normal([8, 52, 52, 128], seed=4)
    g = tf.random.normal([8, 104, 104, 128], seed=5)
    m = interleaved(
        {
            "opforge": lambda: opforge.ops.resize_bilinear(x, [104, 104], half_pixel_centers=True),
            "tf": lambda: tf.raw_ops.ResizeBilinear(images=x, size=[104, 104], half_pixel_centers=True),
        },
        max(5, repeats // 3),
    )
    m2 = interleaved(
        {
            "opforge": lambda: opforge.ops.resize_bilinear_grad(g, x, half_pixel_centers=True),
            "tf": lambda: tf.raw_ops.ResizeBilinearGrad(grads=g, original_image=x, half_pixel_centers=True),
        },
        max(5, repeats // 3),
    )
    case = "[8,52,52,128]->104x104"
    return [
        Row("resize_bilinear", "tf.raw_ops.ResizeBilinear", fwd, 0.0, grad, 1e-5,
            m["tf"] / m["opforge"], case),
        Row("resize_bilinear_grad", "tf.raw_ops.ResizeBilinearGrad", grad_op, 0.0, grad2, 1e-5,
            m2["tf"] / m2["opforge"], case),
    ]


def verify_conv2d_transpose(speed_size: int, repeats: int) -> List[Row]:
    """Forward: small-integer data in every dtype (exact sums, so any index or padding error
    shows) and random float32 data (GEMM order differs from TensorFlow's: ~1e-6); gradient:
    float64 numerical, dilation 2 included; speed: forward plus both gradients."""
    import tensorflow as tf

    import opforge

    cases = [
        ([2, 5, 6, 3], [4, 4, 5, 3], [2, 10, 12, 5], 2, "SAME"),
        ([1, 4, 5, 2], [3, 2, 3, 2], [1, 7, 10, 3], 2, "SAME"),
        ([2, 3, 4, 3], [2, 3, 2, 3], [2, 8, 13, 2], 3, "VALID"),
        ([1, 4, 4, 3], [3, 3, 2, 3], [1, 8, 9, 2], 2, [[0, 0], [1, 0], [0, 1], [0, 0]]),
    ]
    fwd = 0.0
    rng = np.random.default_rng(0)
    for dtype in (tf.float16, tf.bfloat16, tf.float32, tf.float64):
        for xs, fs, os_, s, pad in cases:
            x = tf.cast(rng.integers(-3, 4, xs), dtype)
            f = tf.cast(rng.integers(-3, 4, fs), dtype)
            fwd = max(fwd, max_error(opforge.ops.conv2d_transpose(x, f, os_, s, pad),
                                     tf.nn.conv2d_transpose(x, f, os_, s, pad)))
    for xs, fs, os_, s, pad in cases:
        x = tf.constant(sample(xs, 1, specials=False), tf.float32)
        f = tf.constant(sample(fs, 2, specials=False), tf.float32)
        fwd = max(fwd, max_error(opforge.ops.conv2d_transpose(x, f, os_, s, pad),
                                 tf.nn.conv2d_transpose(x, f, os_, s, pad)))
    grad = max(
        gradient_error(lambda x, f: opforge.ops.conv2d_transpose(x, f, os_, s, pad, dilations=d),
                       [sample(xs, 3, False), sample(fs, 4, False)])
        for xs, fs, os_, s, pad, d in [
            ([2, 3, 4, 3], [4, 4, 2, 3], [2, 6, 8, 2], 2, "SAME", 1),
            ([1, 4, 3, 2], [3, 3, 2, 2], [1, 4, 3, 2], 1, "SAME", 2),
        ]
    )
    x = tf.random.normal([8, 13, 13, 512], seed=5)
    f = tf.random.normal([4, 4, 256, 512], seed=6) * 0.05

    def fwd_and_grads(fn):
        def run():
            with tf.GradientTape() as tape:
                tape.watch([x, f])
                y = fn(x, f, [8, 26, 26, 256], 2)
            return tape.gradient(y, [x, f])

        return run

    m = interleaved({"opforge": fwd_and_grads(opforge.ops.conv2d_transpose),
                     "tf": fwd_and_grads(tf.nn.conv2d_transpose)}, min(repeats, 10))
    return [
        Row("conv2d_transpose", "tf.nn.conv2d_transpose", fwd, 1e-4, grad, 1e-6,
            m["tf"] / m["opforge"], "fwd+grads [8,13,13,512]")
    ]


CHECKS = [verify_leaky_relu, verify_element_mul, verify_resize_bilinear, verify_conv2d_transpose]


def format_rows(rows: List[Row]) -> str:
    header = (
        f"{'op':<22}{'reference':<30}{'forward err':>12}{'grad err':>11}"
        f"{'speed vs TF':>13}  {'speed case':<22}{'status':>7}"
    )
    lines = [header, "-" * len(header)]
    for r in rows:
        lines.append(
            f"{r.op:<22}{r.reference:<30}{r.forward_error:>12.3g}{r.gradient_error:>11.2g}"
            f"{r.speed_ratio:>12.2f}x  {r.speed_case:<22}{'ok' if r.ok else 'FAIL':>7}"
        )
    lines.append(
        "forward err: max |opforge - reference| over dtypes, attrs, shapes and NaN/inf inputs "
        "(tolerance 0: bit-exact, except conv2d_transpose: 1e-4, float32 GEMM order); grad err: "
        "max |C++ gradient - float64 numerical gradient| (tolerance 1e-6; 1e-5 for ops with "
        "float32 outputs); speed: TF median / opforge median, interleaved."
    )
    return "\n".join(lines)


def run(as_json: bool, speed_size: int = 1 << 20, repeats: int = 30) -> int:
    rows: List[Row] = []
    for check in CHECKS:
        rows.extend(check(speed_size, repeats))
    if as_json:
        print(json.dumps([dict(asdict(r), ok=r.ok) for r in rows], indent=2))
    else:
        print(format_rows(rows))
    return 0 if all(r.ok for r in rows) else 1

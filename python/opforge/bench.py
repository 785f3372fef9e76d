"""`opforge bench`: each op against the TensorFlow built-in and against the same op written as
`tf.py_function` over NumPy, timed interleaved in one process; medians and ratios.

A ratio above 1 means opforge is faster (ratio = other's median / opforge's median).
"""
from __future__ import annotations

import json
from typing import Callable, Dict, List, Optional

import numpy as np

from opforge.timing import interleaved

Row = Dict[str, object]


def _row(op: str, case: str, medians: Dict[str, float], bytes_moved: Optional[int] = None) -> Row:
    row: Row = {"op": op, "case": case}
    base = medians["opforge"]
    for name, seconds in medians.items():
        row[f"{name}_ms"] = seconds * 1e3
        if name != "opforge":
            row[f"ratio_vs_{name}"] = seconds / base
        if bytes_moved:
            row[f"{name}_GBps"] = bytes_moved / seconds / 1e9
    return row


def _numpy_copy(n: int, dtype=np.float32) -> Callable[[], None]:
    src = np.random.default_rng(0).standard_normal(n).astype(dtype)
    dst = np.empty_like(src)
    return lambda: np.copyto(dst, src)


def bench_leaky_relu(size: int, repeats: int) -> List[Row]:
    import tensorflow as tf

    import opforge
    from opforge.ops._common import lib

    rows: List[Row] = []
    alpha = 0.2
    x = tf.random.normal([size], seed=1)
    g = tf.random.normal([size], seed=2)
    nbytes = size * 4
    m = interleaved(
        {
            "opforge": lambda: opforge.ops.leaky_relu(x, alpha),
            "tf": lambda: tf.nn.leaky_relu(x, alpha),
            "copy": _numpy_copy(size),
        },
        repeats,
    )
    rows.append(_row("leaky_relu", f"forward float32 [{size}]", m, 2 * nbytes))
    m = interleaved(
        {
            "opforge": lambda: lib().opforge_leaky_relu_grad(g, x, alpha=alpha),
            "tf": lambda: tf.raw_ops.LeakyReluGrad(gradients=g, features=x, alpha=alpha),
            "copy": _numpy_copy(size),
        },
        repeats,
    )
    rows.append(_row("leaky_relu", f"gradient float32 [{size}]", m, 3 * nbytes))
    m = interleaved(
        {
            "opforge": lambda: opforge.ops.leaky_relu_with_mask(x, alpha),
            "tf": lambda: (tf.nn.leaky_relu(x, alpha), tf.where(x > 0, 1.0, alpha)),
        },
        repeats,
    )
    rows.append(_row("leaky_relu_with_mask", f"forward float32 [{size}]", m, 3 * nbytes))

    def numpy_leaky_relu(t):
        v = t.numpy()
        return np.where(v > 0, v, v * np.float32(alpha))

    for n in (1 << 10, 1 << 20):
        xs = tf.random.normal([n], seed=3)
        m = interleaved(
            {
                "opforge": lambda: opforge.ops.leaky_relu(xs, alpha),
                "py_function": lambda: tf.py_function(numpy_leaky_relu, [xs], tf.float32),
            },
            repeats,
        )
        rows.append(_row("leaky_relu", f"forward float32 [{n}] vs py_function", m))
    return rows


def bench_element_mul(size: int, repeats: int) -> List[Row]:
    import tensorflow as tf

    import opforge

    rows: List[Row] = []
    side = int(round(size ** 0.5))
    cases = [
        ("same shape", [size], [size]),
        ("broadcast row", [side, side], [side]),
        ("broadcast column", [side, side], [side, 1]),
    ]
    for label, sa, sb in cases:
        a = tf.random.normal(sa, seed=4)
        b = tf.random.normal(sb, seed=5)
        n = int(np.prod(sa))
        m = interleaved(
            {
                "opforge": lambda: opforge.ops.element_mul(a, b),
                "tf": lambda: tf.multiply(a, b),
                "copy": _numpy_copy(n),
            },
            repeats,
        )
        moved = 4 * (n + int(np.prod(sb)) + n)
        rows.append(_row("element_mul", f"forward float32 {label} {sa}*{sb}", m, moved))

        def grads(fn):
            def run():
                with tf.GradientTape() as tape:
                    tape.watch([a, b])
                    y = fn(a, b)
                return tape.gradient(y, [a, b])

            return run

        m = interleaved(
            {"opforge": grads(opforge.ops.element_mul), "tf": grads(tf.multiply)}, repeats
        )
        rows.append(_row("element_mul", f"forward+gradient float32 {label} {sa}*{sb}", m))

    def numpy_mul(u, v):
        return u.numpy() * v.numpy()

    for n in (1 << 10, 1 << 20):
        a = tf.random.normal([n], seed=6)
        b = tf.random.normal([n], seed=7)
        m = interleaved(
            {
                "opforge": lambda: opforge.ops.element_mul(a, b),
                "py_function": lambda: tf.py_function(numpy_mul, [a, b], tf.float32),
            },
            repeats,
        )
        rows.append(_row("element_mul", f"forward float32 [{n}] vs py_function", m))
    return rows


# The shapes of the resize issue: an FPN/YOLO x2 upsample, a large RGB upsample, a 2x
# downsample of a wide feature map (size argument ignored: these are fixed model shapes).
RESIZE_CASES = [
    ([8, 52, 52, 128], (104, 104)),
    ([16, 224, 224, 3], (512, 512)),
    ([8, 416, 416, 32], (208, 208)),
]


def bench_resize_bilinear(size: int, repeats: int) -> List[Row]:
    import tensorflow as tf

    import opforge
    from opforge.ops._common import lib

    rows: List[Row] = []
    for shape, (oh, ow) in RESIZE_CASES:
        x = tf.random.normal(shape, seed=8)
        g = tf.random.normal([shape[0], oh, ow, shape[3]], seed=9)
        for label, hp in (("half-pixel", True), ("legacy", False)):
            m = interleaved(
                {
                    "opforge": lambda: opforge.ops.resize_bilinear(
                        x, [oh, ow], half_pixel_centers=hp
                    ),
                    "tf": lambda: tf.raw_ops.ResizeBilinear(
                        images=x, size=[oh, ow], half_pixel_centers=hp
                    ),
                },
                max(5, repeats // 4),
            )
            rows.append(_row("resize_bilinear", f"forward {shape}->{oh}x{ow} {label}", m))
            m = interleaved(
                {
                    "opforge": lambda: lib().opforge_resize_bilinear_grad(
                        g, x, half_pixel_centers=hp
                    ),
                    "tf": lambda: tf.raw_ops.ResizeBilinearGrad(
                        grads=g, original_image=x, half_pixel_centers=hp
                    ),
                },
                max(5, repeats // 4),
            )
            rows.append(_row("resize_bilinear", f"gradient {shape}->{oh}x{ow} {label}", m))
    return rows


def bench_conv2d_transpose(size: int, repeats: int) -> List[Row]:
    """The YOLO-neck upsamplers: forward, each gradient, and forward plus both gradients, against
    tf.nn.conv2d_transpose (TensorFlow's gradients: conv2d for the input, Conv2DBackpropFilter
    for the filter). `size` is unused (the shapes are the issue's); repeats capped at 15."""
    import tensorflow as tf

    import opforge
    from opforge.ops._common import lib

    del size
    repeats = min(repeats, 15)
    rows: List[Row] = []
    cases = [([8, 13, 13, 512], 4, 256, 2), ([8, 26, 26, 256], 4, 128, 2), ([1, 104, 104, 64], 3, 64, 2)]
    for shape, k, co, s in cases:
        n, h, w, ci = shape
        out = [n, h * s, w * s, co]
        x = tf.random.normal(shape, seed=8)
        f = tf.random.normal([k, k, co, ci], seed=9) * 0.05
        g = tf.random.normal(out, seed=10)
        label = f"{shape}->{out[1:]} {k}x{k} s{s}"
        attrs = dict(strides=[1, s, s, 1], padding="SAME")
        m = interleaved(
            {"opforge": lambda: opforge.ops.conv2d_transpose(x, f, out, s),
             "tf": lambda: tf.nn.conv2d_transpose(x, f, out, s)}, repeats)
        rows.append(_row("conv2d_transpose", f"forward {label}", m))
        m = interleaved(
            {"opforge": lambda: lib().opforge_conv2d_transpose_input_grad(g, f, **attrs),
             "tf": lambda: tf.nn.conv2d(g, f, s, "SAME")}, repeats)
        rows.append(_row("conv2d_transpose", f"input gradient {label}", m))
        m = interleaved(
            {"opforge": lambda: lib().opforge_conv2d_transpose_filter_grad(x, f, g, **attrs),
             "tf": lambda: tf.raw_ops.Conv2DBackpropFilter(
                 input=g, filter_sizes=tf.shape(f), out_backprop=x, **attrs)}, repeats)
        rows.append(_row("conv2d_transpose", f"filter gradient {label}", m))

        def fwd_and_grads(fn):
            def run():
                with tf.GradientTape() as tape:
                    tape.watch([x, f])
                    y = fn(x, f, out, s)
                return tape.gradient(y, [x, f], output_gradients=g)

            return run

        m = interleaved({"opforge": fwd_and_grads(opforge.ops.conv2d_transpose),
                         "tf": fwd_and_grads(tf.nn.conv2d_transpose)}, repeats)
        rows.append(_row("conv2d_transpose", f"forward+gradients {label}", m))
    return rows


BENCHMARKS: Dict[str, Callable[[int, int], List[Row]]] = {
    "leaky_relu": bench_leaky_relu,
    "element_mul": bench_element_mul,
    "resize_bilinear": bench_resize_bilinear,
    "conv2d_transpose": bench_conv2d_transpose,
}


def format_rows(rows: List[Row]) -> str:
    lines = []
    header = f"{'op':<22}{'case':<56}{'opforge ms':>11}  vs others (median ratio, >1 = opforge faster)"
    lines.append(header)
    lines.append("-" * len(header))
    for row in rows:
        others = []
        for key, value in row.items():
            if key.startswith("ratio_vs_"):
                name = key[len("ratio_vs_"):]
                others.append(f"{name} {row[name + '_ms']:.3f} ms = {value:.2f}x")
        gbps = [
            f"{k[:-5]} {v:.1f}" for k, v in row.items() if k.endswith("_GBps")
        ]
        line = f"{row['op']:<22}{row['case']:<56}{row['opforge_ms']:>11.3f}  " + "; ".join(others)
        if gbps:
            line += "  [GB/s: " + ", ".join(gbps) + "]"
        lines.append(line)
    return "\n".join(lines)


def run(ops: List[str], size: int, repeats: int, as_json: bool) -> int:
    unknown = [op for op in ops if op not in BENCHMARKS]
    if unknown:
        print(f"opforge bench: unknown op(s) {', '.join(unknown)}; known: {', '.join(BENCHMARKS)}")
        return 2
    rows: List[Row] = []
    for op in ops or list(BENCHMARKS):
        rows.extend(BENCHMARKS[op](size, repeats))
    print(json.dumps(rows, indent=2) if as_json else format_rows(rows))
    return 0

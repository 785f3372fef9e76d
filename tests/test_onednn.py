"""The convolutions' oneDNN path (cc/common/onednn.h) through TensorFlow: bfloat16 at the CPU's
bfloat16 rate where it has AVX512-BF16 or AMX, float32 transposed and non-Winograd fused
convolutions. Each result against a float64 reference within the bound of its arithmetic
(products of bfloat16 are exact in float, sums in float, one rounding to bfloat16), forward and
gradients; the same checks with the path turned off (OPFORGE_ONEDNN=0, in a child process) on
opforge's own kernels; and what `opforge doctor` says."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from opforge import ops
from opforge._loader import onednn_bfloat16, onednn_status

BF16_EPS = 2.0 ** -8  # one rounding to bfloat16 (8 significant bits)
F32_EPS = 2.0 ** -24

needs_bf16 = pytest.mark.skipif(not onednn_bfloat16(),
                                reason=f"bfloat16 convolutions on oneDNN not available here: {onednn_status()}")

# (input, filter [kh, kw, out_c, in_c] of the transposed convolution, output, stride, padding, layout)
TRANSPOSE_CASES = [
    ((2, 6, 7, 32), (4, 4, 16, 32), (2, 12, 14, 16), 2, "SAME", "NHWC"),   # the YOLO upsampler
    ((1, 9, 8, 16), (3, 3, 24, 16), (1, 18, 16, 24), 2, "SAME", "NHWC"),   # DCGAN-like 3x3 s2
    ((2, 5, 5, 8), (3, 3, 6, 8), (2, 11, 11, 6), 2, "VALID", "NHWC"),
    ((2, 16, 5, 6), (3, 3, 12, 16), (2, 12, 10, 12), 2, "SAME", "NCHW"),
]
# (input, filter HWIO, stride, padding, alpha)
FUSED_CASES = [
    ((2, 9, 9, 16), (3, 3, 16, 24), 1, "SAME", 0.1),
    ((2, 10, 9, 8), (3, 3, 8, 16), 2, "SAME", 0.1),
    ((2, 7, 7, 32), (1, 1, 32, 16), 1, "VALID", 0.0),
    ((1, 8, 8, 16), (3, 3, 16, 16), 1, "SAME", 1.0),
]


def _bf16_values(rng, shape):
    """Normal values exactly representable in bfloat16, as float64."""
    return tf.cast(tf.cast(rng.standard_normal(shape), tf.bfloat16), tf.float64).numpy()


def _within(got, want, scale, depth, what):
    """|got - want| <= eps_bf16 |want| + depth eps_f32 sum|terms| (+ a rounding of the sum)."""
    got = tf.cast(got, tf.float64).numpy()
    bound = BF16_EPS * np.abs(want) + (depth + 2) * F32_EPS * scale + BF16_EPS * F32_EPS * scale
    bad = np.abs(got - want) > bound
    assert not bad.any(), (f"{what}: {int(bad.sum())} of {bad.size} beyond the bound; worst "
                           f"{float(np.max(np.abs(got - want) - bound)):.3g}")


def _call_transpose(x, w, out_shape, stride, padding, layout):
    return ops.conv2d_transpose(x, w, output_shape=out_shape, strides=stride, padding=padding,
                                data_format=layout)


def _check_transpose(dtype, case):
    in_shape, f_shape, out_shape, stride, padding, layout = case
    rng = np.random.default_rng(sum(in_shape))
    x, w = _bf16_values(rng, in_shape), _bf16_values(rng, f_shape)
    g = _bf16_values(rng, out_shape)
    xt, wt, gt = (tf.constant(v, dtype) for v in (x, w, g))
    with tf.GradientTape() as tape:
        tape.watch([xt, wt])
        y = _call_transpose(xt, wt, out_shape, stride, padding, layout)
    dx, dw = tape.gradient(y, [xt, wt], output_gradients=gt)
    x64, w64, g64 = (tf.constant(v, tf.float64) for v in (x, w, g))
    ax, aw, ag = (tf.constant(np.abs(v), tf.float64) for v in (x, w, g))

    def refs(a, b, c):
        # TensorFlow's CPU kernels take NHWC only: NCHW cases are computed transposed.
        nchw = layout == "NCHW"
        to_nhwc, to_nchw = (lambda v: tf.transpose(v, [0, 2, 3, 1])), (lambda v: tf.transpose(v, [0, 3, 1, 2]))
        shape = [out_shape[0], out_shape[2], out_shape[3], out_shape[1]] if nchw else out_shape
        a = to_nhwc(a) if nchw else a
        with tf.GradientTape() as t:
            t.watch([a, b])
            r = tf.nn.conv2d_transpose(a, b, shape, stride, padding)
        da, db = t.gradient(r, [a, b], output_gradients=to_nhwc(c) if nchw else c)
        return [to_nchw(r), to_nchw(da), db] if nchw else [r, da, db]

    want = [v.numpy() for v in refs(x64, w64, g64)]
    scale = [v.numpy() for v in refs(ax, aw, ag)]
    depth_fwd = f_shape[0] * f_shape[1] * f_shape[3]
    depth_dx = f_shape[0] * f_shape[1] * f_shape[2]
    depth_dw = int(np.prod(in_shape))  # at most every input pixel and channel
    eps = BF16_EPS if dtype == tf.bfloat16 else F32_EPS
    for got, wv, sv, depth, name in zip((y, dx, dw), want, scale, (depth_fwd, depth_dx, depth_dw),
                                        ("forward", "input gradient", "filter gradient")):
        assert got.dtype == dtype
        if dtype == tf.bfloat16:
            _within(got, wv, sv, depth, f"{case} {name}")
        else:
            err = np.abs(got.numpy().astype(np.float64) - wv)
            assert (err <= 4 * eps * np.abs(wv) + (depth + 2) * eps * sv).all(), (case, name)


@needs_bf16
@pytest.mark.parametrize("case", TRANSPOSE_CASES, ids=lambda c: f"{c[0]}-{c[1][0]}x{c[1][1]}s{c[3]}-{c[4]}-{c[5]}")
def test_conv2d_transpose_bfloat16_on_onednn_within_its_rounding(case):
    _check_transpose(tf.bfloat16, case)


@pytest.mark.parametrize("case", TRANSPOSE_CASES, ids=lambda c: f"{c[0]}-{c[1][0]}x{c[1][1]}s{c[3]}-{c[4]}-{c[5]}")
def test_conv2d_transpose_float32_within_its_rounding(case):
    # On oneDNN where it opened (every case here but none is 3x3 stride 1), else opforge's own.
    _check_transpose(tf.float32, case)


def _check_fused(dtype, case):
    in_shape, f_shape, stride, padding, alpha = case
    rng = np.random.default_rng(sum(in_shape) + 1)
    x, w, b = _bf16_values(rng, in_shape), _bf16_values(rng, f_shape), _bf16_values(rng, f_shape[3])
    y = ops.fused_conv2d_bias_leaky_relu(tf.constant(x, dtype), tf.constant(w, dtype), tf.constant(b, dtype),
                                         strides=stride, padding=padding, alpha=alpha)
    z = tf.nn.conv2d(tf.constant(x), tf.constant(w), stride, padding) + b
    want = tf.where(z > 0, z, z * alpha).numpy()
    scale = (tf.nn.conv2d(tf.constant(np.abs(x)), tf.constant(np.abs(w)), stride, padding) + np.abs(b)).numpy()
    depth = f_shape[0] * f_shape[1] * f_shape[2] + 1
    assert y.dtype == dtype
    if dtype == tf.bfloat16:
        _within(y, want, scale, depth, f"{case}")
    else:
        err = np.abs(y.numpy().astype(np.float64) - want)
        assert (err <= 4 * F32_EPS * np.abs(want) + (depth + 2) * F32_EPS * scale).all(), case


@needs_bf16
@pytest.mark.parametrize("case", FUSED_CASES, ids=lambda c: f"{c[1][0]}x{c[1][1]}s{c[2]}-{c[3]}-alpha{c[4]}")
def test_fused_conv_bfloat16_on_onednn_within_its_rounding(case):
    _check_fused(tf.bfloat16, case)


@needs_bf16
def test_fused_conv_bfloat16_gradients_on_onednn():
    # The gradient runs the transposed convolution's ops and the fused op again, all bfloat16.
    rng = np.random.default_rng(5)
    x, w, b = _bf16_values(rng, (2, 9, 9, 16)), _bf16_values(rng, (3, 3, 16, 16)), _bf16_values(rng, 16)
    g = _bf16_values(rng, (2, 5, 5, 16))

    def grads(fn, dtype):
        ts = [tf.constant(v, dtype) for v in (x, w, b)]
        with tf.GradientTape() as tape:
            tape.watch(ts)
            y = fn(*ts)
        return tape.gradient(y, ts, output_gradients=tf.constant(g, dtype))

    ours = grads(lambda a, k, c: ops.fused_conv2d_bias_leaky_relu(a, k, c, strides=2, padding="SAME", alpha=0.1),
                 tf.bfloat16)
    want = grads(lambda a, k, c: tf.nn.leaky_relu(tf.nn.conv2d(a, k, 2, "SAME") + c, 0.1), tf.float64)
    for o, r, name in zip(ours, want, ("input", "filter", "bias")):
        assert o.dtype == tf.bfloat16
        r = r.numpy()
        # bfloat16 rounds the activation's gradient before the products: 2^-8 relative per term.
        np.testing.assert_allclose(tf.cast(o, tf.float64).numpy(), r, rtol=0.03,
                                   atol=0.03 * np.abs(r).max(), err_msg=name)


def test_onednn_status_and_doctor_say_where_convolutions_run():
    status = onednn_status()
    assert status.startswith(("on: ", "off: ")), status
    if status.startswith("on: "):
        assert "oneDNN 3." in status and status.endswith(("bfloat16 convolutions: yes",
                                                          "bfloat16 convolutions: no"))
    out = subprocess.run([sys.executable, "-m", "opforge.tools.cli", "doctor"], capture_output=True, text=True,
                         timeout=300)
    assert f"oneDNN convolutions:  {status}" in out.stdout, out.stdout[-2000:]


_CHILD = r"""
import json, sys
sys.path.insert(0, {tests!r})
import tensorflow as tf
import test_onednn as t
from opforge._loader import onednn_status
for case in t.TRANSPOSE_CASES:
    t._check_transpose(tf.bfloat16, case)
    t._check_transpose(tf.float32, case)
for case in t.FUSED_CASES:
    t._check_fused(tf.bfloat16, case)
    t._check_fused(tf.float32, case)
print(json.dumps(onednn_status()))
"""


def test_without_onednn_the_own_kernels_give_the_same_bounds():
    env = dict(os.environ, OPFORGE_ONEDNN="0", TF_CPP_MIN_LOG_LEVEL="2")
    out = subprocess.run([sys.executable, "-c", _CHILD.format(tests=os.path.dirname(__file__))],
                         capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == "off: disabled by OPFORGE_ONEDNN=0"


def test_capped_at_avx2_inf_and_nan_keep_tensorflows_gradients():
    """oneDNN's AVX2 kernels multiply the padding's zeros by the output gradient: with inf in the
    transposed convolution's input its filter gradient would be NaN where TensorFlow's is finite.
    Capped at AVX2 (OPFORGE_MAX_ISA=avx2, in a child process: oneDNN takes the cap when it
    opens), the inf/NaN gradient checks of test_conv2d_transpose still pass."""
    env = dict(os.environ, OPFORGE_MAX_ISA="avx2", TF_CPP_MIN_LOG_LEVEL="2")
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          os.path.join(os.path.dirname(__file__), "test_conv2d_transpose.py"),
                          "-k", "inf_and_nan_give_tensorflows_exact_gradients"],
                         capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "3 passed" in out.stdout, out.stdout[-2000:]

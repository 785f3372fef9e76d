"""`opforge bench --jax`: every op of `opforge.jax` (its XLA FFI handler, the same C++ kernel
TensorFlow runs) against the same maths written in `jax.numpy` / `jax.lax`, both under
`jax.jit`, on this machine's CPU.

Each row is one case of one op: the opforge.jax call and its jnp rival are compiled once, called
once each to compare their outputs (np.array_equal with NaN equal to NaN, per output: "same
bits"), then timed interleaved (`opforge.tools.timing.interleaved`: the order alternates round by
round; every call ends in `jax.block_until_ready`) and compared by their medians. The ratio is the
jnp rival's median over opforge's: above 1 the FFI call is faster.

The rivals compute what TensorFlow's reference of the op computes (`tf_reference` / `reference`
in `opforge/ops/<op>.py`), written in jnp: `jnp.where(x > 0, x, x * alpha)` for leaky_relu,
`x * sigmoid(x)` for swish, `lax.conv_general_dilated` / `lax.conv_transpose` with TensorFlow's
SAME padding for the convolutions, TensorFlow's ResizeBilinear weights as gathers (and its
gradient as scatter-adds), Keras's BatchNormalization(training=True) formula, yolov3-tf2's
decode, librosa's Griffin-Lim loop with complex64 FFTs, the float64 inverse-DCT matrix of
mfcc_to_mel's tf_reference. Rows "<op> [grad]" time `jax.grad` of the sum of the output with
respect to every float input: opforge's `jax.custom_vjp` (its gradient kernels) against JAX's
autodiff of the rival (the leaky straight-through gradient of clipped_identity is a custom_vjp
there too, as in its TensorFlow reference). The ops JAX has no counterpart of (the NMS, the YOLO
post-processing and target assignment; mel_to_stft's non-negative least squares, for which
jax.scipy.optimize has no bound-constrained solver) are timed alone, "no jnp rival".

The cases are the op specs' first speed cases (`opforge.ops.SPECS`), at their model shapes
(`--size` scales their batch, or sets the element count of the element-wise ones): YOLO feature
maps [8, 52, 52, 256], the YOLO neck's upsamplers, a 52x52x3x85 head, 5 s of 22.05 kHz audio.
`--dtype bfloat16` makes the float inputs bfloat16; an op whose spec has no bfloat16 kernel (the
audio ops, the target assignment) is left out with a line saying so.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from opforge._machine import machine
from opforge.tools.timing import interleaved

Row = Dict[str, object]
DTYPES = ("float32", "bfloat16")
NO_RIVAL = "no jnp rival"


@dataclass
class JaxRun:
    """What one case times: `ours` (an opforge.jax call) and `rival` (the jnp maths, or None)
    take `args` (device arrays) and are jitted by the bench; `outputs` names their outputs (in
    the order of jax.tree_util.tree_leaves) for the bits column; `rival_text` says what the rival
    is (or why there is none)."""

    label: str
    ours: Callable[..., Any]
    args: Tuple[Any, ...]
    rival: Optional[Callable[..., Any]]
    rival_text: str
    outputs: Tuple[str, ...] = ()
    x64: bool = False  # the rival computes in float64 (traced and run with jax_enable_x64)


@dataclass(frozen=True)
class JaxCase:
    """A row of the table: `op` (the opforge.jax function timed), `spec` (the op spec whose
    dtypes it runs in), `setup(size, dtype)` (dtype a NumPy dtype) -> JaxRun. `grad` marks a
    `jax.grad` row ("<op> [grad]")."""

    op: str
    spec: str
    setup: Callable[[Optional[int], Any], JaxRun]
    max_repeats: Optional[int] = None
    grad: bool = False
    group: str = ""  # the opforge.jax module (`opforge bench --jax resize_bilinear` picks all three)

    @property
    def name(self) -> str:
        return f"{self.op} [grad]" if self.grad else self.op


# --- inputs ----------------------------------------------------------------------------------------


def _normal(shape, dtype, seed: int, stddev: float = 1.0):
    """A float input: standard normal (times stddev) drawn in float32, cast to `dtype`."""
    import jax.numpy as jnp

    x = np.random.default_rng(seed).standard_normal(tuple(shape), dtype=np.float32) * np.float32(stddev)
    return jnp.asarray(x).astype(dtype)


def _scaled(shape, size):
    from opforge.ops.spec import scaled_batch

    return scaled_batch(shape, size)


def _name(dtype) -> str:
    return np.dtype(dtype).name


# --- element-wise ops -------------------------------------------------------------------------------

_ACTIVATION_SHAPE = (8, 52, 52, 256)  # a YOLO feature map


def _leaky(x, alpha):
    """TensorFlow's LeakyRelu kernel: features > 0 ? features : features * T(alpha)."""
    import jax.numpy as jnp

    return jnp.where(x > 0, x, x * jnp.asarray(np.float32(alpha), x.dtype))


def _attr(value, dtype):
    """A float attr as the op applies it: float32, then the element type."""
    import jax.numpy as jnp

    return jnp.asarray(np.float32(value), dtype)


def _elementwise(fn: Callable, rival: Callable, rival_text: str, inputs: int = 1,
                 outputs: Tuple[str, ...] = ("y",)) -> Callable:
    def setup(size, dtype):
        shape = _scaled(_ACTIVATION_SHAPE, size)
        args = tuple(_normal(shape, dtype, seed=1 + i, stddev=2.0) for i in range(inputs))
        return JaxRun(f"{'g, x' if inputs == 2 else 'x'} {list(shape)}", fn, args, rival, rival_text, outputs)

    return setup


def _clip_rival(lo_v, hi_v, leak_v):
    """clipped_identity's TensorFlow reference: the clip as two tf.where, its gradient
    tf.where(outside, leak * dy, dy) (a custom gradient, as the reference's)."""
    import jax
    import jax.numpy as jnp

    @jax.custom_vjp
    def clipped(x):
        lo, hi = _attr(lo_v, x.dtype), _attr(hi_v, x.dtype)
        return jnp.where(x < lo, lo, jnp.where(x > hi, hi, x))

    def fwd(x):
        return clipped(x), x

    def bwd(x, dy):
        lo, hi = _attr(lo_v, x.dtype), _attr(hi_v, x.dtype)
        return (jnp.where((x < lo) | (x > hi), dy * _attr(leak_v, dy.dtype), dy),)

    clipped.defvjp(fwd, bwd)
    return clipped


def _bias_leaky_rival(x, b, alpha=0.1):
    """bias_leaky_relu's tf_reference: tf.nn.bias_add then tf.nn.leaky_relu, in float32 for
    half and bfloat16 (rounded once)."""
    import jax.numpy as jnp

    work = jnp.float64 if x.dtype == np.float64 else jnp.float32
    return _leaky(x.astype(work) + b.astype(work), alpha).astype(x.dtype)


def _bias_leaky_setup(size, dtype):
    import opforge.jax as ofj

    shape = _scaled(_ACTIVATION_SHAPE, size)
    x, b = _normal(shape, dtype, 1), _normal(shape[-1:], dtype, 2)
    return JaxRun(f"{list(shape)} + [{shape[-1]}] alpha=0.1", lambda x, b: ofj.bias_leaky_relu(x, b, 0.1), (x, b),
                  _bias_leaky_rival, "x + b, jnp.where(z > 0, z, z * alpha) (float32 for bfloat16, rounded once)",
                  ("y",))


def _element_mul_setup(shapes: Callable[[int], Tuple[List[int], List[int]]], what: str):
    def setup(size, dtype):
        import opforge.jax as ofj

        n = size or (1 << 22)
        sa, sb = shapes(n)
        a, b = _normal(sa, dtype, 4), _normal(sb, dtype, 5)
        return JaxRun(f"{what} {sa} * {sb}", ofj.element_mul, (a, b), lambda a, b: a * b, "a * b (broadcasting)",
                      ("y",))

    return setup


def _side(n: int) -> int:
    return int(round(n ** 0.5))


# --- convolutions -----------------------------------------------------------------------------------


def _tf_same_transpose_pads(in_size: int, out_size: int, k: int, s: int) -> Tuple[int, int]:
    """The pads of tf.nn.conv2d_transpose(padding="SAME") as those of the convolution of the
    stride-dilated input (lax.conv_transpose's explicit padding): TensorFlow pads the forward
    convolution of an `out_size` signal by max((in - 1) s + k - out, 0), the smaller half first."""
    total = max((in_size - 1) * s + k - out_size, 0)
    before = total // 2
    dilated = (in_size - 1) * s + 1
    return k - 1 - before, out_size - dilated + before


def _conv_transpose_rival(k: int, s: int, hw: Tuple[int, int], out_hw: Tuple[int, int]):
    """tf.nn.conv2d_transpose (NHWC, filters [k, k, out, in], SAME) as lax.conv_transpose of the
    forward convolution's kernel (HWIO, transpose_kernel); bfloat16 accumulates in float32 and is
    rounded once, as the op (and TensorFlow's oneDNN kernel)."""
    import jax
    import jax.numpy as jnp

    pads = [_tf_same_transpose_pads(hw[i], out_hw[i], k, s) for i in range(2)]

    def rival(x, f):
        acc = jnp.float64 if x.dtype == np.float64 else jnp.float32
        y = jax.lax.conv_transpose(x, f, (s, s), pads, dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                   transpose_kernel=True, preferred_element_type=acc)
        return y.astype(x.dtype)

    return rival


def _conv_transpose_setup(size, dtype):
    import opforge.jax as ofj

    (n, h, w, ci), k, co, s = _scaled((8, 13, 13, 512), size), 4, 256, 2
    out = [n, h * s, w * s, co]
    x = _normal((n, h, w, ci), dtype, 8)
    f = _normal((k, k, co, ci), dtype, 9, stddev=0.05)
    return JaxRun(f"[{n}, {h}, {w}, {ci}] -> {out[1:]} {k}x{k} s{s} SAME (YOLO neck upsampler)",
                  lambda x, f: ofj.conv2d_transpose(x, f, out, s), (x, f),
                  _conv_transpose_rival(k, s, (h, w), (h * s, w * s)),
                  "lax.conv_transpose(HWIO, transpose_kernel=True, TensorFlow's SAME pads)", ("y",))


def _fused_conv_rival(x, w, b, alpha=0.1):
    """fused_conv2d_bias_leaky_relu's tf_reference: tf.nn.conv2d (SAME, stride 1) + bias_add +
    leaky_relu, in float32 for bfloat16 (its products are exact in float32: preferred_element_type)
    and rounded once."""
    import jax
    import jax.numpy as jnp

    acc = jnp.float64 if x.dtype == np.float64 else jnp.float32
    z = jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                     preferred_element_type=acc)
    return _leaky(z + b.astype(acc), alpha).astype(x.dtype)


def _fused_conv_setup(size, dtype):
    import opforge.jax as ofj

    shape, k, co = _scaled((8, 52, 52, 128), size), 3, 256
    x = _normal(shape, dtype, 1)
    w = _normal((k, k, shape[3], co), dtype, 2, stddev=0.05)
    b = _normal((co,), dtype, 3)
    return JaxRun(f"Darknet 3x3 {list(shape)} -> {k}x{k}x{co} s1 SAME alpha=0.1",
                  lambda x, w, b: ofj.fused_conv2d_bias_leaky_relu(x, w, b, 1, "SAME", alpha=0.1), (x, w, b),
                  _fused_conv_rival, "lax.conv_general_dilated(SAME) + b, leaky (float32 accumulation)", ("y",))


# --- resize -----------------------------------------------------------------------------------------


def _resize_weights(out_size: int, in_size: int, half_pixel: bool):
    """TensorFlow's compute_interpolation_weights (resize_bilinear_op.cc), in float32: the lower
    and upper source rows and the lerp of every output row (align_corners False)."""
    scale = np.float32(in_size) / np.float32(out_size)
    i = np.arange(out_size, dtype=np.float32)
    src = (i + np.float32(0.5)) * scale - np.float32(0.5) if half_pixel else i * scale
    src = src.astype(np.float32)
    floor = np.floor(src)
    lower = np.maximum(floor.astype(np.int64), 0)
    upper = np.minimum(np.ceil(src).astype(np.int64), in_size - 1)
    return lower.astype(np.int32), upper.astype(np.int32), (src - floor).astype(np.float32)


def _resize_rival(in_hw, out_hw, half_pixel: bool):
    """tf.raw_ops.ResizeBilinear in float32: top = tl + (tr - tl) * xl, bottom likewise,
    out = top + (bottom - top) * yl, the sources gathered by TensorFlow's indices."""
    import jax.numpy as jnp

    ylo, yhi, yl = _resize_weights(out_hw[0], in_hw[0], half_pixel)
    xlo, xhi, xl = _resize_weights(out_hw[1], in_hw[1], half_pixel)

    def rival(images):
        x = images.astype(jnp.float32)
        top, bottom = x[:, ylo], x[:, yhi]
        xw = jnp.asarray(xl)[None, None, :, None]
        t = top[:, :, xlo] + (top[:, :, xhi] - top[:, :, xlo]) * xw
        b = bottom[:, :, xlo] + (bottom[:, :, xhi] - bottom[:, :, xlo]) * xw
        return t + (b - t) * jnp.asarray(yl)[None, :, None, None]

    return rival


def _resize_grad_rival(in_hw, out_hw, half_pixel: bool):
    """tf.raw_ops.ResizeBilinearGrad: every output pixel's gradient scattered (added) into its
    four sources with the forward's weights, in float32, cast to the image's dtype."""
    import jax.numpy as jnp

    ylo, yhi, yl = _resize_weights(out_hw[0], in_hw[0], half_pixel)
    xlo, xhi, xl = _resize_weights(out_hw[1], in_hw[1], half_pixel)

    def rival(grads, image):
        yw = jnp.asarray(yl)[None, :, None, None]
        xw = jnp.asarray(xl)[None, None, :, None]
        dtop, dbottom = (1 - yw) * grads, yw * grads
        out = jnp.zeros(image.shape, jnp.float32)
        out = out.at[:, ylo[:, None], xlo[None, :]].add(dtop * (1 - xw))
        out = out.at[:, ylo[:, None], xhi[None, :]].add(dtop * xw)
        out = out.at[:, yhi[:, None], xlo[None, :]].add(dbottom * (1 - xw))
        out = out.at[:, yhi[:, None], xhi[None, :]].add(dbottom * xw)
        return out.astype(image.dtype)

    return rival


_RESIZE_SHAPE, _RESIZE_SIZE = (8, 52, 52, 128), (104, 104)  # the FPN/YOLO x2 upsample


def _resize_setup(op: str, half_pixel: bool):
    def setup(size, dtype):
        import opforge.jax as ofj

        s = _scaled(_RESIZE_SHAPE, size)
        x = _normal(s, dtype, 8)
        mode = "half-pixel" if half_pixel else "legacy"
        rival = _resize_rival(s[1:3], _RESIZE_SIZE, half_pixel)
        text = f"gathers of TensorFlow's {mode} weights and its lerps, float32"
        if op == "resize":
            return JaxRun(f"{s} -> {_RESIZE_SIZE[0]}x{_RESIZE_SIZE[1]} (tf.image.resize: half-pixel)",
                          lambda x: ofj.resize(x, list(_RESIZE_SIZE)), (x,), rival, text, ("y",))
        return JaxRun(f"{s} -> {_RESIZE_SIZE[0]}x{_RESIZE_SIZE[1]} {mode}",
                      lambda x: ofj.resize_bilinear(x, list(_RESIZE_SIZE), half_pixel_centers=half_pixel), (x,),
                      rival, text, ("y",))

    return setup


def _resize_grad_setup(size, dtype):
    import opforge.jax as ofj

    s = _scaled(_RESIZE_SHAPE, size)
    image = _normal(s, dtype, 8)
    grads = _normal([s[0], *_RESIZE_SIZE, s[3]], np.float32, 9)  # float32 in every dtype
    return JaxRun(f"grads [{s[0]}, {_RESIZE_SIZE[0]}, {_RESIZE_SIZE[1]}, {s[3]}] -> image {s} half-pixel",
                  lambda g, x: ofj.resize_bilinear_grad(g, x, half_pixel_centers=True), (grads, image),
                  _resize_grad_rival(s[1:3], _RESIZE_SIZE, True),
                  "four .at[].add scatters of TensorFlow's weights, float32", ("dimage",))


# --- batch norm -------------------------------------------------------------------------------------


def _batch_norm_rival(x, scale, offset, epsilon=1e-3, alpha=0.1):
    """Keras's BatchNormalization(training=True) then tf.nn.leaky_relu: x in float32,
    tf.nn.moments (mean, then the mean of the squared difference), tf.nn.batch_normalization
    (inv = rsqrt(var + eps) * scale; x * inv + (offset - mean * inv)), cast to x's dtype, the
    activation in it. Returns (y, mean, variance) as the op."""
    import jax
    import jax.numpy as jnp

    xf = x.astype(jnp.float32)
    axes = tuple(range(x.ndim - 1))
    mean = jnp.mean(xf, axes)
    variance = jnp.mean(jnp.square(xf - jax.lax.stop_gradient(mean)), axes)
    inv = jax.lax.rsqrt(variance + np.float32(epsilon)) * scale
    y = (xf * inv + (offset - mean * inv)).astype(x.dtype)
    return _leaky(y, alpha), mean, variance


def _batch_norm_setup(size, dtype):
    import jax.numpy as jnp
    import opforge.jax as ofj

    s = _scaled((8, 52, 52, 128), size)
    x = _normal(s, dtype, 1)
    gamma, beta = jnp.ones(s[-1], jnp.float32), jnp.zeros(s[-1], jnp.float32)
    return JaxRun(f"Darknet BN {list(s)}, training mode, alpha=0.1",
                  lambda x, g, b: tuple(ofj.fused_batch_norm_leaky_relu(x, g, b, alpha=0.1)), (x, gamma, beta),
                  _batch_norm_rival,
                  "Keras BatchNormalization(training=True) + leaky_relu: float32 moments, rsqrt",
                  ("y", "batch_mean", "batch_variance"))


# --- YOLO -------------------------------------------------------------------------------------------


def _yolo_decode_rival(anchors: np.ndarray, num_classes: int, input_size: int):
    """opforge.ops.yolo_decode.tf_yolo_decode (yolov3-tf2's yolo_boxes) in jnp, normalised xyxy
    boxes, computed in float32 for half and bfloat16 (as the op and its NumPy reference) and
    rounded once; scores and class indices from the rounded class scores."""
    import jax
    import jax.numpy as jnp

    def rival(features):
        work = jnp.float64 if features.dtype == np.float64 else jnp.float32
        b, h, w = features.shape[:3]
        na = anchors.shape[0]
        f = features.astype(work).reshape(b, h, w, na, 5 + num_classes)
        txy, twh, obj, cls = f[..., 0:2], f[..., 2:4], f[..., 4:5], f[..., 5:]
        gx, gy = jnp.meshgrid(jnp.arange(w, dtype=work), jnp.arange(h, dtype=work))
        grid = jnp.stack([gx, gy], -1)[:, :, None, :]
        size_xy = jnp.asarray([input_size, input_size], work)
        stride = size_xy / jnp.asarray([w, h], work)
        scale = jnp.asarray(1.0, work)
        bxy = (scale * jax.nn.sigmoid(txy) - (scale - 1) / 2 + grid) * stride / size_xy
        bwh = jnp.exp(twh) * jnp.asarray(anchors, work) / size_xy
        boxes = jnp.concatenate([bxy - bwh / 2, bxy + bwh / 2], -1).reshape(b, h * w * na, 4)
        class_scores = (jax.nn.sigmoid(obj) * jax.nn.sigmoid(cls)).reshape(b, h * w * na, num_classes)
        class_scores = class_scores.astype(features.dtype)
        return (boxes.astype(features.dtype), jnp.max(class_scores, -1),
                jnp.argmax(class_scores, -1).astype(jnp.int32), class_scores)

    return rival


def _yolo_decode_setup(size, dtype):
    import opforge.jax as ofj
    from opforge.ops.yolo_decode import YOLOV3_SPEED_ANCHORS, YOLOV3_SPEED_MASKS

    s = _scaled((8, 52, 52, 3 * 85), size)
    x = _normal(s, dtype, 0)
    anchors = YOLOV3_SPEED_ANCHORS[list(YOLOV3_SPEED_MASKS[2])] / 416.0
    return JaxRun(f"52x52 head {list(s)} (A=3, C=80), 416 input, normalized xyxy",
                  lambda f: tuple(ofj.yolo_decode(f, anchors, 80, 416, normalized=True)), (x,),
                  _yolo_decode_rival(anchors, 80, 416), "yolov3-tf2's decode (tf_yolo_decode) in jnp, float32",
                  ("boxes", "scores", "class_indices", "class_scores"))


def _as_jax(t, dtype=None):
    import jax.numpy as jnp

    a = jnp.asarray(np.asarray(t.numpy() if hasattr(t, "numpy") else t))
    return a if dtype is None else a.astype(dtype)


def _nms_setup(size, dtype):
    import opforge.jax as ofj
    from opforge.ops.combined_non_max_suppression import yolo_like_detections

    batch = 8 if size is None else max(1, int(round(size / (10647 * 80))))
    boxes, scores = (_as_jax(t, dtype) for t in yolo_like_detections(batch))
    kw = dict(max_output_size_per_class=100, max_total_size=100, iou_threshold=0.5, score_threshold=0.5)
    return JaxRun(f"B={batch}, 10647 boxes x 80 classes, score_threshold 0.5",
                  lambda b, s: tuple(ofj.combined_non_max_suppression(b, s, **kw)), (boxes, scores), None,
                  NO_RIVAL + " (JAX has no NMS)")


def _postprocess_setup(size, dtype):
    import opforge.jax as ofj
    from opforge.ops.yolo_decode import YOLOV3_SPEED_ANCHORS, YOLOV3_SPEED_MASKS
    from opforge.ops.yolo_postprocess import yolo_like_heads

    b = 1 if size is None else max(1, int(round(size / (10647 * 85))))
    maps = tuple(_as_jax(m, dtype) for m in yolo_like_heads(b))
    kw = dict(anchors=YOLOV3_SPEED_ANCHORS, anchor_masks=YOLOV3_SPEED_MASKS, num_classes=80, input_size=416,
              max_detections=100, max_detections_per_class=100, iou_threshold=0.5, score_threshold=0.5)
    return JaxRun(f"YOLO-v3 416 heads (13, 26, 52), C=80, B={b}, score_threshold 0.5",
                  lambda *m: tuple(ofj.yolo_postprocess(list(m), **kw)), maps, None,
                  NO_RIVAL + " (decode + NMS: JAX has no NMS)")


def _targets_setup(size, dtype):
    import jax.numpy as jnp
    import opforge.jax as ofj
    from opforge.ops.yolo_targets import YOLOV3_MASKS, YOLOV3_NORMALIZED_ANCHORS, random_boxes

    batch = 8 if size is None else max(1, int(round(size / 400)))
    boxes, cls = random_boxes(batch, 100, seed=5, padding=10)
    anchors = YOLOV3_NORMALIZED_ANCHORS.astype(np.float32)
    return JaxRun(f"B={batch}, 100 boxes (10 padding), grids 13/26/52",
                  lambda b, c: tuple(ofj.yolo_targets(b, c, anchors, YOLOV3_MASKS, (13, 26, 52))),
                  (jnp.asarray(boxes, dtype), jnp.asarray(cls, jnp.int32)), None,
                  NO_RIVAL + " (a per-box assignment loop)")


# --- audio ------------------------------------------------------------------------------------------


def _mfcc_setup(shape):
    def setup(size, dtype):
        import jax.numpy as jnp
        import opforge.jax as ofj
        from opforge.ops.mfcc_to_mel import mfcc_basis

        s = _scaled(shape, size)
        x = _normal(s, dtype, 5, stddev=10.0)
        basis = mfcc_basis(s[-2], 128)  # float64 [n_mels, n_mfcc]

        def rival(m):
            # tf_reference: ref * exp(basis @ mfcc * ln(10) / 10) in float64, rounded once.
            y = jnp.matmul(jnp.asarray(basis, jnp.float64), m.astype(jnp.float64))
            return (1.0 * jnp.exp(y * (0.1 * math.log(10.0)))).astype(m.dtype)

        return JaxRun(f"{list(s)} -> n_mels 128", lambda m: ofj.mfcc_to_mel(m, n_mels=128), (x,), rival,
                      "float64 inverse-DCT matrix @ mfcc, exp (tf_reference), rounded once", ("mel",), x64=True)

    return setup


def _mel_setup(size, dtype):
    import jax.numpy as jnp
    import opforge.jax as ofj

    s = _scaled((1, 128, 216), size)
    rng = np.random.default_rng(3)  # a Mel power spectrogram: noise with a decaying spectrum
    mel = (rng.random(s) * np.exp(-np.arange(s[-2]) / 30.0)[:, None]).astype(np.float32)
    return JaxRun(f"{list(s)} -> n_fft 2048 (5 s of 22.05 kHz)", lambda m: ofj.mel_to_stft(m),
                  (jnp.asarray(mel).astype(dtype),), None,
                  NO_RIVAL + " (non-negative least squares: jax.scipy.optimize has no bounded solver)")


def _stft_tools(n_fft: int, hop: int, frames: int):
    """librosa's centred STFT and ISTFT (hann window of n_fft, zero padding, the ISTFT's
    window-sum normalisation) for n_fft a multiple of hop, in complex64."""
    import jax.numpy as jnp

    r = n_fft // hop
    window = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft))  # scipy's periodic hann
    win = jnp.asarray(window.astype(np.float32))
    # librosa.filters.window_sumsquare in float32, and where it is above float32's tiny.
    wss = np.zeros(n_fft + hop * (frames - 1), np.float32)
    sq = (window ** 2).astype(np.float32)
    for t in range(frames):
        wss[t * hop:t * hop + n_fft] += sq
    wss = jnp.asarray(np.where(wss > np.finfo(np.float32).tiny, wss, np.float32(1)))
    half = n_fft // 2

    def istft(spec):  # [B, F, T] complex -> [B, hop * (T - 1)]
        b = spec.shape[0]
        frames_ = jnp.fft.irfft(spec, n=n_fft, axis=-2) * win[:, None]  # [B, n_fft, T]
        parts = frames_.reshape(b, r, hop, frames)
        segs = sum(jnp.pad(parts[:, k], ((0, 0), (0, 0), (k, r - 1 - k))) for k in range(r))  # [B, hop, T + r - 1]
        y = jnp.swapaxes(segs, 1, 2).reshape(b, -1) / wss
        return y[:, half:-half]

    def stft(y):  # [B, L] -> [B, F, T]
        b = y.shape[0]
        segs = jnp.pad(y, ((0, 0), (half, half))).reshape(b, -1, hop)  # [B, T + r - 1, hop]
        fr = jnp.concatenate([segs[:, k:k + frames] for k in range(r)], axis=-1)  # [B, T, n_fft]
        return jnp.swapaxes(jnp.fft.rfft(fr * win, axis=-1), 1, 2)

    return stft, istft


def _griffin_lim_setup(size, dtype):
    import jax
    import jax.numpy as jnp
    import opforge.jax as ofj

    s = _scaled((1, 1025, 216), size)
    x = jnp.abs(_normal(s, dtype, 4))
    n_iter, n_fft, momentum = 32, 2048, 0.99
    stft, istft = _stft_tools(n_fft, n_fft // 4, s[-1])
    # opforge's seed=0 phases: numpy's RandomState(0).random(S.shape), as librosa's rng.
    phases = np.exp(2j * np.pi * np.random.RandomState(0).random(s)).astype(np.complex64)
    eps = np.float32(np.finfo(np.float32).tiny)

    def rival(S):
        angles = jnp.asarray(phases) * S

        def step(_, carry):
            angles, tprev = carry
            rebuilt = stft(istft(angles))
            a = rebuilt - (momentum / (1 + momentum)) * tprev
            a = a / (jnp.abs(a) + eps) * S
            return a, rebuilt

        angles, _ = jax.lax.fori_loop(0, n_iter, step, (angles, jnp.zeros_like(angles)))
        return istft(angles)

    return JaxRun(f"{list(s)}, {n_iter} iterations, n_fft {n_fft}, hop {n_fft // 4}, seed 0",
                  lambda S: ofj.griffin_lim(S, n_iter=n_iter, seed=0), (x,), rival,
                  "librosa.griffinlim's loop (momentum 0.99) with jnp.fft complex64 STFT/ISTFT, same initial phases",
                  ("audio",))


# --- the cases --------------------------------------------------------------------------------------


def _grad(case: JaxCase, argnums: Tuple[int, ...], names: Tuple[str, ...], output: int = 0,
          max_repeats: Optional[int] = None) -> JaxCase:
    """`jax.grad` of the sum of output `output` with respect to the arguments `argnums`."""

    def setup(size, dtype):
        import jax
        import jax.numpy as jnp

        run = case.setup(size, dtype)

        def grad_of(fn):
            def loss(*args):
                out = fn(*args)
                y = out[output] if isinstance(out, (tuple, list)) else out
                return jnp.sum(y)

            return jax.grad(loss, argnums=argnums)

        return JaxRun(run.label, grad_of(run.ours), run.args, grad_of(run.rival),
                      "jax.grad of the sum: JAX's autodiff of " + run.rival_text, names, run.x64)

    return JaxCase(case.op, case.spec, setup, max_repeats or case.max_repeats, grad=True, group=case.group)


def cases() -> List[JaxCase]:
    """Every row of `opforge bench --jax`, in the order printed."""
    import jax
    import jax.numpy as jnp
    import opforge.jax as ofj

    leaky = JaxCase("leaky_relu", "leaky_relu", _elementwise(
        lambda x: ofj.leaky_relu(x, 0.2), lambda x: _leaky(x, 0.2),
        "jnp.where(x > 0, x, x * alpha)"), 50, group="leaky_relu")
    swish = JaxCase("swish", "swish", _elementwise(
        ofj.swish, lambda x: x * jax.nn.sigmoid(x), "x * jax.nn.sigmoid(x) (tf.nn.silu)"),
        50, group="swish")
    clip = JaxCase("clipped_identity", "clipped_identity", _elementwise(
        lambda x: ofj.clipped_identity(x, -1.0, 1.0, 0.01),
        _clip_rival(-1.0, 1.0, 0.01), "jnp.where(x < lo, lo, jnp.where(x > hi, hi, x)), custom_vjp leak"),
        50, group="clipped_identity")
    bias = JaxCase("bias_leaky_relu", "bias_leaky_relu", _bias_leaky_setup, 40, group="bias_leaky_relu")
    mul_row = JaxCase("element_mul", "element_mul", _element_mul_setup(
        lambda n: ([_side(n), _side(n)], [_side(n)]), "broadcast row"), 50, group="element_mul")
    conv_t = JaxCase("conv2d_transpose", "conv2d_transpose", _conv_transpose_setup, 15, group="conv2d_transpose")
    fused = JaxCase("fused_conv2d_bias_leaky_relu", "fused_conv2d_bias_leaky_relu", _fused_conv_setup, 8,
                    group="fused_conv2d_bias_leaky_relu")
    bn = JaxCase("fused_batch_norm_leaky_relu", "fused_batch_norm_leaky_relu", _batch_norm_setup, 30,
                 group="fused_batch_norm_leaky_relu")

    def _mask_rival(x):
        return _leaky(x, 0.2), jnp.where(x > 0, jnp.ones_like(x), _attr(0.2, x.dtype))

    return [
        leaky,
        _grad(leaky, (0,), ("dx",)),
        JaxCase("leaky_relu_with_mask", "leaky_relu_with_mask", _elementwise(
            lambda x: tuple(ofj.leaky_relu_with_mask(x, 0.2)),
            _mask_rival, "leaky_relu's where, jnp.where(x > 0, 1, alpha)", outputs=("activations", "mask")),
            50, group="leaky_relu"),
        JaxCase("leaky_relu_grad", "leaky_relu", _elementwise(
            lambda g, x: ofj.leaky_relu_grad(g, x, 0.2),
            lambda g, x: jnp.where(x > 0, g, g * _attr(0.2, g.dtype)), "jnp.where(x > 0, g, g * alpha)",
            inputs=2, outputs=("backprops",)), 50, group="leaky_relu"),
        swish,
        _grad(swish, (0,), ("dx",)),
        JaxCase("swish_grad", "swish", _elementwise(
            ofj.swish_grad,
            lambda g, x: g * (jax.nn.sigmoid(x) * (1 + x * (1 - jax.nn.sigmoid(x)))),
            "g * (s * (1 + x * (1 - s))), s = sigmoid(x) (TensorFlow's gradient)", inputs=2,
            outputs=("backprops",)), 50, group="swish"),
        clip,
        _grad(clip, (0,), ("dx",)),
        JaxCase("clipped_identity_grad", "clipped_identity", _elementwise(
            lambda g, x: ofj.clipped_identity_grad(g, x, -1.0, 1.0, 0.01),
            lambda g, x: jnp.where((x < _attr(-1.0, x.dtype)) | (x > _attr(1.0, x.dtype)), g * _attr(0.01, g.dtype),
                                   g),
            "jnp.where(outside, g * leak, g)", inputs=2, outputs=("backprops",)), 50, group="clipped_identity"),
        bias,
        _grad(bias, (0, 1), ("dx", "db")),
        JaxCase("element_mul", "element_mul", _element_mul_setup(lambda n: ([n], [n]), "same shape"), 50,
                group="element_mul"),
        mul_row,
        _grad(mul_row, (0, 1), ("da", "db")),
        conv_t,
        _grad(conv_t, (0, 1), ("dx", "dfilters"), max_repeats=8),
        fused,
        _grad(fused, (0, 1, 2), ("dx", "dw", "db"), max_repeats=5),
        JaxCase("resize_bilinear", "resize_bilinear", _resize_setup("resize_bilinear", False), 25,
                group="resize_bilinear"),
        JaxCase("resize_bilinear", "resize_bilinear", _resize_setup("resize_bilinear", True), 25,
                group="resize_bilinear"),
        JaxCase("resize", "resize", _resize_setup("resize", True), 25, group="resize_bilinear"),
        JaxCase("resize_bilinear_grad", "resize_bilinear", _resize_grad_setup, 15, group="resize_bilinear"),
        bn,
        _grad(bn, (0, 1, 2), ("dx", "dscale", "doffset"), max_repeats=20),
        JaxCase("yolo_decode", "yolo_decode", _yolo_decode_setup, 25, group="yolo_decode"),
        JaxCase("combined_non_max_suppression", "combined_non_max_suppression", _nms_setup, 15,
                group="combined_non_max_suppression"),
        JaxCase("yolo_postprocess", "yolo_postprocess", _postprocess_setup, 15, group="yolo_postprocess"),
        JaxCase("yolo_targets", "yolo_targets", _targets_setup, 15, group="yolo_targets"),
        JaxCase("mfcc_to_mel", "mfcc_to_mel", _mfcc_setup((1, 20, 216)), 40, group="mfcc_to_mel"),
        JaxCase("mfcc_to_mel", "mfcc_to_mel", _mfcc_setup((16, 20, 216)), 30, group="mfcc_to_mel"),
        JaxCase("mel_to_stft", "mel_to_stft", _mel_setup, 5, group="mel_to_stft"),
        JaxCase("griffin_lim", "griffin_lim", _griffin_lim_setup, 8, group="griffin_lim"),
    ]


def op_functions() -> List[str]:
    """The ops of opforge.jax: the functions of its op modules (no result types, no constants,
    not the package's `targets`)."""
    import opforge.jax as ofj

    return sorted(name for module in ofj.MODULES for name in module.__all__
                  if callable(getattr(module, name)) and not isinstance(getattr(module, name), type))


# --- comparing and timing ---------------------------------------------------------------------------


def same_bits(a, b) -> Tuple[bool, Optional[float]]:
    """Whether two outputs are the same values (np.array_equal, NaN equal to NaN), and where
    they are not (and have one shape) the largest |a - b| in float64."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False, None
    if a.dtype.kind in "iub":
        return bool(np.array_equal(a, b)), (None if np.array_equal(a, b) else
                                            float(np.abs(a.astype(np.float64) - b.astype(np.float64)).max()))
    if a.dtype.kind == "c":
        a, b = a.view(np.float32 if a.dtype == np.complex64 else np.float64), b.view(
            np.float32 if b.dtype == np.complex64 else np.float64)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    if np.array_equal(a64, b64, equal_nan=True):
        return True, None
    both_nan = np.isnan(a64) & np.isnan(b64)
    diff = np.where(both_nan, 0.0, np.abs(a64 - b64))
    return False, float(np.nan_to_num(diff, nan=np.inf).max())


def bits_text(names: Sequence[str], ours, theirs) -> Tuple[str, List[bool]]:
    """The bits column: "yes" where every output is the same, else each output's verdict
    ("boxes no (max |diff| 1.2e-07)")."""
    import jax

    a, b = jax.tree_util.tree_leaves(ours), jax.tree_util.tree_leaves(theirs)
    if len(a) != len(b):
        return f"no ({len(a)} outputs against {len(b)})", [False]
    names = list(names) + [f"output {i}" for i in range(len(names), len(a))]
    verdicts = [same_bits(x, y) for x, y in zip(a, b)]
    flags = [v[0] for v in verdicts]
    if all(flags):
        return "yes", flags

    def verdict(same, diff):
        if same:
            return "yes"
        return "no (shape or dtype)" if diff is None else f"no (max |diff| {diff:.2g})"

    if len(verdicts) == 1:
        return verdict(*verdicts[0]), flags
    return ", ".join(f"{name} {verdict(*v)}" for name, v in zip(names, verdicts)), flags


def time_case(case: JaxCase, size: Optional[int], repeats: int, dtype) -> Row:
    """Sets up, compiles, compares and times one case; its row."""
    import contextlib

    import jax

    run = case.setup(size, dtype)
    # A rival in float64 (mfcc_to_mel's) is traced and run with jax_enable_x64; the opforge call
    # beside it too, so that both run under the same configuration.
    scope = jax.enable_x64(True) if run.x64 else contextlib.nullcontext()
    with scope:
        ours = jax.jit(run.ours)
        out_ours = jax.block_until_ready(ours(*run.args))  # compiles
        candidates = {"opforge": lambda: jax.block_until_ready(ours(*run.args))}
        bits, flags = NO_RIVAL, None
        if run.rival is not None:
            rival = jax.jit(run.rival)
            out_rival = jax.block_until_ready(rival(*run.args))
            bits, flags = bits_text(run.outputs, out_ours, out_rival)
            del out_rival
            candidates["jnp"] = lambda: jax.block_until_ready(rival(*run.args))
        del out_ours
        rounds = min(repeats, case.max_repeats or repeats)
        medians = interleaved(candidates, rounds, warmup=1)
    row: Row = {"op": case.name, "case": run.label, "dtype": _name(dtype), "rounds": rounds,
                "opforge_ms": medians["opforge"] * 1e3, "rival": run.rival_text, "same_bits": bits}
    if "jnp" in medians:
        row["jnp_ms"] = medians["jnp"] * 1e3
        row["ratio_vs_jnp"] = medians["jnp"] / medians["opforge"]
        row["same_bits_per_output"] = flags
    return row


def format_rows(rows: List[Row]) -> str:
    """The table: op, case, opforge's and jnp's medians, the ratio, the bits; then the rivals."""
    width = max([22] + [len(str(r["op"])) + 2 for r in rows])
    case_width = max([40] + [len(str(r["case"])) + 2 for r in rows])
    header = (f"{'op':<{width}}{'case':<{case_width}}{'opforge ms':>11}{'jnp ms':>11}{'ratio':>9}  "
              "same bits (np.array_equal, NaN = NaN)")
    lines = [header, "-" * len(header)]
    for r in rows:
        if "jnp_ms" in r:
            jnp_ms, ratio = f"{r['jnp_ms']:11.3f}", f"{r['ratio_vs_jnp']:8.2f}x"
        else:
            jnp_ms, ratio = f"{'-':>11}", f"{'-':>9}"
        lines.append(f"{r['op']:<{width}}{r['case']:<{case_width}}{r['opforge_ms']:>11.3f}{jnp_ms}{ratio}  "
                     f"{r['same_bits']}")
    lines.append("")
    lines.append("jnp rivals (under jax.jit):")
    seen = set()
    for r in rows:
        key = (r["op"], r["rival"])
        if key not in seen:
            seen.add(key)
            lines.append(f"  {r['op']}: {r['rival']}")
    return "\n".join(lines)


def skip_reason(case: JaxCase, dtype: str) -> Optional[str]:
    """Why a case cannot run in `dtype`: its op spec has no kernel of it."""
    import tensorflow as tf

    from opforge.ops import SPECS

    spec = next(s for s in SPECS if s.name == case.spec)
    if tf.as_dtype(dtype) not in spec.dtypes:
        return f"skipped in {dtype}: {case.op} has no {dtype} kernel"
    return None


def run(ops: Sequence[str], size: Optional[int], repeats: int, as_json: bool = False,
        dtype: str = "float32") -> int:
    """`opforge bench --jax`: times the cases of `ops` (op or module names; all by default) and
    prints the table (or `as_json`, rows with the machine)."""
    if dtype not in DTYPES:
        print(f"opforge bench --jax: --dtype must be one of {', '.join(DTYPES)}, got {dtype}")
        return 2
    try:
        import jax
        import jax.numpy as jnp

        import opforge.jax  # noqa: F401  (registers the FFI handlers)
    except ImportError as exc:
        print(f"opforge bench --jax: {exc}")
        return 1
    every = cases()
    known = {c.op for c in every} | {c.group for c in every}
    unknown = [op for op in ops if op not in known]
    if unknown:
        print(f"opforge bench --jax: unknown op(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return 2
    np_dtype = np.dtype(jnp.bfloat16) if dtype == "bfloat16" else np.dtype(np.float32)
    rows: List[Row] = []
    skipped: List[str] = []
    for case in every:
        if ops and case.op not in ops and case.group not in ops:
            continue
        reason = skip_reason(case, dtype)
        if reason is not None:
            if reason not in skipped:
                skipped.append(reason)
            continue
        rows.append(time_case(case, size, repeats, np_dtype))
    versions = f"JAX {jax.__version__} ({jax.default_backend()}, {len(jax.devices())} device(s))"
    if as_json:
        print(json.dumps([dict(r, machine=machine(), jax=jax.__version__) for r in rows]
                         + [{"dtype": dtype, "skipped": s} for s in skipped], indent=2))
        return 0
    print(f"machine: {machine()}")
    print(f"dtype: {dtype}")
    print(f"{versions}: opforge.jax (its XLA FFI handler) against the same maths in jax.numpy / jax.lax, both "
          f"under jax.jit; medians of {repeats} interleaved rounds (slow cases fewer: --json's 'rounds'); "
          "ratio = jnp / opforge, > 1 = opforge faster")
    if rows:
        print(format_rows(rows))
    for s in skipped:
        print(s)
    return 0

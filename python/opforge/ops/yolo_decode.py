"""YOLO-v3 box decoding: `opforge.ops.yolo_decode`, one call from a head's raw output map to
boxes and class scores; C++ ops `Opforge>YoloDecode` and `Opforge>YoloDecodeGrad`."""
from __future__ import annotations

import collections
import math
import numbers
from typing import Optional, Sequence

import numpy as np
import tensorflow as tf

from opforge.ops._common import FLOAT_DTYPES, check_dtype, invalid_argument, lib, python_int, short_repr, to_tensor
from opforge.ops.spec import BadInput, Case, OpSpec, Sample, SpeedCase, SpeedRun, speed_normal
from opforge.ops.spec import numpy_copy

__all__ = ["yolo_decode", "YoloDecodeResult", "YOLO_MAX_LOG_SCALE", "BOX_FORMATS"]
OP_NAMES = ("Opforge>YoloDecode", "Opforge>YoloDecodeGrad")

# log(1000 / 16), torchvision's clamp of tw and th (a box at most 62.5 times its anchor): the
# value to pass as `max_log_scale` for torchvision's boxes, and for what `yolo_decode` computed
# before it took the argument. By default (None) tw and th are not clamped: exp(tw) * anchor_w,
# as Darknet and yolov3-tf2 write it.
YOLO_MAX_LOG_SCALE = math.log(1000.0 / 16.0)
# A float32 attr: a bound beyond float32's range would silently become +-inf.
_FLOAT32_MAX = float(np.finfo(np.float32).max)
BOX_FORMATS = ("xyxy", "yxyx", "center_xywh")

YoloDecodeResult = collections.namedtuple(
    "YoloDecodeResult", ["boxes", "scores", "class_indices", "class_scores"])
YoloDecodeResult.__doc__ = """What `yolo_decode` returns: boxes [B, N, 4], scores [B, N],
class_indices [B, N] (int32) and class_scores [B, N, C], N = H * W * A."""

_OP = "YoloDecode"


def _int(op: str, name: str, value) -> int:
    return python_int(op, name, value, "an int")


def max_log_scale_attr(op: str, max_log_scale) -> float:
    """The op's float attr for `max_log_scale`: None is +inf (no clamp); a number is checked for
    its Python type and the float32 range here, its value by the core (NaN and -inf are errors)."""
    if max_log_scale is None:
        return math.inf
    if isinstance(max_log_scale, np.ndarray) and max_log_scale.ndim == 0:
        max_log_scale = max_log_scale.item()
    if isinstance(max_log_scale, (bool, np.bool_)) or not isinstance(max_log_scale, numbers.Real):
        raise invalid_argument(op, "max_log_scale", "None (no clamp) or a number, e.g. YOLO_MAX_LOG_SCALE",
                               short_repr(max_log_scale))
    try:
        value = float(max_log_scale)
    except OverflowError:
        value = math.inf if max_log_scale > 0 else -math.inf  # an int beyond any float: named below
    if (math.isinf(value) and not isinstance(max_log_scale, (float, np.floating))) or (
            math.isfinite(value) and abs(value) > _FLOAT32_MAX):
        # 10**400 or 1e39: beyond the float32 attr, which would make it +-inf.
        raise invalid_argument(op, "max_log_scale", "a finite value within the float32 range or +inf (no clamp)",
                               short_repr(max_log_scale))
    return value


def decode_attrs(op: str, num_classes, input_size, box_format, normalized, scale_x_y,
                 max_log_scale=None) -> dict:
    """The attrs of the C++ op from the wrapper's arguments, checked for Python types (the core
    checks the values)."""
    num_classes = _int(op, "num_classes", num_classes)
    if isinstance(input_size, numbers.Integral) and not isinstance(input_size, bool):
        input_size = (input_size, input_size)
    try:
        size = [_int(op, "input_size", v) for v in input_size]
    except TypeError:
        raise invalid_argument(op, "input_size", "[height, width] as two ints", repr(input_size)) from None
    except tf.errors.InvalidArgumentError:
        raise invalid_argument(op, "input_size", "[height, width] as two ints", repr(input_size)) from None
    if not isinstance(box_format, str):
        raise invalid_argument(op, "box_format", "one of " + ", ".join(repr(f) for f in BOX_FORMATS),
                               repr(box_format))
    if not isinstance(normalized, bool):
        raise invalid_argument(op, "normalized", "a Python bool", repr(normalized))
    if isinstance(scale_x_y, bool) or not isinstance(scale_x_y, numbers.Real):
        raise invalid_argument(op, "scale_x_y", "a number >= 1", repr(scale_x_y))
    if abs(float(scale_x_y)) > 3.4e38:
        raise invalid_argument(op, "scale_x_y", "a finite value >= 1", repr(scale_x_y))
    return dict(num_classes=num_classes, input_size=size, box_format=box_format,
                normalized=normalized, scale_x_y=float(scale_x_y),
                max_log_scale=max_log_scale_attr(op, max_log_scale))


def check_constant_anchors(op: str, anchors: tf.Tensor, argument: str = "anchors") -> None:
    """Where `anchors` (as the op gets them, in the features' dtype) are known now, the check the
    kernel runs on their values (CheckYoloAnchors, with its message), so that a bad anchor of a
    tf.function or a Keras layer is named when the graph is built, not when it first runs."""
    if anchors.shape.rank != 2 or anchors.shape[1] != 2:
        return  # a shape error (an empty [0, 2^62] too, which NumPy cannot hold): the core names it
    value = tf.get_static_value(anchors)
    if value is None:
        return
    for k, (w, h) in enumerate(np.asarray(value, np.float64)):
        if not (w > 0 and h > 0 and math.isfinite(w) and math.isfinite(h)):
            raise invalid_argument(op, f"{argument}[{k}]", "a finite, positive (width, height)", f"[{w:g}, {h:g}]")


def yolo_decode(
    features,
    anchors,
    num_classes: int,
    input_size: Sequence[int],
    box_format: str = "xyxy",
    normalized: bool = False,
    scale_x_y: float = 1.0,
    max_log_scale: Optional[float] = None,
    name: Optional[str] = None,
) -> YoloDecodeResult:
    """Decodes one YOLO-v3 head output into boxes and class scores.

    Args:
      features: [B, H, W, A*(5+C)] (or [B, H, W, A, 5+C]) float16, bfloat16, float32 or float64;
        for anchor a the channels a*(5+C)+k hold tx, ty, tw, th (k=0..3), the objectness logit
        (k=4) and the class logits (the Darknet / yolov3-tf2 layout).
      anchors: [A, 2] (width, height) in input pixels, finite and positive; cast to the dtype
        of features.
      num_classes: C.
      input_size: [height, width] of the network input (an int for a square input); the strides
        are input_h / H and input_w / W.
      box_format: "xyxy", "yxyx" (what the tf.image NMS ops take) or "center_xywh".
      normalized: divide x by input_w and y by input_h (boxes in [0, 1]).
      scale_x_y: YOLO-v4's grid sensitivity (1: YOLO-v3).
      max_log_scale: None (the default): bw = exp(tw) * anchor_w as written. A number clamps tw
        and th there first, bw = exp(min(tw, max_log_scale)) * anchor_w, with no gradient above
        it: `YOLO_MAX_LOG_SCALE` = log(1000 / 16) is torchvision's clamp (boxes at most 62.5
        times their anchor), what this op did before it took the argument. A float32 attr.

    For the cell in column cx, row cy: bx = (scale_x_y * sigmoid(tx) - (scale_x_y - 1) / 2 + cx)
    * stride_x (same for by), bw = exp(tw) * anchor_w (same for bh), the plain formula of Darknet
    and yolov3-tf2. Only where a box coordinate (after `normalized`) would pass the largest
    finite value of the dtype (65504 for half, ~3.4e38 for float32; exp(tw) overflows float32 at
    tw = 88.7) is it saturated at that value, with a zero gradient there (the derivative of the
    saturated function); finite features thus always give finite boxes. NaN stays NaN.

    Returns:
      A YoloDecodeResult (boxes [B, N, 4], scores [B, N], class_indices [B, N] int32,
      class_scores [B, N, C]) with box n = (cy * W + cx) * A + a, N = H * W * A;
      class_scores = sigmoid(obj) * sigmoid(class_c), scores their max, class_indices the argmax
      (the lowest index on ties). half and bfloat16 are computed in float.

    Gradients flow to features from boxes, scores (to the winning class and the objectness) and
    class_scores (the C++ op `Opforge>YoloDecodeGrad`); none to anchors or class_indices.

    Raises:
      InvalidArgumentError: features neither [B, H, W, A*(5+C)] nor [B, H, W, A, 5+C] for the A
        rows of anchors; an anchor that is NaN, infinite or not positive (here when the anchors
        are constant, else when the op runs); a bad num_classes, input_size, box_format,
        scale_x_y or max_log_scale (NaN, -inf).
    """
    attrs = decode_attrs(_OP, num_classes, input_size, box_format, normalized, scale_x_y, max_log_scale)
    features = to_tensor(_OP, "features", features)
    check_dtype(_OP, "features", features, FLOAT_DTYPES)
    anchors = to_tensor(_OP, "anchors", anchors)
    if not (anchors.dtype.is_floating or anchors.dtype.is_integer):
        raise invalid_argument(_OP, "anchors", "a float or integer tensor", anchors.dtype.name)
    anchors = tf.cast(anchors, features.dtype)
    check_constant_anchors(_OP, anchors)
    return YoloDecodeResult(*lib().opforge_yolo_decode(features, anchors, name=name, **attrs))


def _attrs_of(op) -> dict:
    return {k: op.get_attr(k) for k in ("num_classes", "input_size", "box_format", "normalized",
                                        "scale_x_y", "max_log_scale")}


@tf.RegisterGradient("Opforge>YoloDecode")
def _yolo_decode_gradient(op, grad_boxes, grad_scores, grad_class_indices, grad_class_scores):
    del grad_class_indices  # integer
    features, anchors = op.inputs
    # An output without a gradient (None: TensorFlow usually passes zeros instead) goes to the
    # op as an empty [0] tensor, which it reads as zeros.
    grads = [tf.zeros([0], features.dtype) if g is None else g
             for g in (grad_boxes, grad_scores, grad_class_scores)]
    return lib().opforge_yolo_decode_grad(*grads, features, anchors, **_attrs_of(op)), None


# --- the reference and the rival: the same maths in NumPy and in TensorFlow ops ---------------------


def _sigmoid(x):
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(-np.abs(x))
        return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype)


def _bound(max_log_scale):
    """The clamp as the op applies it (a float32 attr), or None."""
    return None if max_log_scale is None or max_log_scale == math.inf else float(np.float32(max_log_scale))


def numpy_yolo_decode(features, anchors, num_classes, input_size, box_format="xyxy",
                      normalized=False, scale_x_y=1.0, max_log_scale=None):
    """An independent NumPy reference, computed in float32 for half, bfloat16 and float32 (as
    the op does) and in float64 for float64, outputs in the dtype of features: the plain formula
    bw = exp(tw) * anchor_w (/ input_w); where that overflows the compute type though tw is
    finite, the size in extended precision (np.longdouble, whose range holds exp of any float32
    and of float64 up to 11356) rounded once, so that a size the dtype holds is never lost to an
    overflow of exp alone; every coordinate saturated at the dtype's largest finite value (NaN
    stays NaN)."""
    out_dtype = tf.as_dtype(features.dtype)
    f = np.asarray(tf.cast(features, tf.float64 if out_dtype == tf.float64 else tf.float32))
    a = np.asarray(tf.cast(anchors, f.dtype))
    ct = f.dtype.type
    if isinstance(input_size, int):
        input_size = (input_size, input_size)
    b, h, w = f.shape[:3]
    na = a.shape[0]
    f = f.reshape(b, h, w, na, 5 + num_classes)
    in_h, in_w = ct(input_size[0]), ct(input_size[1])
    stride_x, stride_y = in_w / ct(w), in_h / ct(h)
    scale = ct(np.float32(scale_x_y))  # a float attr of the op, float64 maths or not
    offset = (scale - ct(1)) / ct(2)
    cx = np.arange(w, dtype=f.dtype)[None, None, :, None]
    cy = np.arange(h, dtype=f.dtype)[None, :, None, None]
    bound = _bound(max_log_scale)
    largest = ct(out_dtype.max)
    ld = np.longdouble
    with np.errstate(over="ignore", invalid="ignore"):
        bx = (scale * _sigmoid(f[..., 0]) - offset + cx) * stride_x
        by = (scale * _sigmoid(f[..., 1]) - offset + cy) * stride_y
        twh = f[..., 2:4]
        if bound is not None:
            twh = np.where(twh > ct(bound), ct(bound), twh)
        divisor = np.array([in_w, in_h] if normalized else [1, 1], f.dtype)
        bwh = np.exp(twh) * a / divisor
        overflow = np.isinf(bwh) & np.isfinite(twh)
        exact = (np.exp(twh.astype(ld)) * a.astype(ld) / divisor.astype(ld)).astype(f.dtype)
        bwh = np.where(overflow, exact, bwh)
        if normalized:
            bx, by = bx / in_w, by / in_h
        bw, bh = bwh[..., 0], bwh[..., 1]
        hw, hh = bw / ct(2), bh / ct(2)
        if box_format == "xyxy":
            boxes = np.stack([bx - hw, by - hh, bx + hw, by + hh], -1)
        elif box_format == "yxyx":
            boxes = np.stack([by - hh, bx - hw, by + hh, bx + hw], -1)
        else:
            boxes = np.stack([bx, by, bw, bh], -1)
        boxes = np.clip(boxes, -largest, largest)  # NaN stays NaN
        class_scores = _sigmoid(f[..., 4:5]) * _sigmoid(f[..., 5:])
    n = h * w * na
    boxes = tf.cast(boxes.reshape(b, n, 4), out_dtype)
    class_scores = tf.cast(class_scores.reshape(b, n, num_classes), out_dtype)
    rounded = class_scores.numpy().astype(np.float64)
    indices = np.argmax(rounded, axis=-1) if num_classes else np.zeros((b, n), np.int64)
    scores = np.take_along_axis(rounded, indices[..., None], -1)[..., 0]
    return YoloDecodeResult(boxes, tf.cast(scores, out_dtype), tf.constant(indices, tf.int32),
                            class_scores)


def _tf_parts(features, anchors, num_classes, input_size, normalized, scale_x_y, max_log_scale):
    """yolov3-tf2's decode up to the box sizes, in TensorFlow ops: the centres (normalised when
    asked), tw and th (clamped when asked), the anchors and the divisor of the sizes."""
    dtype = features.dtype
    if isinstance(input_size, int):
        input_size = (input_size, input_size)
    shape = tf.shape(features)
    b, h, w = shape[0], shape[1], shape[2]
    anchors = tf.cast(anchors, dtype)
    na = tf.shape(anchors)[0]
    f = tf.reshape(features, tf.stack([b, h, w, na, 5 + num_classes]))
    txy, twh, obj, cls = tf.split(f, (2, 2, 1, num_classes), axis=-1)
    grid_x, grid_y = tf.meshgrid(tf.range(w), tf.range(h))
    grid = tf.cast(tf.stack([grid_x, grid_y], axis=-1)[:, :, None, :], dtype)
    size_xy = tf.constant([input_size[1], input_size[0]], dtype)
    stride = size_xy / tf.cast(tf.stack([w, h]), dtype)
    scale = tf.cast(np.float32(scale_x_y), dtype)  # a float attr of the op, float64 maths or not
    bxy = (scale * tf.sigmoid(txy) - (scale - 1) / 2 + grid) * stride
    bound = _bound(max_log_scale)
    if bound is not None:
        twh = tf.minimum(twh, tf.constant(bound, dtype))
    divisor = size_xy if normalized else tf.ones([2], dtype)
    if normalized:
        bxy = bxy / size_xy
    class_scores = tf.reshape(tf.sigmoid(obj) * tf.sigmoid(cls), tf.stack([b, h * w * na, num_classes]))
    return bxy, twh, anchors, divisor, class_scores, tf.stack([b, h * w * na, 4])


def _corners(box_format, bxy, bwh):
    if box_format == "center_xywh":
        return tf.concat([bxy, bwh], -1)
    lo, hi = bxy - bwh / 2, bxy + bwh / 2
    return tf.concat([lo, hi], -1) if box_format == "xyxy" else tf.concat([lo[..., ::-1], hi[..., ::-1]], -1)


def _result(boxes, class_scores, boxes_shape):
    return YoloDecodeResult(tf.reshape(boxes, boxes_shape), tf.reduce_max(class_scores, -1),
                            tf.argmax(class_scores, -1, output_type=tf.int32), class_scores)


def tf_yolo_decode(features, anchors, num_classes, input_size, box_format="xyxy", normalized=False,
                   scale_x_y=1.0, max_log_scale=None):
    """The same maths written with TensorFlow ops the way yolov3-tf2's `yolo_boxes` and
    `yolo_nms` do it, bw = exp(tw) * anchor_w (tw clamped first where max_log_scale is given):
    the rival of the speed benchmarks, and the decode of the `ops="tf"` models. Unlike the op it
    does not saturate: a box beyond the dtype's range is inf, and its gradient NaN."""
    bxy, twh, anchors, divisor, class_scores, shape = _tf_parts(
        features, anchors, num_classes, input_size, normalized, scale_x_y, max_log_scale)
    bwh = tf.exp(twh) * anchors / divisor if normalized else tf.exp(twh) * anchors
    return _result(_corners(box_format, bxy, bwh), class_scores, shape)


def saturating_tf_yolo_decode(features, anchors, num_classes, input_size, box_format="xyxy",
                              normalized=False, scale_x_y=1.0, max_log_scale=None):
    """`tf_yolo_decode` with the op's saturation, in TensorFlow ops so that its autodiff gradient
    is exact too (the spec's answer for inf and NaN inputs): a coordinate beyond the dtype's
    largest finite value is that value, with no gradient; a size every coordinate of which
    saturated is computed from tw = 0 for the gradient's sake (tf.where passes 0 * inf = NaN
    otherwise)."""
    bxy, twh, anchors, divisor, class_scores, shape = _tf_parts(
        features, anchors, num_classes, input_size, normalized, scale_x_y, max_log_scale)
    largest = tf.constant(features.dtype.max, features.dtype)
    raw = tf.stop_gradient(_corners(box_format, bxy, tf.exp(twh) * anchors / divisor))
    saturated = tf.abs(raw) > largest  # NaN: False
    # Per size (w, h): every coordinate it moves saturated.
    if box_format == "center_xywh":
        dead = saturated[..., 2:4]
    elif box_format == "xyxy":
        dead = saturated[..., 0:2] & saturated[..., 2:4]
    else:
        dead = (saturated[..., 0:2] & saturated[..., 2:4])[..., ::-1]
    safe = tf.where(dead, tf.zeros_like(twh), twh)
    boxes = _corners(box_format, bxy, tf.exp(safe) * anchors / divisor)
    boxes = tf.where(saturated, tf.sign(raw) * largest, boxes)
    return _result(boxes, class_scores, shape)


# --- spec ---------------------------------------------------------------------------------------

# (features shape, A, C, input_size, attrs): non-square grids and inputs, every format.
_GEOMETRIES = (
    ((2, 3, 4, 3 * 7), 3, 2, (96, 128), dict(box_format="xyxy")),
    ((1, 5, 2, 2 * 6), 2, 1, (160, 64), dict(box_format="yxyx", normalized=True)),
    ((2, 2, 3, 4, 9), 4, 4, (64, 96), dict(box_format="center_xywh", scale_x_y=1.05)),
    ((1, 1, 1, 8), 1, 3, (32, 32), dict(normalized=True, scale_x_y=2.0)),
    ((0, 4, 4, 3 * 6), 3, 1, (128, 128), {}),  # batch 0
)
_ANCHORS = ((10.0, 13.0), (16.0, 30.0), (33.0, 23.0), (30.0, 61.0))


def _case(i, shape, a, c, size, attrs, specials=False):
    anchors = Sample((a, 2), values=_ANCHORS[:a], differentiable=False)
    name = f"{list(shape)} A={a} C={c} {size} {attrs.get('box_format', 'xyxy')}" + (
        " normalized" if attrs.get("normalized") else "") + (" specials" if specials else "")
    return Case(name, (Sample(shape, seed=300 + i, scale=2.0, specials=specials), anchors),
                dict(num_classes=c, input_size=size, **attrs))


def _yolo_speed_inputs(size, seed=0, dtype=tf.float32):
    """Head outputs of a 416x416 YOLO-v3 (grids 13, 26, 52; A=3, C=80) in `dtype`, batch 8 (or
    scaled so the three maps hold about `size` elements)."""
    shapes = [(8, g, g, 255) for g in (13, 26, 52)]
    if size is not None:
        total = sum(int(np.prod(s[1:])) for s in shapes)
        b = max(1, int(round(size / total)))
        shapes = [(b,) + s[1:] for s in shapes]
    feats = [speed_normal(s, dtype, seed=seed + i) for i, s in enumerate(shapes)]
    return shapes, feats


def _saturating_features():
    """Features [1, 2, 3, 2 * 7] whose tw, th are far past every dtype's range (800 overflows
    float64's exp, 1e4 every one) or far below it (box sizes 0), the rest ~N(0, 1)."""
    f = np.random.default_rng(8).normal(size=(1, 2, 3, 2, 7))
    f[..., 2] = np.array([800.0, 1e4, -800.0, 2.0, 1e4, 0.5]).reshape(1, 2, 3)[..., None]
    f[..., 3] = np.array([-1.0, 800.0, 1e4, 800.0, -1e4, 3.0]).reshape(1, 2, 3)[..., None]
    return f.reshape(1, 2, 3, 14)


YOLOV3_SPEED_ANCHORS = np.array([(10, 13), (16, 30), (33, 23), (30, 61), (62, 45), (59, 119),
                                 (116, 90), (156, 198), (373, 326)], np.float32)
YOLOV3_SPEED_MASKS = ((6, 7, 8), (3, 4, 5), (0, 1, 2))


def _decode_speed(gradient: bool) -> SpeedCase:
    def setup(size, dtype):
        shapes, feats = _yolo_speed_inputs(size, dtype=dtype)
        anchors = [YOLOV3_SPEED_ANCHORS[list(m)] / 416.0 for m in YOLOV3_SPEED_MASKS]
        kw = dict(num_classes=80, input_size=(416, 416), normalized=True)

        def make(fn):
            if not gradient:
                return tf.function(lambda *fs: [fn(f, a, **kw) for f, a in zip(fs, anchors)])

            @tf.function
            def step(*fs):
                with tf.GradientTape() as tape:
                    tape.watch(fs)
                    outs = [fn(f, a, **kw) for f, a in zip(fs, anchors)]
                    loss = tf.add_n([tf.reduce_sum(o.boxes) + tf.reduce_sum(o.class_scores)
                                     for o in outs])
                return loss, tape.gradient(loss, fs)  # the loss too, or the forward is pruned
            return step

        ours, theirs = make(yolo_decode), make(tf_yolo_decode)
        label = ("forward+gradient" if gradient else "forward") + \
            f" 3 scales {[list(s) for s in shapes]}"
        candidates = {"opforge": lambda: ours(*feats), "tf": lambda: theirs(*feats)}
        moved = None
        if not gradient:
            # The limit: the forward reads the features and writes about as much (class scores,
            # boxes, scores); a copy of the features moves the same bytes.
            elements = sum(int(np.prod(s)) for s in shapes)
            candidates["copy"] = numpy_copy(elements, dtype)
            moved = 2 * dtype.size * elements
        return SpeedRun(label, candidates, moved)

    return SpeedCase(setup, max_repeats=20)


SPECS = (
    OpSpec(
        name="yolo_decode",
        op=yolo_decode,
        reference=numpy_yolo_decode,
        reference_name="NumPy (the formulas, float32 / float64)",
        exact_reference=saturating_tf_yolo_decode,
        dtypes=FLOAT_DTYPES,
        cases=tuple(_case(i, *g) for i, g in enumerate(_GEOMETRIES)) + (
            _case(9, (1, 2, 2, 2 * 8), 2, 3, (40, 40), {}, specials=True),
            # Large logits: torchvision's clamp (max_log_scale given) and the saturating sigmoid.
            Case("large logits, clamped", (Sample((1, 2, 3, 8), seed=7, scale=60.0),
                                           Sample((1, 2), values=(12.0, 20.0), differentiable=False)),
                 dict(num_classes=3, input_size=(64, 48), max_log_scale=YOLO_MAX_LOG_SCALE)),
            # No clamp: sizes past every dtype's range saturate at its largest value.
            Case("saturated boxes", (Sample((1, 2, 3, 2 * 7), values=_saturating_features(),
                                            differentiable=False),
                                     Sample((2, 2), values=((12.0, 20.0), (30.0, 61.0)), differentiable=False)),
                 dict(num_classes=2, input_size=(64, 48), normalized=True)),
        ),
        # Boxes in pixels (up to a few hundred): a few float32 ulps; half and bfloat16 one ulp of
        # their own at that size; class_indices must match exactly (max_error counts 1 per class).
        forward_tolerance={"float64": 1e-9, "float32": 1e-4, "float16": 0.25, "bfloat16": 2.0},
        gradient_cases=tuple(
            Case(f"{fmt}{' normalized' if norm else ''}",
                 (Sample((2, 2, 3, 2 * 7), seed=40 + k, scale=1.5),
                  Sample((2, 2), values=((10.0, 14.0), (23.0, 27.0)), differentiable=False)),
                 dict(num_classes=2, input_size=(64, 96), box_format=fmt, normalized=norm,
                      scale_x_y=1.1))
            for k, (fmt, norm) in enumerate((("xyxy", False), ("yxyx", True), ("center_xywh", False)))
        ) + (
            # tw, th ~ N(0, 3): past the old clamp at log(62.5), where the gradient is now exp(tw)
            # * anchor_w (normalised: boxes small enough for float64 differences at 1e-6).
            Case("center_xywh normalized, no clamp",
                 (Sample((1, 2, 3, 2 * 7), seed=44, scale=3.0),
                  Sample((2, 2), values=((10.0, 14.0), (23.0, 27.0)), differentiable=False)),
                 dict(num_classes=2, input_size=(64, 96), box_format="center_xywh", normalized=True)),
            Case("xyxy normalized, clamped",
                 (Sample((1, 2, 3, 2 * 7), seed=45, scale=3.0),
                  Sample((2, 2), values=((10.0, 14.0), (23.0, 27.0)), differentiable=False)),
                 dict(num_classes=2, input_size=(64, 96), normalized=True, max_log_scale=YOLO_MAX_LOG_SCALE)),
        ),
        gradient_tolerance=1e-6,
        gradient_delta=1e-6,
        gradient_output=0,
        determinism_case=Case("large", (Sample((3, 26, 26, 3 * 85), seed=11),
                                        Sample((3, 2), values=_ANCHORS[:3], differentiable=False)),
                              dict(num_classes=80, input_size=(416, 416))),
        speed=(_decode_speed(False), _decode_speed(True)),
        bad_inputs={
            "channels not a multiple": BadInput(
                "opforge.ops.yolo_decode(tf.ones([1, 2, 2, 20]), tf.ones([3, 2]), 2, (64, 64))",
                ("features", "multiple of 5 + num_classes = 7", "[1, 2, 2, 20]")),
            "anchor count": BadInput(
                "opforge.ops.yolo_decode(tf.ones([1, 2, 2, 21]), tf.ones([2, 2]), 2, (64, 64))",
                ("features", "2 anchors", "[1, 2, 2, 21]")),
            "num_classes inconsistent": BadInput(
                "opforge.ops.yolo_decode(tf.ones([1, 2, 2, 3, 7]), tf.ones([3, 2]), 3, (64, 64))",
                ("features", "5 + num_classes = 8", "[1, 2, 2, 3, 7]")),
            "rank 3": BadInput(
                "opforge.ops.yolo_decode(tf.ones([2, 2, 21]), tf.ones([3, 2]), 2, (64, 64))",
                ("features", "4-D", "[2, 2, 21]")),
            "graph rank 3": BadInput(
                "tf.function(lambda f: opforge.ops.yolo_decode(f, tf.ones([3, 2]), 2, (64, 64)), "
                "input_signature=[tf.TensorSpec([None, None, None], tf.float32)])"
                ".get_concrete_function()",
                ("YoloDecode", "features", "rank 3"), "ValueError"),  # a shape-function error while tracing is a ValueError, as in TensorFlow
            "anchors shape": BadInput(
                "opforge.ops.yolo_decode(tf.ones([1, 2, 2, 21]), tf.ones([3, 3]), 2, (64, 64))",
                ("anchors", "[num_anchors, 2]", "[3, 3]")),
            "empty grid": BadInput(
                "opforge.ops.yolo_decode(tf.ones([1, 0, 2, 21]), tf.ones([3, 2]), 2, (64, 64))",
                ("features", "height and width >= 1", "[1, 0, 2, 21]")),
            "num_classes zero": BadInput(
                "opforge.ops.yolo_decode(tf.ones([1, 2, 2, 15]), tf.ones([3, 2]), 0, (64, 64))",
                ("num_classes", "at least 1", "0")),
            "num_classes float": BadInput(
                "opforge.ops.yolo_decode(tf.ones([1, 2, 2, 21]), tf.ones([3, 2]), 2.0, (64, 64))",
                ("num_classes", "an int", "2.0"), error="TypeError"),
            "input_size three": BadInput(
                "opforge.ops.yolo_decode(tf.ones([1, 2, 2, 21]), tf.ones([3, 2]), 2, (64, 64, 3))",
                ("input_size", "two positive values", "[64, 64, 3]")),
            "input_size negative": BadInput(
                "opforge.ops.yolo_decode(tf.ones([1, 2, 2, 21]), tf.ones([3, 2]), 2, (64, -1))",
                ("input_size", "two positive values", "[64, -1]")),
            "box_format": BadInput(
                "opforge.ops.yolo_decode(tf.ones([1, 2, 2, 21]), tf.ones([3, 2]), 2, 64, box_format='xywh')",
                ("box_format", "\"xywh\"")),
            "scale_x_y below 1": BadInput(
                "opforge.ops.yolo_decode(tf.ones([1, 2, 2, 21]), tf.ones([3, 2]), 2, 64, scale_x_y=0.5)",
                ("scale_x_y", ">= 1", "0.5")),
            "max_log_scale NaN": BadInput(
                "opforge.ops.yolo_decode(tf.ones([1, 2, 2, 21]), tf.ones([3, 2]), 2, 64, max_log_scale=float('nan'))",
                ("YoloDecode", "max_log_scale", "+inf (no clamp)", "got nan")),
            "max_log_scale -inf": BadInput(
                "opforge.ops.yolo_decode(tf.ones([1, 2, 2, 21]), tf.ones([3, 2]), 2, 64, max_log_scale=float('-inf'))",
                ("YoloDecode", "max_log_scale", "got -inf")),
            "max_log_scale string": BadInput(
                "opforge.ops.yolo_decode(tf.ones([1, 2, 2, 21]), tf.ones([3, 2]), 2, 64, max_log_scale='4')",
                ("YoloDecode", "max_log_scale", "None (no clamp) or a number", "'4'")),
            "max_log_scale beyond float32": BadInput(
                "opforge.ops.yolo_decode(tf.ones([1, 2, 2, 21]), tf.ones([3, 2]), 2, 64, max_log_scale=1e39)",
                ("YoloDecode", "max_log_scale", "float32 range", "1e+39")),
            "anchors NaN": BadInput(
                "opforge.ops.yolo_decode(tf.ones([1, 2, 2, 14]), [[10.0, 13.0], [float('nan'), 30.0]], 2, 64)",
                ("YoloDecode", "anchors[1]", "finite, positive", "[nan, 30]")),
            "anchors not positive, at run time": BadInput(
                "tf.function(lambda a: opforge.ops.yolo_decode(tf.ones([1, 2, 2, 14]), a, 2, 64))"
                "(tf.constant([[10.0, 13.0], [16.0, 0.0]]))",
                ("YoloDecode", "anchors[1]", "finite, positive", "[16, 0]")),
            "grad anchors inf": BadInput(
                "lib().opforge_yolo_decode_grad(tf.ones([1, 8, 4]), tf.ones([1, 8]), tf.ones([1, 8, 2]), "
                "tf.ones([1, 2, 2, 14]), tf.constant([[10.0, 13.0], [float('inf'), 3.0]]), num_classes=2, "
                "input_size=[64, 64])",
                ("YoloDecodeGrad", "anchors[1]", "finite, positive", "[inf, 3]")),
            "features int": BadInput(
                "opforge.ops.yolo_decode(tf.ones([1, 2, 2, 21], tf.int32), tf.ones([3, 2]), 2, 64)",
                ("features", "int32")),
            "grad shape": BadInput(
                "lib().opforge_yolo_decode_grad(tf.ones([1, 12, 3]), tf.ones([1, 12]), tf.ones([1, 12, 2]), "
                "tf.ones([1, 2, 2, 21]), tf.ones([3, 2]), num_classes=2, input_size=[64, 64])",
                ("YoloDecodeGrad", "grad_boxes", "[1, 12, 4]", "[1, 12, 3]")),
        },
    ),
)

"""Bilinear resize: `opforge.ops.resize` is a drop-in for `tf.image.resize`;
`opforge.ops.resize_bilinear` mirrors `tf.compat.v1.image.resize_bilinear`; C++ ops
`Opforge>ResizeBilinear` and `Opforge>ResizeBilinearGrad`."""
from __future__ import annotations

from typing import Optional

import numpy as np
import tensorflow as tf

from tensorflow.python.framework import tensor_util

from opforge._export import STATE as _EXPORT
from opforge.ops._common import (check_dtype, dtype_error, lib, python_bool, python_int,
                                 shape_error, short_repr, to_tensor, type_error, value_error)
from opforge.ops.spec import BadInput, Case, OpSpec, Sample, SpeedCase, SpeedRun, scaled_batch, speed_normal

__all__ = ["resize", "resize_bilinear", "resize_bilinear_grad"]
OP_NAMES = ("Opforge>ResizeBilinear", "Opforge>ResizeBilinearGrad")

# The input dtypes of tf.raw_ops.ResizeBilinear (the output is always float32).
IMAGE_DTYPES = (
    tf.int8,
    tf.uint8,
    tf.int16,
    tf.uint16,
    tf.int32,
    tf.int64,
    tf.bfloat16,
    tf.float16,
    tf.float32,
    tf.float64,
)
# The dtypes the gradient op produces (those of the images it differentiates).
GRAD_DTYPES = (tf.bfloat16, tf.float16, tf.float32, tf.float64)
_IMAGE_SET = frozenset(IMAGE_DTYPES)


def _check_attrs(op: str, align_corners, half_pixel_centers) -> None:
    # Python types only; the C++ core checks the combination for every entry point.
    for name, value in (("align_corners", align_corners), ("half_pixel_centers", half_pixel_centers)):
        if not isinstance(value, bool):
            raise type_error(op, name, "a Python bool", repr(value))


def _size(size) -> tf.Tensor:
    # The conversion of a Python sequence to the int32 tensor the op takes; the C++ core checks
    # the values (two, positive, an output that fits).
    if isinstance(size, tf.Tensor):
        if size.dtype != tf.int32:
            raise dtype_error("ResizeBilinear", "size", "an int32 tensor", size.dtype.name)
        return size
    try:
        if isinstance(size, (str, bytes)):
            raise TypeError
        items = list(size)
    except TypeError:
        raise type_error(
            "ResizeBilinear", "size", "[new_height, new_width] as two ints", repr(size)
        ) from None
    # Ints only: [3.9, 4.99] is an error (as in TensorFlow), not a 3x4 resize.
    values = [python_int("ResizeBilinear", "size", v) for v in items]
    if any(abs(v) > 2**31 - 1 for v in values):
        raise shape_error("ResizeBilinear", "size", "int32 values", values)
    return tf.constant(values, tf.int32)


def resize_bilinear(
    images,
    size,
    align_corners: bool = False,
    half_pixel_centers: bool = False,
    name: Optional[str] = None,
) -> tf.Tensor:
    """Resizes NHWC `images` to `size` = [new_height, new_width] by bilinear interpolation.

    Same arguments, defaults, dtypes and results as `tf.compat.v1.image.resize_bilinear` (that is,
    `tf.raw_ops.ResizeBilinear`), bit for bit, in its three coordinate conventions:
    legacy (the default), `align_corners=True`, and `half_pixel_centers=True` (what
    `tf.image.resize(method="bilinear")` uses). `images` is a 4-D tensor of int8, uint8, int16,
    uint16, int32, int64, bfloat16, float16, float32 or float64; the result is float32.

    The gradient with respect to `images` is the C++ op `Opforge>ResizeBilinearGrad`
    (bit-identical to TensorFlow's, parallel and deterministic).

    Raises:
      InvalidArgumentError: images not 4-D, of zero height, width or channels, or of another
        dtype; size not two positive int32 values; align_corners and half_pixel_centers both true.
    """
    _check_attrs("ResizeBilinear", align_corners, half_pixel_centers)
    if not (isinstance(images, tf.Tensor) and images.dtype in _IMAGE_SET):
        images = to_tensor("ResizeBilinear", "images", images)
        check_dtype("ResizeBilinear", "images", images, IMAGE_DTYPES)
    if _EXPORT.standard:  # tracing for export (opforge._export): TensorFlow's op, the same flags
        return tf.raw_ops.ResizeBilinear(images=images, size=_size(size), align_corners=align_corners,
                                         half_pixel_centers=half_pixel_centers, name=name)
    return lib().opforge_resize_bilinear(
        images,
        _size(size),
        align_corners=align_corners,
        half_pixel_centers=half_pixel_centers,
        name=name,
    )


# The methods of tf.image.resize (tf.image.ResizeMethod's values).
RESIZE_METHODS = ("bilinear", "nearest", "bicubic", "area", "lanczos3", "lanczos5", "gaussian",
                  "mitchellcubic")


def resize(images, size, method: str = "bilinear", *, antialias: bool = False,
           preserve_aspect_ratio: bool = False, name: Optional[str] = None) -> tf.Tensor:
    """A drop-in for `tf.image.resize`: the same arguments and defaults, the same results.

    `images` is 4-D [batch, height, width, channels] or 3-D [height, width, channels] (one
    image, as in a per-image `dataset.map`); the result has the same rank. `size` is
    [new_height, new_width]; with `preserve_aspect_ratio=True` the image is scaled to fit
    inside it, keeping its aspect ratio (TensorFlow's rounding). The output dtype follows
    `tf.image.resize`: float32 for every input dtype (nearest keeps the input's).

    The default, `method="bilinear"` without antialiasing, runs opforge's C++ kernels with
    half-pixel centres, which is what `tf.image.resize` computes: bit for bit, in every input
    dtype, with opforge's gradient. The other methods ("nearest", "bicubic", "area", "lanczos3",
    "lanczos5", "gaussian", "mitchellcubic") and `antialias=True` run TensorFlow's own kernels
    (`tf.image.resize`), so a call never changes meaning when swapped in.

    `antialias` and `preserve_aspect_ratio` are keyword-only: `tf.image.resize` takes
    preserve_aspect_ratio fourth, and a positional call meant for it must not set antialias.

    Where `tf.image.resize` raises ValueError (a bad rank, size or method), so does this, with a
    message naming the argument.
    """
    op = "Resize"
    if not isinstance(method, str) or method not in RESIZE_METHODS:
        raise value_error(op, "method", "one of " + ", ".join(repr(m) for m in RESIZE_METHODS),
                               repr(method))
    python_bool(op, "antialias", antialias)
    python_bool(op, "preserve_aspect_ratio", preserve_aspect_ratio)
    if method != "bilinear" or antialias:
        return tf.image.resize(images, size, method=method, preserve_aspect_ratio=preserve_aspect_ratio,
                               antialias=antialias, name=name)
    if not (isinstance(images, tf.Tensor) and images.dtype in _IMAGE_SET):
        images = to_tensor(op, "images", images)
        check_dtype(op, "images", images, IMAGE_DTYPES)
    rank = images.shape.rank
    if rank not in (3, 4):
        raise value_error(op, "images", "a 3-D [height, width, channels] or 4-D [batch, height, "
                               "width, channels] tensor", f"shape {images.shape}")
    if isinstance(size, tf.Tensor) and size.shape.rank is not None and size.shape.as_list() != [2]:
        # tf.image.resize checks the static shape of size itself (ValueError).
        raise value_error(op, "size", "a 1-D tensor of 2 elements [new_height, new_width]", f"shape {size.shape}")
    if not isinstance(size, (tf.Tensor, tf.Variable, str, bytes)):
        try:
            static = np.shape(size)
        except ValueError:  # ragged: _size says what it expected
            static = (2,)
        if static != (2,):
            raise value_error(op, "size", "[new_height, new_width] (two elements)", short_repr(size))
    size = _size(size)
    if rank == 3:
        images = tf.expand_dims(images, 0)
    if preserve_aspect_ratio:
        # tf.image.resize's arithmetic: float32 scale factors, the smaller one, rounded half to even.
        shape = tf.shape(images, out_type=tf.int64)  # int32 cannot hold every dimension
        height = tf.cast(images.shape[1] if images.shape[1] is not None else shape[1], tf.float32)
        width = tf.cast(images.shape[2] if images.shape[2] is not None else shape[2], tf.float32)
        scale = tf.minimum(tf.cast(size[0], tf.float32) / height, tf.cast(size[1], tf.float32) / width)
        size = tf.stack([tf.cast(tf.round(scale * height), tf.int32),
                         tf.cast(tf.round(scale * width), tf.int32)])
    if _EXPORT.standard:  # tracing for export (opforge._export): TensorFlow's op, the same flags
        out = tf.raw_ops.ResizeBilinear(images=images, size=size, align_corners=False, half_pixel_centers=True,
                                        name=name)
    else:
        out = lib().opforge_resize_bilinear(images, size, align_corners=False, half_pixel_centers=True,
                                            name=name)
    if not tf.executing_eagerly():
        out.set_shape([None, *tensor_util.constant_value_as_shape(size).as_list(), None])
    return out[0] if rank == 3 else out


def resize_bilinear_grad(
    grads,
    original_image,
    align_corners: bool = False,
    half_pixel_centers: bool = False,
    name: Optional[str] = None,
) -> tf.Tensor:
    """The gradient op: mirrors `tf.raw_ops.ResizeBilinearGrad`.

    `grads` (float32, [batch, new_height, new_width, channels]) is the gradient of a resize of
    `original_image` ([batch, height, width, channels], bfloat16, float16, float32 or float64);
    returns the gradient with respect to the image, shaped and typed like `original_image`.
    Unlike TensorFlow, a batch or channel count that differs between the two is an error.
    """
    op = "ResizeBilinearGrad"
    _check_attrs(op, align_corners, half_pixel_centers)
    grads = to_tensor("ResizeBilinearGrad", "grads", grads)
    check_dtype(op, "grads", grads, (tf.float32,))
    original_image = to_tensor("ResizeBilinearGrad", "original_image", original_image)
    check_dtype(op, "original_image", original_image, GRAD_DTYPES)
    return lib().opforge_resize_bilinear_grad(
        grads,
        original_image,
        align_corners=align_corners,
        half_pixel_centers=half_pixel_centers,
        name=name,
    )


@tf.RegisterGradient("Opforge>ResizeBilinear")
def _resize_bilinear_gradient(op, grad):
    images = op.inputs[0]
    if images.dtype not in GRAD_DTYPES:  # integer images have no gradient
        return None, None
    return (
        lib().opforge_resize_bilinear_grad(
            grad,
            images,
            align_corners=op.get_attr("align_corners"),
            half_pixel_centers=op.get_attr("half_pixel_centers"),
        ),
        None,
    )


@tf.RegisterGradient("Opforge>ResizeBilinearGrad")
def _resize_bilinear_grad_gradient(op, grad):
    # The gradient op is linear in grads, with the forward's weights transposed: its own gradient
    # is the forward resize (same attrs) to the size of grads. original_image only gives a shape.
    grads = op.inputs[0]
    size = tf.shape(grads)[1:3]
    resized = lib().opforge_resize_bilinear(
        grad,
        size,
        align_corners=op.get_attr("align_corners"),
        half_pixel_centers=op.get_attr("half_pixel_centers"),
    )
    return resized, None


# --- specs -------------------------------------------------------------------------------------

MODES = {
    "legacy": dict(align_corners=False, half_pixel_centers=False),
    "align_corners": dict(align_corners=True, half_pixel_centers=False),
    "half_pixel": dict(align_corners=False, half_pixel_centers=True),
}
# (images NHWC, (new_height, new_width), mode): the corner cases of the three conventions.
GEOMETRIES = (
    ((2, 4, 4, 3), (8, 8), "half_pixel"),  # negative source coordinates at the top and left
    ((1, 1, 1, 2), (5, 3), "legacy"),  # input size 1
    ((1, 1, 1, 2), (5, 3), "align_corners"),
    ((2, 6, 9, 1), (1, 1), "align_corners"),  # output size 1
    ((2, 6, 9, 1), (1, 1), "half_pixel"),
    ((1, 5, 7, 3), (5, 7), "half_pixel"),  # same size: a conversion, whatever the attrs
    ((1, 13, 13, 8), (26, 26), "legacy"),  # the YOLO neck's x2
    ((2, 9, 4, 2), (3, 11), "align_corners"),  # down in one axis, up in the other
    ((2, 5, 7, 3), (11, 4), "half_pixel"),
    ((0, 4, 4, 2), (2, 3), "legacy"),  # batch 0
)
# The shapes of model upsamplers and downsamplers timed by `opforge bench`.
SPEED_SHAPES = (
    ((8, 52, 52, 128), (104, 104)),  # an FPN/YOLO x2 upsample
    ((16, 224, 224, 3), (512, 512)),  # a large RGB upsample
    ((8, 416, 416, 32), (208, 208)),  # a 2x downsample of a wide feature map
)


def _raw_resize(images, size, **attrs):
    return tf.raw_ops.ResizeBilinear(images=images, size=size, **attrs)


def _raw_resize_grad(grads, original_image, **attrs):
    return tf.raw_ops.ResizeBilinearGrad(grads=grads, original_image=original_image, **attrs)


def _raw_resize_grad_differentiable(grads, original_image, **attrs):
    """tf.raw_ops.ResizeBilinearGrad with its gradient, which TensorFlow does not register: the
    op is linear in grads, and its adjoint is the forward resize to the size of grads."""
    @tf.custom_gradient
    def fn(g):
        def gradient(upstream):
            return tf.raw_ops.ResizeBilinear(images=upstream, size=tf.shape(g)[1:3], **attrs)
        return _raw_resize_grad(g, original_image, **attrs), gradient
    return fn(grads)


def _speed(shape, new_size, mode: str, gradient: bool) -> SpeedCase:
    def setup(size, dtype):
        s = scaled_batch(shape, size)
        x = speed_normal(s, dtype, seed=8)
        attrs = dict(half_pixel_centers=mode == "half-pixel")
        if gradient:
            # grads is float32 in every dtype (the forward's output); the image's dtype is the
            # gradient's.
            g = tf.random.normal([s[0], *new_size, s[3]], seed=9)
            candidates = {"opforge": lambda: lib().opforge_resize_bilinear_grad(g, x, **attrs),
                          "tf": lambda: _raw_resize_grad(g, x, **attrs)}
        else:
            candidates = {"opforge": lambda: resize_bilinear(x, list(new_size), **attrs),
                          "tf": lambda: _raw_resize(x, list(new_size), **attrs)}
        label = f"{'gradient' if gradient else 'forward'} {s}->{new_size[0]}x{new_size[1]} {mode}"
        return SpeedRun(label, candidates)

    return SpeedCase(setup, max_repeats=25)


def _tf_image_resize(images, size, **attrs):
    return tf.image.resize(images, size, **attrs)


def _resize_speed(shape, new_size) -> SpeedCase:
    def setup(size, dtype):
        s = scaled_batch(shape, size)
        x = speed_normal(s, dtype, seed=8)
        return SpeedRun(f"forward {s}->{new_size[0]}x{new_size[1]} (tf.image.resize)",
                        {"opforge": lambda: resize(x, list(new_size)),
                         "tf": lambda: tf.image.resize(x, list(new_size))})

    return SpeedCase(setup, max_repeats=25)


# (images, size, attrs): 4-D and 3-D, up and down, and preserve_aspect_ratio.
RESIZE_GEOMETRIES = (
    ((2, 5, 7, 3), (11, 4), {}),
    ((5, 7, 3), (10, 14), {}),  # one image, as in a per-image dataset.map
    ((9, 4, 2), (3, 11), {}),
    ((2, 6, 9, 2), (10, 10), dict(preserve_aspect_ratio=True)),  # -> 7x10
    ((13, 5, 1), (4, 30), dict(preserve_aspect_ratio=True)),  # -> 4x2 (a round to even)
    ((1, 13, 13, 8), (26, 26), {}),
)


def _speeds(gradient: bool):
    return tuple(_speed(shape, size, mode, gradient)
                 for shape, size in SPEED_SHAPES for mode in ("half-pixel", "legacy"))


SPECS = (
    OpSpec(
        name="resize",
        replaces="tf.image.resize",
        op=resize,
        reference=_tf_image_resize,
        reference_name="tf.image.resize",
        dtypes=IMAGE_DTYPES,
        cases=tuple(
            Case(f"{list(shape)}->{list(size)}{' preserve_aspect_ratio' if attrs else ''}",
                 (Sample(shape, seed=70 + i, scale=20, specials=True),), dict(size=list(size), **attrs))
            for i, (shape, size, attrs) in enumerate(RESIZE_GEOMETRIES)
        ),
        gradient_cases=(
            Case("4-D", (Sample((1, 4, 3, 2), seed=62),), dict(size=[7, 5])),
            Case("3-D preserve_aspect_ratio", (Sample((4, 3, 2), seed=63),),
                 dict(size=[9, 9], preserve_aspect_ratio=True)),
        ),
        gradient_tolerance=1e-5,
        gradient_delta=0.5,
        determinism_case=Case("large", (Sample((61, 47, 5), seed=42),), dict(size=[97, 131])),
        speed=(_resize_speed((8, 52, 52, 128), (104, 104)),),
        bad_inputs={
            "rank 2": BadInput("opforge.ops.resize(tf.ones([4, 4]), [2, 2])", ("images", "3-D", "4-D", "(4, 4)"), error="ValueError"),
            "rank 5": BadInput("opforge.ops.resize(tf.ones([1, 1, 4, 4, 1]), [2, 2])", ("images", "(1, 1, 4, 4, 1)"), error="ValueError"),
            "method": BadInput("opforge.ops.resize(tf.ones([4, 4, 1]), [2, 2], method='linear')",
                               ("method", "'bilinear'", "'linear'"), error="ValueError"),
            "antialias not bool": BadInput("opforge.ops.resize(tf.ones([4, 4, 1]), [2, 2], antialias=1)",
                                           ("antialias", "bool", "1"), error="TypeError"),
            "size of three": BadInput("opforge.ops.resize(tf.ones([4, 4, 1]), [2, 2, 2])",
                                      ("size", "two elements", "[2, 2, 2]"), error="ValueError"),
            "size zero": BadInput("opforge.ops.resize(tf.ones([4, 4, 1]), [0, 2])", ("size", "positive", "[0, 2]")),
            "images string": BadInput("opforge.ops.resize(tf.constant([[['a']]]), [2, 2])", ("images", "string")),
        },
    ),
    OpSpec(
        name="resize_bilinear",
        replaces="tf.compat.v1.image.resize_bilinear",
        op=resize_bilinear,
        reference=_raw_resize,
        reference_name="tf.raw_ops.ResizeBilinear",
        dtypes=IMAGE_DTYPES,
        cases=tuple(
            Case(f"{list(shape)}->{list(size)} {mode}", (Sample(shape, seed=i, scale=20, specials=True),),
                 dict(size=list(size), **MODES[mode]))
            for i, (shape, size, mode) in enumerate(GEOMETRIES)
        ),
        # The map is linear and its output float32: a large step gives exact difference
        # quotients up to float32 rounding.
        gradient_cases=tuple(
            Case(mode, (Sample((1, 4, 3, 2), seed=60),), dict(size=[7, 5], **attrs))
            for mode, attrs in MODES.items()
        ),
        gradient_tolerance=1e-5,
        gradient_delta=0.5,
        determinism_case=Case("large", (Sample((3, 61, 47, 5), seed=42),),
                              dict(size=[97, 131], half_pixel_centers=True)),
        speed=_speeds(gradient=False),
        bad_inputs={
            "both attrs": BadInput(
                "opforge.ops.resize_bilinear(tf.ones([1, 4, 4, 1]), [2, 2], align_corners=True, half_pixel_centers=True)",
                ("align_corners", "half_pixel_centers")),
            "raw both attrs": BadInput(
                "lib().opforge_resize_bilinear(tf.ones([1, 4, 4, 1]), [2, 2], align_corners=True, half_pixel_centers=True)",
                ("align_corners", "half_pixel_centers")),
            "attr not bool": BadInput(
                "opforge.ops.resize_bilinear(tf.ones([1, 4, 4, 1]), [2, 2], align_corners=1)",
                ("align_corners", "bool", "1"), error="TypeError"),
            "rank 3": BadInput("opforge.ops.resize_bilinear(tf.ones([4, 4, 3]), [2, 2])", ("images", "4-D", "[4, 4, 3]")),
            "rank 5": BadInput(
                "lib().opforge_resize_bilinear(tf.ones([1, 1, 4, 4, 3]), [2, 2])", ("images", "4-D", "[1, 1, 4, 4, 3]")),
            "zero channels": BadInput(
                "opforge.ops.resize_bilinear(tf.ones([1, 4, 4, 0]), [2, 2])", ("images", "channel", "[1, 4, 4, 0]")),
            "zero height": BadInput(
                "opforge.ops.resize_bilinear(tf.ones([1, 0, 4, 1]), [2, 2])", ("images", "height", "[1, 0, 4, 1]")),
            "size of three": BadInput(
                "opforge.ops.resize_bilinear(tf.ones([1, 4, 4, 1]), [2, 2, 2])", ("size", "two elements", "[2, 2, 2]")),
            "raw size of three": BadInput(
                "lib().opforge_resize_bilinear(tf.ones([1, 4, 4, 1]), tf.constant([2, 2, 2]))",
                ("size", "two elements", "[3]")),
            "raw size 2-D": BadInput(
                "lib().opforge_resize_bilinear(tf.ones([1, 4, 4, 1]), tf.constant([[2, 2]]))", ("size", "[1, 2]")),
            "size zero": BadInput(
                "opforge.ops.resize_bilinear(tf.ones([1, 4, 4, 1]), [0, 2])", ("size", "positive", "[0, 2]")),
            "size negative": BadInput(
                "opforge.ops.resize_bilinear(tf.ones([1, 4, 4, 1]), [3, -2])", ("size", "positive", "[3, -2]")),
            "raw size negative": BadInput(
                "lib().opforge_resize_bilinear(tf.ones([1, 4, 4, 1]), tf.constant([3, -2]))",
                ("size", "positive", "[3, -2]")),
            "graph size zero": BadInput(
                "tf.function(lambda s: lib().opforge_resize_bilinear(tf.ones([1, 4, 4, 1]), s))(tf.constant([0, 2]))",
                ("ResizeBilinear:", "size", "positive", "[0, 2]")),
            "size float": BadInput(
                "opforge.ops.resize_bilinear(tf.ones([1, 4, 4, 1]), tf.constant([2.0, 2.0]))",
                ("size", "int32", "float32")),
            "size text": BadInput("opforge.ops.resize_bilinear(tf.ones([1, 4, 4, 1]), 'big')", ("size", "'big'"), error="TypeError"),
            "size beyond int32": BadInput(
                "opforge.ops.resize_bilinear(tf.ones([1, 4, 4, 1]), [2**31, 2])", ("size", "int32", "2147483648")),
            "images string": BadInput(
                "opforge.ops.resize_bilinear(tf.constant([[[['a']]]]), [2, 2])", ("images", "string")),
            "images uint32": BadInput(
                "opforge.ops.resize_bilinear(tf.ones([1, 4, 4, 1], tf.uint32), [2, 2])", ("images", "uint32")),
            "images complex": BadInput(
                "opforge.ops.resize_bilinear(tf.complex(tf.ones([1, 2, 2, 1]), 0.0), [3, 3])",
                ("images", "complex64")),
            # 2^63 bytes: TensorFlow's allocator refuses, as for tf.raw_ops.ResizeBilinear (an
            # output whose element count overflows int64 is an InvalidArgumentError, tested in
            # the core).
            "huge output": BadInput(
                "opforge.ops.resize_bilinear(tf.ones([2, 2, 2, 1]), [2**31 - 1, 2**31 - 1])", ("OOM",),
                "ResourceExhaustedError"),
        },
    ),
    OpSpec(
        name="resize_bilinear_grad",
        op=resize_bilinear_grad,
        reference=_raw_resize_grad,
        reference_name="tf.raw_ops.ResizeBilinearGrad",
        exact_reference=_raw_resize_grad_differentiable,
        dtypes=GRAD_DTYPES,
        cases=tuple(
            Case(f"{list(shape)}<-{list(size)} {mode}",
                 (Sample((shape[0], *size, shape[3]), seed=50 + i, scale=5, specials=True, dtype="float32"),
                  Sample(shape, fill=0.0, differentiable=False)),
                 MODES[mode])
            for i, (shape, size, mode) in enumerate(GEOMETRIES)
        ),
        # The gradient op is linear in grads (float32): a large step is exact up to rounding.
        gradient_cases=tuple(
            Case(mode, (Sample((1, 6, 5, 2), seed=61, dtype="float32"),
                        Sample((1, 3, 4, 2), fill=0.0, differentiable=False)), attrs)
            for mode, attrs in MODES.items()
        ),
        gradient_tolerance=1e-5,
        gradient_delta=0.5,
        determinism_case=Case("large", (Sample((4, 200, 180, 16), seed=42, dtype="float32"),
                                        Sample((4, 97, 61, 16), fill=0.0, differentiable=False)), dict(half_pixel_centers=True)),
        speed=_speeds(gradient=True),
        bad_inputs={
            "wrong rank": BadInput(
                "opforge.ops.resize_bilinear_grad(tf.ones([4, 4, 1]), tf.ones([1, 2, 2, 1]))", ("grads", "[4, 4, 1]")),
            "image wrong rank": BadInput(
                "opforge.ops.resize_bilinear_grad(tf.ones([1, 4, 4, 1]), tf.ones([2, 2, 1]))",
                ("original_image", "[2, 2, 1]")),
            "batch mismatch": BadInput(
                "lib().opforge_resize_bilinear_grad(tf.ones([1, 4, 4, 2]), tf.ones([3, 2, 2, 2]))",
                ("original_image", "batch", "[3, 2, 2, 2]")),
            "channel mismatch": BadInput(
                "lib().opforge_resize_bilinear_grad(tf.ones([1, 4, 4, 2]), tf.ones([1, 2, 2, 5]))",
                ("original_image", "channels", "[1, 2, 2, 5]")),
            "image dtype": BadInput(
                "opforge.ops.resize_bilinear_grad(tf.ones([1, 4, 4, 1]), tf.ones([1, 2, 2, 1], tf.int32))",
                ("original_image", "int32")),
            "grads dtype": BadInput(
                "opforge.ops.resize_bilinear_grad(tf.ones([1, 4, 4, 1], tf.float64), tf.ones([1, 2, 2, 1]))",
                ("grads", "float64")),
            "both attrs": BadInput(
                "lib().opforge_resize_bilinear_grad(tf.ones([1, 4, 4, 1]), tf.ones([1, 2, 2, 1]), align_corners=True, half_pixel_centers=True)",
                ("ResizeBilinearGrad:", "align_corners", "half_pixel_centers")),
        },
    ),
)

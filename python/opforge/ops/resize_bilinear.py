"""Bilinear resize: `opforge.ops.resize_bilinear` mirrors `tf.compat.v1.image.resize_bilinear`;
C++ ops `Opforge>ResizeBilinear` and `Opforge>ResizeBilinearGrad`."""
from __future__ import annotations

from typing import Optional

import tensorflow as tf

from opforge.ops._common import check_dtype, invalid_argument, lib

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
    for name, value in (("align_corners", align_corners), ("half_pixel_centers", half_pixel_centers)):
        if not isinstance(value, bool):
            raise invalid_argument(f"{op}: {name} must be a Python bool, got {value!r}")
    if align_corners and half_pixel_centers:
        raise invalid_argument(
            f"{op}: align_corners must be false when half_pixel_centers is true, got both true"
        )


def _size(op: str, size) -> tf.Tensor:
    if isinstance(size, tf.Tensor):
        if size.dtype != tf.int32:
            raise invalid_argument(f"{op}: size must be an int32 tensor, got {size.dtype.name}")
        return size
    try:
        values = [int(v) for v in size]
    except (TypeError, ValueError):
        raise invalid_argument(
            f"{op}: size must be [new_height, new_width] (two positive ints), got {size!r}"
        ) from None
    if len(values) != 2 or min(values) <= 0 or max(values) > 2**31 - 1:
        raise invalid_argument(
            f"{op}: size must be [new_height, new_width] (two positive ints), got {values}"
        )
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
    op = "opforge.ops.resize_bilinear"
    _check_attrs(op, align_corners, half_pixel_centers)
    if not (isinstance(images, tf.Tensor) and images.dtype in _IMAGE_SET):
        images = tf.convert_to_tensor(images, name="images")
        check_dtype(op, "images", images, IMAGE_DTYPES)
    return lib().opforge_resize_bilinear(
        images,
        _size(op, size),
        align_corners=align_corners,
        half_pixel_centers=half_pixel_centers,
        name=name,
    )


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
    op = "opforge.ops.resize_bilinear_grad"
    _check_attrs(op, align_corners, half_pixel_centers)
    grads = tf.convert_to_tensor(grads, name="grads")
    check_dtype(op, "grads", grads, (tf.float32,))
    original_image = tf.convert_to_tensor(original_image, name="original_image")
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

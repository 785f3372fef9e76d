"""opforge.jax's resize, resize_bilinear and resize_bilinear_grad: the handlers of
`Opforge>ResizeBilinear` and `Opforge>ResizeBilinearGrad` (opforge.ops.resize_bilinear's kernels).

`resize` is opforge.ops.resize (a drop-in for `tf.image.resize`) in JAX: its default, bilinear
without antialiasing, is the C++ kernel with half-pixel centres; "nearest" is TensorFlow's
ResizeNearestNeighbor (half-pixel centres) written with jnp, the same index map (float32 scale
arithmetic on the host) and so the same bits, with the gradient TensorFlow's
ResizeNearestNeighborGrad sums in the same order. TensorFlow's other kernels ("bicubic", "area",
"lanczos3", "lanczos5", "gaussian", "mitchellcubic", and antialias=True: ScaleAndTranslate)
have no bit-exact JAX counterpart: they raise ValueError naming the argument."""
from __future__ import annotations

import functools
from typing import Tuple

import numpy as np

import jax
import jax.numpy as jnp

from opforge.jax._batching import Fold, apply
from opforge.jax._checks import array, boolean, check_dtype, integer, message, short_repr

__all__ = ["resize", "resize_bilinear", "resize_bilinear_grad"]

# The input dtypes of tf.raw_ops.ResizeBilinear (the output is always float32).
IMAGE_DTYPES = tuple(np.dtype(d) for d in (np.int8, np.uint8, np.int16, np.uint16, np.int32, np.int64,
                                           jnp.bfloat16, np.float16, np.float32, np.float64))
# The dtypes the gradient op produces (those of the images it differentiates).
GRAD_DTYPES = tuple(np.dtype(d) for d in (jnp.bfloat16, np.float16, np.float32, np.float64))
# The dtypes of TensorFlow's ResizeNearestNeighbor (resize's method="nearest"): the same.
NEAREST_DTYPES = IMAGE_DTYPES

# The methods of tf.image.resize (tf.image.ResizeMethod's values).
RESIZE_METHODS = ("bilinear", "nearest", "bicubic", "area", "lanczos3", "lanczos5", "gaussian",
                  "mitchellcubic")
# The batch axis is the images' first: a vmapped axis merges into it (every output is per image).
_FORWARD_RULE = Fold((0,))
_GRAD_RULE = Fold((0, 1))


def _check_attrs(op: str, align_corners, half_pixel_centers) -> Tuple[bool, bool]:
    # Python types only; the C++ core checks the combination.
    for name, value in (("align_corners", align_corners), ("half_pixel_centers", half_pixel_centers)):
        if not isinstance(value, (bool, np.bool_)):
            raise TypeError(message(op, name, "a Python bool", repr(value)))
    return bool(align_corners), bool(half_pixel_centers)


def _images(op: str, images, allowed=IMAGE_DTYPES) -> jax.Array:
    images = array(op, "images", images)
    check_dtype(op, "images", images, allowed)
    return images


def _size(size, op: str = "ResizeBilinear") -> Tuple[Tuple[int, ...], Tuple[int, ...]]:
    """The values of `size` (they decide the result's shape: concrete, not a tracer) and its
    shape. A Python sequence of ints (as opforge.ops turns it into its int32 tensor), or an
    integer NumPy or concrete JAX array, whose shape the core checks ([2])."""
    expected = "[new_height, new_width] as two ints"
    if isinstance(size, jax.core.Tracer):
        raise ValueError(message(op, "size", f"{expected}, known while JAX traces (a Python list, a NumPy "
                                 "array, or a static argument under jax.jit)", "a tracer"))
    if isinstance(size, (jax.Array, np.ndarray, np.generic)):
        values = np.asarray(size)
        if values.dtype.kind not in "iu":
            raise TypeError(message(op, "size", "[new_height, new_width] as ints (an integer array)",
                                    values.dtype.name))
        shape = values.shape
        values = [int(v) for v in values.reshape(-1)]
    else:
        if isinstance(size, (str, bytes)):
            raise TypeError(message(op, "size", expected, repr(size)))
        try:
            items = list(size)
        except TypeError:
            raise TypeError(message(op, "size", expected, repr(size))) from None
        # Ints only: [3.9, 4.99] is an error (as in TensorFlow), not a 3x4 resize.
        values = [integer(op, "size", v, "ints") for v in items]
        shape = (len(values),)
    if any(abs(v) > 2**31 - 1 for v in values):
        raise ValueError(message(op, "size", "int32 values", values))
    return tuple(values), tuple(shape)


def _forward(images, size, flags):
    values, shape = size
    align_corners, half_pixel_centers = flags
    operand = jnp.asarray(np.asarray(values, np.int32).reshape(shape))
    attrs = {"align_corners": align_corners, "half_pixel_centers": half_pixel_centers,
             "opforge_values": np.asarray(values, np.int64)}
    return apply("Opforge>ResizeBilinear", (images, operand), attrs, _FORWARD_RULE)[0]


def _backward(grads, original_image, flags):
    align_corners, half_pixel_centers = flags
    return apply("Opforge>ResizeBilinearGrad", (grads, original_image),
                 {"align_corners": align_corners, "half_pixel_centers": half_pixel_centers}, _GRAD_RULE,
                 dtype=original_image.dtype)[0]


@functools.partial(jax.custom_vjp, nondiff_argnums=(1, 2))
def _resize_bilinear(images, size, flags):
    return _forward(images, size, flags)


def _resize_bilinear_fwd(images, size, flags):
    return _resize_bilinear(images, size, flags), images


def _resize_bilinear_bwd(size, flags, images, g):
    if np.dtype(images.dtype) not in GRAD_DTYPES:  # integer images have no gradient
        return (np.zeros(images.shape, jax.dtypes.float0),)
    return (_resize_bilinear_grad(g, images, flags),)


_resize_bilinear.defvjp(_resize_bilinear_fwd, _resize_bilinear_bwd)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _resize_bilinear_grad(grads, original_image, flags):
    return _backward(grads, original_image, flags)


def _resize_bilinear_grad_fwd(grads, original_image, flags):
    # grads only gives its height and width to the gradient: a zero-size residual keeps them.
    return _backward(grads, original_image, flags), (jnp.zeros(grads.shape[1:3] + (0,), grads.dtype),
                                                       original_image)


def _resize_bilinear_grad_bwd(flags, res, g):
    # The gradient op is linear in grads, with the forward's weights transposed: its own gradient
    # is the forward resize (same attrs) to the size of grads. original_image only gives a shape.
    grid, original_image = res
    size = ((int(grid.shape[0]), int(grid.shape[1])), (2,))
    return _resize_bilinear(g, size, flags), jnp.zeros_like(original_image)


_resize_bilinear_grad.defvjp(_resize_bilinear_grad_fwd, _resize_bilinear_grad_bwd)


def resize_bilinear(images, size, align_corners: bool = False, half_pixel_centers: bool = False) -> jax.Array:
    """opforge.ops.resize_bilinear in JAX (tf.compat.v1.image.resize_bilinear,
    tf.raw_ops.ResizeBilinear): NHWC `images` (int8, uint8, int16, uint16, int32, int64,
    bfloat16, float16, float32 or float64) resized to `size` = [new_height, new_width] by
    bilinear interpolation, float32, TensorFlow's bits in its three conventions (legacy,
    align_corners, half_pixel_centers). `size` must be known while JAX traces (a list, a NumPy
    or a concrete JAX array). The gradient is ResizeBilinearGrad's (float images only)."""
    op = "ResizeBilinear"
    flags = _check_attrs(op, align_corners, half_pixel_centers)
    images = _images(op, images)
    return _resize_bilinear(images, _size(size, op), flags)


def resize_bilinear_grad(grads, original_image, align_corners: bool = False,
                         half_pixel_centers: bool = False) -> jax.Array:
    """opforge.ops.resize_bilinear_grad in JAX (tf.raw_ops.ResizeBilinearGrad): the gradient with
    respect to `original_image` ([batch, height, width, channels], bfloat16, float16, float32 or
    float64) of a resize whose gradient is `grads` (float32, [batch, new_height, new_width,
    channels]); shaped and typed like `original_image`. Its own gradient (in grads) is the
    forward resize to the size of grads."""
    op = "ResizeBilinearGrad"
    flags = _check_attrs(op, align_corners, half_pixel_centers)
    grads = array(op, "grads", grads)
    if grads.dtype != np.float32:  # the forward's output dtype, whatever the image's
        raise TypeError(message(op, "grads", "float32", np.dtype(grads.dtype).name))
    original_image = array(op, "original_image", original_image)
    check_dtype(op, "original_image", original_image, GRAD_DTYPES)
    return _resize_bilinear_grad(grads, original_image, flags)


# --- resize ----------------------------------------------------------------------------------------


def _unsupported(argument: str, expected: str, given) -> ValueError:
    return ValueError(message("Resize", argument, expected + " in opforge.jax (tf.image.resize runs " +
                              "TensorFlow's own kernel there, which has no bit-exact JAX counterpart)", given))


def _nearest_indices(in_size: int, out_size: int) -> np.ndarray:
    """TensorFlow's ResizeNearestNeighbor index map with half-pixel centres (align_corners
    false): min(floor((x + 0.5f) * scale), in - 1), at least 0, scale = in / out in float32."""
    scale = np.float32(in_size) / np.float32(out_size)
    x = np.arange(out_size, dtype=np.float32)
    src = np.floor((x + np.float32(0.5)) * scale).astype(np.int64)
    return np.maximum(np.minimum(src, in_size - 1), 0)


def _nearest(images, new_height: int, new_width: int) -> jax.Array:
    op = "Resize"
    _, height, width, channels = images.shape
    if new_height <= 0 or new_width <= 0:  # TensorFlow's "output dimensions must be positive"
        raise ValueError(message(op, "size", "positive [new_height, new_width]", [new_height, new_width]))
    if height == 0 or width == 0:
        raise ValueError(message(op, "images", "of non-zero height and width", f"shape {tuple(images.shape)}"))
    if channels == 0:
        raise ValueError(message(op, "images", "at least one channel", f"shape {tuple(images.shape)}"))
    rows = _nearest_indices(height, new_height)
    cols = _nearest_indices(width, new_width)
    # One gather (its transpose one scatter-add, over the output pixels in row-major order:
    # ResizeNearestNeighborGrad's order of summation).
    return images[:, rows[:, None], cols[None, :], :]


def _aspect_size(height: int, width: int, size: Tuple[int, int]) -> Tuple[int, int]:
    """tf.image.resize's preserve_aspect_ratio arithmetic: float32 scale factors, the smaller
    one, rounded half to even, then cast to int32."""
    h, w = np.float32(height), np.float32(width)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        scale = np.minimum(np.float32(size[0]) / h, np.float32(size[1]) / w)
        new = [np.round(np.float32(scale * h)), np.round(np.float32(scale * w))]
    out = []
    for v in new:
        if not np.isfinite(v) or abs(v) > 2**31 - 1:
            raise ValueError(message("Resize", "size", "a size that keeps the aspect ratio within int32",
                                     f"{list(size)} for a {height}x{width} image"))
        out.append(int(v))
    return out[0], out[1]


def resize(images, size, method: str = "bilinear", *, antialias: bool = False,
           preserve_aspect_ratio: bool = False) -> jax.Array:
    """opforge.ops.resize (a drop-in for `tf.image.resize`) in JAX: the same arguments, defaults
    and results. `images` 4-D [batch, height, width, channels] or 3-D [height, width, channels];
    `size` [new_height, new_width] (known while JAX traces); float32 result ("nearest" keeps the
    input's dtype). method="bilinear" without antialias is opforge's kernel with half-pixel
    centres (TensorFlow's bits, with opforge's gradient); "nearest" is TensorFlow's nearest
    neighbour with half-pixel centres, in jnp (the same bits, the same gradient).

    Raises ValueError for the methods and options whose TensorFlow kernel has no bit-exact JAX
    counterpart: method "bicubic", "area", "lanczos3", "lanczos5", "gaussian" or
    "mitchellcubic", and antialias=True with "bilinear"."""
    op = "Resize"
    if not isinstance(method, str) or method not in RESIZE_METHODS:
        raise ValueError(message(op, "method", "one of " + ", ".join(repr(m) for m in RESIZE_METHODS),
                                 repr(method)))
    antialias = boolean(op, "antialias", antialias)
    preserve_aspect_ratio = boolean(op, "preserve_aspect_ratio", preserve_aspect_ratio)
    if method not in ("bilinear", "nearest"):
        raise _unsupported("method", "'bilinear' or 'nearest'", repr(method))
    if method == "bilinear" and antialias:  # tf.image.resize's ScaleAndTranslate ("triangle")
        raise _unsupported("antialias", "False with method 'bilinear'", "True")
    images = _images(op, images, NEAREST_DTYPES if method == "nearest" else IMAGE_DTYPES)
    rank = images.ndim
    if rank not in (3, 4):
        raise ValueError(message(op, "images", "a 3-D [height, width, channels] or 4-D [batch, height, "
                                 "width, channels] tensor", f"shape {tuple(images.shape)}"))
    if isinstance(size, (jax.Array, np.ndarray)) and not isinstance(size, jax.core.Tracer) and np.shape(size) != (2,):
        # tf.image.resize checks the static shape of size itself (ValueError).
        raise ValueError(message(op, "size", "a 1-D tensor of 2 elements [new_height, new_width]",
                                 f"shape {tuple(np.shape(size))}"))
    if not isinstance(size, (jax.Array, np.ndarray, str, bytes)):
        try:
            static = np.shape(size)
        except ValueError:  # ragged: _size says what it expected
            static = (2,)
        if static != (2,):
            raise ValueError(message(op, "size", "[new_height, new_width] (two elements)", short_repr(size)))
    values, shape = _size(size)
    if rank == 3:
        images = images[None]
    if preserve_aspect_ratio:
        values = _aspect_size(images.shape[1], images.shape[2], values)
    if method == "nearest":
        out = _nearest(images, *values)
    else:
        out = _resize_bilinear(images, (values, shape), (False, True))
    return out[0] if rank == 3 else out

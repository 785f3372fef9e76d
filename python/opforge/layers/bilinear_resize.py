"""`opforge.layers.BilinearResize`: `keras.layers.Resizing(interpolation="bilinear")` and
`keras.layers.UpSampling2D(interpolation="bilinear")` on the `Opforge>ResizeBilinear` op."""
from __future__ import annotations

import numbers
from typing import Any, Dict, Optional, Sequence, Union

from opforge._keras import framework
import tensorflow as tf

from opforge.layers import _backend
from opforge.layers._checks import check_with_op
from opforge.ops._common import python_bool, python_int
from opforge.ops import _xla
from opforge.ops.resize_bilinear import resize_bilinear

keras = framework()  # Keras 3, or tf-keras under TF_USE_LEGACY_KERAS=1 (opforge._keras)
__all__ = ["BilinearResize"]

_LAYER = "opforge.layers.BilinearResize"


def _positive_scale(value) -> tuple:
    """`scale` as (height factor, width factor): one positive number or two."""
    items = value if isinstance(value, (list, tuple)) else (value, value)
    ok = len(items) == 2 and all(isinstance(v, numbers.Real) and not isinstance(v, bool) and v > 0
                                 and v != float("inf") for v in items)
    if not ok:
        raise ValueError(f"{_LAYER}: scale must be a positive number or two (height, width), got {value!r}")
    return tuple(int(v) if float(v).is_integer() else float(v) for v in items)


@keras.saving.register_keras_serializable(package="opforge")
class BilinearResize(keras.layers.Layer):
    """Bilinear resizing of feature maps or images, on opforge's C++ kernel and gradient.

    Three ways to say the output size (exactly one):
    - `BilinearResize(height, width)`, as `keras.layers.Resizing(height, width)`;
    - `BilinearResize(target_size=(height, width))` (or `BilinearResize((height, width))`);
    - `BilinearResize(scale=2)`, as `keras.layers.UpSampling2D(size=2, interpolation="bilinear")`:
      the output is `floor(input size * scale)` per axis, for inputs whose size is unknown (the
      upsampler of a YOLO or FPN neck). `scale` is one positive number or (height, width).

    The other arguments are those of `keras.layers.Resizing`, with its defaults and results (bit
    for bit with the default `half_pixel_centers=True`): `crop_to_aspect_ratio` crops the input
    to the target aspect ratio first, `pad_to_aspect_ratio` pads it with `fill_value` instead
    (`fill_mode="constant"`, the only mode Keras has), `data_format` ("channels_last" or
    "channels_first"; default: Keras's image data format), and 3-D inputs (one unbatched image).
    `interpolation` must be "bilinear" (`keras.layers.Resizing` has the other methods);
    `antialias=True` (which changes only downsampling) runs TensorFlow's antialiasing kernel.
    opforge adds the coordinate conventions of `tf.compat.v1.image.resize_bilinear`:
    `align_corners=True` (with `half_pixel_centers=False`) and the legacy one (both False).

    The output has the layer's compute dtype (float16 under `mixed_float16`), as Keras's
    symbolic tensors say; the C++ kernel interpolates in float32. The op lowers to XLA, so
    models using the layer compile with `jit_compile=True`.
    """

    def __init__(
        self,
        height: Union[int, Sequence[int], None] = None,
        width: Optional[int] = None,
        interpolation: str = "bilinear",
        crop_to_aspect_ratio: bool = False,
        pad_to_aspect_ratio: bool = False,
        fill_mode: str = "constant",
        fill_value: float = 0.0,
        antialias: bool = False,
        data_format: Optional[str] = None,
        *,
        target_size: Optional[Sequence[int]] = None,
        scale: Union[float, Sequence[float], None] = None,
        align_corners: bool = False,
        half_pixel_centers: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        _backend.require(_LAYER)
        if isinstance(height, (list, tuple)):  # BilinearResize((26, 26)): the target_size form
            if width is not None or target_size is not None:
                raise ValueError(f"{_LAYER}: give the size once: (height, width) as the first argument, "
                                 f"or height and width, or target_size; got height={height!r}, "
                                 f"width={width!r}, target_size={target_size!r}")
            height, target_size = None, height
        forms = [name for name, given in (("height and width", height is not None or width is not None),
                                          ("target_size", target_size is not None),
                                          ("scale", scale is not None)) if given]
        if len(forms) != 1:
            raise ValueError(f"{_LAYER}: give exactly one of height and width, target_size or scale, "
                             f"got {' and '.join(forms) if forms else 'none'}")
        size = None
        try:
            if target_size is not None:
                if isinstance(target_size, (str, bytes)) or not hasattr(target_size, "__len__") or len(target_size) != 2:
                    raise ValueError(f"{_LAYER}: target_size must be (height, width), two ints, got {target_size!r}")
                size = tuple(python_int("BilinearResize", "target_size", v) for v in target_size)
            elif scale is None:
                if height is None or width is None:
                    raise ValueError(f"{_LAYER}: height and width must both be given, got "
                                     f"height={height!r}, width={width!r}")
                size = (python_int("BilinearResize", "height", height),
                        python_int("BilinearResize", "width", width))
            for name, value in (("align_corners", align_corners), ("half_pixel_centers", half_pixel_centers),
                                ("crop_to_aspect_ratio", crop_to_aspect_ratio),
                                ("pad_to_aspect_ratio", pad_to_aspect_ratio), ("antialias", antialias)):
                python_bool("BilinearResize", name, value)
        except (TypeError, OverflowError, tf.errors.InvalidArgumentError) as exc:  # the argument, named
            raise ValueError(f"{_LAYER}: {getattr(exc, 'message', None) or exc}") from None
        if interpolation != "bilinear":
            raise ValueError(f"{_LAYER}: interpolation must be 'bilinear' (keras.layers.Resizing has the other "
                             f"methods), got {interpolation!r}")
        if fill_mode != "constant":
            raise ValueError(f"{_LAYER}: fill_mode must be 'constant' (as in keras.layers.Resizing), "
                             f"got {fill_mode!r}")
        if crop_to_aspect_ratio and pad_to_aspect_ratio:
            raise ValueError(f"{_LAYER}: only one of crop_to_aspect_ratio and pad_to_aspect_ratio can be True")
        if (crop_to_aspect_ratio or pad_to_aspect_ratio) and size is None:
            raise ValueError(f"{_LAYER}: crop_to_aspect_ratio and pad_to_aspect_ratio need a target size "
                             "(height and width, or target_size), not scale")
        if antialias and not half_pixel_centers:
            raise ValueError(f"{_LAYER}: antialias=True runs TensorFlow's antialiasing kernel, which has "
                             "half-pixel centres only: leave align_corners and half_pixel_centers at their defaults")
        if isinstance(fill_value, bool) or not isinstance(fill_value, numbers.Real):
            raise ValueError(f"{_LAYER}: fill_value must be a number, got {fill_value!r}")
        self.scale = None if scale is None else _positive_scale(scale)
        if size is not None:
            check_with_op(
                f"{_LAYER}(height={size[0]!r}, width={size[1]!r}, align_corners={align_corners!r}, "
                f"half_pixel_centers={half_pixel_centers!r})",
                lambda: resize_bilinear(tf.zeros([0, 1, 1, 1]), size, align_corners=bool(align_corners),
                                        half_pixel_centers=bool(half_pixel_centers)),
            )
        elif align_corners and half_pixel_centers:
            raise ValueError(f"{_LAYER}: align_corners and half_pixel_centers cannot both be True")
        self.height, self.width = (None, None) if size is None else size
        self.interpolation = "bilinear"
        self.crop_to_aspect_ratio = bool(crop_to_aspect_ratio)
        self.pad_to_aspect_ratio = bool(pad_to_aspect_ratio)
        self.fill_mode = "constant"
        self.fill_value = float(fill_value)
        self.antialias = bool(antialias)
        if data_format is None:
            data_format = _backend.image_data_format()
        if not isinstance(data_format, str) or data_format.lower() not in ("channels_last", "channels_first"):
            raise ValueError(f"{_LAYER}: data_format must be 'channels_last' or 'channels_first', "
                             f"got {data_format!r}")
        self.data_format = data_format.lower()
        self.align_corners = bool(align_corners)
        self.half_pixel_centers = bool(half_pixel_centers)
        self.input_spec = keras.layers.InputSpec(min_ndim=3, max_ndim=4)
        # The op lowers to XLA (its size is a compile-time constant there, shapes being static),
        # and so does TensorFlow's antialiasing kernel.
        self.supports_jit = _xla.supports_jit("Opforge>ResizeBilinear", "Opforge>ResizeBilinearGrad")

    @property
    def target_size(self):
        """(height, width), or None in the scale form."""
        return None if self.height is None else (self.height, self.width)

    def _size(self, images):
        """The output [height, width] of NHWC `images`: static ints where known."""
        if self.scale is None:
            return [self.height, self.width]
        out = []
        for axis, factor in zip((1, 2), self.scale):
            n = images.shape[axis]
            if n is not None:
                out.append(max(int(n * factor), 0) if isinstance(factor, int) else int(n * factor // 1))
            else:
                n = tf.shape(images)[axis]
                out.append(n * factor if isinstance(factor, int) else
                           tf.cast(tf.floor(tf.cast(n, tf.float64) * factor), tf.int32))
        if all(isinstance(v, int) for v in out):
            return out
        return tf.stack([tf.cast(v, tf.int32) for v in out])

    def _crop_or_pad(self, images):
        """keras.layers.Resizing's crop_to_aspect_ratio / pad_to_aspect_ratio, same arithmetic."""
        shape = tf.shape(images)
        height, width = shape[1], shape[2]
        target_height, target_width = self.height, self.width
        if self.crop_to_aspect_ratio:
            crop_height = tf.cast(tf.cast(width * target_height, "float32") / target_width, "int32")
            crop_height = tf.maximum(tf.minimum(height, crop_height), 1)
            crop_width = tf.cast(tf.cast(height * target_width, "float32") / target_height, "int32")
            crop_width = tf.maximum(tf.minimum(width, crop_width), 1)
            top = tf.cast(tf.cast(height - crop_height, "float32") / 2, "int32")
            left = tf.cast(tf.cast(width - crop_width, "float32") / 2, "int32")
            return images[:, top:top + crop_height, left:left + crop_width, :]
        pad_height = tf.maximum(height, tf.cast(tf.cast(width * target_height, "float32") / target_width, "int32"))
        pad_width = tf.maximum(width, tf.cast(tf.cast(height * target_width, "float32") / target_height, "int32"))
        # The same amount on both sides (Keras pads the start offset before and after).
        top = tf.cast(tf.cast(pad_height - height, "float32") / 2, "int32")
        left = tf.cast(tf.cast(pad_width - width, "float32") / 2, "int32")
        fill = tf.cast(self.fill_value, images.dtype)
        return tf.pad(images, [[0, 0], [top, top], [left, left], [0, 0]], constant_values=fill)

    def _crop_or_pad_static(self, images):
        """_crop_or_pad on a static shape (the JAX backend), the same float32 arithmetic."""
        import jax.numpy as jnp
        import numpy as np

        f32 = np.float32
        height, width = images.shape[1], images.shape[2]
        th, tw = self.height, self.width
        if self.crop_to_aspect_ratio:
            crop_height = max(min(height, int(f32(width * th) / f32(tw))), 1)
            crop_width = max(min(width, int(f32(height * tw) / f32(th))), 1)
            top, left = int(f32(height - crop_height) / f32(2)), int(f32(width - crop_width) / f32(2))
            return images[:, top:top + crop_height, left:left + crop_width, :]
        pad_height = max(height, int(f32(width * th) / f32(tw)))
        pad_width = max(width, int(f32(height * tw) / f32(th)))
        top, left = int(f32(pad_height - height) / f32(2)), int(f32(pad_width - width) / f32(2))
        fill = jnp.asarray(self.fill_value).astype(images.dtype)
        return jnp.pad(images, [(0, 0), (top, top), (left, left), (0, 0)], constant_values=fill)

    def _call_jax(self, inputs):
        """The layer on Keras's JAX backend (static shapes): opforge.jax's resize ops."""
        import jax.numpy as jnp

        ofj = _backend.ops()
        images = inputs
        unbatched = images.ndim == 3
        if unbatched:
            images = images[None]
        if self.data_format == "channels_first":
            images = jnp.transpose(images, (0, 2, 3, 1))
        if self.crop_to_aspect_ratio or self.pad_to_aspect_ratio:
            images = self._crop_or_pad_static(images)
        size = self._size(images)
        if self.antialias:
            out = ofj.resize(images, size, "bilinear", antialias=True)
        else:
            out = ofj.resize_bilinear(images, size, align_corners=self.align_corners,
                                      half_pixel_centers=self.half_pixel_centers)
        if self.data_format == "channels_first":
            out = jnp.transpose(out, (0, 3, 1, 2))
        if unbatched:
            out = out[0]
        return out.astype(self.compute_dtype)

    def call(self, inputs):
        if _backend.is_jax():
            return self._call_jax(inputs)
        images = inputs
        unbatched = images.shape.rank == 3
        if unbatched:
            images = tf.expand_dims(images, 0)
        if self.data_format == "channels_first":
            images = tf.transpose(images, (0, 2, 3, 1))
        if self.crop_to_aspect_ratio or self.pad_to_aspect_ratio:
            images = self._crop_or_pad(images)
        size = self._size(images)
        if self.antialias:
            # TensorFlow's antialiasing kernel (scale_and_translate), as keras.layers.Resizing.
            out = tf.image.resize(images, size, "bilinear", antialias=True)
        else:
            out = resize_bilinear(images, size, align_corners=self.align_corners,
                                  half_pixel_centers=self.half_pixel_centers)
        if self.data_format == "channels_first":
            out = tf.transpose(out, (0, 3, 1, 2))
        if unbatched:
            out = out[0]
        # The kernel's output is float32; Keras's symbolic tensor has the compute dtype.
        return tf.cast(out, self.compute_dtype)

    def compute_output_shape(self, input_shape):
        shape = list(input_shape)
        axes = (-3, -2) if self.data_format == "channels_last" else (-2, -1)
        if self.scale is None:
            sizes = (self.height, self.width)
        else:
            sizes = tuple(None if shape[a] is None else (shape[a] * f if isinstance(f, int) else int(shape[a] * f // 1))
                          for a, f in zip(axes, self.scale))
        for a, n in zip(axes, sizes):
            shape[a] = n
        return tuple(shape)

    def get_config(self) -> Dict[str, Any]:
        config = super().get_config()
        config.update(
            {
                "height": self.height,
                "width": self.width,
                "interpolation": self.interpolation,
                "crop_to_aspect_ratio": self.crop_to_aspect_ratio,
                "pad_to_aspect_ratio": self.pad_to_aspect_ratio,
                "fill_mode": self.fill_mode,
                "fill_value": self.fill_value,
                "antialias": self.antialias,
                "data_format": self.data_format,
                "scale": None if self.scale is None else list(self.scale),
                "align_corners": self.align_corners,
                "half_pixel_centers": self.half_pixel_centers,
            }
        )
        return config

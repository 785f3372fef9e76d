"""`opforge.layers.BilinearResize`: a resize layer on the `Opforge>ResizeBilinear` op."""
from __future__ import annotations

from typing import Any, Dict, Sequence

import keras
import tensorflow as tf

from opforge.layers._checks import check_with_op
from opforge.ops._common import python_bool, python_int
from opforge.ops.resize_bilinear import resize_bilinear

__all__ = ["BilinearResize"]


@keras.saving.register_keras_serializable(package="opforge")
class BilinearResize(keras.layers.Layer):
    """Resizes NHWC feature maps to `target_size` = (height, width) by bilinear interpolation.

    The upsampler of FPN and YOLO necks: `BilinearResize((26, 26))` after a 13x13 map. The
    default, `half_pixel_centers=True`, matches `keras.layers.Resizing(..., "bilinear")` and
    `tf.image.resize`; `align_corners=True` (with `half_pixel_centers=False`) and the legacy
    convention (both False) are available too. Inputs may have unknown height and width; the
    output is float32 (the op's output type). Forward and gradient are opforge's C++ kernels. The
    op has no XLA kernel, so `supports_jit = False`.
    """

    def __init__(
        self,
        target_size: Sequence[int],
        align_corners: bool = False,
        half_pixel_centers: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        try:
            # Ints and bools as given, not coerced: (3.9, 4) and align_corners=1 are errors.
            size = tuple(python_int("BilinearResize", "target_size", v) for v in target_size)
            python_bool("BilinearResize", "align_corners", align_corners)
            python_bool("BilinearResize", "half_pixel_centers", half_pixel_centers)
        except TypeError:
            size = ()
        except tf.errors.InvalidArgumentError as exc:
            raise ValueError(f"opforge.layers.BilinearResize: {exc.message}") from None
        if len(size) != 2:
            raise ValueError(
                "opforge.layers.BilinearResize: target_size must be (height, width), two ints, "
                f"got {target_size!r}"
            )
        check_with_op(
            f"opforge.layers.BilinearResize(target_size={target_size!r}, "
            f"align_corners={align_corners!r}, half_pixel_centers={half_pixel_centers!r})",
            lambda: resize_bilinear(tf.zeros([0, 1, 1, 1]), size, align_corners=bool(align_corners),
                                    half_pixel_centers=bool(half_pixel_centers)),
        )
        self.target_size = size
        self.align_corners = bool(align_corners)
        self.half_pixel_centers = bool(half_pixel_centers)
        self.input_spec = keras.layers.InputSpec(ndim=4)
        self.supports_jit = False

    def call(self, inputs):
        return resize_bilinear(
            inputs,
            self.target_size,
            align_corners=self.align_corners,
            half_pixel_centers=self.half_pixel_centers,
        )

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.target_size[0], self.target_size[1], input_shape[3])

    def get_config(self) -> Dict[str, Any]:
        config = super().get_config()
        config.update(
            {
                "target_size": list(self.target_size),
                "align_corners": self.align_corners,
                "half_pixel_centers": self.half_pixel_centers,
            }
        )
        return config

"""YOLO-v3 and YOLO-v3-tiny as Keras 3 Functional models, in yolov3-tf2's layout (Darknet-53 with
the stride-2 top-left zero padding, the tiny backbone, the same heads), with opforge's LeakyReLU,
upsamplers and head ops, or (`ops="tf"`) the same network from TensorFlow built-ins.

The models return the raw head maps, `[B, H, W, A*(5+C)]` per scale, largest stride first
(13, 26, 52 for a 416 input); `detector(model, ...)` appends decoding and NMS for inference.
"""
from __future__ import annotations

from typing import Optional

import keras
import numpy as np
import tensorflow as tf

from opforge.layers import BilinearResize, Conv2DTranspose, ConvBNLeaky, LeakyReLU, YoloPostprocess

__all__ = ["YOLOV3_ANCHORS", "YOLOV3_MASKS", "YOLOV3_TINY_ANCHORS", "YOLOV3_TINY_MASKS", "YoloV3",
           "YoloV3Tiny", "YoloV3TinySubclassed", "detector"]

# (width, height) in pixels of a 416x416 input; a mask per scale, largest stride first.
YOLOV3_ANCHORS = np.array([(10, 13), (16, 30), (33, 23), (30, 61), (62, 45), (59, 119), (116, 90),
                           (156, 198), (373, 326)], np.float32)
YOLOV3_MASKS = ((6, 7, 8), (3, 4, 5), (0, 1, 2))
YOLOV3_TINY_ANCHORS = np.array([(10, 14), (23, 27), (37, 58), (81, 82), (135, 169), (344, 319)],
                               np.float32)
YOLOV3_TINY_MASKS = ((3, 4, 5), (0, 1, 2))

UPSAMPLES = ("transpose", "bilinear", "nearest")
OPS = ("opforge", "tf")


def _check_fused(name: str, fused, ops: str, sync_batch_norm) -> None:
    if not isinstance(fused, bool):
        raise ValueError(f"opforge.models.{name}: fused must be a bool, got {fused!r}")
    if fused and ops != "opforge":
        raise ValueError(f"opforge.models.{name}: fused=True builds from opforge's fused ops; ops must be "
                         f"'opforge', got {ops!r}")
    if fused and sync_batch_norm:
        raise ValueError(f"opforge.models.{name}: fused=True computes batch statistics per replica; "
                         "sync_batch_norm=True needs the unfused model")


def _check(name: str, upsample: str, ops: str, num_classes, input_size) -> None:
    if upsample not in UPSAMPLES:
        raise ValueError(f"opforge.models.{name}: upsample must be one of {UPSAMPLES}, got {upsample!r}")
    if ops not in OPS:
        raise ValueError(f"opforge.models.{name}: ops must be one of {OPS}, got {ops!r}")
    if isinstance(num_classes, bool) or not isinstance(num_classes, (int, np.integer)) or num_classes < 1:
        raise ValueError(f"opforge.models.{name}: num_classes must be a positive int, got {num_classes!r}")
    if input_size is not None and (isinstance(input_size, bool) or not isinstance(input_size, (int, np.integer))
                                   or input_size < 32 or input_size % 32):
        raise ValueError(f"opforge.models.{name}: input_size must be a multiple of 32 (or None), "
                         f"got {input_size!r}")


@keras.saving.register_keras_serializable(package="opforge")
class TfLeakyReLU(keras.layers.Layer):
    """`tf.nn.leaky_relu` as a layer: the `ops="tf"` twin of `opforge.layers.LeakyReLU`."""

    def __init__(self, negative_slope: float = 0.1, **kwargs) -> None:
        super().__init__(**kwargs)
        self.negative_slope = float(negative_slope)

    def call(self, x):
        return tf.nn.leaky_relu(x, alpha=self.negative_slope)

    def get_config(self):
        return {**super().get_config(), "negative_slope": self.negative_slope}


@keras.saving.register_keras_serializable(package="opforge")
class TfBilinearUpsample(keras.layers.Layer):
    """x2 bilinear upsampling with `tf.image.resize` (half-pixel centres): the `ops="tf"` twin
    of `opforge.layers.BilinearResize`."""

    def call(self, x):
        return tf.image.resize(x, 2 * tf.shape(x)[1:3], "bilinear")

    def compute_output_shape(self, shape):
        double = lambda d: None if d is None else 2 * d  # noqa: E731
        return (shape[0], double(shape[1]), double(shape[2]), shape[3])


class _Builder:
    """Creates the layers of one network, in one order for both `ops` (so the variables of an
    `ops="opforge"` and an `ops="tf"` model line up one to one)."""

    def __init__(self, ops: str, upsample: str, sync_batch_norm: bool = False, fused: bool = False):
        self.ops, self.upsample, self.sync_batch_norm = ops, upsample, bool(sync_batch_norm)
        self.fused = bool(fused)
        self.count = 0  # convolutions so far: layers are named conv_<k>, bn_<k>, leaky_<k>

    def leaky(self, name=None):
        return LeakyReLU(0.1, name=name) if self.ops == "opforge" else TfLeakyReLU(0.1, name=name)

    def conv_layers(self, filters: int, size: int, strides: int = 1, batch_norm: bool = True):
        """The layers of one DarknetConv (its convolution, and batch norm and activation)."""
        k = self.count
        self.count += 1
        if self.fused and batch_norm:
            # One layer with the variables of the three (conv_k's kernel, bn_k's four).
            return [ConvBNLeaky(filters, size, strides=strides, padding="same" if strides == 1 else "valid",
                                alpha=0.1, kernel_regularizer=keras.regularizers.L2(0.0005), name=f"conv_{k}")]
        layers = [keras.layers.Conv2D(filters, size, strides=strides, padding="same" if strides == 1 else "valid",
                                      use_bias=not batch_norm,
                                      kernel_regularizer=keras.regularizers.L2(0.0005), name=f"conv_{k}")]
        if batch_norm:
            layers += [keras.layers.BatchNormalization(synchronized=self.sync_batch_norm, name=f"bn_{k}"),
                       self.leaky(name=f"leaky_{k}")]
        return layers

    def upsample_layer(self, channels: int, size: Optional[int]):
        if self.upsample == "nearest":
            return keras.layers.UpSampling2D(2, name=f"upsample_{self.count}")
        if self.upsample == "transpose":
            layer = Conv2DTranspose if self.ops == "opforge" else keras.layers.Conv2DTranspose
            return layer(channels, 4, strides=2, padding="same", name=f"upsample_{self.count}")
        if self.ops == "tf":
            return TfBilinearUpsample(name=f"upsample_{self.count}")
        return BilinearResize(scale=2, name=f"upsample_{self.count}")

    def conv(self, x, filters: int, size: int, strides: int = 1, batch_norm: bool = True):
        """yolov3-tf2's DarknetConv: stride 2 pads top-left by one and convolves 'valid'."""
        if strides != 1:
            x = keras.layers.ZeroPadding2D(((1, 0), (1, 0)))(x)
        for layer in self.conv_layers(filters, size, strides, batch_norm):
            x = layer(x)
        return x

    def up(self, x, channels: int, size: Optional[int]):
        return self.upsample_layer(channels, size)(x)

    def residual(self, x, filters: int):
        prev = x
        x = self.conv(x, filters // 2, 1)
        x = self.conv(x, filters, 3)
        return keras.layers.Add()([prev, x])

    def block(self, x, filters: int, blocks: int):
        x = self.conv(x, filters, 3, strides=2)
        for _ in range(blocks):
            x = self.residual(x, filters)
        return x


def YoloV3(num_classes: int = 80, input_size: Optional[int] = 416, upsample: str = "transpose",
           ops: str = "opforge", name: str = "yolov3", sync_batch_norm: bool = False,
           fused: bool = False) -> keras.Model:
    """YOLO-v3 (Darknet-53 backbone, three heads) returning the raw head maps
    `[B, S/32, S/32, 3*(5+C)]`, `[B, S/16, ...]`, `[B, S/8, ...]` for an `S`x`S` input.

    Args:
      num_classes: C.
      input_size: S, a multiple of 32, or None for any size (not with upsample="bilinear" and
        ops="opforge").
      upsample: the neck's x2 upsampler: "transpose" (Conv2DTranspose, kernel 4, stride 2),
        "bilinear" (half-pixel bilinear resize) or "nearest" (the original YOLO-v3).
      ops: "opforge" (opforge's LeakyReLU, Conv2DTranspose, BilinearResize) or "tf" (the same
        network from TensorFlow built-ins, variables in the same order, for parity checks).
      sync_batch_norm: batch norm with `synchronized=True`: in training under a
        tf.distribute strategy, the batch statistics are those of the global batch (summed
        over the replicas), so a multi-replica step normalises as one device would on the
        whole batch. Same variables and the same inference either way; in training it
        computes the variance as E[x^2] - E[x]^2 (Keras' synchronized path, also outside a
        strategy), which differs from the default in float32 rounding only.
      fused: every Conv2D + BatchNormalization + LeakyReLU block as one
        `opforge.layers.ConvBNLeaky` (named conv_k, with the same variables in the same order as
        the unfused model, so weights move between the two with get_weights/set_weights):
        training runs the fused batch norm + activation ops, inference the folded fused
        convolution. ops="opforge" only.
    """
    _check("YoloV3", upsample, ops, num_classes, input_size)
    _check_fused("YoloV3", fused, ops, sync_batch_norm)
    b = _Builder(ops, upsample, sync_batch_norm, fused)
    out_channels = 3 * (5 + int(num_classes))
    inputs = keras.Input((input_size, input_size, 3), name="input")
    x = b.conv(inputs, 32, 3)
    x = b.block(x, 64, 1)
    x = b.block(x, 128, 2)
    x = x_36 = b.block(x, 256, 8)
    x = x_61 = b.block(x, 512, 8)
    x = b.block(x, 1024, 4)
    grid = None if input_size is None else input_size // 32
    outputs = []
    for k, filters in enumerate((512, 256, 128)):
        if k:
            x = b.conv(x, filters, 1)
            x = b.up(x, filters, grid)
            x = keras.layers.Concatenate()([x, (x_61, x_36)[k - 1]])
            grid = None if grid is None else 2 * grid
        for _ in range(2):
            x = b.conv(x, filters, 1)
            x = b.conv(x, filters * 2, 3)
        x = b.conv(x, filters, 1)
        head = b.conv(x, filters * 2, 3)
        outputs.append(b.conv(head, out_channels, 1, batch_norm=False))
    return keras.Model(inputs, outputs, name=name)


def YoloV3Tiny(num_classes: int = 80, input_size: Optional[int] = 416, upsample: str = "transpose",
               ops: str = "opforge", name: str = "yolov3_tiny", sync_batch_norm: bool = False,
               fused: bool = False) -> keras.Model:
    """YOLO-v3-tiny (the 7-convolution backbone, two heads) returning `[B, S/32, S/32, 3*(5+C)]`
    and `[B, S/16, S/16, 3*(5+C)]`. Arguments as `YoloV3`."""
    _check("YoloV3Tiny", upsample, ops, num_classes, input_size)
    _check_fused("YoloV3Tiny", fused, ops, sync_batch_norm)
    b = _Builder(ops, upsample, sync_batch_norm, fused)
    inputs = keras.Input((input_size, input_size, 3), name="input")
    x = inputs
    for filters in (16, 32, 64, 128):
        x = b.conv(x, filters, 3)
        x = keras.layers.MaxPooling2D(2, 2, "same")(x)
    x = x_8 = b.conv(x, 256, 3)
    x = keras.layers.MaxPooling2D(2, 2, "same")(x)
    x = b.conv(x, 512, 3)
    x = keras.layers.MaxPooling2D(2, 1, "same")(x)
    x = b.conv(x, 1024, 3)
    grid = None if input_size is None else input_size // 32
    out_channels = 3 * (5 + int(num_classes))
    x = b.conv(x, 256, 1)
    head = b.conv(x, 512, 3)
    out_0 = b.conv(head, out_channels, 1, batch_norm=False)
    x = b.conv(x, 128, 1)
    x = b.up(x, 128, grid)
    x = keras.layers.Concatenate()([x, x_8])
    head = b.conv(x, 256, 3)
    out_1 = b.conv(head, out_channels, 1, batch_norm=False)
    return keras.Model(inputs, [out_0, out_1], name=name)


@keras.saving.register_keras_serializable(package="opforge")
class YoloV3TinySubclassed(keras.Model):
    """YOLO-v3-tiny as a subclassed `keras.Model`: the same layers, created in the same order as
    `YoloV3Tiny`, so `model.set_weights(functional.get_weights())` gives the same outputs."""

    def __init__(self, num_classes: int = 80, upsample: str = "transpose", ops: str = "opforge", **kwargs):
        super().__init__(**kwargs)
        _check("YoloV3TinySubclassed", upsample, ops, num_classes, None)
        self.num_classes, self.upsample, self.ops = int(num_classes), upsample, ops
        b = _Builder(ops, upsample)
        out = 3 * (5 + self.num_classes)
        # The layers of YoloV3Tiny, created in its order, so they carry its layer names.
        self.backbone = [b.conv_layers(f, 3) for f in (16, 32, 64, 128, 256, 512, 1024)]
        self.pools = [keras.layers.MaxPooling2D(2, s, "same") for s in (2, 2, 2, 2, 2, 1)]
        self.neck_0 = b.conv_layers(256, 1)
        self.head_0 = b.conv_layers(512, 3) + b.conv_layers(out, 1, batch_norm=False)
        self.neck_1 = b.conv_layers(128, 1)
        self.up = b.upsample_layer(128, None)
        self.concat = keras.layers.Concatenate()
        self.head_1 = b.conv_layers(256, 3) + b.conv_layers(out, 1, batch_norm=False)

    def set_functional_weights(self, functional: keras.Model) -> None:
        """Copies the weights of a Functional `YoloV3Tiny` of the same arguments, layer by layer
        (matched by name: the two create the same layers in the same order). Call the model once
        first so that its weights exist."""
        for layers in self.backbone + [self.neck_0, self.head_0, self.neck_1, [self.up], self.head_1]:
            for layer in layers:
                if layer.weights:
                    layer.set_weights(functional.get_layer(layer.name).get_weights())

    @staticmethod
    def _run(layers, x, training):
        for layer in layers:
            x = layer(x, training=training) if isinstance(layer, keras.layers.BatchNormalization) else layer(x)
        return x

    def call(self, x, training=False):
        for k, layers in enumerate(self.backbone):
            x = self._run(layers, x, training)
            if k == 4:
                x_8 = x
            if k < len(self.pools):
                x = self.pools[k](x)
        x = self._run(self.neck_0, x, training)
        out_0 = self._run(self.head_0, x, training)
        x = self._run(self.neck_1, x, training)
        x = self.concat([self.up(x), x_8])
        out_1 = self._run(self.head_1, x, training)
        return [out_0, out_1]

    def get_config(self):
        return {**super().get_config(), "num_classes": self.num_classes, "upsample": self.upsample,
                "ops": self.ops}


def detector(model: keras.Model, num_classes: int, input_size: int, anchors=None, anchor_masks=None,
             **postprocess) -> keras.Model:
    """`model` (YoloV3 or YoloV3Tiny) followed by `opforge.layers.YoloPostprocess`: images in,
    (boxes, scores, classes, valid_detections) out. Anchors and masks default to those of the
    model's kind (three heads: YOLO-v3's; two: tiny's), scaled from 416 to `input_size`;
    `postprocess` goes to YoloPostprocess (max_detections, score_threshold...)."""
    heads = model.outputs
    if anchors is None:
        anchors = (YOLOV3_ANCHORS if len(heads) == 3 else YOLOV3_TINY_ANCHORS) * (input_size / 416)
    if anchor_masks is None:
        anchor_masks = YOLOV3_MASKS if len(heads) == 3 else YOLOV3_TINY_MASKS
    detections = YoloPostprocess(anchors, anchor_masks, num_classes, input_size, **postprocess)(heads)
    return keras.Model(model.inputs, detections, name=model.name + "_detector")

"""`opforge.layers.Conv2DTranspose`: `keras.layers.Conv2DTranspose` on the
`Opforge>Conv2DTranspose` op (and its two C++ gradient ops)."""
from __future__ import annotations

from typing import Any, List, Optional, Union

from opforge._keras import framework
import tensorflow as tf

from opforge.layers import _backend
from opforge.ops import _xla
from opforge.ops.conv2d_transpose import conv2d_transpose

keras = framework()  # Keras 3, or tf-keras under TF_USE_LEGACY_KERAS=1 (opforge._keras)
__all__ = ["Conv2DTranspose"]


def deconv_output_length(
    input_size, kernel_size: int, stride: int, padding: str, output_padding: Optional[int],
    dilation: int,
):
    """Keras' output-size rule for transposed convolutions (`input_size` may be a tensor).

    "valid": `(in - 1) * stride + max(eff, stride) - eff + eff` unless `output_padding` is given;
    "same": `in * stride`, or `(in - 1) * stride + eff % 2 + output_padding`; eff is the dilated
    kernel size.
    """
    eff = (kernel_size - 1) * dilation + 1
    if padding == "valid":
        if output_padding is None:
            output_padding = max(eff, stride) - eff
        return (input_size - 1) * stride + eff + output_padding
    if output_padding is None:
        return input_size * stride
    return (input_size - 1) * stride + eff % 2 + output_padding


@keras.saving.register_keras_serializable(package="opforge")
class Conv2DTranspose(keras.layers.Conv2DTranspose):
    """2-D transposed convolution layer (the upsampler of decoders and YOLO necks).

    Mirrors `keras.layers.Conv2DTranspose` argument for argument (filters, kernel_size, strides,
    padding "valid"/"same", output_padding, data_format, dilation_rate, activation, use_bias,
    initializers, regularizers, constraints), with the same output-size rules and the same
    weights: `kernel` of shape `(kh, kw, filters, in_channels)` and `bias` of shape
    `(filters,)`, so weights copied from a Keras `Conv2DTranspose` give the same output. It
    computes with opforge's C++ kernel, which also runs `channels_first` and dilation above 1 on
    the CPU. Under XLA the op runs as an FFI custom call (`supports_jit`), with the same results.
    """

    def __init__(
        self,
        filters: int,
        kernel_size: Union[int, List[int]],
        strides: Union[int, List[int]] = (1, 1),
        padding: str = "valid",
        output_padding: Union[int, List[int], None] = None,
        data_format: Optional[str] = None,
        dilation_rate: Union[int, List[int]] = (1, 1),
        activation=None,
        use_bias: bool = True,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        kernel_regularizer=None,
        bias_regularizer=None,
        activity_regularizer=None,
        kernel_constraint=None,
        bias_constraint=None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            filters, kernel_size, strides=strides, padding=padding, output_padding=output_padding,
            data_format=data_format, dilation_rate=dilation_rate, activation=activation, use_bias=use_bias,
            kernel_initializer=kernel_initializer, bias_initializer=bias_initializer,
            kernel_regularizer=kernel_regularizer, bias_regularizer=bias_regularizer,
            activity_regularizer=activity_regularizer, kernel_constraint=kernel_constraint,
            bias_constraint=bias_constraint, **kwargs)
        _backend.require("opforge.layers.Conv2DTranspose")
        self.supports_jit = _xla.supports_jit("Opforge>Conv2DTranspose",
                                              "Opforge>Conv2DTransposeInputGrad",
                                              "Opforge>Conv2DTransposeFilterGrad")

    def _output_shape(self, inputs: tf.Tensor):
        shape = list(inputs.shape)
        if any(d is None for d in shape):
            dynamic = tf.shape(inputs)
            shape = [dynamic[i] if d is None else d for i, d in enumerate(shape)]
        spatial = shape[1:3] if self.data_format == "channels_last" else shape[2:4]
        out = [
            deconv_output_length(
                spatial[i], self.kernel_size[i], self.strides[i], self.padding,
                None if self.output_padding is None else self.output_padding[i],
                self.dilation_rate[i],
            )
            for i in range(2)
        ]
        if all(isinstance(v, int) for v in out):
            return out  # static [height, width]: the op keeps batch and channels
        return tf.stack([tf.cast(v, tf.int32) for v in out])

    def call(self, inputs):
        if _backend.is_jax():
            return self._call_jax(inputs)
        kernel = tf.convert_to_tensor(self.kernel)
        if kernel.dtype != inputs.dtype:
            kernel = tf.cast(kernel, inputs.dtype)
        channels_last = self.data_format == "channels_last"
        outputs = conv2d_transpose(
            inputs,
            kernel,
            self._output_shape(inputs),
            strides=list(self.strides),
            padding=self.padding.upper(),
            data_format="NHWC" if channels_last else "NCHW",
            dilations=list(self.dilation_rate),
        )
        if self.use_bias:
            bias = tf.cast(tf.convert_to_tensor(self.bias), outputs.dtype)
            shape = (1, 1, 1, self.filters) if channels_last else (1, self.filters, 1, 1)
            outputs = tf.add(outputs, tf.reshape(bias, shape))
        if self.activation is not None:
            return self.activation(outputs)
        return outputs

    def _call_jax(self, inputs):
        """The layer on Keras's JAX backend: opforge.jax.conv2d_transpose (the same kernel and
        its gradients), the output size from the static shape."""
        ofj = _backend.ops()
        kernel = keras.ops.cast(self.kernel, inputs.dtype)
        channels_last = self.data_format == "channels_last"
        outputs = ofj.conv2d_transpose(inputs, kernel, self._output_shape(inputs), strides=list(self.strides),
                                       padding=self.padding.upper(), data_format="NHWC" if channels_last else "NCHW",
                                       dilations=list(self.dilation_rate))
        if self.use_bias:
            bias = keras.ops.cast(self.bias, outputs.dtype)
            shape = (1, 1, 1, self.filters) if channels_last else (1, self.filters, 1, 1)
            outputs = keras.ops.add(outputs, keras.ops.reshape(bias, shape))
        if self.activation is not None:
            return self.activation(outputs)
        return outputs

"""`opforge.layers.ConvBNLeaky`: a Darknet block (Conv2D without bias -> BatchNormalization ->
LeakyReLU) as one layer with the same variables, on opforge's fused ops."""
from __future__ import annotations

from typing import Any, Dict

from opforge._keras import framework
import tensorflow as tf

from opforge.layers import _backend
from opforge.ops import _xla
from opforge.ops.bias_leaky_relu import bias_leaky_relu
from opforge.ops.fused_batch_norm_leaky_relu import fused_batch_norm_leaky_relu
from opforge.ops.fused_conv2d_bias_leaky_relu import fused_conv2d_bias_leaky_relu

keras = framework()  # Keras 3, or tf-keras under TF_USE_LEGACY_KERAS=1 (opforge._keras)
__all__ = ["ConvBNLeaky"]


def _pair(name: str, value) -> tuple:
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value, value)
    try:
        pair = tuple(int(v) for v in value)
    except (TypeError, ValueError):
        pair = ()
    if len(pair) != 2 or any(v < 1 for v in pair) or any(isinstance(v, bool) for v in value):
        raise ValueError(f"opforge.layers.ConvBNLeaky: {name} must be a positive int or two, got {value!r}")
    return pair


def _bfloat16(dtype) -> bool:
    return dtype is not None and tf.as_dtype(dtype) == tf.bfloat16


def _bfloat16_on_onednn(dtype) -> bool:
    """In bfloat16 the choice turns on where opforge's convolutions run. On oneDNN (the CPU has
    AVX512-BF16 or AMX, `opforge._loader.onednn_bfloat16`) they run the kernels TensorFlow's
    do, the forward at its rate and the gradients faster than TensorFlow's Conv2DBackpropInput
    and Conv2DBackpropFilter (1.5-2.2x on an AMX Xeon, `opforge bench --dtype bfloat16`), so
    the layers take opforge's everywhere. Without it they compute bfloat16 at the float32 rate
    (0.5-0.8x on the AVX512-BF16 EPYC, 0.2x on an AMX Xeon), so the layers take TensorFlow's."""
    if not _bfloat16(dtype):
        return False
    from opforge._loader import onednn_bfloat16

    return onednn_bfloat16()


def _winograd_pays(shape, filters: int, dtype=None) -> bool:
    """Where opforge's Winograd convolution beat TensorFlow's in a training step on the 2-core
    AVX-512 EPYC: 64 channels or more on each side (narrower products run below the GEMM's
    rate) and maps of at least 26x26 (on smaller ones the per-call filter transform is not
    amortised). In bfloat16: everywhere on oneDNN, nowhere without it (`_bfloat16_on_onednn`)."""
    if _bfloat16(dtype):
        return _bfloat16_on_onednn(dtype)
    h, w, c = shape[1], shape[2], shape[3]
    return (c is not None and c >= 64 and filters >= 64 and h is not None and w is not None
            and h >= 26 and w >= 26)


# Which convolution ConvBNLeaky's inference runs: "auto" (opforge's fused op where it measured
# faster, TensorFlow's conv2d + bias_add + leaky_relu elsewhere), "opforge" or "tf". A module
# setting for benchmarks and tests, not a per-layer option: it changes no variable and no result
# beyond rounding.
INFERENCE_CONV = "auto"


def _opforge_conv_pays(layer, shape, dtype=None) -> bool:
    """Where opforge's fused convolution beat TensorFlow's (oneDNN's, with bias and leaky_relu
    fused into it by grappler) in inference on the 2-core AVX-512 EPYC, layer by layer over
    YOLO-v3 at batch 1 and 8: the 3x3 stride-1 convolutions with 64+ channels on each side and
    maps of 13x13 or larger, which run Winograd on a transformed filter kept between calls
    (1.2-1.5x). TensorFlow's was faster on 1x1 convolutions (0.7-1.0x), on stride 2
    (0.7-1.1x) and with few input channels (0.3x with 3, 0.7x with 32). In bfloat16: everywhere
    on oneDNN, nowhere without it (`_bfloat16_on_onednn`)."""
    if INFERENCE_CONV != "auto":
        return INFERENCE_CONV == "opforge"
    if _bfloat16(dtype):
        return _bfloat16_on_onednn(dtype)
    h, w, c = shape[1], shape[2], shape[3]
    return (layer.kernel_size == (3, 3) and layer.strides == (1, 1) and layer.dilation_rate == (1, 1)
            and c is not None and c >= 64 and layer.filters >= 64 and h is not None and w is not None
            and h >= 13 and w >= 13)


def _gpu_present() -> bool:
    return bool(tf.config.list_logical_devices("GPU"))


@keras.saving.register_keras_serializable(package="opforge")
class ConvBNLeaky(keras.layers.Layer):
    """`Conv2D(filters, kernel_size, strides, padding, use_bias=False)` ->
    `BatchNormalization(momentum, epsilon)` -> `LeakyReLU(alpha)` in one layer.

    The variables are those of the unfused chain, in its order and with its shapes (kernel
    [kh, kw, C_in, filters], gamma, beta, moving_mean, moving_variance), so `get_weights()` /
    `set_weights()` move weights between this layer and a Conv2D + BatchNormalization pair.

    - training=True: TensorFlow's convolution, then `opforge.ops.fused_batch_norm_leaky_relu`
      (batch statistics, normalisation and activation in two passes, gradient in two more); the
      moving statistics update as Keras's BatchNormalization updates them
      (`moving = moving * momentum + batch * (1 - momentum)`, the biased batch variance).
    - otherwise: the batch norm folded into the kernel and a bias
      (`W' = W * gamma / sqrt(var + eps)`, `b' = beta - mean * gamma / sqrt(var + eps)`) and
      `opforge.ops.fused_conv2d_bias_leaky_relu` (bias and activation applied while each output
      tile is in cache) where it measured faster than TensorFlow's convolution (3x3 stride-1
      convolutions on Winograd, see `_opforge_conv_pays`); elsewhere TensorFlow's conv2d,
      bias_add and leaky_relu on the folded weights, which grappler fuses into one kernel in a
      tf.function. On a machine with a GPU, TensorFlow's conv2d (cuDNN) and
      `opforge.ops.bias_leaky_relu`.

    Args as Conv2D / BatchNormalization / LeakyReLU: filters, kernel_size, strides=1,
    padding ("same" or "valid"), alpha (LeakyReLU's negative slope, >= 0; YOLO uses 0.1),
    momentum, epsilon, dilation_rate, and the initializers and regularizer of the kernel and of
    the batch norm's variables.
    """

    def __init__(self, filters: int, kernel_size, strides=1, padding: str = "same", alpha: float = 0.1,
                 momentum: float = 0.99, epsilon: float = 1e-3, dilation_rate=1,
                 kernel_initializer="glorot_uniform", kernel_regularizer=None, gamma_initializer="ones",
                 beta_initializer="zeros", moving_mean_initializer="zeros", moving_variance_initializer="ones",
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        _backend.require("opforge.layers.ConvBNLeaky")
        if isinstance(filters, bool) or not isinstance(filters, int) or filters < 1:
            raise ValueError(f"opforge.layers.ConvBNLeaky: filters must be a positive int, got {filters!r}")
        if not isinstance(padding, str) or padding.lower() not in ("same", "valid"):
            raise ValueError(f"opforge.layers.ConvBNLeaky: padding must be 'same' or 'valid', got {padding!r}")
        for name, value, low in (("alpha", alpha, 0.0), ("epsilon", epsilon, 1e-12), ("momentum", momentum, 0.0)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= low:
                raise ValueError(f"opforge.layers.ConvBNLeaky: {name} must be a number >= {low:g}, got {value!r}")
        if momentum > 1:
            raise ValueError(f"opforge.layers.ConvBNLeaky: momentum must be in [0, 1], got {momentum!r}")
        self.filters = filters
        self.kernel_size = _pair("kernel_size", kernel_size)
        self.strides = _pair("strides", strides)
        self.dilation_rate = _pair("dilation_rate", dilation_rate)
        self.padding = padding.lower()
        self.alpha = float(alpha)
        self.momentum = float(momentum)
        self.epsilon = float(epsilon)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.gamma_initializer = keras.initializers.get(gamma_initializer)
        self.beta_initializer = keras.initializers.get(beta_initializer)
        self.moving_mean_initializer = keras.initializers.get(moving_mean_initializer)
        self.moving_variance_initializer = keras.initializers.get(moving_variance_initializer)
        # Under XLA the ops run as FFI custom calls (the same kernels, the same bits).
        self.supports_jit = _xla.supports_jit("Opforge>FusedConv2DBiasLeakyRelu",
                                              "Opforge>FusedBatchNormLeakyRelu",
                                              "Opforge>FusedBatchNormLeakyReluGrad",
                                              "Opforge>BiasLeakyRelu")

    def build(self, input_shape):
        channels = input_shape[-1]
        if channels is None:
            raise ValueError("opforge.layers.ConvBNLeaky: the input's channels (last axis) must be known")
        self.kernel = self.add_weight(name="kernel", shape=(*self.kernel_size, channels, self.filters),
                                      initializer=self.kernel_initializer, regularizer=self.kernel_regularizer)
        # Batch norm variables in float32 (or float64) whatever the compute dtype, as Keras keeps them.
        bn_dtype = "float64" if self.variable_dtype == "float64" else "float32"
        self.gamma = self.add_weight(name="gamma", shape=(self.filters,), initializer=self.gamma_initializer,
                                     dtype=bn_dtype)
        self.beta = self.add_weight(name="beta", shape=(self.filters,), initializer=self.beta_initializer,
                                    dtype=bn_dtype)
        self.moving_mean = self.add_weight(name="moving_mean", shape=(self.filters,), trainable=False,
                                           initializer=self.moving_mean_initializer, dtype=bn_dtype)
        self.moving_variance = self.add_weight(name="moving_variance", shape=(self.filters,), trainable=False,
                                               initializer=self.moving_variance_initializer, dtype=bn_dtype)

    def _conv_args(self):
        return dict(strides=[1, *self.strides, 1], padding=self.padding.upper(),
                    dilations=[1, *self.dilation_rate, 1])

    def call(self, inputs, training=None):
        if _backend.is_jax():
            return self._call_jax(inputs, training)
        kernel = tf.cast(self.kernel, inputs.dtype)
        if training:
            stride1_3x3 = self.kernel_size == (3, 3) and self.strides == (1, 1) and self.dilation_rate == (1, 1)
            if (_bfloat16_on_onednn(inputs.dtype) or stride1_3x3) \
                    and _winograd_pays(inputs.shape, self.filters, inputs.dtype) and not _gpu_present():
                # opforge's convolution: Winograd for 3x3 stride 1 in float32, oneDNN in bfloat16,
                # where it measured faster than TensorFlow's (see _winograd_pays).
                args = self._conv_args()
                z = fused_conv2d_bias_leaky_relu(inputs, kernel, tf.zeros([self.filters], inputs.dtype),
                                                 args["strides"], args["padding"], alpha=1.0)
            else:
                z = tf.nn.conv2d(inputs, kernel, **self._conv_args())
            y, mean, variance = fused_batch_norm_leaky_relu(z, self.gamma, self.beta, epsilon=self.epsilon,
                                                            alpha=self.alpha)
            m = tf.cast(self.momentum, mean.dtype)
            self.moving_mean.assign(self.moving_mean * m + mean * (1.0 - m))
            self.moving_variance.assign(self.moving_variance * m + variance * (1.0 - m))
            return y
        weights, bias = self.folded_weights()
        weights, bias = tf.cast(weights, inputs.dtype), tf.cast(bias, inputs.dtype)
        if _gpu_present():
            # TensorFlow's convolution (cuDNN), then opforge's bias + leaky_relu kernel.
            return bias_leaky_relu(tf.nn.conv2d(inputs, weights, **self._conv_args()), bias, self.alpha)
        args = self._conv_args()
        if not _opforge_conv_pays(self, inputs.shape, inputs.dtype):
            # TensorFlow's convolution with the folded weights; in a tf.function grappler fuses
            # the bias and the activation into it (_FusedConv2D).
            y = tf.nn.bias_add(tf.nn.conv2d(inputs, weights, **args), bias)
            return tf.nn.leaky_relu(y, alpha=self.alpha)
        return fused_conv2d_bias_leaky_relu(inputs, weights, bias, args["strides"], args["padding"],
                                            alpha=self.alpha, dilations=args["dilations"])

    def _call_jax(self, inputs, training):
        """The layer on Keras's JAX backend: XLA's convolution then opforge.jax's fused batch norm
        and activation in training (the moving statistics updated as above); in inference the
        folded weights and opforge's fused convolution (`opforge.jax.fused_conv2d_bias_leaky_relu`,
        the kernel the TensorFlow backend runs where `_opforge_conv_pays`)."""
        import jax

        ofj = _backend.ops()
        args = self._conv_args()
        if training:
            kernel = keras.ops.cast(self.kernel, inputs.dtype)
            z = jax.lax.conv_general_dilated(inputs, kernel, window_strides=self.strides,
                                             padding=self.padding.upper(), rhs_dilation=self.dilation_rate,
                                             dimension_numbers=("NHWC", "HWIO", "NHWC"))
            y, mean, variance = ofj.fused_batch_norm_leaky_relu(
                z, keras.ops.convert_to_tensor(self.gamma), keras.ops.convert_to_tensor(self.beta),
                epsilon=self.epsilon, alpha=self.alpha)
            m = keras.ops.cast(self.momentum, mean.dtype)
            self.moving_mean.assign(self.moving_mean * m + mean * (1.0 - m))
            self.moving_variance.assign(self.moving_variance * m + variance * (1.0 - m))
            return y
        weights, bias = self.folded_weights()
        weights, bias = keras.ops.cast(weights, inputs.dtype), keras.ops.cast(bias, inputs.dtype)
        return ofj.fused_conv2d_bias_leaky_relu(inputs, weights, bias, args["strides"], args["padding"],
                                                alpha=self.alpha, dilations=args["dilations"])

    def folded_weights(self):
        """The kernel and bias with the inference-mode batch norm folded in (in the variables'
        dtype): `W * gamma / sqrt(var + eps)`, `beta - mean * gamma / sqrt(var + eps)`."""
        dtype = self.gamma.dtype
        if _backend.is_jax():
            scale = self.gamma * keras.ops.rsqrt(self.moving_variance + keras.ops.cast(self.epsilon, dtype))
            weights = keras.ops.cast(self.kernel, dtype) * scale
        else:
            scale = self.gamma * tf.math.rsqrt(self.moving_variance + tf.cast(self.epsilon, dtype))
            weights = tf.cast(self.kernel, dtype) * scale
        return weights, self.beta - self.moving_mean * scale

    def compute_output_shape(self, input_shape):
        def size(n, k, s, d):
            if n is None:
                return None
            eff = (k - 1) * d + 1
            return (n + s - 1) // s if self.padding == "same" else max((n - eff) // s + 1, 0)

        b, h, w, _ = input_shape
        return (b, size(h, self.kernel_size[0], self.strides[0], self.dilation_rate[0]),
                size(w, self.kernel_size[1], self.strides[1], self.dilation_rate[1]), self.filters)

    def get_config(self) -> Dict[str, Any]:
        config = super().get_config()
        config.update(
            filters=self.filters, kernel_size=list(self.kernel_size), strides=list(self.strides),
            padding=self.padding, alpha=self.alpha, momentum=self.momentum, epsilon=self.epsilon,
            dilation_rate=list(self.dilation_rate),
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
            kernel_regularizer=keras.regularizers.serialize(self.kernel_regularizer),
            gamma_initializer=keras.initializers.serialize(self.gamma_initializer),
            beta_initializer=keras.initializers.serialize(self.beta_initializer),
            moving_mean_initializer=keras.initializers.serialize(self.moving_mean_initializer),
            moving_variance_initializer=keras.initializers.serialize(self.moving_variance_initializer))
        return config

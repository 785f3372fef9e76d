"""opforge in a few lines: drop-in ops, a gradient, Keras layers, saving, and a neck's upsamplers."""
import numpy as np
import tensorflow as tf
import keras
import opforge

x = tf.constant([[-2.0, -0.5, 0.0, 1.5]])
y = opforge.ops.leaky_relu(x, alpha=0.2)  # same as tf.nn.leaky_relu, bit for bit
z = opforge.ops.element_mul(y, tf.constant([2.0]))  # same as tf.multiply, with broadcasting
with tf.GradientTape() as tape:
    tape.watch(x)
    loss = tf.reduce_sum(opforge.ops.element_mul(opforge.ops.leaky_relu(x), x))
print("y =", y.numpy(), "z =", z.numpy(), "dloss/dx =", tape.gradient(loss, x).numpy())

model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8), opforge.layers.LeakyReLU(0.3)])
model.save("/tmp/opforge_quickstart.keras")
restored = keras.models.load_model("/tmp/opforge_quickstart.keras")  # opforge.layers is registered
assert np.array_equal(model(x).numpy(), restored(x).numpy())
print("saved and restored:", restored(x).numpy())

# The upsamplers of a detection neck: bilinear resize (== tf.image.resize, bit for bit) and a
# transposed convolution with C++ gradients for the input and the filter.
feature_map = tf.random.normal([2, 13, 13, 16])
up = opforge.ops.resize_bilinear(feature_map, [26, 26], half_pixel_centers=True)
assert np.array_equal(up.numpy(), tf.image.resize(feature_map, [26, 26]).numpy())
neck = keras.Sequential([
    keras.Input((None, None, 16)),
    opforge.layers.Conv2DTranspose(8, 4, strides=2, padding="same"),
    opforge.layers.BilinearResize((52, 52)),
])
print("neck output:", neck(feature_map).shape)  # (2, 52, 52, 8)

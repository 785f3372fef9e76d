"""opforge in ten lines: a drop-in op, its gradient, a Keras layer, and saving."""
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

"""Arguments of the wrong Python type are errors naming the argument, never coerced (the
reliability issue's items 2 and 3): a float size is not truncated, a string slope is not parsed,
1 is not a bool, and data_format=None is TensorFlow's default. The classes are TensorFlow's for
the same mistake: TypeError for a value of the wrong type, OverflowError for 10**400 as a float."""
import numpy as np
import pytest
import tensorflow as tf

import opforge
from opforge.layers import BilinearResize, LeakyReLU


def test_resize_size_must_be_ints():
    x = tf.ones([1, 5, 5, 1])
    with pytest.raises(TypeError, match=r"ResizeBilinear: size must be ints, got 3\.9"):
        opforge.ops.resize_bilinear(x, [3.9, 4.99])
    with pytest.raises(TypeError, match="size must be ints, got True"):
        opforge.ops.resize_bilinear(x, [True, 4])
    # NumPy ints are ints.
    assert opforge.ops.resize_bilinear(x, np.array([3, 4])).shape == (1, 3, 4, 1)


@pytest.mark.parametrize("alpha,given,error", [("0.3", "'0.3'", TypeError), (True, "True", TypeError),
                                               (10**400, "1000000000", OverflowError), (None, "None", TypeError)])
def test_leaky_relu_alpha_must_be_a_number_in_range(alpha, given, error):
    with pytest.raises(error, match=f"LeakyRelu: alpha must be a number.*got {given}"):
        opforge.ops.leaky_relu(tf.ones([3]), alpha=alpha)
    with pytest.raises(error, match="FusedConv2DBiasLeakyRelu: alpha must be"):
        opforge.ops.fused_conv2d_bias_leaky_relu(tf.ones([1, 3, 3, 1]), tf.ones([1, 1, 1, 1]), tf.ones([1]), 1,
                                                 "SAME", alpha=alpha)


def test_leaky_relu_alpha_accepts_numpy_scalars():
    y = opforge.ops.leaky_relu(tf.constant([-1.0, 2.0]), alpha=np.float64(0.5))
    np.testing.assert_array_equal(y, [-0.5, 2.0])


@pytest.mark.parametrize("kwargs,fragment", [
    (dict(negative_slope="0.3"), "negative_slope must be a number, got '0.3'"),
    (dict(negative_slope=10**400), "negative_slope must be a number within the float range"),
])
def test_leaky_relu_layer_rejects_what_it_used_to_coerce(kwargs, fragment):
    with pytest.raises(ValueError, match=fragment):
        LeakyReLU(**kwargs)


@pytest.mark.parametrize("kwargs,fragment", [
    (dict(target_size=(8, 8), align_corners=1, half_pixel_centers=False), "align_corners must be a Python bool, got 1"),
    (dict(target_size=(8, 8), half_pixel_centers="yes"), "half_pixel_centers must be a Python bool, got 'yes'"),
    (dict(target_size=(8.5, 8)), "target_size must be ints, got 8.5"),
])
def test_bilinear_resize_layer_rejects_what_it_used_to_coerce(kwargs, fragment):
    with pytest.raises(ValueError, match=fragment):
        BilinearResize(**kwargs)


def test_conv2d_transpose_data_format_none_is_nhwc():
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=(1, 3, 3, 2)), tf.float32)
    f = tf.constant(rng.normal(size=(3, 3, 4, 2)), tf.float32)
    ours = opforge.ops.conv2d_transpose(x, f, [1, 6, 6, 4], 2, "SAME", data_format=None)
    theirs = tf.nn.conv2d_transpose(x, f, [1, 6, 6, 4], 2, "SAME", data_format=None)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)
    with pytest.raises(TypeError, match="data_format must be"):
        opforge.ops.conv2d_transpose(x, f, [1, 6, 6, 4], 2, "SAME", data_format=3)


# --- raw ops: TensorFlow's positional dtype errors, named --------------------------------------

def test_raw_op_dtype_errors_name_the_argument():
    lib = opforge.load_library()
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"^ElementMul: b must be a float tensor \(attr T, the dtype of a\), got an int32 tensor$"):
        lib.Opforge_ElementMul(a=tf.ones([2]), b=tf.ones([2], tf.int32))
    with pytest.raises(tf.errors.InvalidArgumentError, match="Conv2DTranspose: filter must be a float tensor"):
        lib.Opforge_Conv2DTranspose(input=tf.ones([1, 2, 2, 1]), filter=tf.ones([2, 2, 1, 1], tf.float64),
                                    output_shape=[1, 4, 4, 1], strides=[1, 2, 2, 1], padding="SAME")
    with pytest.raises(tf.errors.InvalidArgumentError, match="ResizeBilinear: size must be an int32 tensor, got a float"):
        lib.Opforge_ResizeBilinear(images=tf.ones([1, 2, 2, 1]), size=tf.constant([2.0, 3.0]))
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="ElementMul: a must have a dtype among half, bfloat16, float, double, int8, .*, "
                             "complex128, got bool"):
        lib.Opforge_ElementMul(a=tf.ones([2], tf.bool), b=tf.ones([2], tf.bool))
    # Calls that are right are untouched, and other errors pass through as they were.
    np.testing.assert_array_equal(lib.Opforge_ElementMul(a=tf.ones([2]), b=tf.fill([2], 3.0)), [3.0, 3.0])
    with pytest.raises(tf.errors.InvalidArgumentError, match="broadcast-compatible"):
        lib.Opforge_ElementMul(a=tf.ones([2]), b=tf.ones([3]))


def test_every_raw_op_input_position_maps_to_its_name():
    """For every op the library registers and every input, TensorFlow's positional message
    becomes one that names the input."""
    from tensorflow.python.framework import op_def_registry

    from opforge._loader import raw_op_error_message

    opforge.load_library()
    for name in opforge.ops.OP_NAMES:
        op_def = op_def_registry.get(name)
        for i, arg in enumerate(op_def.input_arg):
            message = (f"cannot compute {name} as input #{i}(zero-based) was expected to be a float tensor "
                       f"but is a int64 tensor [Op:{name}]")
            named = raw_op_error_message(op_def, message)
            assert named.startswith(f"{name.split('>')[1]}: {arg.name} must be a float tensor"), (name, named)
            assert named.endswith("got an int64 tensor"), named


def test_raw_filter_gradient_refuses_a_grad_that_is_not_4d():
    """Found by conv2d_transpose_fuzz: a [OH, OW] grad passed as a 2-value output_shape, and the
    kernel read it as [N, OH, OW, C], past its end."""
    lib = opforge.load_library()
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"Conv2DTranspose: grad must be a 4-D tensor, got shape \[4, 4\]"):
        lib.Opforge_Conv2DTransposeFilterGrad(input=tf.ones([2, 4, 4, 3]), filter=tf.ones([3, 3, 5, 3]),
                                              grad=tf.ones([4, 4]), strides=[1, 1, 1, 1], padding="SAME")

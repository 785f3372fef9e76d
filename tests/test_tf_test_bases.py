"""TensorFlow's own test bases, as the installed wheel ships them, run against opforge.

`tensorflow/python/ops/image_grad_test_base.py` holds the ResizeBilinear gradient tests that
TensorFlow runs on its own kernels (`image_grad_test.py`); here the same classes run with the
function they call, `image_ops.resize_bilinear`, replaced by `opforge.ops.resize_bilinear` for
the duration of each test (so every forward and gradient they check is opforge's). The other
classes of that module (nearest neighbour, bicubic, crop_and_resize, HSV...) test ops opforge
does not mirror. The other test bases the wheel ships (kernel_tests/nn_ops: depthwise conv,
cuDNN determinism, softmax cross entropy; sparse cross entropy; tf.data) cover no op opforge
mirrors either; `kernel_tests/nn_ops/bias_op_base.py` (BiasAdd) is covered below through
`bias_leaky_relu` with alpha=1, where leaky ReLU is the identity.
"""
from __future__ import annotations

import pytest
import tensorflow as tf

import opforge

image_grad_test_base = pytest.importorskip("tensorflow.python.ops.image_grad_test_base")
from tensorflow.python.ops import image_ops  # noqa: E402  (the module the test base calls)

_calls = {"resize_bilinear": 0}


def _opforge_resize_bilinear(images, size, align_corners=False, name=None, half_pixel_centers=False):
    """`image_ops.resize_bilinear`'s signature, computed by opforge."""
    _calls["resize_bilinear"] += 1
    return opforge.ops.resize_bilinear(images, size, align_corners=align_corners,
                                       half_pixel_centers=half_pixel_centers, name=name)


class TestResizeBilinearOpTestBaseOnOpforge(image_grad_test_base.ResizeBilinearOpTestBase):
    """TensorFlow's ResizeBilinearOpTestBase (shapes, float64 numerical gradients for the three
    coordinate conventions, half/bfloat16/float32/float64 gradients, no gradient for uint8,
    'GPU vs CPU', which on a machine without a GPU compares two CPU runs) with opforge's op."""

    def setUp(self):
        super().setUp()
        if self._testMethodName.startswith("testCompareGpuVsCpu") and not tf.config.list_physical_devices("GPU"):
            # Without a GPU both sides are the same CPU op (24 s of numerical Jacobians for nothing).
            self.skipTest("no GPU: TensorFlow's GPU-vs-CPU comparison would compare two CPU runs")
        self._saved = image_ops.resize_bilinear
        image_ops.resize_bilinear = _opforge_resize_bilinear
        self._calls_before = _calls["resize_bilinear"]

    def tearDown(self):
        if not hasattr(self, "_saved"):  # skipped
            return super().tearDown()
        image_ops.resize_bilinear = self._saved
        # Every test of the base resizes: the replacement was used, so opforge was tested.
        assert _calls["resize_bilinear"] > self._calls_before, "the test base did not call resize_bilinear"
        super().tearDown()


# --- BiasAdd (kernel_tests/nn_ops/bias_op_base.py) through bias_leaky_relu with alpha=1 ----------

bias_op_base = pytest.importorskip("tensorflow.python.kernel_tests.nn_ops.bias_op_base")
from tensorflow.python.ops import nn_ops  # noqa: E402  (the module the test base calls)

_calls["bias_add"] = 0


def _opforge_bias_add(value, bias, data_format=None, name=None):
    """`nn_ops.bias_add` computed by `opforge.ops.bias_leaky_relu(value, bias, alpha=1.0)` (leaky
    ReLU with slope 1 is the identity, -0 and NaN included). opforge's op takes channels last;
    for NCHW the channel axis is moved last and back around it (transposes, exact both ways)."""
    _calls["bias_add"] += 1
    value = tf.convert_to_tensor(value)
    bias = tf.convert_to_tensor(bias, dtype_hint=value.dtype)
    if data_format is not None and data_format.startswith("NC") and value.shape.rank >= 3:
        rank = value.shape.rank
        to_last = [0] + list(range(2, rank)) + [1]
        back = [0, rank - 1] + list(range(1, rank - 1))
        out = opforge.ops.bias_leaky_relu(tf.transpose(value, to_last), bias, alpha=1.0, name=name)
        return tf.transpose(out, back)
    return opforge.ops.bias_leaky_relu(value, bias, alpha=1.0, name=name)


class TestBiasAddTestBaseOnOpforge(bias_op_base.BiasAddTestBase):
    """TensorFlow's BiasAddTestBase (values in float16, bfloat16, float32 and float64 at ranks 2 to
    5, NHWC and NCHW, empty tensors; input, bias and second-order gradients against numerical
    ones) with opforge's bias_leaky_relu at alpha=1."""

    # What opforge deliberately does otherwise, or does not do.
    SKIPPED = {
        # opforge takes [..., C] of any rank >= 1 on purpose; TensorFlow wants 2-D or more.
        "testInputDims": "1-D features are accepted on purpose",
    }

    def setUp(self):
        super().setUp()
        if self._testMethodName in self.SKIPPED:
            self.skipTest(self.SKIPPED[self._testMethodName])
        self._saved = nn_ops.bias_add
        nn_ops.bias_add = _opforge_bias_add
        self._calls_before = _calls["bias_add"]

    def tearDown(self):
        if self._testMethodName in self.SKIPPED:
            return super().tearDown()
        nn_ops.bias_add = self._saved
        if self._testMethodName != "testNpBias":  # the one test of NumPy alone
            assert _calls["bias_add"] > self._calls_before, "the test base did not call bias_add"
        super().tearDown()

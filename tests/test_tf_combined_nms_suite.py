"""TensorFlow's own CombinedNonMaxSuppression tests, run against opforge.

The wheel ships none of them, so they are restated here from TensorFlow's sources:
- the C++ kernel cases of `core/kernels/image/non_max_suppression_op_test.cc`
  (CombinedNonMaxSuppressionOpTest): inputs, attributes and the exact outputs TensorFlow's test
  expects, checked against opforge bit for bit (and against TensorFlow's op on the same inputs);
- the Python error tests of `python/ops/image_ops_test.py` (CombinedNonMaxSuppressionTest:
  `max_total_size` of 2**31 as a Python int and as a tensor) and of
  `python/kernel_tests/image_ops_combined_nms_shape_test.py` (boxes or scores of the wrong rank):
  the exception classes TensorFlow's tests accept, eagerly and inside tf.function, and in each
  mode the class TensorFlow's own function raises. TensorFlow's tests also match its messages;
  opforge's messages are its own (they name the argument, what was expected and what was given),
  so the messages are not compared.
"""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import opforge
from helpers import bits_equal

# --- the kernel cases (CombinedNonMaxSuppressionOpTest) -------------------------------------------

# Six boxes in three clusters, for one image and for a second one (shifted), as the C++ test.
_ONE = [[0, 0, 0.1, 0.1], [0, 0.01, 0.1, 0.11], [0, -0.01, 0.1, 0.09],
        [0, 0.11, 0.1, 0.2], [0, 0.12, 0.1, 0.21], [0, 0.3, 1, 0.4]]
_TWO = [[0, 0, 0.2, 0.2], [0, 0.02, 0.2, 0.22], [0, -0.02, 0.2, 0.19],
        [0, 0.21, 0.2, 0.3], [0, 0.22, 0.2, 0.31], [0, 0.4, 1, 0.5]]
_SCORES_1 = [.9, .75, .6, .95, .5, .3]
_SCORES_2C = [[0.1, 0.9], [0.75, 0.8], [0.6, 0.3], [0.95, 0.1], [0.5, 0.5], [0.3, 0.1]]
_BOXES_2Q = [  # [2, 6, 2, 4]: a box per class
    [[[0, 0, 0.1, 0.1], [0, 0, 0.1, 0.1]], [[0, 0.01, 0.1, 0.11], [0, 0.6, 0.1, 0.7]],
     [[0, -0.01, 0.1, 0.09], [0, -0.01, 0.1, 0.09]], [[0, 0.11, 0.1, 0.2], [0, 0.11, 0.1, 0.2]],
     [[0, 0.12, 0.1, 0.21], [0, 0.12, 0.1, 0.21]], [[0, 0.3, 1, 0.4], [0, 0.3, 1, 0.4]]],
    [[[0, 0, 0.2, 0.2], [0, 0, 0.2, 0.2]], [[0, 0.02, 0.2, 0.22], [0, 0.02, 0.2, 0.22]],
     [[0, -0.02, 0.2, 0.19], [0, -0.02, 0.2, 0.19]], [[0, 0.21, 0.2, 0.3], [0, 0.21, 0.2, 0.3]],
     [[0, 0.22, 0.2, 0.31], [0, 0.22, 0.2, 0.31]], [[0, 0.4, 1, 0.5], [0, 0.4, 1, 0.5]]]]
_Z = [0, 0, 0, 0]

# name: (boxes, scores, max_output_size_per_class, max_total_size, iou, score_threshold, attrs,
#        expected boxes, scores, classes, valid)
KERNEL_CASES = {
    "TestEmptyInput": (np.zeros([0, 0, 0, 4]), np.zeros([0, 0, 0]), 30, 10, .5, 0.0, {},
                       np.zeros([0, 10, 4]), np.zeros([0, 10]), np.zeros([0, 10]), np.zeros([0])),
    "TestSelectFromThreeClusters": (
        [[[b] for b in _ONE]], [[[s] for s in _SCORES_1]], 3, 3, .5, 0.0, {},
        [[_ONE[3], _ONE[0], _ONE[5]]], [[.95, .9, .3]], [[0, 0, 0]], [3]),
    "TestSelectFromThreeClustersNoBoxClipping": (
        [[[[0, 0, 10, 10]], [[0, 1, 10, 11]], [[0, 1, 10, 9]], [[0, 11, 10, 20]], [[0, 12, 10, 21]],
          [[0, 30, 100, 40]]]], [[[s] for s in _SCORES_1]], 3, 3, .5, 0.0, {"clip_boxes": False},
        [[[0, 11, 10, 20], [0, 0, 10, 10], [0, 30, 100, 40]]], [[.95, .9, .3]], [[0, 0, 0]], [3]),
    "TestSelectFromThreeClustersWithScoreThreshold": (
        [[[b] for b in _ONE]], [[[s] for s in _SCORES_1]], 3, 3, .5, 0.4, {},
        [[_ONE[3], _ONE[0], _Z]], [[.95, .9, 0]], [[0, 0, 0]], [2]),
    "TestSelectFromThreeClustersWithScoreThresholdZeroScores": (
        [[[b] for b in _ONE]], [[[s] for s in [.1, 0, 0, .3, .2, -5.0]]], 4, 5, .5, -3.0, {},
        [[_ONE[3], _ONE[0], _Z, _Z, _Z]], [[.3, .1, 0, 0, 0]], [[0, 0, 0, 0, 0]], [2]),
    "TestSelectSingleBox": (
        [[[[0, 0, 1, 1]]]], [[[.9]]], 3, 1, .5, 0.0, {}, [[[0, 0, 1, 1]]], [[.9]], [[0]], [1]),
    "TestSelectFromTwoBatchesWithScoreThreshold": (
        [[[b] for b in _ONE], [[b] for b in _TWO]], [[[s] for s in _SCORES_1]] * 2, 3, 3, .5, 0.4, {},
        [[_ONE[3], _ONE[0], _Z], [_TWO[3], _TWO[0], _Z]], [[.95, .9, 0]] * 2, [[0, 0, 0]] * 2, [2, 2]),
    "TestSelectFromTwoBatchesTwoClasses": (
        [[[b] for b in _ONE], [[b] for b in _TWO]], [_SCORES_2C] * 2, 3, 3, .5, 0.0, {},
        [[_ONE[3], _ONE[0], _ONE[1]], [_TWO[3], _TWO[0], _TWO[1]]], [[.95, .9, .75]] * 2,
        [[0, 1, 0]] * 2, [3, 3]),
    "TestSelectFromTwoBatchesTwoClassesWithScoreThreshold": (
        [[[b] for b in _ONE], [[b] for b in _TWO]], [_SCORES_2C] * 2, 3, 3, .5, 0.8, {},
        [[_ONE[3], _ONE[0], _Z], [_TWO[3], _TWO[0], _Z]], [[.95, .9, 0]] * 2, [[0, 1, 0]] * 2, [2, 2]),
    "TestSelectFromTwoBatchesTwoClassesWithScoreThresholdPaddedTotalSize": (
        [[[b] for b in _ONE], [[b] for b in _TWO]], [_SCORES_2C] * 2, 10, 3, .5, 0.8, {"pad_per_class": True},
        [[_ONE[3], _ONE[0], _Z], [_TWO[3], _TWO[0], _Z]], [[.95, .9, 0]] * 2, [[0, 1, 0]] * 2, [2, 2]),
    "TestSelectFromTwoBatchesTwoClassesWithScoreThresholdPaddedPerClass": (
        [[[b] for b in _ONE], [[b] for b in _TWO]], [_SCORES_2C] * 2, 2, 50, .5, 0.8, {"pad_per_class": True},
        [[_ONE[3], _ONE[0], _Z, _Z], [_TWO[3], _TWO[0], _Z, _Z]], [[.95, .9, 0, 0]] * 2, [[0, 1, 0, 0]] * 2,
        [2, 2]),
    "TestSelectFromTwoBatchesTwoClassesTotalSize": (
        [[[b] for b in _ONE], [[b] for b in _TWO]], [_SCORES_2C] * 2, 3, 5, .5, 0.1, {},
        [[_ONE[3], _ONE[0], _ONE[1], _ONE[4], _ONE[5]], [_TWO[3], _TWO[0], _TWO[1], _TWO[4], _TWO[5]]],
        [[.95, .9, .75, .5, .3]] * 2, [[0, 1, 0, 1, 0]] * 2, [5, 5]),
    "TestSelectFromTwoBatchesTwoClassesForBoxesAndScores": (
        _BOXES_2Q, [_SCORES_2C] * 2, 3, 3, .5, 0.0, {},
        [[_ONE[3], _ONE[0], [0, 0.6, 0.1, 0.7]], [_TWO[3], _TWO[0], _TWO[1]]], [[.95, .9, .8], [.95, .9, .75]],
        [[0, 1, 1], [0, 1, 0]], [3, 3]),
}


@pytest.mark.parametrize("mode", ["eager", "tf.function"])
@pytest.mark.parametrize("name", list(KERNEL_CASES))
def test_tensorflows_kernel_cases(name, mode):
    """Each case's outputs are the ones TensorFlow's test expects (float32 of the same literals,
    bit for bit), and the ones TensorFlow's op gives on the same inputs."""
    boxes, scores, per_class, total, iou, threshold, attrs, *expected = KERNEL_CASES[name]
    boxes, scores = tf.constant(boxes, tf.float32), tf.constant(scores, tf.float32)

    def ours():
        return opforge.ops.combined_non_max_suppression(boxes, scores, per_class, total, iou, threshold, **attrs)

    out = ours() if mode == "eager" else tf.function(ours)()
    theirs = tf.image.combined_non_max_suppression(boxes, scores, per_class, total, iou, threshold, **attrs)
    dtypes = (np.float32, np.float32, np.float32, np.int32)
    for k, (o, t, e, dtype) in enumerate(zip(out, theirs, expected, dtypes)):
        assert bits_equal(o.numpy(), np.asarray(e, dtype)), (name, k, o.numpy(), e)
        assert bits_equal(o.numpy(), t.numpy()), (name, k, o.numpy(), t.numpy())


# --- the error tests (CombinedNonMaxSuppressionTest, CombinedNmsShapeTest) ------------------------

_BOXES_NP = [[[[0, 0, 1, 1], [0, 0.1, 1, 1.1], [0, -0.1, 1, 0.9], [0, 10, 1, 11], [0, 10.1, 1, 11.1],
               [0, 100, 1, 101]]]]
_SCORES_NP = [[[0.9, 0.75, 0.6, 0.95, 0.5, 0.3]]]
uniform = tf.random.uniform

# name: (the call with `nms` standing for the function under test, the classes TensorFlow's test
# accepts). TensorFlow's tests run with its test case's default graph-building or eager mode; here
# each runs eagerly and inside tf.function.
ERROR_TESTS = {
    "testInvalidPyInput": (
        lambda nms: nms(boxes=_BOXES_NP, scores=_SCORES_NP, max_output_size_per_class=5, max_total_size=2**31),
        (TypeError, ValueError)),
    "testInvalidTensorInput": (
        lambda nms: nms(boxes=_BOXES_NP, scores=_SCORES_NP, max_output_size_per_class=5,
                        max_total_size=tf.convert_to_tensor(2**31)),
        (TypeError, ValueError)),
    "test_boxes_wrong_rank_raises": (lambda nms: nms(uniform([4, 10, 4]), uniform([4, 10, 1]), 10, 10), (ValueError,)),
    "test_scores_wrong_rank_raises": (lambda nms: nms(uniform([4, 10, 1, 4]), uniform([4, 10]), 10, 10), (ValueError,)),
}


def _raised(call, nms, mode):
    try:
        if mode == "eager":
            call(nms)
        else:
            tf.function(lambda: call(nms), autograph=False)()
    except Exception as exc:  # the class is what is compared
        return exc
    return None


@pytest.mark.parametrize("name", list(ERROR_TESTS))
def test_tensorflows_error_tests_inside_tf_function(name):
    """Inside tf.function (a graph, as TensorFlow's tests build one) opforge raises a class
    TensorFlow's test accepts, and the class TensorFlow's own function raises."""
    call, accepted = ERROR_TESTS[name]
    ours = _raised(call, opforge.ops.combined_non_max_suppression, "tf.function")
    theirs = _raised(call, tf.image.combined_non_max_suppression, "tf.function")
    assert isinstance(ours, accepted), (name, repr(ours))
    assert type(ours) is type(theirs), (name, repr(ours), repr(theirs))


@pytest.mark.parametrize("name", [n for n in ERROR_TESTS if n != "test_scores_wrong_rank_raises"])
def test_tensorflows_error_tests_eagerly(name):
    """Eagerly, the class TensorFlow's own function raises for the same call (its kernel lookup's
    InvalidArgumentError for an int64 max_total_size, its kernel's for a rank-3 boxes): what a
    caller of TensorFlow's function catches. (Eagerly, TensorFlow's kernel aborts the process on
    rank-2 scores (a CHECK on the dimension it reads): opforge raises its InvalidArgumentError,
    tested in the spec's bad inputs.)"""
    call, _ = ERROR_TESTS[name]
    ours = _raised(call, opforge.ops.combined_non_max_suppression, "eager")
    theirs = _raised(call, tf.image.combined_non_max_suppression, "eager")
    assert ours is not None and type(ours) is type(theirs), (name, repr(ours), repr(theirs))
    assert "CombinedNonMaxSuppression" in str(ours)

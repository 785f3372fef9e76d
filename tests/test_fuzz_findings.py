"""Every defect the fuzzers found (opforge fuzz, make fuzz), as a regression test through
TensorFlow, in a child process: before the fixes these aborted the process (TensorFlow's
TensorShape CHECK on an output shape of 2^63 elements or more), read past a buffer, allocated
terabytes, overflowed int64 or ran 2^40 empty iterations."""
import json

from helpers import run_python

CALLS = {
    # An empty input beside sizes of 2^31: the output [1, 2^31, 2^31, 4] cannot exist.
    "fused conv output of 2^63 elements": "opforge.ops.fused_conv2d_bias_leaky_relu("
    "tf.zeros([1, 2**31, 2**31, 0]), tf.zeros([1, 1, 0, 4]), tf.zeros([4]), 1, 'SAME')",
    "nms batch of 2^62": "opforge.ops.combined_non_max_suppression(tf.zeros([2**62, 0, 1, 4]), "
    "tf.zeros([2**62, 0, 3]), 3, 5)",
    "decode grid of 2^62 cells": "opforge.ops.yolo_decode(tf.zeros([0, 2**62, 3, 14]), tf.ones([2, 2]), 2, (64, 96))",
    # A [OH, OW] grad read as [N, OH, OW, C].
    "filter gradient of a 2-D grad": "lib().Opforge_Conv2DTransposeFilterGrad(input=tf.ones([2, 4, 4, 3]), "
    "filter=tf.ones([3, 3, 5, 3]), grad=tf.ones([4, 4]), strides=[1, 1, 1, 1], padding='SAME')",
    # The sum of anchors_per_scale overflowed int64.
    "anchor counts past int64": "lib().Opforge_YoloTargets(boxes=tf.zeros([1, 2, 4]), classes=tf.zeros([1, 2], tf.int32), "
    "anchors=tf.ones([3, 2]) * 0.1, anchor_masks=[0, 1, 2], anchors_per_scale=[2**63 - 1, 1], "
    "grid_sizes=[13, 13, 26, 26], num_scales=2)",
}
# Legal calls that must return at once: no boxes with 2^40 classes (no per-class bookkeeping),
# empty half-precision operands of 2^28 rows (no walk over rows of nothing).
QUICK = {
    "nms no boxes, 2^40 classes": "opforge.ops.combined_non_max_suppression(tf.zeros([8, 0, 1, 4]), "
    "tf.zeros([8, 0, 2**40]), 3, 5)",
    "empty half operand": "opforge.ops.conv2d_transpose(tf.zeros([2**14, 2**14, 0, 2], tf.float16), "
    "tf.zeros([1, 1, 3, 2], tf.float16), [2**14, 2**14, 0, 3], 1)",
    "empty half filter gradient": "lib().Opforge_Conv2DTransposeFilterGrad(input=tf.zeros([40092, 24476, 0, 6], tf.float16), "
    "filter=tf.zeros([1, 1, 3, 6], tf.float16), grad=tf.zeros([40092, 24476, 0, 3], tf.float16), "
    "strides=[1, 1, 1, 1], padding='SAME')",
}

SCRIPT = """
import json, time
import tensorflow as tf
import opforge
from opforge.ops._common import lib
out = {}
for name, code in json.loads(%r).items():
    start = time.time()
    try:
        eval(code)
        out[name] = ["ok", "", time.time() - start]
    except Exception as exc:
        out[name] = [type(exc).__name__, str(getattr(exc, "message", exc)), time.time() - start]
print("OUT " + json.dumps(out))
"""


def _run(calls):
    proc = run_python(SCRIPT % json.dumps(calls), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(next(l for l in proc.stdout.splitlines() if l.startswith("OUT "))[4:])


def test_fuzz_findings_are_named_errors():
    results = _run(CALLS)
    for name, (error, message, _) in results.items():
        assert error == "InvalidArgumentError", (name, error, message)
    assert "fewer than 2^63 elements" in results["fused conv output of 2^63 elements"][1]
    assert "CombinedNonMaxSuppression: batch must be" in results["nms batch of 2^62"][1]
    assert "YoloDecode: features must be" in results["decode grid of 2^62 cells"][1]
    assert "grad must be a 4-D tensor, got shape [4, 4]" in results["filter gradient of a 2-D grad"][1]
    assert "YoloTargets: anchors_per_scale" in results["anchor counts past int64"][1]


def test_empty_calls_with_huge_sizes_return_at_once():
    for name, (error, message, seconds) in _run(QUICK).items():
        assert error == "ok", (name, error, message)
        assert seconds < 5, (name, seconds)

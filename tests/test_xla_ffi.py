"""The ops without an HLO lowering under XLA: typed-FFI custom calls to their op structs.

Each such op (`opforge.ops._xla.ffi_ops()`, cc/ops/<op>/<op>_xla.cc with OPFORGE_REGISTER_XLA_FFI_OP)
compiles inside tf.function(jit_compile=True) into a custom call whose handler
(cc/ops/<op>/<op>_ffi.cc, common/xla_ffi.h) runs the same op struct and core as the TensorFlow
kernel. So:
- every spec case of every such op, forward in every dtype and gradient in float64, gives the
  same bits under XLA as outside it, and the determinism case too with 1 and 2 intra-op threads;
- bad input fails the compilation with the op's own message (the tf2xla kernel runs the op's
  Validate on the static shapes and constant inputs); a bad value only the kernel sees fails the
  run with it; a size or threshold that is not a compile-time constant gets TensorFlow's error
  naming the input;
- libopforge_ffi.so holds the same handlers without TensorFlow, for other XLA hosts.
"""
from __future__ import annotations

import ctypes
import subprocess

import numpy as np
import pytest
import tensorflow as tf

import opforge
from opforge import _loader
from opforge.ops import SPECS, _xla
from opforge.ops.spec import bits_equal, max_error

from helpers import run_python

FFI = _xla.ffi_ops()
pytestmark = pytest.mark.skipif(
    not FFI, reason="this build has no XLA FFI custom calls (opforge doctor says why)")


def _ffi_groups():
    """The spec groups (op modules) whose ops run as FFI custom calls."""
    opforge.ops._common.lib()
    return {_xla._snake_names.get(op, "") for op in _xla.ffi_ops()}


FFI_SPECS = [s for s in SPECS if s.group in _ffi_groups()]


def jit(fn):
    return tf.function(fn, jit_compile=True)


def _differences(expected, actual):
    return [f"output {i}: max error {max_error(a, e)}" for i, (e, a) in enumerate(zip(expected, actual))
            if not bits_equal(e.numpy(), a.numpy())]


def test_every_op_without_hlo_lowering_is_a_custom_call():
    ops = set(opforge.ops.OP_NAMES)
    assert ops <= _xla.lowered_ops(), sorted(ops - _xla.lowered_ops())
    for op in ("Opforge>YoloDecode", "Opforge>YoloDecodeGrad", "Opforge>CombinedNonMaxSuppression",
               "Opforge>GriffinLim", "Opforge>Conv2DTransposeFilterGrad"):
        assert _xla.xla_path(op).startswith("FFI custom call")
    assert _xla.xla_path("Opforge>LeakyRelu") == "HLO lowering"
    assert len(FFI_SPECS) >= 11


@pytest.mark.parametrize("spec", FFI_SPECS, ids=lambda s: s.name)
def test_forward_same_bits_as_outside_xla(spec):
    failures = []
    for dtype in spec.dtypes:
        for case in spec.cases:
            if case.dtypes is not None and dtype not in case.dtypes:
                continue
            tensors = case.tensors(dtype)
            expected = spec.call(spec.op, case, tensors)
            actual = jit(lambda *t: spec.call(spec.op, case, t))(*tensors)
            assert len(actual) == len(expected)
            for d in _differences(expected, actual):
                failures.append(f"{dtype.name} {case.name}: {d}")
    assert not failures, failures


def _gradients(spec, case, tensors):
    wrt = [i for i, s in enumerate(case.inputs) if s.differentiable]
    args = list(tensors)
    with tf.GradientTape() as tape:
        for i in wrt:
            tape.watch(args[i])
        out = spec.call(spec.op, case, args)[spec.gradient_output]
        # A weighting that makes every output element's gradient different.
        weights = tf.cast(tf.reshape(tf.range(tf.size(out)) % 7 + 1, tf.shape(out)), out.dtype)
        loss = tf.reduce_sum(out * weights)
    return tape.gradient(loss, [args[i] for i in wrt])


@pytest.mark.parametrize("spec", [s for s in FFI_SPECS if s.gradient_cases], ids=lambda s: s.name)
def test_gradient_same_bits_as_outside_xla(spec):
    for case in spec.gradient_cases:
        tensors = case.tensors(tf.float64)
        expected = _gradients(spec, case, tensors)
        actual = jit(lambda *t: _gradients(spec, case, t))(*tensors)
        assert not _differences(expected, actual), (case.name, _differences(expected, actual))


def test_determinism_case_same_bits_with_one_and_two_threads():
    """The FFI handlers split work over XLA's (TensorFlow's) intra-op pool: the results do not
    depend on the number of threads."""
    code = """
        import hashlib
        import tensorflow as tf
        tf.config.threading.set_intra_op_parallelism_threads(THREADS)
        import opforge
        from opforge.ops import SPECS, _xla
        opforge.ops._common.lib()
        groups = {_xla._snake_names.get(op, "") for op in _xla.ffi_ops()}
        for spec in SPECS:
            if spec.group not in groups:
                continue
            case = spec.determinism_case or spec.cases[-1]
            dtype = tf.float32 if tf.float32 in spec.dtypes else spec.dtypes[0]
            tensors = case.tensors(dtype)
            out = tf.function(lambda *t: spec.call(spec.op, case, t), jit_compile=True)(*tensors)
            digest = hashlib.sha256(b"".join(o.numpy().tobytes() for o in out)).hexdigest()[:16]
            print(spec.name, digest)
    """
    runs = [run_python(code.replace("THREADS", str(n)), timeout=300) for n in (1, 2)]
    for r in runs:
        assert r.returncode == 0, r.stderr[-3000:]
    assert runs[0].stdout == runs[1].stdout and runs[0].stdout.count("\n") == len(FFI_SPECS)


def test_bad_constant_input_fails_the_compilation_with_the_ops_message():
    """Anchors are read on the host (a compile-time constant under XLA): the tf2xla kernel runs
    the op's Validate on their values, as the kernel does outside XLA."""
    anchors = tf.constant([[10.0, 13.0], [-16.0, 30.0]])
    features = tf.zeros([1, 4, 4, 2 * 7])
    with pytest.raises(tf.errors.InvalidArgumentError) as eager:
        opforge.ops.yolo_decode(features, anchors, num_classes=2, input_size=[64, 64])
    with pytest.raises(tf.errors.InvalidArgumentError) as compiled:
        jit(lambda f: opforge.ops.yolo_decode(f, anchors, num_classes=2, input_size=[64, 64]))(features)
    message = str(eager.value).split(" [Op:")[0].split("}} ")[-1]
    assert "YoloDecode" in message and "anchors" in message and message in str(compiled.value)


def test_bad_constant_value_fails_the_compilation():
    boxes = tf.random.uniform([1, 6, 1, 4])
    scores = tf.random.uniform([1, 6, 2])
    with pytest.raises(tf.errors.InvalidArgumentError, match="iou_threshold"):
        jit(lambda b, s: opforge.ops.combined_non_max_suppression(b, s, 3, 4, iou_threshold=1.5))(
            boxes, scores)


def test_bad_value_only_the_kernel_sees_fails_the_run():
    boxes = tf.constant([[[0.1, 0.1, 0.3, 0.3], [0.2, 0.2, 0.4, 0.4]]])
    classes = tf.constant([[1, 9]])  # class 9 of 3
    anchors = tf.constant([[0.1, 0.1], [0.2, 0.2], [0.3, 0.3]])

    def targets(b, c):
        return opforge.ops.yolo_targets(b, c, anchors, [[0, 1, 2]], [4], num_classes=3)

    with pytest.raises(tf.errors.InvalidArgumentError) as eager:
        targets(boxes, classes)
    with pytest.raises(tf.errors.InvalidArgumentError) as compiled:
        jit(targets)(boxes, classes)
    message = str(eager.value).split(" [Op:")[0].split("}} ")[-1]
    assert "YoloTargets" in message and message in str(compiled.value)
    # And the process goes on: the same function with good classes.
    out = jit(targets)(boxes, tf.constant([[1, 2]]))
    assert bits_equal(out[0].numpy(), targets(boxes, tf.constant([[1, 2]]))[0].numpy())


def test_size_computed_at_run_time_gets_xlas_compile_time_constant_error():
    boxes = tf.random.uniform([1, 6, 1, 4])
    scores = tf.random.uniform([1, 6, 2])
    with pytest.raises(tf.errors.InvalidArgumentError, match="must be a compile-time constant"):
        jit(lambda b, s: opforge.ops.combined_non_max_suppression(
            b, s, 3, tf.random.uniform([], 2, 5, tf.int32)))(boxes, scores)
    # A size given as a tensor argument is a constant of each compilation.
    out = jit(lambda b, s, n: opforge.ops.combined_non_max_suppression(b, s, 3, n))(
        boxes, scores, tf.constant(4))
    assert out.nmsed_boxes.shape == (1, 4, 4)


def test_every_layer_supports_jit():
    """Where TensorFlow sees a GPU, layers on FFI ops claim XLA only where every op's CUDA handler
    is registered (a CUDA build; not YoloDecode's, whose anchors Validate reads, nor the CPU-only
    ops'), and the HLO ones still do."""
    gpu = bool(tf.config.list_physical_devices("GPU"))
    hlo = (opforge.layers.LeakyReLU, opforge.layers.ClippedIdentity)
    if _xla.ffi_gpu_ops():
        hlo += (opforge.layers.Conv2DTranspose, opforge.layers.Swish, opforge.layers.BilinearResize,
                opforge.layers.InverseMfcc)
    layers = [
        opforge.layers.ConvBNLeaky(4, 3),
        opforge.layers.Conv2DTranspose(4, 3),
        opforge.layers.YoloDecode([[10, 13], [16, 30]], num_classes=2, input_size=[64, 64]),
        opforge.layers.YoloPostprocess(anchors=[[10, 13], [16, 30]], anchor_masks=[[0, 1]],
                                       num_classes=2, input_size=[64, 64]),
        opforge.layers.InverseMfcc(n_mels=8, n_fft=16),
        opforge.layers.LeakyReLU(), opforge.layers.Swish(), opforge.layers.ClippedIdentity(),
        opforge.layers.BilinearResize(4, 4),
    ]
    wrong = [type(layer).__name__ for layer in layers
             if layer.supports_jit != (isinstance(layer, hlo) or not gpu)]
    assert not wrong, wrong


def test_supports_jit_on_a_gpu_needs_each_ops_cuda_handler(monkeypatch):
    """The rule itself, with a GPU faked: an FFI op claims XLA on a GPU only with its CUDA handler
    registered; a CPU build of the library registers none."""
    ffi_op, hlo_op = "Opforge>BiasLeakyRelu", "Opforge>LeakyRelu"
    if not tf.test.is_built_with_cuda():
        assert _xla.ffi_gpu_ops() == frozenset()
    monkeypatch.setattr(tf.config, "list_physical_devices",
                        lambda kind=None: ["/physical_device:GPU:0"] if kind == "GPU" else [])
    monkeypatch.setattr(_xla, "_ffi_gpu", frozenset())
    assert _xla.supports_jit(hlo_op)
    assert not _xla.supports_jit(ffi_op) and not _xla.supports_jit(hlo_op, ffi_op)
    assert _xla.xla_path(ffi_op) == "FFI custom call"
    monkeypatch.setattr(_xla, "_ffi_gpu", frozenset({ffi_op}))
    assert _xla.supports_jit(ffi_op) and _xla.supports_jit(hlo_op, ffi_op)
    assert _xla.xla_path(ffi_op) == "FFI custom call, CPU and GPU"


def test_ffi_library_needs_no_tensorflow_and_lists_every_custom_call():
    path = _loader.library_path().parent / "libopforge_ffi.so"
    if not path.is_file():
        pytest.skip("libopforge_ffi.so not built (opforge doctor says why)")
    needed = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True).stdout
    assert "NEEDED" in needed and "tensorflow" not in needed
    library = ctypes.CDLL(str(path))
    library.OpforgeFfiTargets.restype = ctypes.c_char_p
    targets = dict(line.split(" ") for line in library.OpforgeFfiTargets().decode().splitlines())
    # Every op: TensorFlow's FFI custom calls, and for the other XLA hosts (opforge.jax) the ops
    # TensorFlow's XLA runs as HLO lowerings too.
    assert set(targets) == set(opforge.ops.OP_NAMES) and set(FFI) <= set(targets)
    for symbol in targets.values():
        assert getattr(library, symbol) is not None


def test_custom_calls_registered_after_first_xla_compilation():
    result = run_python("""
        import numpy as np
        import tensorflow as tf
        print(tf.function(lambda v: v * 2, jit_compile=True)(tf.ones([3])).numpy())
        import opforge
        from opforge.ops import _xla
        assert _xla.registered_late()
        x = tf.constant(np.linspace(-3, 3, 48, dtype=np.float32).reshape(1, 2, 3, 8))
        b = tf.constant(np.linspace(-1, 1, 8, dtype=np.float32))
        f = tf.function(lambda v: opforge.ops.bias_leaky_relu(v, b), jit_compile=True)
        assert np.array_equal(f(x).numpy(), opforge.ops.bias_leaky_relu(x, b).numpy())
        print("OK")
    """, timeout=240)
    assert result.returncode == 0 and "OK" in result.stdout, result.stdout + result.stderr

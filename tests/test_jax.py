"""opforge.jax against opforge.ops in TensorFlow: every op spec's forward cases and gradient cases
give the same bits through the FFI handlers from JAX (eagerly, under jax.jit, under jax.vmap),
and bad input raises with the core's message."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)  # the float64 cases and gradients  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import opforge.jax as ofj  # noqa: E402
from opforge.ops import SPECS  # noqa: E402
from opforge.ops.spec import bits_equal  # noqa: E402



def _jax_fn(spec):
    """The opforge.jax function of a spec's op (yolo_postprocess's spec op takes the head maps as
    separate arguments: the function takes them as a list)."""
    if spec.op.__name__ == "_spec_op":
        fn = getattr(ofj, spec.name, None)
        return None if fn is None else (lambda *maps, **kwargs: fn(list(maps), **kwargs))
    return getattr(ofj, spec.op.__name__, None)


# The specs whose op opforge.jax has (every one: test_every_op_of_opforge_ops_is_in_opforge_jax).
JAX_SPECS = [s for s in SPECS if _jax_fn(s) is not None]


def _numpy(value):
    if isinstance(value, (tf.Tensor, tf.Variable)):
        return value.numpy()
    if isinstance(value, (list, tuple)) and any(isinstance(v, (tf.Tensor, tf.Variable)) for v in value):
        return type(value)(_numpy(v) for v in value)
    return value


def _outputs(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _forward_params():
    for spec in JAX_SPECS:
        for dtype in spec.dtypes:
            for case in spec.cases:
                if case.dtypes is None or dtype in case.dtypes:
                    yield pytest.param(spec, case, dtype, id=f"{spec.name}-{case.name}-{dtype.name}")


def _jax_call(spec, case, tensors, jit=False):
    fn = _jax_fn(spec)
    arrays = [_numpy(t) for t in tensors]
    attrs = {k: _numpy(v) for k, v in case.attrs.items()}
    if not jit:
        return _outputs(fn(*arrays, **attrs))
    # The float inputs that carry values are the jitted function's arguments; the rest (sizes,
    # anchors, class ids) stay constants, as TensorFlow's XLA wants them.
    traced = [i for i, (s, a) in enumerate(zip(case.inputs, arrays))
              if s.differentiable and np.asarray(a).dtype.kind == "f" and np.asarray(a).dtype != np.float16 or
              (s.differentiable and np.asarray(a).dtype == np.float16)]

    def call(*xs):
        full = list(arrays)
        for i, x in zip(traced, xs):
            full[i] = x
        return fn(*full, **attrs)

    return _outputs(jax.jit(call)(*[arrays[i] for i in traced]))


def _same(ours, theirs, what):
    assert len(ours) == len(theirs), what
    for i, (a, b) in enumerate(zip(ours, theirs)):
        a, b = np.asarray(a), np.asarray(_numpy(b))
        assert a.dtype == b.dtype and a.shape == b.shape, f"{what} output {i}: {a.dtype}{a.shape} vs {b.dtype}{b.shape}"
        assert bits_equal(a, b), f"{what} output {i}: max diff {np.nanmax(np.abs(a.astype(np.float64) - b.astype(np.float64)))}"


@pytest.mark.parametrize("spec,case,dtype", list(_forward_params()))
def test_forward_same_bits_as_tensorflow(spec, case, dtype):
    tensors = case.tensors(dtype)
    theirs = spec.call(spec.op, case, tensors)
    _same(_jax_call(spec, case, tensors), theirs, "eager")
    _same(_jax_call(spec, case, tensors, jit=True), theirs, "jit")


def _gradient_params():
    for spec in JAX_SPECS:
        for case in spec.gradient_cases:
            yield pytest.param(spec, case, id=f"{spec.name}-{case.name}")


@pytest.mark.parametrize("spec,case", list(_gradient_params()))
def test_gradient_same_bits_as_tensorflow(spec, case):
    tensors = case.tensors(tf.float64)
    wrt = [i for i, s in enumerate(case.inputs) if s.differentiable and tensors[i].dtype.is_floating]
    with tf.GradientTape() as tape:
        for i in wrt:
            tape.watch(tensors[i])
        out = spec.call(spec.op, case, tensors)[spec.gradient_output]
    cotangent = np.random.default_rng(7).standard_normal(out.shape).astype(out.dtype.as_numpy_dtype)
    theirs = tape.gradient(out, [tensors[i] for i in wrt], output_gradients=tf.constant(cotangent))

    fn = _jax_fn(spec)
    arrays = [_numpy(t) for t in tensors]
    attrs = {k: _numpy(v) for k, v in case.attrs.items()}

    def f(*xs):
        full = list(arrays)
        for i, x in zip(wrt, xs):
            full[i] = x
        return _outputs(fn(*full, **attrs))[spec.gradient_output]

    for jit in (False, True):
        g = jax.jit(f) if jit else f
        _, vjp = jax.vjp(g, *[arrays[i] for i in wrt])
        ours = vjp(jnp.asarray(cotangent))
        _same(list(ours), [t if t is not None else np.zeros_like(arrays[i]) for t, i in zip(theirs, wrt)],
              f"gradient (jit={jit})")


@pytest.mark.parametrize("spec", JAX_SPECS, ids=[s.name for s in JAX_SPECS])
def test_vmap_is_the_op_on_each_element(spec):
    """vmap over the float inputs of the first case, two elements (the case's inputs and the same
    inputs scaled): the same bits as calling the op on each element."""
    case = spec.cases[0]
    dtypes = spec.dtypes if case.dtypes is None else case.dtypes
    # float32 where the op takes it: a spec whose first dtype is an integer one (resize's int8)
    # has no float input to map over.
    dtype = tf.float32 if tf.float32 in dtypes else dtypes[0]
    fn = _jax_fn(spec)
    arrays = [_numpy(t) for t in case.tensors(dtype)]
    attrs = {k: _numpy(v) for k, v in case.attrs.items()}
    mapped = [i for i, (s, a) in enumerate(zip(case.inputs, arrays)) if s.differentiable and a.dtype.kind == "f"]
    if not mapped:  # NMS: no differentiable input; its float inputs are the data
        mapped = [i for i, a in enumerate(arrays) if jnp.issubdtype(a.dtype, jnp.floating)]
    second = [(a * np.asarray(0.5, a.dtype)).astype(a.dtype) if i in mapped else a for i, a in enumerate(arrays)]

    def f(*xs):
        full = list(arrays)
        for i, x in zip(mapped, xs):
            full[i] = x
        return _outputs(fn(*full, **attrs))

    stacked = [np.stack([arrays[i], second[i]]) for i in mapped]
    ours = jax.vmap(f)(*stacked)
    each = [f(*[arrays[i] for i in mapped]), f(*[second[i] for i in mapped])]
    _same(ours, [np.stack([a, b]) for a, b in zip(each[0], each[1])], "vmap")


def test_every_op_of_opforge_ops_is_in_opforge_jax():
    import opforge.ops

    missing = [name for m in opforge.ops.MODULES for name in m.__all__
               if callable(getattr(m, name)) and not isinstance(getattr(m, name), type)
               and name[0].islower() and not hasattr(ofj, name)]
    assert not missing, f"opforge.jax lacks {missing}"


def test_every_handler_is_registered_with_jax():
    import opforge.ops

    assert set(opforge.ops.OP_NAMES) <= set(ofj.targets())


def test_bad_input_raises_the_core_message_at_trace_time():
    x = np.ones((2, 3), np.float32)
    with pytest.raises(ValueError, match="LeakyRelu: alpha must be a finite number, got nan"):
        ofj.leaky_relu(x, alpha=float("nan"))
    with pytest.raises(ValueError, match=r"ElementMul: a and b must have broadcast-compatible shapes, got \[2, 3\] and \[4\]"):
        jax.jit(ofj.element_mul)(x, np.ones(4, np.float32))
    with pytest.raises(TypeError, match="LeakyRelu: alpha must be a number, got 'a'"):
        ofj.leaky_relu(x, alpha="a")
    with pytest.raises(TypeError, match="Swish: features must be float16, bfloat16, float32 or float64, got int32"):
        ofj.swish(np.ones(3, np.int32))


def _jax_cuda():
    try:
        return bool(jax.devices("cuda"))
    except RuntimeError:
        return False


@pytest.mark.skipif(not _jax_cuda(), reason="skipped: JAX has no CUDA device here")
@pytest.mark.parametrize("spec", JAX_SPECS, ids=[s.name for s in JAX_SPECS])
def test_cuda_handlers_agree_with_the_cpu_handlers(spec):
    """On a GPU: every op with a CUDA handler agrees, on JAX's CUDA device, with its CPU handler
    within float32 rounding (the CUDA kernels are the TensorFlow GPU kernels that tests/test_gpu.py
    checks against the CPU ones; a sigmoid or exp is CUDA's, a few ulps off); the others have
    no CUDA handler, and XLA refuses them on the GPU naming the op."""
    case = spec.cases[0]
    dtype = tf.float32 if tf.float32 in (case.dtypes or spec.dtypes) else (case.dtypes or spec.dtypes)[0]
    tensors = case.tensors(dtype)
    with jax.default_device(jax.devices("cpu")[0]):
        cpu = _jax_call(spec, case, tensors)
    targets = {t.split(">")[1] for t in ofj.cuda_targets()}
    try:
        gpu = _jax_call(spec, case, tensors)
    except Exception as error:  # noqa: BLE001 - XLA's lowering error for an op without a CUDA handler
        assert not any(t in str(error) for t in targets) and "Opforge>" in str(error), error
        return
    for g, c in zip(gpu, cpu):
        g, c = np.asarray(g), np.asarray(c)
        assert g.dtype == c.dtype and g.shape == c.shape
        if g.dtype.kind in "iub":
            np.testing.assert_array_equal(g, c)
        else:
            np.testing.assert_allclose(g.astype(np.float64), c.astype(np.float64), rtol=1e-4, atol=1e-5)


# The bad inputs whose message in JAX differs from TensorFlow's on purpose, and why.
JAX_MESSAGE_DIFFERS = {
    # JAX converts a Python int beyond int32 itself (jnp.asarray), before the op sees it; the
    # message names the argument and the value.
    ("element_mul", "python int beyond int32"): "ElementMul: b must be",
    # JAX's allocator refuses the result at run time (RESOURCE_EXHAUSTED), as TensorFlow's does (OOM).
    ("element_mul", "huge broadcast"): "RESOURCE_EXHAUSTED",
    # Refused at trace time: the result would hold more elements than an array can.
    ("resize_bilinear", "huge output"): "more elements than an array can hold",
    # The float sizes are named as JAX holds them (float64 under jax_enable_x64).
    ("conv2d_transpose", "output_shape float"): "output_shape must be int32 sizes",
    ("resize_bilinear", "size float"): "ResizeBilinear: size must be ints",
}

_BAD_INPUT_CHILD = r'''
import json, sys
import numpy as np, tensorflow as tf
import jax
jax.config.update("jax_enable_x64", True)
import opforge, opforge.jax
from opforge.ops import SPECS
lib = None
for spec in SPECS:
    for name, bad in spec.bad_inputs.items():
        if "lib()" in bad.code or "tf.function" in bad.code or "opforge.ops." not in bad.code:
            continue  # raw ops and graph-mode calls have no JAX counterpart
        print("CALL", json.dumps([spec.name, name]), flush=True)  # the last line names a crash
        try:
            jax.block_until_ready(eval(bad.code.replace("opforge.ops.", "opforge.jax.")))
            result = ["no error", ""]
        except Exception as error:  # noqa: BLE001 - every class is reported
            result = [type(error).__name__, str(error)]
        print("RESULT", json.dumps([spec.name, name, result, list(bad.fragments)]), flush=True)
'''


def test_every_bad_input_raises_the_core_message_in_jax_never_a_crash():
    """Every spec's bad input (its eager calls of the wrapper), made to opforge.jax's function on
    the same values: an exception with the core's message (its fragments), never a crash or a
    silent result; in a child process, so that a crash is seen as one."""
    import json
    import subprocess
    import sys

    from helpers import TESTS_DIR

    env = dict(__import__("os").environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(TESTS_DIR))
    proc = subprocess.run([sys.executable, "-c", _BAD_INPUT_CHILD], env=env, capture_output=True, text=True,
                          timeout=600)
    calls = [line for line in proc.stdout.splitlines() if line.startswith("CALL ")]
    results = [json.loads(line[len("RESULT "):]) for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and len(results) == len(calls), \
        f"the child died at {calls[-1] if calls else '?'}: {proc.stderr[-3000:]}"
    assert len(results) > 200
    wrong = []
    for spec, name, (kind, text), fragments in results:
        expected = JAX_MESSAGE_DIFFERS.get((spec, name))
        if kind == "no error" or (expected is None and not all(f in text for f in fragments)) or \
                (expected is not None and expected not in text):
            wrong.append((spec, name, kind, text[:200], fragments))
    assert not wrong, wrong


def test_every_function_takes_the_arguments_of_its_opforge_ops_twin():
    """The same parameters, in the same order, of the same kind, with the same defaults (only
    TensorFlow's `name=None` is left out)."""
    import inspect

    import opforge.ops

    checked, different = 0, []
    for module in opforge.ops.MODULES:
        for name in module.__all__:
            ours, theirs = getattr(ofj, name, None), getattr(module, name)
            if not inspect.isfunction(theirs) or ours is None:
                continue
            want = [(p.name, p.kind, p.default) for p in inspect.signature(theirs).parameters.values()
                    if p.name != "name"]
            got = [(p.name, p.kind, p.default) for p in inspect.signature(ours).parameters.values()]
            checked += 1
            if got != want:
                different.append((name, got, want))
    assert checked >= 20 and not different, different

"""TensorFlow Lite (LiteRT) conversion of models that use opforge ops, and interpreters that run
them.

    import opforge.lite
    tflite_model = opforge.lite.convert(model)                 # bytes of a .tflite flatbuffer
    it = opforge.lite.interpreter(model_content=tflite_model, num_threads=2)
    it.allocate_tensors()

`convert` traces the model with `training=False` and converts it with TensorFlow's
TFLiteConverter (`allow_custom_ops=True`). With `standard_ops=True` (the default) each opforge op
that has an exact TFLite builtin equivalent is written as that builtin (`STANDARD_OPS`), so
LiteRT runs it itself (with XNNPACK where it can); the others, and every opforge op with
`standard_ops=False`, become custom ops `Opforge>X` whose custom options are a flexbuffer map of
the TensorFlow node's attrs. LiteRT runs those through opforge's delegate plugin
(`library_path()`, libopforge_lite.so: the same C++ kernels as TensorFlow, so the same bits),
which `interpreter` loads.
"""
from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional, Set, Union

__all__ = ["CUSTOM_OPS", "LITE_LIBRARY_NAME", "LiteLibraryError", "MissingOpsError", "STANDARD_OPS",
           "convert", "custom_op_names", "interpreter", "library_path"]

LITE_LIBRARY_NAME = "libopforge_lite.so"
# The C function the delegate library exports: a comma-separated list of the custom ops it runs.
OP_NAMES_SYMBOL = "OpforgeLiteOpNames"
PREFIX = "Opforge>"

# What each opforge op becomes with standard_ops=True (opforge._export makes the op wrappers emit
# the TensorFlow chain that the converter maps to these builtins).
STANDARD_OPS: Dict[str, str] = {
    "Opforge>LeakyRelu": "LEAKY_RELU",
    "Opforge>LeakyReluWithMask": "LEAKY_RELU, and the mask from GREATER / SELECT",
    "Opforge>ElementMul": "MUL",
    "Opforge>ResizeBilinear": "RESIZE_BILINEAR (the same align_corners / half_pixel_centers)",
    "Opforge>Conv2DTranspose": "TRANSPOSE_CONV (with a slice of its output where the converter's padding "
                               "would differ from TensorFlow's)",
    "Opforge>Swish": "LOGISTIC + MUL",
    "Opforge>BiasLeakyRelu": "ADD + LEAKY_RELU",
    "Opforge>FusedConv2DBiasLeakyRelu": "CONV_2D (with its bias) + LEAKY_RELU",
}
# The ops with no exact builtin: custom ops with standard_ops=True too. ClippedIdentity's forward
# is TensorFlow's ClipByValue, which has no TFLite builtin (the converter would leave an
# unresolvable custom op): it stays opforge's.
KEEP = ("clipped_identity",)
CUSTOM_OPS = ("Opforge>ClippedIdentity", "Opforge>YoloDecode", "Opforge>YoloTargets", "Opforge>YoloPostprocess",
              "Opforge>CombinedNonMaxSuppression", "Opforge>MfccToMel", "Opforge>MelToStft",
              "Opforge>GriffinLim", "Opforge>FusedBatchNormLeakyRelu")

PathLike = Union[str, "os.PathLike[str]"]


class LiteLibraryError(FileNotFoundError):
    """opforge's LiteRT delegate library is not installed (the adapter was not built)."""


class MissingOpsError(RuntimeError):
    """The model has opforge custom ops that the installed delegate library does not run."""


# --- the delegate library -------------------------------------------------------------------


def library_path(must_exist: bool = True) -> Path:
    """The path of opforge's LiteRT delegate plugin, `libopforge_lite.so`, installed in the package
    directory next to the TensorFlow library `_opforge_ops.so`.

    Raises LiteLibraryError when the file is absent (pass `must_exist=False` to get the path
    anyway, e.g. to test for it).
    """
    from opforge._loader import adapter_path

    return adapter_path(
        LITE_LIBRARY_NAME, must_exist, LiteLibraryError,
        "this opforge was built without its LiteRT adapter, so models with Opforge> custom ops cannot run "
        "in LiteRT. Run `opforge doctor` to see what the build found; convert with "
        "opforge.lite.convert(..., standard_ops=True) for a model of builtin ops where the model allows it.")


def _library_op_names(path: Path) -> Optional[Set[str]]:
    """The custom ops the library runs (its `OpforgeLiteOpNames()`), None where it lacks it."""
    from opforge._loader import adapter_names

    return adapter_names(path, OP_NAMES_SYMBOL, LiteLibraryError)


def custom_op_names(model_content: bytes) -> List[str]:
    """The custom op names of a .tflite model's operator codes (all of them, opforge's or not),
    sorted. Reads the flatbuffer directly (the schema's Model.operator_codes[].custom_code), so it
    needs neither TensorFlow nor LiteRT."""
    from flatbuffers import table

    buf = bytearray(model_content)
    try:
        model = table.Table(buf, int.from_bytes(buf[0:4], "little"))
        names: Set[str] = set()
        offset = model.Offset(6)  # Model field 1: operator_codes
        if offset:
            vector = model.Vector(offset)
            for i in range(model.VectorLen(offset)):
                code = table.Table(buf, model.Indirect(vector + 4 * i))
                field = code.Offset(6)  # OperatorCode field 1: custom_code
                if field:
                    names.add(code.String(field + code.Pos).decode("utf-8", "replace"))
    except (IndexError, ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"opforge.lite: the model is not a valid .tflite flatbuffer ({exc})") from None
    return sorted(names)


def _check_ops(needed: List[str]) -> Path:
    library = library_path()
    available = _library_op_names(library)
    if available is None:
        warnings.warn(f"opforge's LiteRT library {library} does not export {OP_NAMES_SYMBOL}() (an older "
                      f"build?), so the model's opforge ops ({', '.join(needed)}) could not be checked "
                      "against it before loading", RuntimeWarning, stacklevel=3)
        return library
    missing = [op for op in needed if op not in available]
    if missing:
        from opforge import __version__

        raise MissingOpsError(
            f"the model has opforge custom ops that opforge {__version__}'s LiteRT library ({library}) "
            f"does not run: {', '.join(missing)}. It runs: {', '.join(sorted(available)) or 'none'}. "
            "Convert with the opforge version that runs it, or upgrade opforge.")
    return library


def interpreter(model_path: Optional[PathLike] = None, model_content: Optional[bytes] = None,
                num_threads: Optional[int] = None, **kwargs: Any):
    """A LiteRT interpreter of the model (a `.tflite` file at `model_path`, or its bytes as
    `model_content`) with opforge's delegate loaded where the model has opforge custom ops:
    `tf.lite.Interpreter`, or `ai_edge_litert.interpreter.Interpreter` where TensorFlow is not
    installed.

    Args:
      model_path, model_content: the model, exactly one of them.
      num_threads: the interpreter's threads (None: LiteRT's default); opforge's kernels use as
        many, with the same results for any number.
      **kwargs: passed on to the Interpreter (e.g. `experimental_op_resolver_type`).

    Call `allocate_tensors()` (after `resize_tensor_input` where the batch is dynamic), then
    `set_tensor` / `invoke` / `get_tensor`, or use `get_signature_runner()`.

    Raises:
      LiteLibraryError: the model has opforge ops and the delegate library is not installed.
      MissingOpsError: the library does not run some of the model's opforge ops (named, with the
        opforge version), before LiteRT would fail with "unresolved custom op".
      ValueError: neither or both of model_path and model_content.
    """
    if (model_path is None) == (model_content is None):
        raise ValueError("opforge.lite.interpreter: pass exactly one of model_path and model_content")
    content = model_content if model_content is not None else Path(os.fspath(model_path)).read_bytes()
    needed = [n for n in custom_op_names(content) if n.startswith(PREFIX)]
    try:
        import tensorflow as tf

        Interpreter, load_delegate = tf.lite.Interpreter, tf.lite.experimental.load_delegate
    except ImportError:
        from ai_edge_litert import interpreter as litert

        Interpreter, load_delegate = litert.Interpreter, litert.load_delegate
    delegates = list(kwargs.pop("experimental_delegates", None) or [])
    if needed:
        # One delegate per interpreter: it holds that interpreter's kernel threads.
        delegates.append(load_delegate(str(_check_ops(needed))))
    with warnings.catch_warnings():
        # tf.lite.Interpreter's deprecation notice (ai_edge_litert's is the same class).
        warnings.filterwarnings("ignore", message=r"(?s).*tf\.lite\.Interpreter is deprecated")
        if model_content is not None:
            return Interpreter(model_content=model_content, experimental_delegates=delegates,
                               num_threads=num_threads, **kwargs)
        return Interpreter(model_path=os.fspath(model_path), experimental_delegates=delegates,
                           num_threads=num_threads, **kwargs)


# --- conversion ------------------------------------------------------------------------------


def _concrete(model, input_signature):
    """(a concrete function traced now, the object that holds its variables)."""
    import keras
    import tensorflow as tf

    if isinstance(model, tf.types.experimental.ConcreteFunction):
        return model, None
    if isinstance(model, keras.layers.Layer):
        try:
            structure = model.input if getattr(model, "inputs", None) else None
        except (AttributeError, ValueError):
            structure = None
        if input_signature is None:
            if structure is None:
                raise ValueError(f"opforge.lite.convert: the model {model.name!r} has no symbolic inputs (a "
                                 "subclassed model, or one not yet built): pass input_signature, e.g. "
                                 "[tf.TensorSpec([None, 416, 416, 3], tf.float32, name='input')]")
            signature = [tf.TensorSpec(t.shape, t.dtype, name=(getattr(t, "name", "") or f"input_{i}").split(":")[0])
                         for i, t in enumerate(tf.nest.flatten(structure))]
        else:
            signature = list(tf.nest.flatten(input_signature))

        def call(*args):
            if structure is not None and len(tf.nest.flatten(structure)) == len(args):
                packed = tf.nest.pack_sequence_as(structure, list(args))
            else:
                packed = list(args) if len(args) > 1 else args[0]
            return model(packed, training=False)

        return tf.function(call, input_signature=signature).get_concrete_function(), model
    if hasattr(model, "python_function") and hasattr(model, "get_concrete_function"):  # a tf.function
        signature = input_signature if input_signature is not None else model.input_signature
        if signature is None:
            raise ValueError("opforge.lite.convert: the tf.function has no input_signature; pass one")
        # A fresh tf.function of the same Python function: traces made outside standard_ops()
        # would otherwise be reused.
        fresh = tf.function(model.python_function, input_signature=list(tf.nest.flatten(signature)))
        return fresh.get_concrete_function(), getattr(model.python_function, "__self__", None)
    if callable(model):
        if input_signature is None:
            raise ValueError("opforge.lite.convert: a plain callable needs input_signature")
        fn = tf.function(model, input_signature=list(tf.nest.flatten(input_signature)))
        return fn.get_concrete_function(), None
    raise TypeError(f"opforge.lite.convert: model must be a Keras model, a tf.function, a concrete function "
                    f"or a callable, got {type(model).__name__}")


def convert(model, standard_ops: bool = True, input_signature=None) -> bytes:
    """The model as a TFLite flatbuffer (the bytes of a .tflite file).

    Args:
      model: a Keras 3 model (traced with `training=False`), a `tf.function` (with an input
        signature), a concrete function, or a plain callable of tensors (with `input_signature`).
        A concrete function is already traced and keeps the ops it was traced with: trace it
        inside `opforge._export.standard_ops(...)` to choose them.
      standard_ops: True writes each opforge op with an exact TFLite builtin equivalent as that
        builtin (`STANDARD_OPS`) and the others as custom ops (`CUSTOM_OPS`); False writes every
        opforge op as a custom op `Opforge>X` (run by opforge's delegate, `interpreter`).
      input_signature: a list of `tf.TensorSpec`, for a callable, a tf.function without one, or a
        Keras model without symbolic inputs. A None dimension (the batch) stays dynamic: resize
        the interpreter's input before `allocate_tensors()`.

    Raises:
      TypeError, ValueError: a model or signature conversion cannot use.
      tensorflow's ConverterError: TensorFlow ops the converter cannot convert.
    """
    import tensorflow as tf

    import opforge.ops
    from opforge import _export

    opforge.ops._common.lib()  # the op defs must be registered
    with _export.standard_ops(standard_ops, keep=KEEP):
        concrete, holder = _concrete(model, input_signature)  # traced here, inside the switch
    # Variables frozen into constants here: the converter would keep them as resource variables
    # (VAR_HANDLE / READ_VARIABLE), which a plain interpreter leaves uninitialised.
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    frozen = convert_variables_to_constants_v2(concrete)
    # The frozen function's outputs are a flat list: a function of the same inputs packs them back
    # into the traced structure, so the model's signature keeps the output names (a dict's keys).
    structure = concrete.structured_outputs
    signature = [s for s in tf.nest.flatten(concrete.structured_input_signature) if isinstance(s, tf.TensorSpec)]
    named = tf.function(lambda *args: tf.nest.pack_sequence_as(structure, tf.nest.flatten(frozen(*args))),
                        input_signature=signature).get_concrete_function()
    # Without a holder object the converter writes no signature at all.
    converter = tf.lite.TFLiteConverter.from_concrete_functions([named], holder if holder is not None else tf.Module())
    converter.allow_custom_ops = True
    return converter.convert()

"""ONNX export of models that use opforge ops, and ONNX Runtime sessions that run them.

    import opforge.onnx
    opforge.onnx.export(model, "model.onnx")         # a Keras 3 model, a tf.function, a callable
    sess = opforge.onnx.session("model.onnx")        # onnxruntime.InferenceSession
    boxes, scores, classes, valid = sess.run(None, {"input": images})

`export` traces the model with `training=False` and converts it with tf2onnx. With
`standard_ops=True` (the default) each opforge op that has an exact standard ONNX equivalent is
written as that op (see `STANDARD_OPS`), so a model of those ops runs in any ONNX runtime; the
others (`CUSTOM_OPS`: the YOLO ops, combined NMS with TensorFlow's semantics, the inverse-MFCC
ops, the fused batch norm) become nodes of the ONNX domain `opforge` (op type: the TensorFlow op
name without `Opforge>`, e.g. `opforge.YoloPostprocess`), with every attribute of the TensorFlow
node but its type attributes. ONNX Runtime runs those through opforge's custom-op library
(`library_path()`), which `session` registers. `standard_ops=False` writes every opforge op as
an `opforge` node.

Your own ops, built with `opforge.build` (`load(..., ort_sources=[...])`, `load_inline(...,
ort_source=...)`), export the same way: each becomes a node of its module's domain (the op's
namespace lowercased: `Custom>MyOp` is `custom.MyOp`), run by the module's ONNX Runtime library:

    lib = opforge.build.load_inline("my_op", [op_struct, tf_binding], ort_source=[op_struct, ort_line])
    opforge.onnx.export(f, "f.onnx", standard_ops=False)
    sess = opforge.onnx.session("f.onnx", libraries=[opforge.build.ort_library_path(lib)])
"""
from __future__ import annotations

import logging
import os
import re
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Set, Tuple, Union

import onnx  # the top-level onnx package (absolute import), not this module
from onnx import AttributeProto, helper

__all__ = ["CUSTOM_OPS", "DOMAIN", "DOMAIN_VERSION", "ExportError", "MissingOpsError", "ORT_LIBRARY_NAME",
           "OrtLibraryError", "STANDARD_OPS", "custom_op_types", "export", "library_path", "session"]

DOMAIN = "opforge"
DOMAIN_VERSION = 1
ORT_LIBRARY_NAME = "libopforge_ort.so"
# The C function the ORT library exports: a comma-separated list of the op types it registers.
OP_NAMES_SYMBOL = "OpforgeOrtOpNames"
# ... and the ONNX domain it registers them in (libraries built by opforge.build; "opforge" where
# a library does not export it).
DOMAIN_SYMBOL = "OpforgeOrtDomain"

# What each opforge op becomes with standard_ops=True: the standard ONNX ops that compute the same
# values (opforge._export makes the op wrappers emit the TensorFlow chain that tf2onnx maps so).
STANDARD_OPS: Dict[str, str] = {
    "Opforge>LeakyRelu": "LeakyRelu",
    "Opforge>LeakyReluWithMask": "LeakyRelu, and Greater for the mask (tf2onnx writes the select as Cast, Mul "
                                 "and Add: exact for its two finite values, 1 and alpha)",
    "Opforge>ElementMul": "Mul",
    "Opforge>ResizeBilinear": "Resize (linear; coordinate_transformation_mode align_corners, half_pixel "
                              "or asymmetric, as align_corners / half_pixel_centers / neither)",
    "Opforge>Conv2DTranspose": "ConvTranspose (and a Slice / Pad of its full output where the converter's "
                               "padding would differ from TensorFlow's)",
    "Opforge>Swish": "Sigmoid + Mul",
    "Opforge>BiasLeakyRelu": "Add + LeakyRelu",
    "Opforge>ClippedIdentity": "Clip (the forward; NaN passes through as in TensorFlow)",
    "Opforge>FusedConv2DBiasLeakyRelu": "Conv (with its bias) + LeakyRelu",
}
# The ops with no exact standard equivalent: `opforge` nodes with standard_ops=True too.
CUSTOM_OPS = ("Opforge>YoloDecode", "Opforge>YoloTargets", "Opforge>YoloPostprocess",
              "Opforge>CombinedNonMaxSuppression", "Opforge>MfccToMel", "Opforge>MelToStft",
              "Opforge>GriffinLim", "Opforge>FusedBatchNormLeakyRelu")

PathLike = Union[str, "os.PathLike[str]"]


class ExportError(RuntimeError):
    """The model could not be converted to ONNX; the message names the ops or the argument."""


class OrtLibraryError(FileNotFoundError):
    """opforge's ONNX Runtime custom-op library is not installed (the adapter was not built)."""


class MissingOpsError(RuntimeError):
    """The model has `opforge` nodes that the installed ONNX Runtime library does not register."""


# --- the ONNX Runtime library ----------------------------------------------------------------


def library_path(must_exist: bool = True) -> Path:
    """The path of opforge's ONNX Runtime custom-op library, `libopforge_ort.so`, installed in the
    package directory next to the TensorFlow library `_opforge_ops.so`.

    Raises OrtLibraryError when the file is absent (pass `must_exist=False` to get the path
    anyway, e.g. to test for it).
    """
    from opforge._loader import adapter_path

    return adapter_path(
        ORT_LIBRARY_NAME, must_exist, OrtLibraryError,
        "this opforge was built without its ONNX Runtime adapter (the build compiles it only where it finds "
        "ONNX Runtime's headers), so models with `opforge`-domain nodes cannot run in ONNX Runtime. Run "
        "`opforge doctor` to see what the build found; export with opforge.onnx.export(..., "
        "standard_ops=True) for a model of standard ops where the model allows it.")


def _library_op_types(path: Path) -> Optional[Set[str]]:
    """The op types the library registers (its `OpforgeOrtOpNames()`), or None where it does not
    export that function."""
    from opforge._loader import adapter_names

    return adapter_names(path, OP_NAMES_SYMBOL, OrtLibraryError)


def _library_domain(path: Path) -> Optional[str]:
    """The ONNX domain an opforge-made library registers (its `OpforgeOrtDomain()`), or None where
    it does not export that function (opforge's own library before it did: "opforge"; another
    runtime's library: unknown)."""
    from opforge._loader import adapter_string

    return adapter_string(path, DOMAIN_SYMBOL, OrtLibraryError)


def _node_types(model: onnx.ModelProto) -> Dict[str, Set[str]]:
    """domain -> the op types of the model's nodes of it (subgraphs and functions included)."""
    types: Dict[str, Set[str]] = {}
    nodes = [n for g in _graphs(model.graph) for n in g.node] + [n for f in model.functions for n in f.node]
    for n in nodes:
        types.setdefault(n.domain, set()).add(n.op_type)
    return types


def _user_library(library) -> Path:
    """A `libraries` entry of `session`: a path, or a module opforge.build loaded."""
    if isinstance(library, ModuleType):
        import opforge.build

        return opforge.build.ort_library_path(library)
    path = Path(os.fspath(library)).expanduser().resolve()
    if not path.is_file():
        raise OrtLibraryError(f"opforge.onnx.session: the ONNX Runtime library {path} (in libraries=) "
                              "does not exist")
    return path


def _graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == AttributeProto.GRAPH:
                yield from _graphs(attr.g)
            elif attr.type == AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from _graphs(g)


def custom_op_types(model: onnx.ModelProto) -> List[str]:
    """The op types of the model's `opforge`-domain nodes (subgraphs and functions included),
    sorted."""
    types = {n.op_type for g in _graphs(model.graph) for n in g.node if n.domain == DOMAIN}
    types |= {n.op_type for f in model.functions for n in f.node if n.domain == DOMAIN}
    return sorted(types)


def session(path: Union[PathLike, onnx.ModelProto, bytes], providers: Optional[Sequence[Any]] = None,
            libraries: Sequence[Union[PathLike, ModuleType]] = (), **session_options: Any):
    """An `onnxruntime.InferenceSession` for the model at `path` (or a ModelProto, or its bytes),
    with opforge's ONNX Runtime library registered where the model has `opforge` nodes.

    Args:
      path: the .onnx file (as `export` wrote it).
      providers: ONNX Runtime execution providers; default `["CPUExecutionProvider"]`.
      libraries: more ONNX Runtime custom-op libraries to register besides opforge's own: those of
        your ops, `opforge.build.ort_library_path(module)` (or the module opforge.build loaded
        itself), or any other runtime's custom-op library.
      **session_options: attributes set on `onnxruntime.SessionOptions`, e.g.
        `intra_op_num_threads=2`, `graph_optimization_level=ort.GraphOptimizationLevel.ORT_ENABLE_ALL`.

    A model of standard ops only needs no library. One with `opforge` nodes needs
    `library_path()` (OrtLibraryError where it is absent), and every op type among its nodes must
    be one the library registers: MissingOpsError names the ones it lacks and the opforge
    version, before ONNX Runtime would fail with a less helpful message. Nodes of a library of
    `libraries` built by opforge.build are checked against it the same way, and nodes of the
    domain of an op this process loaded through opforge.build with no library for it given are
    refused with the library to pass.

    Raises:
      TypeError: a session option that SessionOptions does not have.
      OrtLibraryError, MissingOpsError: as above.
    """
    import onnxruntime as ort

    options = ort.SessionOptions()
    for key, value in session_options.items():
        if not hasattr(options, key) or key.startswith("_"):
            valid = sorted(k for k in dir(options) if not k.startswith("_") and not callable(getattr(options, k)))
            raise TypeError(f"opforge.onnx.session: onnxruntime.SessionOptions has no option {key!r}; "
                            f"options: {', '.join(valid)}")
        setattr(options, key, value)
    if isinstance(path, onnx.ModelProto):
        model, source = path, path.SerializeToString()
    elif isinstance(path, (bytes, bytearray)):
        model, source = onnx.load_from_string(bytes(path)), bytes(path)
    else:
        model, source = onnx.load(os.fspath(path), load_external_data=False), os.fspath(path)
    needed = custom_op_types(model)
    if needed:
        library = library_path()
        available = _library_op_types(library)
        if available is None:
            warnings.warn(f"opforge's ONNX Runtime library {library} does not export {OP_NAMES_SYMBOL}() "
                          "(an older build?), so the model's opforge ops "
                          f"({', '.join(needed)}) could not be checked against it before loading",
                          RuntimeWarning, stacklevel=2)
        else:
            missing = [op for op in needed if op not in available]
            if missing:
                from opforge import __version__

                raise MissingOpsError(
                    f"the model has opforge ops that opforge {__version__}'s ONNX Runtime library "
                    f"({library}) does not register: {', '.join(DOMAIN + '.' + op for op in missing)}. "
                    f"It registers: {', '.join(sorted(available)) or 'none'}. Export with the opforge "
                    "version that runs it, or upgrade opforge.")
        options.register_custom_ops_library(str(library))
    _register_user_libraries(options, model, [_user_library(lib) for lib in libraries],
                             library_path(must_exist=False) if needed else None)
    return ort.InferenceSession(source, sess_options=options,
                                providers=list(providers) if providers is not None else ["CPUExecutionProvider"])


def _register_user_libraries(options, model: onnx.ModelProto, paths: List[Path],
                             opforge_library: Optional[Path]) -> None:
    """Registers `paths` on the session options, after checking the model's nodes of their domains
    (and of the domains of ops loaded through opforge.build) against what they register."""
    import opforge.build

    types = _node_types(model)
    given: Dict[str, List[Tuple[Path, Optional[Set[str]]]]] = {}
    for path in dict.fromkeys(paths):  # each once, in order
        if opforge_library is not None and path == opforge_library.resolve():
            continue  # registered already
        domain = _library_domain(path)
        if domain is not None:
            given.setdefault(domain, []).append((path, _library_op_types(path)))
        options.register_custom_ops_library(str(path))
    for domain, libs in given.items():
        if domain == DOMAIN or domain not in types:
            continue
        if any(names is None for _, names in libs):
            continue  # cannot tell
        available = set().union(*(names for _, names in libs))
        missing = sorted(types[domain] - available)
        if missing:
            raise MissingOpsError(
                f"the model has {domain!r} ops that the ONNX Runtime libraries given for that domain "
                f"({', '.join(str(p) for p, _ in libs)}) do not register: "
                f"{', '.join(domain + '.' + op for op in missing)}. They register: "
                f"{', '.join(sorted(available)) or 'none'}. Rebuild the library with an "
                "OPFORGE_ORT_KERNELS line for each op (ort_sources / ort_source of opforge.build).")
    for op, (domain, library) in sorted(opforge.build.loaded_op_domains().items()):
        if domain in types and domain not in given and domain != DOMAIN:
            hint = (f"libraries=[{str(library)!r}] (opforge.build.ort_library_path(module))" if library
                    else "an ONNX Runtime library: build the module with ort_sources=[...] / "
                         "ort_source=... and pass libraries=[opforge.build.ort_library_path(module)]")
            raise MissingOpsError(
                f"opforge.onnx.session: the model has nodes of the domain {domain!r} "
                f"({', '.join(sorted(types[domain]))}), the ops of the opforge.build module that "
                f"registers {op!r}, but no library given registers that domain: pass {hint}")


# --- export ----------------------------------------------------------------------------------

_ATTR_TYPES = {
    "int": AttributeProto.INT, "float": AttributeProto.FLOAT, "bool": AttributeProto.INT,
    "string": AttributeProto.STRING, "list(int)": AttributeProto.INTS, "list(float)": AttributeProto.FLOATS,
    "list(bool)": AttributeProto.INTS, "list(string)": AttributeProto.STRINGS,
}


def _onnx_attribute(name: str, tf_type: str, value: Any) -> AttributeProto:
    """An ONNX attribute of the TensorFlow attr's value: bools as ints, strings as strings (bytes),
    list(int) as ints, floats as floats (typed by the op def, so empty lists keep their type)."""
    if tf_type in ("bool", "int"):
        value = int(value)
    elif tf_type == "float":
        value = float(value)
    elif tf_type == "string":
        value = value if isinstance(value, bytes) else str(value).encode()
    elif tf_type in ("list(int)", "list(bool)"):
        value = [int(v) for v in value]
    elif tf_type == "list(float)":
        value = [float(v) for v in value]
    elif tf_type == "list(string)":
        value = [v if isinstance(v, bytes) else str(v).encode() for v in value]
    return helper.make_attribute(name, value, attr_type=_ATTR_TYPES[tf_type])


def onnx_input_order(tf_op: str, num_inputs: int) -> List[int]:
    """For each input of the ONNX node of `tf_op`, the index of the TensorFlow input it is.

    ONNX allows a variadic input only last, so an op whose TensorFlow inputs have one in the middle
    takes its fixed inputs first in ONNX: YoloPostprocess's five scalars, then its num_scales
    feature maps and num_scales anchors (cc/ops/yolo_postprocess/yolo_postprocess_ort.cc reads them
    back in TensorFlow's order). Every other op keeps TensorFlow's order.
    """
    if tf_op == "Opforge>YoloPostprocess":
        maps = num_inputs - 5
        return list(range(maps, num_inputs)) + list(range(maps))
    return list(range(num_inputs))


def _attributes(tf_op: str, get, where: str) -> List[AttributeProto]:
    """The ONNX attributes of a node of `tf_op` whose TF attr values `get(name)` returns (None for
    a missing one): the op def's attributes but its type attributes (T, U, Tshape)."""
    from tensorflow.python.framework import op_def_registry

    op_def = op_def_registry.get(tf_op)
    attrs = []
    for attr in op_def.attr:
        if attr.type in ("type", "list(type)"):
            continue
        value = get(attr.name)
        if value is None:
            raise ExportError(f"{tf_op}: the converted node {where} lacks its attribute {attr.name}")
        if attr.type not in _ATTR_TYPES:
            raise ExportError(f"{tf_op}: attribute {attr.name} of type {attr.type} has no ONNX form")
        attrs.append(_onnx_attribute(attr.name, attr.type, value))
    return attrs


def node_from_tf_op(op, inputs: Sequence[str], outputs: Sequence[str]) -> onnx.NodeProto:
    """The `opforge`-domain ONNX node of a TensorFlow graph's opforge op (`tf.Operation`), with
    ONNX input names `inputs` given in TensorFlow's input order (reordered here as ONNX wants)."""
    attrs = _attributes(op.type, lambda n: op.get_attr(n) if n in op.node_def.attr else None, op.name)
    order = onnx_input_order(op.type, len(inputs))
    node = helper.make_node(op.type.split(">", 1)[-1], [inputs[i] for i in order], list(outputs),
                            domain=DOMAIN, name=op.name)
    node.attribute.extend(attrs)
    return node


def _custom_node_handler(tf_op: str, domain: str = DOMAIN) -> Callable:
    """A tf2onnx custom-op handler that turns the TensorFlow node of `tf_op` into an `opforge`
    node: domain `opforge` (a user's op: its module's domain), op type without the namespace
    (`Opforge>`), the op def's attributes but its
    type attributes (T, U, Tshape), converted by the op def's types. Inputs and outputs keep
    TensorFlow's dtypes (int32 sizes, shapes and thresholds stay int32) and order, but where ONNX
    needs another (onnx_input_order)."""

    def handler(ctx, node, name, args):
        attrs = {a.name: a for a in _attributes(
            tf_op, lambda n: node.get_attr_value(n) if n in node.attr else None, name)}
        node.attr.clear()
        node.attr.update(attrs)
        order = onnx_input_order(tf_op, len(node.input))
        if order != list(range(len(node.input))):
            ctx.replace_inputs(node, [node.input[i] for i in order])
        node.type = tf_op.split(">", 1)[-1]
        node.domain = domain
        return node

    return handler


def _custom_op_handlers() -> Tuple[Dict[str, tuple], List[str]]:
    """The handlers of opforge's ops and of the ops loaded through opforge.build (each as a node
    of its module's domain), and those modules' domains."""
    import opforge.build
    import opforge.ops

    opforge.ops._common.lib()  # the op defs must be registered
    handlers = {op: (_custom_node_handler(op), []) for op in opforge.ops.OP_NAMES}
    domains: List[str] = []
    for op, (domain, _) in sorted(opforge.build.loaded_op_domains().items()):
        if op not in handlers:
            handlers[op] = (_custom_node_handler(op, domain), [])
            if domain not in domains:
                domains.append(domain)
    return handlers, domains


def _spec_list(input_signature) -> List[Any]:
    import tensorflow as tf

    if isinstance(input_signature, tf.TensorSpec):
        return [input_signature]
    if isinstance(input_signature, (list, tuple)) and all(isinstance(s, tf.TensorSpec) for s in input_signature):
        return list(input_signature)
    raise TypeError("opforge.onnx.export: input_signature must be a tf.TensorSpec or a list of them, "
                    f"got {input_signature!r}")


def _input_name(name: str, index: int, used: Set[str]) -> str:
    base = re.sub(r"[^A-Za-z0-9_.]", "_", (name or "").split(":")[0]) or f"input_{index}"
    name, k = base, 1
    while name in used:
        name, k = f"{base}_{k}", k + 1
    used.add(name)
    return name


def _traceable(model, input_signature):
    """(a fresh tf.function, its input signature, output names or None) for export."""
    import keras
    import tensorflow as tf

    if isinstance(model, tf.types.experimental.ConcreteFunction):
        raise TypeError("opforge.onnx.export: pass the tf.function (or the Python callable and an "
                        "input_signature), not a ConcreteFunction: a traced function keeps the ops it "
                        "was traced with, and export retraces so opforge ops can become standard ones")
    if isinstance(model, keras.layers.Layer):
        # A Functional model's input structure (a tensor, a list, a dict): the traced arguments
        # are packed back into it, as Keras expects.
        try:
            structure = model.input if getattr(model, "inputs", None) else None
        except (AttributeError, ValueError):
            structure = None
        if input_signature is None:
            inputs = structure
            if inputs is None:
                raise ValueError(f"opforge.onnx.export: the model {model.name!r} has no symbolic inputs "
                                 "(a subclassed model, or one not yet built): pass input_signature, e.g. "
                                 "[tf.TensorSpec([None, 416, 416, 3], tf.float32, name='input')]")
            used: Set[str] = set()
            signature = [tf.TensorSpec(t.shape, t.dtype, name=_input_name(getattr(t, "name", ""), i, used))
                         for i, t in enumerate(tf.nest.flatten(inputs))]
        else:
            signature = _spec_list(input_signature)

        def call(*args):
            if structure is not None and len(tf.nest.flatten(structure)) == len(args):
                packed = tf.nest.pack_sequence_as(structure, list(args))
            else:
                packed = list(args) if len(args) > 1 else args[0]
            return model(packed, training=False)

        names = list(getattr(model, "output_names", None) or []) or None
        return tf.function(call, input_signature=signature), signature, names
    if hasattr(model, "python_function") and hasattr(model, "get_concrete_function"):  # a tf.function
        signature = input_signature if input_signature is not None else model.input_signature
        if signature is None:
            raise ValueError("opforge.onnx.export: the tf.function has no input_signature; pass one")
        signature = _spec_list(signature)
        # A fresh tf.function of the same Python function: its traces made outside standard_ops()
        # would otherwise be reused.
        return tf.function(model.python_function, input_signature=signature), signature, None
    if callable(model):
        if input_signature is None:
            raise ValueError("opforge.onnx.export: a plain callable needs input_signature")
        signature = _spec_list(input_signature)
        return tf.function(model, input_signature=signature), signature, None
    raise TypeError(f"opforge.onnx.export: model must be a Keras model, a tf.function or a callable, got "
                    f"{type(model).__name__}")


def _rename_outputs(model: onnx.ModelProto, names: Optional[List[str]]) -> None:
    """Graph outputs renamed to `names` (Keras's output names), made unique."""
    if not names or len(names) != len(model.graph.output):
        return
    taken = {i.name for i in model.graph.input} | {t.name for t in model.graph.initializer}
    unique: List[str] = []
    for n in names:
        base = re.sub(r"[^A-Za-z0-9_.]", "_", n) or "output"
        new, k = base, 1
        while new in taken:
            new, k = f"{base}_{k}", k + 1
        taken.add(new)
        unique.append(new)
    mapping = {o.name: n for o, n in zip(model.graph.output, unique)}
    if len(set(mapping)) != len(mapping):  # one tensor listed twice: keep tf2onnx's names
        return
    for node in model.graph.node:
        node.output[:] = [mapping.get(o, o) for o in node.output]
        node.input[:] = [mapping.get(i, i) for i in node.input]
    for info in list(model.graph.output) + list(model.graph.value_info):
        info.name = mapping.get(info.name, info.name)


def _unmapped_nodes(model: onnx.ModelProto) -> List[str]:
    """Nodes of the default domain that are no ONNX op (TensorFlow ops tf2onnx could not map;
    it continues past them)."""
    bad = []
    for g in _graphs(model.graph):
        for n in g.node:
            if n.domain in ("", "ai.onnx") and not onnx.defs.has(n.op_type):
                bad.append(f"{n.op_type} ({n.name})")
    return bad


def export(model, path: PathLike, input_signature=None, opset: int = 17,
           standard_ops: bool = True) -> onnx.ModelProto:
    """Writes `model` as an ONNX file at `path` and returns the onnx.ModelProto.

    Args:
      model: a Keras 3 model (traced with `training=False`; its inputs give the signature, its
        output names the ONNX output names), a `tf.function`, or a plain callable of tensors.
      path: the .onnx file to write.
      input_signature: a list of `tf.TensorSpec` (their names are the ONNX input names). Needed for
        a plain callable, a tf.function without one, and a Keras model without symbolic inputs
        (subclassed). A None dimension (the batch) stays dynamic in the ONNX graph.
      opset: the ONNX opset (default 17).
      standard_ops: True writes each opforge op that has an exact standard ONNX equivalent as
        that op (`STANDARD_OPS`) and the others as `opforge` nodes (`CUSTOM_OPS`); False writes
        every opforge op as an `opforge` node (run by opforge's ONNX Runtime library).

    The `opforge` opset (version 1) is imported where the model has `opforge` nodes. Ops loaded
    through `opforge.build` become nodes of their module's domain (`opforge.build.ort_domain`:
    `Custom>MyOp` is `custom.MyOp`, version 1), with their op def's attributes; their module's
    ONNX Runtime library (`opforge.build.ort_library_path`) runs them
    (`session(..., libraries=[...])`).

    Raises:
      ExportError: TensorFlow ops tf2onnx cannot map (named).
      TypeError, ValueError: a model or signature export cannot use.
    """
    import tensorflow as tf
    import tf2onnx
    import tf2onnx.tf_loader

    from opforge import _export

    fn, signature, output_names = _traceable(model, input_signature)
    handlers, user_domains = _custom_op_handlers()
    tf2onnx_logger = logging.getLogger("tf2onnx")
    level = tf2onnx_logger.level
    tf2onnx_logger.setLevel(max(level, logging.ERROR))
    try:
        with _export.standard_ops(standard_ops):
            concrete = fn.get_concrete_function()  # traced here, inside the switch
        # tf2onnx's from_function takes every input of the concrete function as a graph input,
        # the tensors it captures too (an eager tensor a function closes over); only the
        # signature's are inputs here, the captures are frozen into constants.
        user_inputs = concrete.inputs[:len(tf.nest.flatten(concrete.structured_input_signature))]
        input_names = [t.name for t in user_inputs]
        output_names_tf = [t.name for t in concrete.outputs if t.dtype != tf.resource]
        # ONNX input names: the signature's names (else TensorFlow's placeholder names).
        rename = {t: (spec.name or t.split(":")[0]) for t, spec in zip(input_names, signature)}
        if output_names is None:  # a function's outputs: a dict's keys (flattened in key order), else output_<i>
            structured = concrete.structured_outputs
            output_names = (sorted(str(k) for k in structured) if isinstance(structured, dict)
                            and len(structured) == len(output_names_tf)
                            else [f"output_{i}" for i in range(len(output_names_tf))])
        from tensorflow.python.util import deprecation

        with tf.device("/cpu:0"), deprecation.silence():  # tf2onnx's TF1 freezing calls
            graph_def = tf2onnx.tf_loader.from_function(concrete, input_names, output_names_tf)
            proto, _ = tf2onnx.convert.from_graph_def(
                graph_def, name=concrete.name, input_names=input_names, output_names=output_names_tf,
                opset=opset, custom_op_handlers=handlers,
                extra_opset=[helper.make_opsetid(d, DOMAIN_VERSION) for d in [DOMAIN] + user_domains],
                tensors_to_rename=rename)
    finally:
        tf2onnx_logger.setLevel(level)
    unmapped = _unmapped_nodes(proto)
    if unmapped:
        raise ExportError("opforge.onnx.export: tf2onnx could not convert these TensorFlow ops to ONNX "
                          f"(opset {opset}): {', '.join(unmapped)}")
    used = _node_types(proto)
    unused = {d for d in [DOMAIN] + user_domains if d not in used}
    if unused:
        kept = [o for o in proto.opset_import if o.domain not in unused]
        del proto.opset_import[:]
        proto.opset_import.extend(kept)
    _rename_outputs(proto, output_names)
    proto.producer_name = "opforge"
    from opforge import __version__

    proto.producer_version = __version__
    onnx.save(proto, os.fspath(path))
    return proto


def ort_version() -> str:
    """The version of the onnxruntime package in this process ("" when it is not installed)."""
    try:
        import onnxruntime
    except ImportError:
        return ""
    return onnxruntime.__version__

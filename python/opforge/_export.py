"""The switch that makes opforge's op wrappers emit TensorFlow's built-in ops while a model is
traced for export (ONNX through `opforge.onnx`, TFLite through `opforge.lite`).

Inside `with standard_ops():` each wrapper whose op has an exact standard equivalent (leaky_relu,
element_mul, resize_bilinear, conv2d_transpose, swish, bias_leaky_relu, clipped_identity,
fused_conv2d_bias_leaky_relu) builds the TensorFlow chain that computes the same values
(`tf.nn.leaky_relu`, `tf.multiply`, `ResizeBilinear` with the same flags, ...), which the
converters map to their standard ops, so the exported model runs in any runtime. The ops without
one (the YOLO ops, combined NMS, the inverse-MFCC ops, the fused batch norm) stay opforge ops and
become custom nodes.

The flag is per thread (a trace runs in the thread that calls it) and costs the wrappers' normal
path one attribute read: `STATE.standard`, a class attribute of a `threading.local` unless a
thread set it.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Iterator

__all__ = ["STATE", "standard_ops", "standard_ops_enabled"]


class _State(threading.local):
    # The class attributes are the defaults every thread sees until it enters standard_ops().
    standard = False
    keep: frozenset = frozenset()  # wrappers that stay opforge ops for this target


STATE = _State()


@contextlib.contextmanager
def standard_ops(enabled: bool = True, keep=()) -> Iterator[None]:
    """While active (in this thread), opforge's op wrappers emit TensorFlow's built-in ops where
    an exact standard equivalent exists; `enabled=False` forces opforge's own ops (inside an
    outer `standard_ops()` too). The previous setting is restored on exit. Trace the model
    (`tf.function.get_concrete_function`, a converter's from_function) inside the block: a
    function already traced outside it keeps the ops it was traced with. `keep` names wrappers
    (by function name) that stay opforge ops for a target whose converter has no builtin for
    their chain (TFLite has none for ClipByValue: `opforge.lite` keeps "clipped_identity")."""
    previous = STATE.standard, STATE.keep
    STATE.standard, STATE.keep = bool(enabled), frozenset(keep)
    try:
        yield
    finally:
        STATE.standard, STATE.keep = previous


def standard_ops_enabled() -> bool:
    """Whether the wrappers emit standard TensorFlow ops in this thread (see `standard_ops`)."""
    return STATE.standard

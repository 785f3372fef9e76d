"""Constructor checks of the layers, done by the one place that checks an op's arguments."""
from __future__ import annotations

import re
from typing import Callable

import tensorflow as tf


def check_with_op(layer: str, call: Callable[[], object]) -> None:
    """Runs the layer's op once on an empty input, so that the C++ core validates the layer's
    arguments, and raises the core's message as the ValueError Keras users expect from a
    constructor (`layer` names the layer and the arguments given)."""
    try:
        with tf.init_scope():  # eagerly, also when the layer is built inside a tf.function
            call()
    except tf.errors.InvalidArgumentError as exc:
        # Only the core's sentence: not the eager wrapper's "{{function_node ...}}" and
        # "[Op:...] name:" decorations.
        message = re.sub(r"^\{\{function_node [^}]*\}\}\s*", "", exc.message)
        message = re.sub(r"\s*\[Op:[^\]]*\]( name: \S*)?\s*$", "", message)
        raise ValueError(f"{layer}: {message}") from None

"""Constructor checks of the layers, done by the one place that checks an op's arguments."""
from __future__ import annotations

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
        raise ValueError(f"{layer}: {exc.message}") from None

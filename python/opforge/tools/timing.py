"""Interleaved timing: the one way opforge compares speeds.

Machines are shared and noisy, so absolute times mean little. Each candidate is timed in the
same process, in turn, after a warm-up, and compared by the median. The order rotates every
round (A B C, B C A, C A B, ...): a candidate that always ran second would find the inputs the
first one just read still in cache, and would look faster for it.
"""
from __future__ import annotations

import statistics
import time
from typing import Callable, Dict, List

import numpy as np


def interleaved(
    candidates: Dict[str, Callable[[], object]], repeats: int = 30, warmup: int = 3,
    min_seconds: float = 0.0,
) -> Dict[str, float]:
    """Median seconds per call of each candidate, timed interleaved.

    Eager CPU ops run synchronously; where a GPU is present the devices are synchronised after
    each call so that asynchronous work is counted. (Results are not copied to NumPy: that copy
    would cost as much as the ops being timed.) Runs at least `repeats` rounds and, if
    `min_seconds` is set, keeps going until that much time has passed.
    """
    import tensorflow as tf

    sync = None
    if tf.config.list_logical_devices("GPU"):
        sync = tf.test.experimental.sync_devices

    def run(fn: Callable[[], object]) -> None:
        fn()
        if sync is not None:
            sync()

    for _ in range(warmup):
        for fn in candidates.values():
            run(fn)
    samples: Dict[str, List[float]] = {name: [] for name in candidates}
    start = time.perf_counter()
    rounds = 0
    names = list(candidates)
    while rounds < repeats or time.perf_counter() - start < min_seconds:
        k = rounds % len(names)
        for name in names[k:] + names[:k]:
            fn = candidates[name]
            t0 = time.perf_counter()
            run(fn)
            samples[name].append(time.perf_counter() - t0)
        rounds += 1
    return {name: statistics.median(values) for name, values in samples.items()}


"""An op's CUDA kernels run on the CPU, inside TensorFlow, on opforge's SIMT runtime.

A library built for cuda_sim (`opforge.build.load(..., cuda_sim=True)` for your op; for
opforge's own ops, `_opforge_ops_cuda_sim.so`, which `make test` builds) has its `.cu` files
compiled by the host compiler for the SIMT runtime (each CUDA thread a fiber; barriers, warp
intrinsics, shared memory and atomics as on a GPU; launch limits, barrier divergence and a
block-order check reported as errors naming the kernel), and registers each op's GPU kernel --
the op struct's `Gpu` path, through the same binding code as on a GPU -- on the CPU device under
the kernel label `"cuda_sim"`. A node whose `_kernel` attr is that label runs it; every other node
runs the CPU kernel as usual. TensorFlow applies labels to graphs only, so the GPU kernels run in
a `tf.function`:

    sim = opforge.cuda_sim.function(lambda x: my_ops.my_op(x), ["MyOp", "MyOpGrad"])
    y_gpu_path = sim(x)            # the CUDA kernel, on the CPU
    y_cpu = my_ops.my_op(x)        # the CPU kernel

What a SIMT run proves, and what only a GPU does: docs/guides/gpu.md.
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional, Sequence

LABEL = "cuda_sim"
LIBRARY_NAME = "_opforge_ops_cuda_sim.so"
# Where `make test` builds opforge's own cuda_sim library (the binding's build directory).
_BUILD_LIBRARY = Path(__file__).resolve().parents[2] / "build" / "wheel" / LIBRARY_NAME

_loaded: Optional[Path] = None


def opforge_library_path() -> Optional[Path]:
    """The cuda_sim library of opforge's own ops: $OPFORGE_CUDA_SIM_LIBRARY, else the one `make
    test` builds in a source checkout (build/wheel/, beside the package's source or under the
    working directory), else None."""
    env = os.environ.get("OPFORGE_CUDA_SIM_LIBRARY", "").strip()
    if env:
        return Path(env).expanduser().resolve()
    for path in (_BUILD_LIBRARY, Path.cwd() / "build" / "wheel" / LIBRARY_NAME):
        if path.is_file():
            return path.resolve()
    return None


def load_opforge_kernels(path: Optional[Path] = None) -> Path:
    """Loads the cuda_sim kernels of opforge's own ops beside opforge's library (which it loads
    first: the cuda_sim library registers kernels only, for ops that library registers).

    Raises FileNotFoundError (naming the command that builds it) where there is none."""
    global _loaded
    import tensorflow as tf

    from opforge._loader import load_library

    path = Path(path) if path is not None else opforge_library_path()
    if path is None or not path.is_file():
        raise FileNotFoundError(
            f"no cuda_sim library of opforge's ops ({path or _BUILD_LIBRARY}): in an opforge checkout "
            "`make cuda-sim` builds it (`make test` does), or set OPFORGE_CUDA_SIM_LIBRARY")
    if _loaded != path.resolve():
        load_library()
        tf.load_op_library(str(path))
        _loaded = path.resolve()
    return path


@contextlib.contextmanager
def kernels(op_names: Iterable[str]) -> Iterator[None]:
    """While a graph is built (inside a `tf.function`): the nodes of `op_names` made in this
    block, gradients taken in it included, select the cuda_sim kernel."""
    import tensorflow as tf

    graph = tf.compat.v1.get_default_graph()
    if tf.executing_eagerly():
        raise RuntimeError("opforge.cuda_sim.kernels selects kernels of a graph: use it inside a "
                           "tf.function (or use opforge.cuda_sim.function)")
    with graph._kernel_label_map({name: LABEL for name in op_names}):
        yield


def function(fn: Callable, op_names: Sequence[str]) -> Callable:
    """`tf.function(fn)` whose nodes of `op_names` (and their gradient ops, if named) run the
    cuda_sim kernels: the ops' CUDA kernels on the SIMT runtime. A dtype without a GPU kernel
    fails with TensorFlow's error for a missing kernel (no silent CPU kernel)."""
    import tensorflow as tf

    names = tuple(op_names)

    def simulated(*args):
        with kernels(names):
            return fn(*args)

    traced = tf.function(simulated, autograph=False)
    checked = set()

    def call(*args):
        concrete = traced.get_concrete_function(*args)
        if id(concrete) not in checked:
            check_labels(concrete.graph.as_graph_def(), names)
            checked.add(id(concrete))
        return traced(*args)

    return call


def check_labels(graph_def, op_names: Iterable[str]) -> None:
    """Raises RuntimeError if a node of `op_names` in the graph (or in a function it calls) does
    not select the cuda_sim kernel: a label reaches the graph it is set in only, not a nested
    tf.function's, whose nodes would run the CPU kernel unseen."""
    names = set(op_names)
    nodes = list(graph_def.node) + [n for f in graph_def.library.function for n in f.node_def]
    missed = sorted({n.op for n in nodes if n.op in names and
                     (n.attr["_kernel"].s.decode() if "_kernel" in n.attr else "") != LABEL})
    if missed:
        raise RuntimeError(f"opforge.cuda_sim: nodes of {missed} would run their CPU kernels: they are "
                           "built in a nested tf.function, which the kernel label does not reach")

"""`opforge bench gpu` (also `opforge gpu-bench`): opforge's GPU kernels against TensorFlow's GPU
kernels of the same computation, and the element-wise ops against a device copy of the same
bytes (the memory-bound limit), timed interleaved on the GPU.

Every op module with a GPU kernel contributes its spec's speed cases (`opforge.ops.spec.SpeedCase`,
the same cases `opforge bench` times on the CPU) at sizes that keep an H200 busy: element-wise
cases over 64M elements (256 MiB per float32 tensor), model-shaped cases with their batch scaled
to about 16M elements; plus the element-wise forward and gradient kernels in float16 and
bfloat16 (their vectorised 16-bit paths). Rivals that are not GPU kernels (tf.py_function, a
NumPy copy) are left out; a case without a TensorFlow rival is skipped.

Timing: the device is synchronised (tf.test.experimental.sync_devices) before and after each
sample; a sample is `calls` back-to-back calls (enough for 5 ms, so that the launch and the
synchronisation are a small part of it), its time divided by `calls`; candidates take turns in
a rotating order (A B C, B C A, ...) after a warm-up; the median of each is reported. A ratio
above 1 means opforge is faster (ratio = TensorFlow's median / opforge's). GB/s is the bytes a
call of the op moves (its inputs read and outputs written) over its median time, for the op, for
TensorFlow's kernel and for the copy of the same bytes.

`--device CPU` is a dry run on a machine without a GPU: tiny sizes, the same code.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from typing import Callable, Dict, List, Optional, Tuple

# Elements per tensor of the element-wise cases, and of the model-shaped cases' batch scaling.
SIZES = {"full": (1 << 26, 1 << 24), "quick": (1 << 24, 1 << 22), "cpu": (1 << 14, 1 << 12)}
# Seconds of timing per case (after the warm-up), per mode.
BUDGETS = {"full": 0.6, "quick": 0.25, "cpu": 0.05}
# Seconds for all cases, per mode: the cases left when it has passed are listed, not timed (a
# kernel far slower than expected must not take the whole run).
DEADLINES = {"full": 100.0, "quick": 50.0, "cpu": 120.0}
# Cases timed at a size of their own: the target assignment's rival is a Python loop of
# TensorFlow ops per box (a host round trip each), so its batch stays small (2 images).
CASE_SIZES = {"yolo_targets": 800}
MIN_SAMPLE_SECONDS = 5e-3

Row = Dict[str, object]


# --- the machine ---------------------------------------------------------------------------------


def _nvidia_smi() -> Dict[str, str]:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return {}
    fields = ("name", "driver_version", "memory.total", "clocks.max.sm", "clocks.max.memory")
    try:
        out = subprocess.run([smi, f"--query-gpu={','.join(fields)}", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError):
        return {}
    if not out:
        return {}
    return dict(zip(fields, (v.strip() for v in out[0].split(","))))


def _driver_cuda_version() -> str:
    """The CUDA version of the driver (cuDriverGetVersion of libcuda), or 'none'."""
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
        version = ctypes.c_int(0)
        if libcuda.cuDriverGetVersion(ctypes.byref(version)) != 0:
            return "none"
        return f"{version.value // 1000}.{version.value % 1000 // 10}"
    except OSError:
        return "none"


def machine_info(device: str) -> Dict[str, object]:
    """What the figures hold for: the GPU, the driver, the CUDA TensorFlow and opforge were built
    with, what opforge's loaded module runs on, and the CPU."""
    import tensorflow as tf

    from opforge._machine import machine as cpu_machine

    info: Dict[str, object] = {"device": device, "tensorflow": tf.__version__, "cpu": cpu_machine()}
    build = tf.sysconfig.get_build_info()
    info["tensorflow_cuda"] = build.get("cuda_version") or "none (not a CUDA build)"
    info["tensorflow_cudnn"] = build.get("cudnn_version") or "none"
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        details = tf.config.experimental.get_device_details(gpus[0])
        info["gpu"] = details.get("device_name", "?")
        capability = details.get("compute_capability")
        info["compute_capability"] = ".".join(str(c) for c in capability) if capability else "?"
    smi = _nvidia_smi()
    if smi:
        info["nvidia_smi"] = smi
    info["driver_cuda"] = _driver_cuda_version()
    try:
        from opforge import _build_info as b

        info["opforge_nvcc"] = b.CUDA_VERSION or "none"
        info["opforge_cuda_archs"] = b.CUDA_ARCHS or "none"
        info["opforge_gpu_binding"] = bool(b.GPU_BINDING)
    except ImportError:
        info["opforge_build_info"] = "missing"
    try:  # what the loaded module itself reports (its CUDA runtime, the code compiled in)
        from opforge.tools import cuda_info
        from opforge._loader import library_path, load_library

        load_library()
        info["opforge_cuda"] = cuda_info.describe(library_path())
    except Exception as exc:  # noqa: BLE001 (an older build without it: say so, go on)
        info["opforge_cuda"] = [f"not available: {type(exc).__name__}: {exc}"]
    return info


def format_info(info: Dict[str, object]) -> str:
    lines = [f"device: {info['device']}"]
    if "gpu" in info:
        smi = info.get("nvidia_smi", {})
        lines.append(f"GPU: {info['gpu']}, compute capability {info['compute_capability']}"
                     + (f", {smi['memory.total']}, max clocks SM {smi['clocks.max.sm']}, memory "
                        f"{smi['clocks.max.memory']}" if smi else ""))
        lines.append(f"driver: {smi.get('driver_version', '?') if smi else '?'} (CUDA {info['driver_cuda']})")
    lines.append(f"TensorFlow {info['tensorflow']}: CUDA {info['tensorflow_cuda']}, cuDNN {info['tensorflow_cudnn']}")
    if "opforge_nvcc" in info:
        lines.append(f"opforge: nvcc {info['opforge_nvcc']} for {info['opforge_cuda_archs']}, "
                     f"GPU binding {'yes' if info['opforge_gpu_binding'] else 'no'}")
    lines += [f"  {line.strip()}" for line in info.get("opforge_cuda", [])]
    lines.append(f"CPU: {info['cpu']}")
    return "\n".join(lines)


# --- timing ----------------------------------------------------------------------------------------


def _sync_function(device: str) -> Callable[[], None]:
    """Waits until the device has finished what was launched."""
    import tensorflow as tf

    sync = getattr(getattr(tf.test, "experimental", None), "sync_devices", None)
    if sync is not None:
        return sync

    def fallback() -> None:  # ops on one stream run in order: a tiny result waits for the rest
        with tf.device(device):
            tf.reduce_sum(tf.zeros([1])).numpy()

    return fallback


def time_candidates(candidates: Dict[str, Callable[[], object]], sync: Callable[[], None], budget: float,
                    min_rounds: int = 5, max_rounds: int = 30) -> Tuple[Dict[str, float], Dict[str, int], int]:
    """(median seconds per call, calls per sample, rounds) of each candidate, interleaved.

    One warm-up call each (it may trace, autotune or allocate), one timed call each (how many
    calls make a sample of MIN_SAMPLE_SECONDS), then rounds until `budget` seconds are spent,
    at least `min_rounds` (3 where one round alone would overrun the budget), at most
    `max_rounds`."""
    for fn in candidates.values():
        fn()
        sync()
    single = {}
    for name, fn in candidates.items():
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        single[name] = max(time.perf_counter() - t0, 1e-7)
    calls = {name: max(1, min(200, math.ceil(MIN_SAMPLE_SECONDS / s))) for name, s in single.items()}
    per_round = sum(calls[n] * single[n] for n in candidates)
    if per_round > budget:  # slow calls: a few rounds, one if a round is far over the budget
        min_rounds = 3 if per_round < 4 * budget else 1
    rounds = max(min_rounds, min(max_rounds, int(budget / per_round)))
    samples: Dict[str, List[float]] = {name: [] for name in candidates}
    names = list(candidates)
    for r in range(rounds):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            fn, n = candidates[name], calls[name]
            sync()
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            sync()
            samples[name].append((time.perf_counter() - t0) / n)
    return {name: statistics.median(v) for name, v in samples.items()}, calls, rounds


# --- the cases -------------------------------------------------------------------------------------


def _copy_candidate(nbytes: int, device: str) -> Tuple[str, Callable[[], object]]:
    """A device copy of `nbytes` bytes (read once, written once), as a (label, call).

    tf.identity copies nothing (the output is the input's buffer), and so does tf.concat of one
    tensor; tf.raw_ops.DeepCopy always allocates its output and copies every element with a
    device kernel (inplace_ops: an Eigen element-wise assignment, like an element-wise op's),
    and has GPU kernels for float32. Where it has none, Snapshot (a cudaMemcpy between device
    buffers: the input is held here, so it cannot be forwarded), else x * 1 (an element-wise
    kernel reading and writing the same bytes).
    """
    import tensorflow as tf
    from tensorflow.python.framework import kernels

    kind = tf.DeviceSpec.from_string(device).device_type
    n = max(1, nbytes // 4)
    with tf.device(device):
        x = tf.random.normal([n])
    for op in ("DeepCopy", "Snapshot"):
        for k in kernels.get_registered_kernels_for_op(op).kernel:
            types = [t for c in k.constraint for t in c.allowed_values.list.type]
            if k.device_type == kind and tf.float32.as_datatype_enum in types:
                if op == "DeepCopy":
                    return op, lambda: tf.raw_ops.DeepCopy(x=x)
                return op, lambda: tf.raw_ops.Snapshot(input=x)
    return "x * 1", lambda: x * 1.0


def _first_tensor(result):
    import tensorflow as tf

    for t in tf.nest.flatten(result):
        if isinstance(t, tf.Tensor):
            return t
    return None


def _sixteen_bit_runs(n: int, dtype):
    """The element-wise kernels in a 16-bit dtype: (op, label, candidates, bytes moved)."""
    import tensorflow as tf

    from opforge import ops
    from opforge.ops._common import lib

    x = tf.cast(tf.random.normal([n], seed=1) * 3, dtype)
    g = tf.cast(tf.random.normal([n], seed=2), dtype)
    size = dtype.size
    alpha = 0.2

    def tf_swish_grad():
        s = tf.sigmoid(x)
        return g * (s * (1.0 + x * (1.0 - s)))

    return [
        ("leaky_relu", "forward", {"opforge": lambda: ops.leaky_relu(x, alpha),
                                   "tf": lambda: tf.nn.leaky_relu(x, alpha)}, 2 * size * n),
        ("leaky_relu", "gradient", {"opforge": lambda: lib().opforge_leaky_relu_grad(g, x, alpha=alpha),
                                    "tf": lambda: tf.raw_ops.LeakyReluGrad(gradients=g, features=x, alpha=alpha)},
         3 * size * n),
        ("clipped_identity", "forward", {"opforge": lambda: ops.clipped_identity(x, -1.0, 1.0, 0.01),
                                         "tf": lambda: tf.clip_by_value(x, -1.0, 1.0)}, 2 * size * n),
        ("clipped_identity", "gradient", {
            "opforge": lambda: lib().opforge_clipped_identity_grad(g, x, clip_min=-1.0, clip_max=1.0, leak=0.01),
            "tf": lambda: tf.where(tf.logical_or(x < -1.0, x > 1.0), g * 0.01, g)}, 3 * size * n),
        ("swish", "forward", {"opforge": lambda: ops.swish(x), "tf": lambda: tf.nn.silu(x)}, 2 * size * n),
        ("swish", "gradient", {"opforge": lambda: lib().opforge_swish_grad(g, x), "tf": tf_swish_grad}, 3 * size * n),
        ("element_mul", "forward same shape", {"opforge": lambda: ops.element_mul(x, g),
                                               "tf": lambda: tf.multiply(x, g)}, 3 * size * n),
    ]


def _row(op: str, label: str, run_candidates: Dict[str, Callable[[], object]], bytes_moved: Optional[int],
         device: str, sync, budget: float) -> Row:
    import tensorflow as tf

    candidates = {name: fn for name, fn in run_candidates.items() if name in ("opforge", "tf")}
    copy_op = None
    if bytes_moved:
        copy_op, candidates["copy"] = _copy_candidate(bytes_moved // 2, device)
    with tf.device(device):
        out = _first_tensor(candidates["opforge"]())
    placed = tf.DeviceSpec.from_string(out.device) if out is not None else None
    want = tf.DeviceSpec.from_string(device)
    on_device = placed is not None and placed.device_type == want.device_type

    def scoped(fn):
        def call():
            with tf.device(device):
                return fn()
        return call

    medians, calls, rounds = time_candidates({n: scoped(f) for n, f in candidates.items()}, sync, budget)
    row: Row = {"op": op, "case": label, "dtype": out.dtype.name if out is not None else "?",
                "shape": list(out.shape) if out is not None else None, "on_device": on_device,
                "opforge_device": out.device if out is not None else None, "rounds": rounds}
    for name, seconds in medians.items():
        row[f"{name}_ms"] = seconds * 1e3
        row[f"{name}_calls_per_sample"] = calls[name]
        if bytes_moved:
            row[f"{name}_GBps"] = bytes_moved / seconds / 1e9
    if "tf_ms" in row:
        row["ratio_vs_tf"] = row["tf_ms"] / row["opforge_ms"]
    if copy_op:
        row["copy_op"] = copy_op
        row["bytes_moved"] = bytes_moved
        row["fraction_of_copy"] = row["copy_ms"] / row["opforge_ms"]
    return row


def _failed(op: str, case: str, exc: Exception) -> Row:
    """The row of a case that raised (an op error on the device, say): reported, not timed."""
    message = getattr(exc, "message", None) or str(exc)
    return {"op": op, "case": case, "dtype": "-", "error": f"{type(exc).__name__}: {message.splitlines()[0][:300]}",
            "skipped": f"FAILED: {type(exc).__name__}: {message.splitlines()[0][:120]}"}


def format_rows(rows: List[Row]) -> str:
    header = (f"{'op':<28}{'case':<62}{'dtype':<9}{'opforge ms':>11}{'TF ms':>10}{'ratio':>7}"
              f"{'GB/s op':>9}{'GB/s TF':>9}{'GB/s copy':>10}")
    lines = [header, "-" * len(header)]
    for r in rows:
        case = str(r["case"])
        case = case if len(case) <= 60 else case[:57] + "..."

        def num(key, fmt):
            width = int(fmt.split(".")[0])
            return format(r[key], fmt) if key in r else f"{'-':>{width}}"

        line = (f"{str(r['op']):<28}{case:<62}{str(r['dtype']):<9}{num('opforge_ms', '11.3f')}"
                f"{num('tf_ms', '10.3f')}{num('ratio_vs_tf', '7.2f')}{num('opforge_GBps', '9.0f')}"
                f"{num('tf_GBps', '9.0f')}{num('copy_GBps', '10.0f')}")
        if r.get("skipped"):
            line = f"{str(r['op']):<28}{case:<62}not timed: {r['skipped']}"
        elif not r.get("on_device", True):
            line += f"  (NOT on the device: {r['opforge_device']})"
        lines.append(line)
    lines.append("ratio = TF ms / opforge ms (> 1: opforge faster); GB/s = bytes an op call reads and writes / "
                 "median time; copy = the same bytes copied on the device")
    return "\n".join(lines)


def run(ops: List[str], device_kind: str, quick: bool, json_path: Optional[str], budget: Optional[float],
        max_seconds: Optional[float] = None) -> int:
    import tensorflow as tf

    from opforge import ops as opforge_ops

    if device_kind == "GPU" and not tf.config.list_physical_devices("GPU"):
        print(f"opforge bench gpu: TensorFlow sees no GPU (TensorFlow {tf.__version__}, CUDA build: "
              f"{tf.test.is_built_with_cuda()}); `--device CPU` runs the benchmark's code on the CPU",
              file=sys.stderr)
        return 1
    known = {s.name for s in opforge_ops.SPECS} | {s.group for s in opforge_ops.SPECS}
    unknown = [op for op in ops if op not in known]
    if unknown:
        print(f"opforge bench gpu: unknown op(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}",
              file=sys.stderr)
        return 2
    from opforge._loader import load_library

    load_library()  # a library that cannot load ends the run here, with the loader's reason
    device = f"/{device_kind}:0"
    mode = "cpu" if device_kind == "CPU" else "quick" if quick else "full"
    elementwise_size, model_size = SIZES[mode]
    budget = BUDGETS[mode] if budget is None else budget
    max_seconds = DEADLINES[mode] if max_seconds is None else max_seconds
    info = machine_info(device)
    print(format_info(info), flush=True)
    sync = _sync_function(device)
    rows: List[Row] = []
    started = time.perf_counter()

    def out_of_time() -> bool:
        return time.perf_counter() - started > max_seconds

    modules = {m.__name__.rsplit(".", 1)[-1]: m for m in opforge_ops.MODULES}
    for spec in opforge_ops.SPECS:
        gpu_ops = set(modules[spec.group].OP_NAMES) - set(opforge_ops.CPU_ONLY)
        if not gpu_ops or (ops and spec.name not in ops and spec.group not in ops):
            continue
        for speed in (spec.speed[:1] if quick else spec.speed):
            # Memory-bound cases (those that say how many bytes they move) over
            # `elementwise_size` elements, the others with their batch scaled to `model_size`.
            size = CASE_SIZES.get(spec.name, model_size)
            if out_of_time():
                rows.append({"op": spec.name, "case": f"speed case {spec.speed.index(speed)}", "dtype": "-",
                             "skipped": f"past --max-seconds {max_seconds:.0f}"})
                continue
            try:
                with tf.device(device):
                    probe = speed.setup(size, tf.float32)
                    if probe is not None and probe.bytes_moved:
                        probe = speed.setup(elementwise_size, tf.float32)
                if probe is None or "tf" not in probe.candidates:
                    continue
                rows.append(_row(spec.name, probe.label, probe.candidates, probe.bytes_moved, device, sync, budget))
            except Exception as exc:  # noqa: BLE001 (a failing case is reported; the others still run)
                rows.append(_failed(spec.name, f"speed case {spec.speed.index(speed)}", exc))
            print(format_rows(rows[-1:]).splitlines()[2], flush=True)
            probe = None
    wanted = {"leaky_relu", "clipped_identity", "swish", "element_mul"}
    if ops:
        wanted &= set(ops)
    for dtype in (tf.float16, tf.bfloat16):
        if quick and dtype == tf.bfloat16:
            continue
        try:
            with tf.device(device):
                runs = _sixteen_bit_runs(elementwise_size, dtype)
        except Exception as exc:  # noqa: BLE001
            rows.append(_failed("16-bit inputs", dtype.name, exc))
            continue
        for op, what, candidates, moved in runs:
            if op not in wanted:
                continue
            if out_of_time():
                rows.append({"op": op, "case": f"{what} {dtype.name}", "dtype": dtype.name,
                             "skipped": f"past --max-seconds {max_seconds:.0f}"})
                continue
            try:
                rows.append(_row(op, f"{what} {dtype.name} [{elementwise_size}]", candidates, moved, device, sync,
                                 budget))
            except Exception as exc:  # noqa: BLE001
                rows.append(_failed(op, f"{what} {dtype.name}", exc))
            print(format_rows(rows[-1:]).splitlines()[2], flush=True)
        del runs
    seconds = time.perf_counter() - started
    print()
    print(format_rows(rows))
    print(f"{len(rows)} cases in {seconds:.0f} s")
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"machine": info, "mode": mode, "budget_per_case_s": budget, "seconds": seconds,
                       "rows": rows}, f, indent=2, default=str)
        print(f"wrote {json_path}")
    missing = [r for r in rows if not r.get("on_device", True)]
    failed = [r for r in rows if r.get("error")]
    if missing:
        print(f"opforge bench gpu: {len(missing)} case(s) did not run on {device}", file=sys.stderr)
    if failed:
        print(f"opforge bench gpu: {len(failed)} case(s) failed: " + "; ".join(
            f"{r['op']} {r['case']}: {r['error']}" for r in failed), file=sys.stderr)
    return 1 if missing or failed else 0


def main(argv: Optional[List[str]] = None) -> int:
    """`opforge bench gpu [--device GPU|CPU] [--quick] [--json PATH] [--budget S] [OP ...]`."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    parser = argparse.ArgumentParser(
        prog="opforge bench gpu",
        description="opforge's GPU kernels against TensorFlow's GPU kernels of the same computation, and "
                    "element-wise ops against a device copy of the same bytes; interleaved, synchronised, medians.")
    parser.add_argument("ops", nargs="*", help="spec or op-module names (default: every op with a GPU kernel)")
    parser.add_argument("--device", choices=("GPU", "CPU"), default="GPU",
                        help="CPU: a dry run of the same code at tiny sizes, on a machine without a GPU")
    parser.add_argument("--quick", action="store_true", help="smaller sizes, one case per op, float16 only")
    parser.add_argument("--json", metavar="PATH", default=None, help="also write the machine and rows as JSON")
    parser.add_argument("--budget", type=float, default=None,
                        help="seconds of timing per case after the warm-up (default 0.6; --quick 0.25)")
    parser.add_argument("--max-seconds", type=float, default=None,
                        help="cases left after this many seconds are listed, not timed (default 100; --quick 50)")
    args = parser.parse_args(argv)
    from opforge._loader import LoadError

    try:
        return run(args.ops, args.device, args.quick, args.json, args.budget, args.max_seconds)
    except LoadError as exc:
        print(f"opforge bench gpu: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

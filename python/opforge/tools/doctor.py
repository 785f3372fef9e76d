"""`opforge doctor`: what opforge was built with, what is running, and what is registered."""
from __future__ import annotations

import shutil
import subprocess
from typing import List, Optional


def _nvcc_version() -> str:
    nvcc = shutil.which("nvcc")
    if not nvcc:
        return "not found"
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=20).stdout
        return out.strip().splitlines()[-1] if out.strip() else nvcc
    except (OSError, subprocess.SubprocessError):
        return nvcc


def tensorflow_package() -> str:
    """The distribution that installed the running `tensorflow`, as pip names it (tensorflow,
    tensorflow-cpu, ...), or "" when that cannot be told. Where several share the folder, a
    variant (tensorflow-cpu) rather than plain tensorflow: the doctor names it for lacking CUDA."""
    import re
    from importlib import metadata

    try:
        names = metadata.packages_distributions().get("tensorflow", [])
    except Exception:  # a broken distribution's metadata: say nothing rather than fail
        return ""
    names = sorted({re.sub(r"[-_.]+", "-", n).lower() for n in names}, key=lambda n: (n == "tensorflow", n))
    return names[0] if names else ""


def cuda_kernels(build_info, running_tf: str, package: Optional[str] = None, nvcc: Optional[str] = None) -> str:
    """The doctor's `CUDA kernels:` line: what the build compiled, or the reason it compiled none.
    The build (CMakeLists.txt, OPFORGE_CUDA=AUTO) compiles them only when the TensorFlow it is
    built against is a CUDA build and nvcc is found; `build_info` records the first fact and the
    nvcc used, and nvcc on PATH now (`nvcc`, default shutil.which) tells the rest."""
    b = build_info
    if b.CUDA_VERSION:
        return f"compiled with nvcc {b.CUDA_VERSION} for {b.CUDA_ARCHS}, static CUDA runtime"
    if not b.TF_IS_CUDA_BUILD:
        if package is None:
            package = tensorflow_package() if running_tf == b.TF_VERSION else ""
        which = f"{package} {b.TF_VERSION}" if package else b.TF_VERSION
        return (f"not compiled: TensorFlow {which} is built without CUDA (the GPU binding needs the CUDA wheel: "
                "make build TF_PACKAGE=tensorflow)")
    nvcc = shutil.which("nvcc") if nvcc is None else nvcc
    if nvcc:
        return (f"not compiled: no nvcc at build time, or the build was configured with -DOPFORGE_CUDA=OFF "
                f"(nvcc is on PATH now, {nvcc}: rebuild to compile them)")
    return "not compiled (no nvcc at build time)"


def registered_kernels(op_name: str) -> List[str]:
    """'DEVICE: dtype, dtype, ...' for each device the op has kernels on."""
    from tensorflow.python.framework import kernels
    from tensorflow.python.framework import dtypes

    by_device = {}
    for kernel in kernels.get_registered_kernels_for_op(op_name).kernel:
        types = []
        for constraint in kernel.constraint:
            if constraint.name == "T":
                types = [dtypes.as_dtype(t).name for t in constraint.allowed_values.list.type]
        by_device.setdefault(kernel.device_type, []).extend(types)
    return [f"{device}: {', '.join(types)}" for device, types in sorted(by_device.items())]


def run() -> int:
    import tensorflow as tf

    from opforge import __version__
    from opforge._loader import SUPPORTED_TF, LoadError, library_path, load_library, tf_supported

    print(f"opforge {__version__}")
    print(f"  library:              {library_path()}")
    print(f"  TensorFlow running:   {tf.__version__} ({tf.__file__.rsplit('/', 1)[0]})")
    print(f"  TensorFlow supported: {SUPPORTED_TF[0]} to {SUPPORTED_TF[1]} (each built and tested by "
          "`make compat-check`)")
    if not tf_supported(tf.__version__):
        print(f"  WARNING: TensorFlow {tf.__version__} is outside the supported range; the build may "
              "fail or the ops misbehave")
    running_flags = tf.sysconfig.get_compile_flags()
    try:
        from opforge import _build_info as b

        print(f"  TensorFlow built for: {b.TF_VERSION}")
        print(f"  C++ compiler:         {b.CXX_COMPILER}, C++{b.CXX_STANDARD}, {b.BUILD_TYPE}")
        print(f"  _GLIBCXX_USE_CXX11_ABI: {b.CXX11_ABI}")
        print(f"  compile flags:        {' '.join(b.TF_COMPILE_FLAGS)}")
        print(f"  link flags:           {' '.join(b.TF_LINK_FLAGS)}")
        print(f"  CUDA kernels:         {cuda_kernels(b, tf.__version__)}")
        if b.GPU_BINDING:
            binding = "yes (GPU kernels registered with TensorFlow)"
        elif not b.TF_IS_CUDA_BUILD:
            binding = "no (the TensorFlow built against is not a CUDA build)"
        else:
            binding = "no (no nvcc at build time)"
        print(f"  GPU binding:          {binding}")
        print(f"  XLA lowerings:        {'yes (jit_compile=True)' if b.XLA else 'no: ' + b.XLA_WHY_NOT}")
        for line in runtime_lines(library_path().parent, b):
            print(line)
        if b.TF_COMPILE_FLAGS != running_flags:
            print(f"  WARNING: running TensorFlow's compile flags differ: {' '.join(running_flags)}")
    except ImportError:
        print("  build info:           missing (library not built)")
        for line in runtime_lines(library_path().parent, None):
            print(line)
    build = tf.sysconfig.get_build_info()
    gpus = tf.config.list_physical_devices("GPU")
    print(f"  TensorFlow CUDA build: {build.get('is_cuda_build')}"
          + (f" (CUDA {build.get('cuda_version')})" if build.get("is_cuda_build") else ""))
    print(f"  GPUs visible:         {len(gpus)}")
    print(f"  nvcc on PATH:         {_nvcc_version()}")
    try:
        load_library()
    except LoadError as exc:
        print(f"\nopforge doctor: the library cannot be loaded:\n{exc}")
        return 1
    from opforge.tools import cuda_info
    from opforge.ops import CPU_ONLY, OP_NAMES, _xla

    for line in cuda_info.describe(library_path()):
        print(f"  {line}")
    from opforge._loader import onednn_status

    print(f"  oneDNN convolutions:  {onednn_status()}")

    lowered = sorted(_xla.lowered_ops())
    if lowered:
        ffi = len(_xla.ffi_ops())
        xla = (f"{len(lowered)} ops run under XLA (jit_compile=True): {len(lowered) - ffi} as HLO "
               f"lowerings, {ffi} as FFI custom calls (each op's path below)")
        if len(lowered) < len(OP_NAMES) and not ffi:
            xla += ("; this TensorFlow's wheel lacks XLA's FFI, so the ops without an HLO lowering "
                    "have no XLA kernel")
        if _xla.registered_late():
            xla += " (registered by opforge: loaded after TensorFlow's first XLA compilation)"
    else:
        xla = ("none (built without TensorFlow's XLA library libtensorflow_cc or its headers; "
               "jit_compile=True is not available for opforge ops)")
    print(f"  XLA kernels:          {xla}")

    print("\nregistered kernels:")
    missing = False
    width = max(len(name) for name in OP_NAMES) + 2
    for name in OP_NAMES:
        entries = registered_kernels(name)
        missing |= not entries
        note = " (CPU only, by design: no GPU kernel)" if name in CPU_ONLY else ""
        print(f"  {name:<{width}}" + ("; ".join(entries) if entries else "NO KERNELS") + note
              + f"; XLA: {_xla.xla_path(name)}")
    return 1 if missing else 0


def runtime_lines(folder, build_info) -> list:
    """The doctor's lines on the other runtimes' adapters: which were built, where they are, what
    runs them, and why one was not built (the build's reason)."""
    lines = []
    ort = folder / "libopforge_ort.so"
    lite = folder / "libopforge_lite.so"
    if ort.is_file():
        api = getattr(build_info, "ORT_API_VERSION", "")
        needs = f", needs ONNX Runtime >= 1.{api}" if api else ""
        lines.append(f"  ONNX Runtime adapter: {ort} (opforge.onnx.session{needs})")
    else:
        why = getattr(build_info, "ORT_WHY_NOT", "") or "not found"
        lines.append(f"  ONNX Runtime adapter: not built: {why} (models with opforge ONNX nodes need it; "
                     "standard-op exports run without it)")
    if lite.is_file():
        lines.append(f"  LiteRT delegate:      {lite} (opforge.lite.interpreter)")
    else:
        why = getattr(build_info, "LITE_WHY_NOT", "") or "not found"
        lines.append(f"  LiteRT delegate:      not built: {why}")
    ffi = folder / "libopforge_ffi.so"
    if ffi.is_file():
        lines.append(f"  XLA FFI handlers:     {ffi} (any XLA host; OpforgeFfiTargets lists them)")
    else:
        why = getattr(build_info, "FFI_WHY_NOT", "") or "not found"
        lines.append(f"  XLA FFI handlers:     not built: {why}")
    try:
        import onnxruntime

        lines.append(f"  onnxruntime:          {onnxruntime.__version__}")
    except ImportError:
        lines.append("  onnxruntime:          not installed (pip install 'opforge[onnx]')")
    lines += backend_lines(ffi.is_file())
    return lines


def backend_lines(ffi_built: bool) -> list:
    """The doctor's lines on the frameworks beside TensorFlow: JAX (opforge.jax, over the FFI
    handlers), and which Keras runs."""
    import importlib.util

    lines = []
    if importlib.util.find_spec("jax") is None:
        lines.append("  JAX:                  not installed (pip install 'opforge[jax]' for opforge.jax)")
    else:
        import jax

        if not ffi_built:
            lines.append(f"  JAX:                  {jax.__version__}, but opforge.jax needs the XLA FFI handlers (above)")
        else:
            try:
                import opforge.jax as ofj

                lines.append(f"  JAX:                  {jax.__version__} (opforge.jax: {len(ofj.targets())} "
                             f"FFI targets on {', '.join(sorted({d.platform for d in jax.devices()}))})")
            except Exception as exc:  # noqa: BLE001 - the doctor reports, never raises
                lines.append(f"  JAX:                  {jax.__version__}, opforge.jax failed to load: {exc}")
    try:
        import keras

        backend = keras.backend.backend()
        lines.append(f"  Keras:                {keras.__version__}, backend {backend} (KERAS_BACKEND)")
    except Exception as exc:  # noqa: BLE001
        lines.append(f"  Keras:                cannot be imported ({exc})")
    return lines

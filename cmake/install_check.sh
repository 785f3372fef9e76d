#!/usr/bin/env bash
# `make install-check`: the README's two ways to install, as written, each in a fresh virtual
# environment with TensorFlow:
#  1. the binary wheel ($WHEEL, from `make wheel`), installed and used with no compiler, CMake or
#     Ninja on PATH: import, ops and gradients, a layer's .keras round trip, `opforge doctor`;
#  2. from source, on a clean copy of the committed tree: the build writes nothing into the
#     source tree, a CPU TensorFlow compiles no CUDA, the installed package works from another
#     directory; prints the build time.
set -euo pipefail
PYTHON=${PYTHON:-python3}
TF_SPEC=${TF_SPEC:?TF_SPEC, e.g. tensorflow-cpu==2.21.0}
ROOT=$(git rev-parse --show-toplevel)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# --- 1. the wheel, with no build tools --------------------------------------------------------
WHEEL=${WHEEL:?WHEEL, the wheel make wheel built}
WHEEL=$(cd "$(dirname "$WHEEL")" && pwd)/$(basename "$WHEEL")
NO_BUILD_TOOLS=gcc,g++,cc,c++,cpp,clang,clang++,gcc-12,g++-12,x86_64-linux-gnu-gcc,x86_64-linux-gnu-g++,x86_64-linux-gnu-gcc-12,x86_64-linux-gnu-g++-12,nvcc,cmake,ninja,make
"$PYTHON" -m venv "$work/wheel-venv"
"$work/wheel-venv/bin/pip" install -q --disable-pip-version-check "$TF_SPEC"
mkdir "$work/elsewhere"
(
  cd "$work/elsewhere"
  # The extra `cpu` names the release the wheel was built for: already satisfied here.
  "$ROOT/.ci/without-tools" "$NO_BUILD_TOOLS" \
    "$work/wheel-venv/bin/pip" install -q --disable-pip-version-check "${WHEEL}[cpu]"
  "$ROOT/.ci/without-tools" "$NO_BUILD_TOOLS" "$work/wheel-venv/bin/python" - <<'PY'
import importlib.metadata as md, os, subprocess, sys, tempfile
import numpy as np, tensorflow as tf, keras, opforge
from opforge import _build_info
version = md.version("opforge")
tf_minor = ".".join(tf.__version__.split(".")[:2])
assert version.endswith(f"+tf{tf_minor}"), (version, tf.__version__)
assert any(r.startswith(f"tensorflow-cpu=={tf_minor}.*") for r in md.requires("opforge")), md.requires("opforge")
assert opforge.library_path().is_file() and "site-packages" in str(opforge.library_path())
x = tf.constant([-1.0, 2.0])
with tf.GradientTape() as tape:
    tape.watch(x)
    y = opforge.ops.leaky_relu(x, alpha=0.5)
assert y.numpy().tolist() == [-0.5, 2.0] and tape.gradient(y, x).numpy().tolist() == [0.5, 1.0]
model = keras.Sequential([keras.Input((3,)), opforge.layers.LeakyReLU(negative_slope=0.3)])
path = os.path.join(tempfile.mkdtemp(), "m.keras")
model.save(path)
loaded = keras.models.load_model(path)
v = np.array([[-1.0, 0.0, 2.0]], np.float32)
assert np.array_equal(loaded(v).numpy(), model(v).numpy())
doctor = subprocess.run([os.path.join(os.path.dirname(sys.executable), "opforge"), "doctor"],
                        capture_output=True, text=True, timeout=300)
assert doctor.returncode == 0, doctor.stdout + doctor.stderr
print(f"install-check: wheel opforge {version} works with no compiler: ops, gradients, .keras, doctor")
PY
)
# --- 2. from source ------------------------------------------------------------------------------
git clone -q "$ROOT" "$work/src"
"$PYTHON" -m venv "$work/venv"
source "$work/venv/bin/activate"
pip install -q --disable-pip-version-check "$TF_SPEC"
cd "$work/src"
# --- the README's commands, verbatim ---
pip install "scikit-build-core>=0.10" "cmake>=3.22" ninja
start=$(date +%s)
pip install --no-build-isolation . 2>&1 | tee "$work/build.log" | tail -3
echo "install-check: opforge built and installed in $(( $(date +%s) - start )) s"
# ---
# (Python's bytecode cache of the build backend shim aside: that is the interpreter, not the build.)
written=$(git status --porcelain --ignored | grep -v __pycache__ || true)
if [ -n "$written" ]; then
  echo "install-check: the build wrote into the source tree:"; echo "$written"; exit 1
fi
cd "$work"
python - <<'PY'
import sys, numpy as np, tensorflow as tf, opforge
from opforge import _build_info
y = opforge.ops.leaky_relu(tf.constant([-1.0, 2.0]), alpha=0.5).numpy().tolist()
assert y == [-0.5, 2.0], y
print("install-check: import and an op call work; CUDA compiled in:", _build_info.CUDA_VERSION or "no",
      "| TensorFlow CUDA build:", tf.test.is_built_with_cuda())
if not tf.test.is_built_with_cuda() and _build_info.CUDA_VERSION:
    sys.exit("install-check: a CPU TensorFlow build compiled the CUDA kernels")
PY

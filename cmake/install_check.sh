#!/usr/bin/env bash
# `make install-check`: the README's "into an environment of your own" commands, as written, in a
# fresh virtual environment on a clean copy of the committed source. Checks that the build
# writes nothing into the source tree, that a CPU TensorFlow compiles no CUDA, and that the
# installed package works from another directory; prints the build time.
set -euo pipefail
PYTHON=${PYTHON:-python3}
TF_SPEC=${TF_SPEC:?TF_SPEC, e.g. tensorflow-cpu==2.21.0}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git clone -q "$(git rev-parse --show-toplevel)" "$work/src"
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

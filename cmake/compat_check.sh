#!/usr/bin/env bash
# `make compat-check TF_VERSIONS="2.16.2 2.21.0"`: for each TensorFlow version, a fresh virtual
# environment with that tensorflow-cpu and the test tools, opforge built against it from this
# source tree (an incremental build directory per version, build/compat/<version>/build), then
# the compat subset of the tests (`pytest -m compat`: every op spec's forward and gradient case,
# the ops' and layers' .keras and SavedModel round trips, the XLA glue and every FFI custom call,
# a YOLO-tiny training step; tests/conftest.py names it). Prints a table; exits non-zero if any
# version failed.
# librosa (the audio ops' reference) is the newest that this TensorFlow's NumPy allows: librosa 1.0
# needs NumPy >= 2.1, which TensorFlow 2.17 and 2.18 do not take.
#
# A version written as X.Y.Z+tf-keras runs the same TensorFlow with tf-keras installed and
# TF_USE_LEGACY_KERAS=1 (Keras 2): there the ops' tests, the Keras-version checks and the layers'
# tf-keras tests run (every layer built, trained, saved and loaded: tests/test_keras_backends.py).
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
TF_VERSIONS=${TF_VERSIONS:?TF_VERSIONS, e.g. "2.16.2 2.17.1 2.18.1 2.19.1 2.20.0 2.21.0"}
PYTEST_ARGS=${PYTEST_ARGS:-}
OUT=build/compat
mkdir -p "$OUT"
table="$OUT/table.md"
{
  echo "| TensorFlow | Keras | Python | NumPy | librosa | build | XLA lowerings | compat tests | time |"
  echo "|---|---|---|---|---|---|---|---|---|"
} > "$table"
failed=0
for spec in $TF_VERSIONS; do
  version=${spec%%+*}
  legacy=""
  [ "$spec" != "$version" ] && legacy=${spec#*+}
  dir="$OUT/$spec"
  mkdir -p "$dir"
  start=$(date +%s)
  log="$dir/log.txt"
  : > "$log"
  echo "== TensorFlow $spec: fresh venv in $dir/venv (log: $log)"
  rm -rf "$dir/venv"
  build="failed"; xla="-"; tests="not run"; keras="-"; pyver="-"; numpy="-"; librosa="-"
  if "$PYTHON" -m venv "$dir/venv" >> "$log" 2>&1 &&
     { grep -v '^librosa\|^jax' requirements-test.txt; echo librosa; } > "$dir/requirements.txt" &&
     "$dir/venv/bin/python" -m pip install -q --disable-pip-version-check "tensorflow-cpu==$version" \
       -r "$dir/requirements.txt" >> "$log" 2>&1 &&
     { [ -z "$legacy" ] || "$dir/venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps \
         "tf-keras~=${version%.*}.0" >> "$log" 2>&1; }; then
    # JAX where this TensorFlow's NumPy allows it (resolved together, so that neither is broken);
    # without it the JAX tests skip.
    "$dir/venv/bin/python" -m pip install -q --disable-pip-version-check "tensorflow-cpu==$version" \
      "$(grep '^jax' requirements-test.txt)" >> "$log" 2>&1 || echo "   (no JAX for TensorFlow $version)"
    py="$dir/venv/bin/python"
    pyver=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    numpy=$("$py" -c 'import numpy; print(numpy.__version__)')
    librosa=$("$py" -m pip show librosa 2>/dev/null | sed -n 's/^Version: //p')
    if "$py" -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps \
         --config-settings=build-dir="$dir/build" . >> "$log" 2>&1; then
      build="ok"
      xla=$("$py" -c "from opforge import _build_info as b; print('yes' if b.XLA else 'no')" 2>/dev/null || echo "?")
      if [ -n "$legacy" ]; then
        export TF_USE_LEGACY_KERAS=1
        keras=$("$py" -c "import tf_keras; print('tf-keras', tf_keras.__version__)" 2>>"$log")
        selection=(tests/test_specs.py tests/test_keras_versions.py tests/test_keras_backends.py
                   -k "forward_matches_reference or gradient_matches or savedmodel_round_trip or legacy or tf_keras")
      else
        unset TF_USE_LEGACY_KERAS
        keras=$("$py" -c "import keras; print(keras.__version__)" 2>>"$log")
        selection=(tests -m compat)
      fi
      "$py" -m pytest -q -p no:cacheprovider "${selection[@]}" $PYTEST_ARGS > "$dir/pytest.txt" 2>&1
      rc=$?
      unset TF_USE_LEGACY_KERAS
      tests=$(grep -E "^=* ?[0-9]+ (passed|failed|error)" "$dir/pytest.txt" | tail -1 |
              grep -oE "[0-9]+ (passed|failed|errors?|skipped)" | paste -sd, - | sed 's/,/, /g')
      [ -n "$tests" ] || tests="no summary (see $dir/pytest.txt)"
      [ "$rc" = 0 ] || failed=1
    else
      failed=1
      echo "   build failed; the errors:"; grep -E "error:" "$log" | head -5
    fi
  else
    failed=1
    echo "   could not install tensorflow-cpu==$version (see $log)"
  fi
  took=$(( $(date +%s) - start ))
  echo "| $spec | $keras | $pyver | $numpy | $librosa | $build | $xla | $tests | ${took} s |" >> "$table"
  echo "   $spec: build $build, XLA $xla, tests: $tests (${took} s)"
done
echo
echo "opforge compat-check on $(uname -m), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'):"
cat "$table"
exit $failed

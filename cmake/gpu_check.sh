#!/usr/bin/env bash
# make gpu-check: one run on a machine with an NVIDIA GPU that answers whether opforge's GPU path
# works and how fast it is, leaving a report (build/gpu-check/report.md, plus the raw results
# beside it). Prepared to run unattended the first time a GPU machine is lent, within 10 minutes:
#
#   1. the machine: GPU, driver, nvcc, CPU;
#   2. TensorFlow's GPU wheel (tensorflow[and-cuda], the pinned version) in .venv-gpu, from PyPI,
#      or from a folder of wheels (OPFORGE_WHEELS=dir) where the machine is offline, or an
#      existing Python that has it (OPFORGE_TF_PYTHON=path);
#   3. the CUDA test binary (the kernels against the CPU kernels, no TensorFlow in the process),
#      built and run. Without TensorFlow it still runs: Eigen then comes from OPFORGE_EIGEN_INCLUDE
#      or build/carry/eigen, GoogleTest from the system, OPFORGE_GTEST_SOURCE or
#      build/carry/googletest (`make gpu-carry` prepares both folders on a machine that has them);
#      OPFORGE_CUDA_TEST_BIN=path runs a binary built elsewhere instead (the same commit, nvcc's
#      sm_90 code in it), which saves the build's minutes on a machine lent by the minute;
#   3b. where compute-sanitizer is installed, the float and untyped cases (every kernel) under its
#      memcheck (with leak check), racecheck, synccheck and initcheck;
#   4. with TensorFlow: opforge built and installed against the GPU wheel, `opforge doctor`
#      (the CUDA runtime, driver and code the loaded module really has), the GPU tests through
#      TensorFlow (tests/test_gpu.py) and the GPU benchmark (`opforge gpu-bench`);
#   5. the CUDA cases sized for a GPU (past 2^31 elements), last, with the time that is left.
#
# Each step has a time limit inside the overall deadline (GPU_CHECK_SECONDS, default 570); a step
# that fails or is skipped is recorded and the others still run. Exit status: 0 when every step
# that ran passed and the GPU tests ran, 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUTDIR=${GPU_CHECK_OUT:-$ROOT/build/gpu-check}
TF_VERSION=${TF_VERSION:?set by the Makefile}
PYTHON=${PYTHON:-python3}
DEADLINE=$(($(date +%s) + ${GPU_CHECK_SECONDS:-570}))
JOBS=$(nproc 2>/dev/null || echo 4)
mkdir -p "$OUTDIR"
export ROOT OUTDIR TF_VERSION PYTHON JOBS
REPORT=$OUTDIR/report.md
: >"$REPORT"
declare -a SUMMARY=()
FAILED=0

say() { echo "$*" | tee -a "$REPORT"; }
left() { echo $((DEADLINE - $(date +%s))); }
# step NAME LIMIT CMD...: runs CMD with its output in $OUTDIR/NAME.log (tail in the report),
# at most LIMIT seconds and never past the deadline; records the outcome.
step() {
  local name=$1 limit=$2
  shift 2
  local budget
  budget=$(left)
  ((budget < limit)) && limit=$budget
  if ((limit < 10)); then
    SUMMARY+=("| $name | not run: out of time | |")
    FAILED=1
    return 1
  fi
  local t0=$(date +%s) rc
  say ""
  say "## $name"
  say '```'
  # bash -c, so that CMD may be one of the functions below (exported with export -f)
  timeout --kill-after=10 "$limit" bash -c '"$@"' "$name" "$@" >"$OUTDIR/$name.log" 2>&1
  rc=$?
  tail -n 40 "$OUTDIR/$name.log" | tee -a "$REPORT"
  say '```'
  local secs=$(($(date +%s) - t0)) outcome=passed
  if ((rc == 124 || rc == 137)); then
    outcome="TIMED OUT after ${limit} s"
  elif ((rc != 0)); then
    outcome="FAILED (exit $rc)"
  fi
  [[ $outcome == passed ]] || FAILED=1
  SUMMARY+=("| $name | $outcome | ${secs} s |")
  return $rc
}
skip() {
  SUMMARY+=("| $1 | skipped: $2 | |")
  say ""
  say "## $1"
  say "skipped: $2"
}

say "# opforge GPU check, $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
say ""
say '```'
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv 2>&1 ||
    echo "nvidia-smi: not available"
  nvidia-smi 2>/dev/null | grep -o "CUDA Version: [0-9.]*" || true
  (command -v nvcc >/dev/null && nvcc --version | tail -n 2) || echo "nvcc: not on PATH"
  grep -m1 "model name" /proc/cpuinfo
  echo "cores: $JOBS"
  $PYTHON --version
} 2>&1 | tee -a "$REPORT"
say '```'

# --- TensorFlow's GPU wheel ------------------------------------------------------------------
TF_PY=""
export OPFORGE_WHEELS=${OPFORGE_WHEELS:-}
if [[ -n ${OPFORGE_TF_PYTHON:-} ]]; then
  TF_PY=$OPFORGE_TF_PYTHON
elif [[ -n ${OPFORGE_NO_TF:-} ]]; then
  skip tensorflow-install "OPFORGE_NO_TF is set (no TensorFlow GPU wheel can reach this machine)"
else
  install_tf() {
    test -x .venv-gpu/bin/python || $PYTHON -m venv .venv-gpu || return 1
    local src=()
    [[ -n ${OPFORGE_WHEELS:-} ]] && src=(--no-index --find-links "$OPFORGE_WHEELS")
    local extra=()
    command -v cmake >/dev/null || extra+=("cmake>=3.22")
    .venv-gpu/bin/python -m pip install -q --disable-pip-version-check "${src[@]}" \
      "tensorflow[and-cuda]==$TF_VERSION" -r requirements-test.txt "${extra[@]}"
  }
  export -f install_tf
  step tensorflow-install 300 install_tf && TF_PY=$ROOT/.venv-gpu/bin/python
fi
TF_GPUS=0
if [[ -n $TF_PY ]]; then
  TF_GPUS=$("$TF_PY" -c "import os; os.environ['TF_CPP_MIN_LOG_LEVEL']='3'; import tensorflow as tf; \
print(len(tf.config.list_physical_devices('GPU')))" 2>/dev/null | tail -n 1)
  TF_GPUS=${TF_GPUS:-0}
  export TF_PY
  say ""
  say "TensorFlow ($TF_PY) sees $TF_GPUS GPU(s)"
fi

# --- the CUDA test binary ----------------------------------------------------------------------
cuda_cfg=(-DOPFORGE_CORE_ONLY=ON -DOPFORGE_CUDA=ON -DCMAKE_BUILD_TYPE=Release)
if [[ -n $TF_PY ]]; then
  cuda_cfg+=(-DPython_EXECUTABLE="$TF_PY")
else
  eigen=${OPFORGE_EIGEN_INCLUDE:-$ROOT/build/carry/eigen}
  cuda_cfg+=(-DPython_EXECUTABLE="$(command -v $PYTHON)" -DOPFORGE_EIGEN_INCLUDE="$eigen")
fi
gtest_src=${OPFORGE_GTEST_SOURCE:-}
[[ -z $gtest_src && -d $ROOT/build/carry/googletest ]] && gtest_src=$ROOT/build/carry/googletest
[[ -z $gtest_src && -d /usr/src/googletest ]] && gtest_src=/usr/src/googletest
[[ -n $gtest_src ]] && cuda_cfg+=(-DOPFORGE_GTEST_SOURCE="$gtest_src")
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
build_cuda_tests() {
  cmake -S . -B "$OUTDIR/cuda" "$@" &&
    cmake --build "$OUTDIR/cuda" --target opforge_cuda_test -j "$JOBS"
}
export -f build_cuda_tests
CUDA_TEST=""
if [[ -n ${OPFORGE_CUDA_TEST_BIN:-} ]]; then
  CUDA_TEST=$(readlink -f "$OPFORGE_CUDA_TEST_BIN")
  skip cuda-test-build "prebuilt binary $CUDA_TEST (OPFORGE_CUDA_TEST_BIN)"
elif step cuda-test-build 240 build_cuda_tests "${gen[@]}" "${cuda_cfg[@]}"; then
  CUDA_TEST=$OUTDIR/cuda/opforge_cuda_test
fi
if [[ -n $CUDA_TEST ]]; then
  # Every case but the ones sized for a GPU (*Large*, at the end).
  step cuda-test 150 "$CUDA_TEST" --gtest_filter='-*Large*' \
    --gtest_output="json:$OUTDIR/cuda_test.json"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ test" "$OUTDIR/cuda-test.log" | tee -a "$REPORT"
  if nvidia-smi -L >/dev/null 2>&1 && grep -q "skipped: no CUDA device" "$OUTDIR/cuda-test.log"; then
    say "FAILED: nvidia-smi lists a GPU, but the CUDA tests found no usable CUDA device"
    SUMMARY+=("| cuda-test | FAILED: tests skipped, no usable CUDA device | |")
    FAILED=1
  fi
  # compute-sanitizer: what the GPU itself checks, over the float cases and the untyped tests
  # (every kernel; under the tools they run 5 to 50 times slower). Each tool's run ends with its
  # summary ("ERROR SUMMARY: 0 errors"); --error-exitcode makes any finding fail the step.
  SANITIZER=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  if [[ -x $SANITIZER ]] && nvidia-smi -L >/dev/null 2>&1; then
    some='*/float.*:ResizeBilinearCudaForward/0.*:*Cuda.*:*Errors.*:*ErrorTest.*:*Plan*.*'
    some+=':*Geometry.*:*Tridiagonal.*:*Edge.*:*Workspace*.*:*IntTest.*:-*Large*'
    step cuda-memcheck 90 "$SANITIZER" --tool memcheck --leak-check full --error-exitcode 3 \
      "$CUDA_TEST" --gtest_filter="$some"
    step cuda-racecheck 90 "$SANITIZER" --tool racecheck --racecheck-report all \
      --error-exitcode 3 "$CUDA_TEST" --gtest_filter="$some"
    step cuda-synccheck 60 "$SANITIZER" --tool synccheck --error-exitcode 3 \
      "$CUDA_TEST" --gtest_filter="$some"
    step cuda-initcheck 60 "$SANITIZER" --tool initcheck --error-exitcode 3 \
      "$CUDA_TEST" --gtest_filter="$some"
  else
    skip compute-sanitizer "not installed, or no GPU"
  fi
fi

# --- opforge through TensorFlow on the GPU ------------------------------------------------------
if [[ -z $TF_PY ]]; then
  skip gpu-binding "no TensorFlow GPU wheel could be installed"
elif ((TF_GPUS == 0)); then
  skip gpu-binding "TensorFlow sees no GPU (its CUDA libraries missing? see the doctor)"
  "$TF_PY" -c "import tensorflow as tf; print(tf.sysconfig.get_build_info())" >>"$REPORT" 2>&1
else
  install_opforge() {
    CMAKE_BUILD_PARALLEL_LEVEL=$JOBS "$TF_PY" -m pip install -q --disable-pip-version-check \
      --no-build-isolation --no-deps --config-settings=build-dir="$OUTDIR/wheel" .
  }
  export -f install_opforge
  if step gpu-binding 240 install_opforge; then
    GPUBIN=$(dirname "$TF_PY")
    # from another directory, so that the installed package is what loads
    step doctor 60 bash -c 'cd /tmp && "$0" doctor' "$GPUBIN/opforge"
    # Every GPU kernel through TensorFlow against the CPU kernel (OPFORGE_TEST_DEVICE=GPU: a
    # missing GPU is an error, not a skip); the over-2^31-element cases in a process of their
    # own, so that a crash there cannot hide the other results; then the benchmark, then the
    # generic per-op tests on the GPU (the `device` parameter of test_specs.py).
    step gpu-pytest 150 env OPFORGE_TEST_DEVICE=GPU "$TF_PY" -m pytest "$ROOT/tests/test_gpu.py" \
      -k "not past" -v -ra -p no:cacheprovider --junitxml="$OUTDIR/gpu_pytest.xml"
    step gpu-bench 150 "$GPUBIN/opforge" gpu-bench --json "$OUTDIR/gpu_bench.json"
    step gpu-pytest-large 150 env OPFORGE_TEST_DEVICE=GPU "$TF_PY" -m pytest \
      "$ROOT/tests/test_gpu.py" -k past -v -ra -p no:cacheprovider \
      --junitxml="$OUTDIR/gpu_pytest_large.xml"
    step gpu-specs 120 "$TF_PY" -m pytest "$ROOT/tests/test_specs.py" -k GPU -q -ra \
      -p no:cacheprovider --junitxml="$OUTDIR/gpu_specs.xml"
  fi
fi

# --- the CUDA cases sized for a GPU, last: the heaviest (past 2^31 elements, up to ~19 GB of
# device memory; the CPU references take most of their ~4 minutes on 16 cores), in a run of
# their own so that a crash or a slow case there cannot hide the others.
if [[ -n $CUDA_TEST ]]; then
  step cuda-test-large 300 "$CUDA_TEST" --gtest_filter='*Large*' \
    --gtest_output="json:$OUTDIR/cuda_test_large.json"
fi

say ""
say "## Summary"
say "| step | outcome | time |"
say "| --- | --- | --- |"
for line in "${SUMMARY[@]}"; do say "$line"; done
if [[ -z $TF_PY || $TF_GPUS == 0 ]]; then
  say ""
  say "The GPU tests through TensorFlow did not run: this check is incomplete."
  FAILED=1
fi
say ""
say "report: $REPORT"
exit $FAILED

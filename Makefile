# opforge: the two commands are `make demo` and `make test`; both set everything up.
#   make demo        verify every op against TensorFlow (the op table with errors and speed), then
#                    train YOLO-tiny on a synthetic set (~5 min on 2 cores): mAP, demo_out/*.png
#   make test        core GoogleTests under ASan+UBSan, the CUDA test binary (and the race
#                    check), pytest but the whole-system tests, then the manual's strict build;
#                    under 30 minutes on a fresh 2-core machine
#   make test-slow   the whole-system tests `make test` leaves out (marked slow in
#                    tests/conftest.py: user builds, CLI runs, training, deployment, benchmarks,
#                    fuzzing, TensorFlow's own suites, every example of README.md and docs/)
#   make build       rebuild and reinstall opforge after a change (incremental)
#   make bench       `opforge bench` for every op
#   make core-bench  Google Benchmark of the C++ core alone (no TensorFlow in the process)
#   make cuda-race   every CUDA test on the SIMT runtime under ThreadSanitizer (the race check
#                    at the level of single accesses; `make cuda-test` runs its own tests)
#   make format      clang-format the C++ sources
#   make wheel       a binary wheel for the TensorFlow in .venv: dist/opforge-<v>+tf<X.Y>-...whl
#   make install-check  the README's two installs in fresh venvs: from source, and the wheel with
#                    no compiler on PATH
#   make compat-check  build and test against every TensorFlow from 2.16 to 2.21 (TF_VERSIONS=...)
#   make gpu-build-check  compile and load the GPU binding against TensorFlow's CUDA wheel
#                    (separate .venv-gpu; needs nvcc; no GPU needed to compile)
#   make audio-demo  MFCCs back to audio: WAV files, spectrograms and the real-time factor
#   make docs        the manual (docs/, MkDocs) into site/, strictly: a broken link fails
#   make docs-images the manual's pictures, each made by a command: the demo's detections and
#                    loss, the audio demo's spectrograms, `opforge bench --plot` (~12 min)
#   make gpu-check   on a machine with an NVIDIA GPU: the whole GPU path, tested and timed, in one
#                    run (< 10 min); report in build/gpu-check/report.md
#
# TensorFlow is pinned here and only here. For the CUDA build path use
#   make build TF_PACKAGE=tensorflow
TF_PACKAGE ?= tensorflow-cpu
TF_VERSION := 2.21.0
# The TensorFlow releases `make compat-check` builds and tests (the latest patch of each minor
# release in opforge._loader.SUPPORTED_TF's range).
TF_VERSIONS ?= 2.16.2 2.17.1 2.18.1 2.19.1 2.20.0 2.21.0

# Python 3.12 where the machine has it (librosa 1.0, what the audio tests compare with, needs
# it), else python3; every TensorFlow from 2.16 to 2.21 has wheels for both.
PYTHON ?= $(or $(shell for p in python3.12 $$HOME/.pyenv/versions/3.12*/bin/python3.12; do \
  "$$p" -c "import sys; assert sys.version_info[:2] == (3, 12)" >/dev/null 2>&1 && \
  { echo "$$p"; break; }; done),python3)
VENV := .venv
VPY := $(VENV)/bin/python
export PATH := $(abspath $(VENV))/bin:$(PATH)
export TF_CPP_MIN_LOG_LEVEL ?= 2

comma := ,
empty :=
space := $(empty) $(empty)
SOURCES := $(shell find cc python cmake -type f -not -name '*.pyc' 2>/dev/null) \
           CMakeLists.txt pyproject.toml

.PHONY: all demo test test-slow build deps core-test cuda-test cuda-race cuda-sim pytest bench core-bench format clean yolo-bench yolo-parity \
        gpu-build-check gpu-check gpu-carry install-check wheel compat-check test-without-tools docs docs-images

all: build

# 1. The virtual environment with TensorFlow and the test tools (skipped when up to date).
$(VENV)/.deps: Makefile requirements-test.txt
	test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install -q --disable-pip-version-check --upgrade pip
	$(VPY) -m pip install -q --disable-pip-version-check "$(TF_PACKAGE)==$(TF_VERSION)" -r requirements-test.txt
	# Keras 2 for the layers' tf-keras tests; --no-deps: it requires the `tensorflow` package,
	# which pip would otherwise install over $(TF_PACKAGE).
	$(VPY) -m pip install -q --disable-pip-version-check --no-deps "tf-keras==$(TF_VERSION)"
	touch $@

deps: $(VENV)/.deps

# 2. opforge itself, built from source with CMake through pyproject.toml. Here the build directory
#    persists (build/wheel, passed as a config setting), so a rebuild recompiles only what changed;
#    a plain `pip install .` builds in a temporary directory and writes nothing into the source.
$(VENV)/.built: $(VENV)/.deps $(SOURCES)
	$(VPY) -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps \
	  --config-settings=build-dir=build/wheel .
	touch $@

build: $(VENV)/.built

demo: build
	$(VENV)/bin/opforge verify
	$(VENV)/bin/opforge yolo demo --out demo_out

# The framework-free core with its GoogleTest suite under AddressSanitizer and UBSan, at -O1 with
# line tables only (what ASan's documentation recommends), for the same checks: the sanitizer
# build of a fresh clone takes about a third of the time it takes at -O2 -g, which keeps
# `make test` inside its budget on 2 cores.
SANITIZE_FLAGS := -O1 -g1 -DNDEBUG
SANITIZE_CONFIGURE = mkdir -p build && cmake -S . -B build/sanitize -G Ninja -DOPFORGE_CORE_ONLY=ON \
	  -DOPFORGE_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=$(SANITIZE_FLAGS)" -DPython_EXECUTABLE=$(abspath $(VPY)) \
	  > build/sanitize.log 2>&1 || (cat build/sanitize.log; exit 1)
SANITIZE_ENV := ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1
core-test: deps
	$(SANITIZE_CONFIGURE)
	cmake --build build/sanitize
	cd build/sanitize && $(SANITIZE_ENV) \
	  OPFORGE_ONEDNN_LIBRARY=$(abspath $(VENV))/lib/libdnnl.so.3 \
	  ctest --output-on-failure -j2

# The CUDA kernels' tests (cc/ops/*/*_cuda_test.cc and the SIMT runtime's own): on the GPU where
# there is one, else on the SIMT runtime (common/simt/: every .cu compiled as C++ and run on the
# CPU, under ASan and UBSan, in the core's sanitizer build; four shards on the two cores, which
# balances the long tests better than two); it says which. nvcc compiles the
# kernels (build/cuda) either way, which keeps the CUDA sources compiling on every machine with
# nvcc (without a GPU, the .cu files' objects alone: the library would build the whole core
# again for nothing). CUDA_TEST_ON=gpu|simt overrides the choice.
CUDA_TEST_ON ?= $(if $(shell nvidia-smi -L 2>/dev/null | grep -i gpu),gpu,simt)
cuda-test: deps
	@if ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ]; then \
	  echo "cuda-test: no CUDA toolkit (nvcc), CUDA kernels not compiled"; exit 0; fi; \
	mkdir -p build && \
	cmake -S . -B build/cuda -G Ninja -DOPFORGE_CORE_ONLY=ON -DOPFORGE_CUDA=ON \
	  -DPython_EXECUTABLE=$(abspath $(VPY)) > build/cuda.log 2>&1 || (cat build/cuda.log; exit 1); \
	if [ "$(CUDA_TEST_ON)" = gpu ]; then \
	  cmake --build build/cuda --target opforge_cuda_test && \
	  echo "cuda-test: on the GPU" && build/cuda/opforge_cuda_test; \
	else \
	  cmake --build build/cuda --target $$(ninja -C build/cuda -t targets all | \
	    sed -n 's|^\(CMakeFiles/opforge_cuda.dir/.*\.cu\.o\):.*|\1|p') && \
	  echo "cuda-test: no CUDA device: the CUDA tests run on the SIMT runtime (CPU, ASan + UBSan)" && \
	  $(SANITIZE_CONFIGURE) && cmake --build build/sanitize --target opforge_simt_test && \
	  rm -f build/sanitize/simt_launches.* && \
	  $(VPY) cmake/run_sharded.py 4 build/sanitize/opforge_simt_test -- $(SANITIZE_ENV) \
	    OPFORGE_SIMT_LAUNCHES=$(abspath build/sanitize/simt_launches) && \
	  $(VPY) cmake/check_launches.py . build/sanitize/simt_launches.* && \
	  echo "cuda-test: the race check (ThreadSanitizer over the SIMT runtime's threads)" && \
	  $(SIMT_TSAN_CONFIGURE) && cmake --build build/simt-tsan --target opforge_simt_race_test && \
	  build/simt-tsan/opforge_simt_race_test; \
	fi

# The race check at the level of single accesses: the SIMT runtime's threads as ThreadSanitizer's
# fibers (build/simt-tsan; the compiler's TSan). `make cuda-test` runs its own tests (planted
# races reported with the kernel and the threads; barriers, atomics and warp exchanges not);
# `make cuda-race` runs every CUDA test under it (the core and every kernel built under TSan,
# then about half an hour on 2 cores; TSAN_OPTIONS as you like), but the order check's own test,
# whose kernel races on purpose (TSan reports it, as it should).
SIMT_TSAN_CONFIGURE = mkdir -p build && cmake -S . -B build/simt-tsan -G Ninja -DOPFORGE_CORE_ONLY=ON \
	  -DOPFORGE_TSAN=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=$(SANITIZE_FLAGS)" -DPython_EXECUTABLE=$(abspath $(VPY)) \
	  > build/simt-tsan.log 2>&1 || (cat build/simt-tsan.log; exit 1)
cuda-race: deps
	$(SIMT_TSAN_CONFIGURE)
	cmake --build build/simt-tsan --target opforge_simt_race_test opforge_simt_test
	build/simt-tsan/opforge_simt_race_test
	$(VPY) cmake/run_sharded.py 2 build/simt-tsan/opforge_simt_test \
	  --gtest_filter=-SimtTest.ReportsResultsThatDependOnTheOrderOfBlocksOrThreads

# pytest in PYTEST_WORKERS processes (pytest-xdist), each test file in one of them (module
# fixtures such as a trained model are made once); PYTEST_WORKERS=0 runs them in this process.
PYTEST_WORKERS ?= 2
# OPFORGE_REQUIRE_ADAPTERS: on a machine of the project's kind the build must make both runtime
# adapters (ONNX Runtime, LiteRT); tests/test_adapters_built.py fails loudly, rather than the
# adapters' tests skipping, the day their headers can no longer be fetched.
# tests/test_gpu.py runs its GPU comparisons on the GPU where there is one, and through the cuda_sim
# library (build/wheel/_opforge_ops_cuda_sim.so: the ops' CUDA kernels on the SIMT runtime, inside
# TensorFlow, opforge.cuda_sim) wherever the CUDA toolkit's headers are; there, pytest is told
# where it is (OPFORGE_CUDA_SIM_LIBRARY), and a missing library fails the tests.
CUDA_HEADERS := $(firstword $(wildcard $(CUDA_HOME)/include/cuda_runtime.h /usr/local/cuda/include/cuda_runtime.h))
CUDA_SIM_LIB := build/wheel/_opforge_ops_cuda_sim.so
CUDA_SIM_ENV := $(if $(CUDA_HEADERS),OPFORGE_CUDA_SIM_LIBRARY=$(abspath $(CUDA_SIM_LIB)))
cuda-sim: build
	@if [ -n "$(CUDA_HEADERS)" ]; then cmake --build build/wheel --target opforge_ops_cuda_sim; \
	else echo "cuda-sim: no CUDA toolkit headers: the cuda_sim library is not built"; fi

# `make test` leaves out the whole-system tests (marked `slow`, listed in tests/conftest.py);
# `make test-slow` runs them, and `.ci/run` runs both.
PYTEST_RUN = OPFORGE_REQUIRE_ADAPTERS=1 $(CUDA_SIM_ENV) $(VPY) -m pytest tests -q -ra \
	$(if $(filter-out 0,$(PYTEST_WORKERS)),-n $(PYTEST_WORKERS) --dist loadfile)
pytest: build cuda-sim
	$(PYTEST_RUN) -m "not slow"

test-slow: build cuda-sim
	$(PYTEST_RUN) -m slow

test: core-test cuda-test pytest docs

# The manual: MkDocs + Material + mkdocstrings (the API reference, read from the docstrings
# without importing them), strictly (mkdocs.yml: a broken link, a page left out of the nav or an
# unreadable docstring fails). Its Python examples run in pytest (tests/test_docs_examples.py).
docs: deps
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet --site-dir site

# The pictures in docs/img/, each from a command (run on the machine whose figures the manual
# quotes; the benchmark's rows stay beside the chart in docs/data/).
DOCS_IMAGES := build/docs-images
docs-images: build
	mkdir -p $(DOCS_IMAGES) docs/img docs/data
	$(VENV)/bin/opforge yolo demo --out $(DOCS_IMAGES)/demo
	cp $(DOCS_IMAGES)/demo/detections.png $(DOCS_IMAGES)/demo/loss.png docs/img/
	$(VENV)/bin/opforge audio demo --out $(DOCS_IMAGES)/audio
	cp $(DOCS_IMAGES)/audio/spectrograms.png docs/img/
	$(VENV)/bin/opforge bench --json > docs/data/bench-float32.json
	$(VENV)/bin/opforge bench --json --dtype bfloat16 > docs/data/bench-bfloat16.json
	$(VENV)/bin/opforge bench --plot docs/img/bench.png --from docs/data/bench-float32.json \
	  --from docs/data/bench-bfloat16.json

# The tests whose behaviour depends on an optional system tool (marked `uses_tool`), again with
# those tools hidden from PATH, as on a machine without them (`.ci/run` runs it after `make test`,
# with the tools installed, so both cases are tested).
OPTIONAL_TOOLS := espeak-ng
test-without-tools: build
	.ci/without-tools $(subst $(space),$(comma),$(strip $(OPTIONAL_TOOLS))) $(VPY) -m pytest tests -q -ra -m uses_tool

# A binary wheel for the TensorFlow in .venv: dist/opforge-<version>+tf<X.Y>-<tags>.whl, which
# installs with no compiler into an environment with that TensorFlow (`make install-check`).
wheel: deps
	rm -rf build/wheel-built
	$(VPY) -m pip wheel -q --disable-pip-version-check --no-build-isolation --no-deps \
	  --config-settings=build-dir=build/wheel -w build/wheel-built .
	$(VPY) cmake/make_wheel.py build/wheel-built/opforge-*.whl dist \
	  "$$($(VPY) -c 'import tensorflow as tf; print(tf.__version__)' 2>/dev/null)"

# Every supported TensorFlow: a fresh venv each, opforge built against it, the compat subset of the
# tests; prints a table (build/compat/table.md). A version written X.Y.Z+tf-keras runs it with
# Keras 2 (tf-keras, TF_USE_LEGACY_KERAS=1).
compat-check:
	TF_VERSIONS="$(TF_VERSIONS)" PYTHON=$(PYTHON) cmake/compat_check.sh

bench: build
	$(VENV)/bin/opforge bench

# YOLO: training step and post-processing against the same network from TF built-ins, and the
# full-size parity check of the two (first-step loss, gradients, 20 steps).
yolo-bench: build
	$(VENV)/bin/opforge yolo bench

yolo-parity: build
	$(VENV)/bin/opforge yolo parity --size 416 --dtype float64
	$(VENV)/bin/opforge yolo parity --size 416 --dtype float32

# MFCCs back to audio: speech (espeak-ng, else synthesised) -> MFCCs -> opforge.audio.mfcc_to_audio;
# audio_out/original.wav, reconstructed.wav, spectrograms.png, spectral convergence, real-time factor.
.PHONY: audio-demo
audio-demo: build
	$(VENV)/bin/opforge audio demo --out audio_out

core-bench: deps
	mkdir -p build
	cmake -S . -B build/bench -G Ninja -DOPFORGE_CORE_ONLY=ON -DCMAKE_BUILD_TYPE=Release \
	  -DPython_EXECUTABLE=$(abspath $(VPY)) > build/bench.log 2>&1 || (cat build/bench.log; exit 1)
	cmake --build build/bench --target opforge_core_bench
	build/bench/opforge_core_bench --benchmark_min_time=0.2

# The CUDA path: TensorFlow's CUDA wheel in its own venv, the binding compiled with GOOGLE_CUDA,
# then loaded to list its GPU kernels (they run only where a GPU is present).
gpu-build-check:
	test -x .venv-gpu/bin/python || $(PYTHON) -m venv .venv-gpu
	.venv-gpu/bin/python -m pip install -q --disable-pip-version-check "tensorflow==$(TF_VERSION)"
	cmake -S . -B build/gpu -G Ninja -DPython_EXECUTABLE=$(abspath .venv-gpu/bin/python)
	cmake --build build/gpu --target opforge_ops
	PYTHONPATH=python .venv-gpu/bin/python -W ignore::RuntimeWarning -c "import sys, tensorflow as tf; \
	  tf.load_op_library('build/gpu/_opforge_ops.so'); \
	  from tensorflow.python.framework import kernels as k; from opforge.ops import CPU_ONLY, OP_NAMES; \
	  devices = {n: sorted({d.device_type for d in k.get_registered_kernels_for_op(n).kernel}) for n in OP_NAMES}; \
	  [print(n, d) for n, d in devices.items()]; \
	  bad = [n for n, d in devices.items() if d != (['CPU'] if n in CPU_ONLY else ['CPU', 'GPU'])]; \
	  sys.exit(f'ops without their CPU and GPU kernels: {bad}' if bad else 0)"
	PYTHONPATH=python .venv-gpu/bin/python -W ignore::RuntimeWarning -c "import os, tensorflow as tf; \
	  path = os.path.abspath('build/gpu/_opforge_ops.so'); tf.load_op_library(path); \
	  from opforge.tools import cuda_info; info = cuda_info.module_info(path); \
	  print('\n'.join(cuda_info.describe(path))); \
	  assert info['gpu_binding'] and info['runtime_in'] == path, info; \
	  assert 'sm_90' in info['targets'], info"
	.venv-gpu/bin/python -c "import tensorflow as tf; lib = tf.load_op_library('build/gpu/_opforge_ops.so'); \
	  f = tf.function(lambda x: lib.opforge_leaky_relu(x, alpha=0.5), jit_compile=True); \
	  y = f(tf.constant([-2.0, 3.0])).numpy().tolist(); assert y == [-1.0, 3.0], y; \
	  print('XLA (jit_compile=True) on the CUDA wheel build: leaky_relu lowers')"
	PYTHONPATH=python .venv-gpu/bin/python -W ignore::RuntimeWarning -c "import os, tensorflow as tf; \
	  path = os.path.abspath('build/gpu/_opforge_ops.so'); tf.load_op_library(path); \
	  from opforge.ops import _xla; gpu = _xla.read_ffi_gpu_ops(path); print('XLA:GPU custom calls:', sorted(gpu)); \
	  need = {'Opforge>BiasLeakyRelu', 'Opforge>Conv2DTranspose', 'Opforge>FusedBatchNormLeakyRelu', 'Opforge>Swish'}; \
	  assert need <= gpu and 'Opforge>YoloDecode' not in gpu, sorted(gpu)"

# The GPU path on a machine with an NVIDIA GPU (cmake/gpu_check.sh): installs TensorFlow's GPU
# wheel, builds and runs the CUDA tests, builds opforge against the wheel, runs `opforge doctor`,
# the GPU tests through TensorFlow and the GPU benchmark; report in build/gpu-check/report.md.
gpu-check:
	TF_VERSION=$(TF_VERSION) PYTHON=$(PYTHON) cmake/gpu_check.sh

# For a GPU machine that cannot reach PyPI: copies of what the CUDA tests need besides this
# repository (TensorFlow's Eigen, GoogleTest's source) into build/carry, which gpu-check finds.
gpu-carry: deps
	mkdir -p build/carry/eigen
	inc=$$($(VPY) -c "import tensorflow as tf; print(tf.sysconfig.get_include())" 2>/dev/null) && \
	  cp -rL "$$inc/Eigen" "$$inc/unsupported" "$$inc/external/ducc/src/ducc0" build/carry/eigen/
	rm -rf build/carry/googletest && cp -r /usr/src/googletest build/carry/googletest
	du -sh build/carry

# The README's own-environment install, verbatim, in a fresh venv on a clean clone of HEAD
# (downloads TensorFlow; a few minutes): no file written into the source, no CUDA compiled
# against a CPU TensorFlow, the package works; prints the build time.
install-check: wheel
	TF_SPEC="$(TF_PACKAGE)==$(TF_VERSION)" PYTHON=$(PYTHON) \
	  WHEEL="$$(ls -t dist/opforge-*+tf$(basename $(TF_VERSION))-*.whl | head -1)" cmake/install_check.sh

format:
	clang-format -i $$(find cc -name '*.h' -o -name '*.cc' -o -name '*.cu' -o -name '*.cuh')

clean:
	rm -rf build $(VENV)/.built

# --- fuzzing and ThreadSanitizer --------------------------------------------------------------
#   make fuzz-build   the libFuzzer harnesses (cc/ops/<op>/<op>_fuzz.cc) under ASan + UBSan, with
#                     clang, in build/fuzz
#   make fuzz         fuzz-build, then each harness for FUZZ_SECONDS (one at a time) on a scratch
#                     copy of its seeds (cc/fuzz/corpus/<op>/ -> build/fuzz/work/<op>/); prints
#                     executions and findings per harness (crash files in build/fuzz/findings/)
#                     and fails if any harness found something. FUZZ=<op> runs one harness.
#   make tsan         the core GoogleTests under ThreadSanitizer (build/tsan), halting on the
#                     first report
#   make fuzz-python  `opforge fuzz`: FUZZ_CALLS malformed calls of every op from its spec (seed
#                     FUZZ_SEED), in child processes; fails on any crash, hang or vague error
FUZZ_SECONDS ?= 60
FUZZ_RSS_MB ?= 2048
FUZZ_TIMEOUT ?= 20
FUZZ ?=
TSAN_CXX ?= clang++
# Build parallelism for these targets (empty: the generator's default).
JOBS ?=

FUZZ_CALLS ?= 1000
FUZZ_SEED ?= $(shell date +%s)

.PHONY: fuzz-build fuzz tsan fuzz-python

fuzz-python: build
	$(VENV)/bin/opforge fuzz --calls $(FUZZ_CALLS) --seed $(FUZZ_SEED)

# These need TensorFlow's Eigen (and flags) from the venv, not a fresh `deps` after every Makefile edit.
fuzz-build:
	test -x $(VPY) || $(MAKE) deps
	mkdir -p build
	cmake -S . -B build/fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DOPFORGE_FUZZ=ON \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPython_EXECUTABLE=$(abspath $(VPY)) \
	  > build/fuzz.log 2>&1 || (cat build/fuzz.log; exit 1)
	cmake --build build/fuzz $(if $(JOBS),-j $(JOBS))

fuzz: fuzz-build
	FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_RSS_MB=$(FUZZ_RSS_MB) FUZZ_TIMEOUT=$(FUZZ_TIMEOUT) \
	  cc/fuzz/run_fuzzers.sh build/fuzz cc/fuzz/corpus $(FUZZ)

tsan:
	test -x $(VPY) || $(MAKE) deps
	mkdir -p build
	cmake -S . -B build/tsan -G Ninja -DCMAKE_CXX_COMPILER=$(TSAN_CXX) -DOPFORGE_CORE_ONLY=ON \
	  -DOPFORGE_TSAN=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DPython_EXECUTABLE=$(abspath $(VPY)) > build/tsan.log 2>&1 || (cat build/tsan.log; exit 1)
	cmake --build build/tsan $(if $(JOBS),-j $(JOBS))
	cd build/tsan && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 $(TSAN_EXTRA)" \
	  ctest --output-on-failure -j2

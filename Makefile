# The two commands: `make bench` and `make test`. Both set up a fresh Debian 12
# machine on first use (scripts/setup.sh), build in Release with Ninja, and run.
BUILD ?= build
JOBS ?= $(shell nproc)
VENV := $(BUILD)/venv
ANVIL := $(BUILD)/bin/anvil

.PHONY: all setup build bench test test-fast test-asan test-tsan test-pip fuzz clean

all: build

$(BUILD)/.setup-done: scripts/setup.sh
	bash scripts/setup.sh

setup: $(BUILD)/.setup-done

$(BUILD)/build.ninja: CMakeLists.txt | $(BUILD)/.setup-done
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DANVIL_PYTHON=$(abspath $(VENV))/bin/python

build: $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

# Benchmarks the built-in ResNet-18 (seeded weights) with the articles' method.
# Side-by-side ratios against ONNX Runtime / OpenVINO: bench/compare (docs/benchmarks.md).
bench: build
	$(ANVIL) info
	$(ANVIL) bench zoo:resnet18 --threads $(JOBS) --json $(BUILD)/bench-resnet18.json

test: build
	cd $(BUILD) && ctest --output-on-failure -j 1 --timeout 1800

test-fast: build
	cd $(BUILD) && ctest --output-on-failure -L unit

# Slow suites, not part of `make test` (docs/testing.md gives their run times).
# Unit tests, the CLI suite (bad inputs, hostile files, training), both
# backend conformance suites and the model tests (each at every ISA cap)
# under ASan + UBSan, the models and the current suite shared with build/;
# the concurrency tests under TSan (OpenMP teams of one thread: Debian's
# libgomp is not TSan-instrumented).
SANITIZE_CMAKE = -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DANVIL_PYTHON=$(abspath $(VENV))/bin/python \
  -DANVIL_MODEL_CACHE=$(abspath build)/models -DANVIL_ONNX_SUITE_DIR=$(abspath build)/onnx-suite
test-asan: setup
	cmake -S . -B build-asan $(SANITIZE_CMAKE) -DANVIL_SANITIZE=address
	cmake --build build-asan -j $(JOBS) --target anvil_unit_tests anvil_cli
	cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  ctest --output-on-failure --no-tests=error -L '^(asan|cli|conformance|models)$$'

test-tsan: setup
	cmake -S . -B build-tsan $(SANITIZE_CMAKE) -DANVIL_SANITIZE=thread
	cmake --build build-tsan -j $(JOBS) --target anvil_unit_tests
	cd build-tsan && OMP_NUM_THREADS=1 TSAN_OPTIONS="halt_on_error=1 suppressions=$(abspath tests/tsan.supp)" ctest --output-on-failure --no-tests=error -L tsan

# `pip install .` into a fresh venv (a full Release build in build/pip), then
# the Python tests against the installed module instead of build/python.
PIP_VENV := $(BUILD)/venv-pip
test-pip: build
	rm -rf $(PIP_VENV) && /usr/bin/python3 -m venv --system-site-packages $(PIP_VENV)
	$(PIP_VENV)/bin/python -m pip install -q --disable-pip-version-check . pytest "onnxruntime>=1.30" "numpy<2"
	cd /tmp && $(abspath $(PIP_VENV))/bin/python -c "import anvil; assert 'site-packages' in anvil.__file__, anvil.__file__"
	ANVIL_BIN=$(abspath $(ANVIL)) ANVIL_MODEL_CACHE=$(abspath $(BUILD))/models $(PIP_VENV)/bin/python -m pytest tests/python -q

# libFuzzer targets (clang, ASan + UBSan) for FUZZ_SECONDS each.
FUZZ_SECONDS ?= 600
fuzz: setup
	cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
	  -DANVIL_FUZZ=ON -DBUILD_TESTING=OFF
	cmake --build build-fuzz -j $(JOBS) --target fuzz_model_loader fuzz_tensor_reader fuzz_kserve_request fuzz_train_inputs
	ANVIL_PYTHON=$(abspath $(VENV))/bin/python bash scripts/fuzz.sh build-fuzz $(FUZZ_SECONDS)

clean:
	rm -rf $(BUILD)/CMakeFiles $(BUILD)/build.ninja $(BUILD)/bin $(BUILD)/lib*

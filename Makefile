# The two commands: `make bench` and `make test`. Both set up a fresh Debian 12
# machine on first use (scripts/setup.sh), build in Release with Ninja, and run.
BUILD ?= build
JOBS ?= $(shell nproc)
VENV := $(BUILD)/venv
ANVIL := $(BUILD)/bin/anvil

.PHONY: all setup build bench test test-fast clean

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

clean:
	rm -rf $(BUILD)/CMakeFiles $(BUILD)/build.ninja $(BUILD)/bin $(BUILD)/lib*

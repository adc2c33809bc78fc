# Quick start: `make demo` and `make test`. Both install missing Debian packages
# (as root), configure and build into build/, then do their job.
MAKEFLAGS += --no-print-directory
BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=

.PHONY: all deps configure build test test-cpu test-gpu demo bench clean format

all: build

deps:
	@bash tools/install_deps.sh

configure: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

test-cpu: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -L cpu

test-gpu: build
	@cd $(BUILD) && ctest --output-on-failure -L gpu

demo: build
	@bash tools/demo.sh $(BUILD)

bench: build
	@$(BUILD)/bin/strata-bench

format:
	@clang-format -i $$(git ls-files '*.h' '*.cc' '*.cu')

clean:
	@rm -rf $(BUILD)

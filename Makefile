# Quick start: `make demo` and `make test`. Both install missing Debian packages
# (as root), configure and build into build/, then do their job.
SHELL := /bin/bash
MAKEFLAGS += --no-print-directory
BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=

.PHONY: all deps configure build test test-cpu test-gpu demo bench clean format format-check \
	tidy check check-includes sanitize sanitize-address sanitize-thread

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

# Sanitizer runs of the cpu suite, each in its own build dir (RelWithDebInfo, no CUDA). The
# sanitizer-only warning flags live with STRATA_SANITIZE in CMakeLists.txt. In the TSan build,
# tools/tsan/absl_tsan_annotations.cc makes the uninstrumented Debian absl::Mutex visible to TSan.
SAN_CMAKE_FLAGS = -DSTRATA_WITH_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo

sanitize: sanitize-address sanitize-thread

sanitize-address: deps
	@cmake -S . -B build-asan -DSTRATA_SANITIZE=address $(SAN_CMAKE_FLAGS) >/dev/null
	@cmake --build build-asan -j $(JOBS)
	@cd build-asan && ASAN_OPTIONS=detect_leaks=1:detect_stack_use_after_return=1:check_initialization_order=1 \
		ctest --output-on-failure -j $(JOBS) -L cpu

sanitize-thread: deps
	@cmake -S . -B build-tsan -DSTRATA_SANITIZE=thread $(SAN_CMAKE_FLAGS) >/dev/null
	@cmake --build build-tsan -j $(JOBS)
	@cd build-tsan && TSAN_OPTIONS="second_deadlock_stack=1 suppressions=$(CURDIR)/tools/tsan/tsan.supp" ctest --output-on-failure -j $(JOBS) -L cpu

format:
	@clang-format -i $$(git ls-files '*.h' '*.cc' '*.cu' '*.c')

format-check: deps
	@clang-format --dry-run -Werror $$(git ls-files '*.h' '*.cc' '*.cu' '*.c')
	@echo "format-check: clean"

# clang-tidy (.clang-tidy) over the library, the tools and the C ABI; warnings are errors.
TIDY_SOURCES = '$(CURDIR)/(allocation|raw|layers|reporting|strategies|strategies/vmm|facade|flags|platform|tools|capi|history)/[^/]*\.cc$$'
tidy: build
	@run-clang-tidy -p $(BUILD) -quiet -j $(JOBS) $(TIDY_SOURCES) 2>&1 | grep -v -e '^[0-9]* warnings\? generated' -e '^Suppressed' -e '^Use -header-filter' -e '^clang-tidy' ; exit $${PIPESTATUS[0]}
	@echo "tidy: clean"

# Includes go only down the folder levels (docs/ARCHITECTURE.md, "Layering").
check-includes:
	@bash .ci/check_includes.sh

# Everything CI checks: include direction, tests, format, clang-tidy, sanitizers.
check: check-includes test format-check tidy sanitize

clean:
	@rm -rf $(BUILD)

# Thin wrapper around scripts/install-deps.sh and the CMake presets
# (CMakePresets.json). Every target that builds first installs the Debian
# packages that are missing (a no-op when all are there).
#
#   make demo                 install the demo's deps only (install-deps.sh
#                             --profile demo), build hpsearch and hpsearch-torch
#                             (release; tests and benchmarks off), run the demo
#                             study, write its report and print the report's path
#   make test                 install deps, check formatting, run clang-tidy,
#                             build + test release, check the docs, then asan,
#                             fuzz and tsan
#   make docs                 build the documentation site (docs/, Sphinx) into
#                             build/docs/html, warnings as errors
#   make check-docs           make docs, then check it: internal links, the
#                             runnable blocks of the pages (with the release
#                             hpsearch), every page in headless Chromium
#   make check-tidy           clang-tidy over our sources (scripts/run-clang-tidy.sh)
#   make test-fuzz            build the libFuzzer targets (asan preset, clang) and
#                             run each for FUZZ_SECONDS on a copy of its seed corpus
#   make install PREFIX=DIR   install the release build into DIR
#   make bench                build (release) and run the benchmark programs
#   make clean                remove build/

PREFIX ?= /usr/local
# Parallel compile jobs (default: all cores).
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
# Parallel test processes.
TEST_JOBS ?= 2
# Seconds each fuzz target runs in test-fuzz, and how many run at once.
FUZZ_SECONDS ?= 30
FUZZ_JOBS ?= $(TEST_JOBS)
RELEASE_DIR := build/release
# The demo study: one worker per core (one LibTorch thread each). OpenMP
# threads that wait sleep instead of spinning (OMP_WAIT_POLICY=passive): a
# test-set scoring that has to retrain (no checkpoint) uses every core, and
# on a busy 2-core machine it took 526 s without this, 79 s with it (docs:
# tutorials/torch-objectives.md).
DEMO_WORKERS ?= $(shell nproc 2>/dev/null || echo 2)
DEMO_CMD ?= OMP_WAIT_POLICY=passive ./$(RELEASE_DIR)/hpsearch run examples/fashion_mnist/space.json --workers $(DEMO_WORKERS)
# The demo study's report (hpsearch report), written after the study.
DEMO_REPORT ?= fmnist-demo-report.html
# Runs every benchmark program built from bench/*.cpp, one after another.
BENCH_CMD ?= found=0; for b in $(RELEASE_DIR)/bench/*; do \
	  if [ -f "$$b" ] && [ -x "$$b" ]; then found=1; echo "== $$b"; "$$b" || exit 1; fi; \
	done; [ $$found = 1 ] || echo "bench: no benchmark programs yet (bench/*.cpp)"

# The hpsearch binary the docs describe: its --help makes the CLI reference,
# and the runnable blocks of the pages run it. The default is the release
# build's, built by `make docs` when missing.
HPSEARCH ?= $(RELEASE_DIR)/hpsearch
DOCS_DIR ?= build/docs/html

.PHONY: all deps deps-demo build build-demo test check-format check-tidy test-release test-asan test-tsan test-fuzz demo install bench clean docs check-docs

all: build

# Targets run one at a time (the builds inside use JOBS cores each).
.NOTPARALLEL:

deps:
	scripts/install-deps.sh

# What the demo needs and no more: no test, docs, Slurm or browser packages.
deps-demo:
	scripts/install-deps.sh --profile demo

build: deps
	cmake --preset release
	cmake --build --preset release -j $(JOBS)

# Runs every suite even if one fails (make -k), and fails if any did.
test: deps
	$(MAKE) -k check-format check-tidy test-release check-docs test-asan test-fuzz test-tsan

check-format:
	scripts/check-format.sh

# clang-tidy (.clang-tidy) with the release preset's compile commands
# (configuring is enough: nothing is built for it).
check-tidy:
	cmake --preset release
	scripts/run-clang-tidy.sh build/release

test-release:
	cmake --preset release
	cmake --build --preset release -j $(JOBS)
	ctest --preset release -j $(TEST_JOBS) --output-on-failure

test-asan:
	cmake --preset asan
	cmake --build --preset asan -j $(JOBS)
	ctest --preset asan -j $(TEST_JOBS) --output-on-failure

# ThreadSanitizer over the tests of the concurrent parts (coordinator,
# workers and their threads, local pool, SQLite storage and its checkpoint
# thread); the list (test files and a gtest filter) is in tests/CMakeLists.txt
# (HPSEARCH_TSAN_TEST_FILES): only those are built under TSan. It leaves out
# six tests whose workers must answer heartbeats within 1-5 s: under TSan's
# 5-15x slowdown on a loaded 2-core machine they are expired (a timing
# failure, not a race). libzmq's own pipes are suppressed (tests/tsan.supp:
# libzmq is not built with TSan).
test-tsan:
	cmake --preset tsan
	cmake --build --preset tsan -j $(JOBS)
	ctest --preset tsan -j $(TEST_JOBS) --output-on-failure

# libFuzzer targets (tests/fuzz): fails on any crash, UB, leak or blow-up.
# They are built in the asan preset (clang), beside the tests and from the
# same library objects (a no-op after test-asan); the fuzz preset builds
# them alone at -O1 for longer runs (scripts/run-fuzz.sh).
test-fuzz:
	cmake --preset asan
	cmake --build --preset asan -j $(JOBS) --target fuzz_targets
	FUZZ_BUILD_DIR=build/asan FUZZ_JOBS=$(FUZZ_JOBS) scripts/run-fuzz.sh $(FUZZ_SECONDS)

# The documentation site (docs/contributing/docs.md). Doxygen reads
# the public headers and the CLI reference runs $(HPSEARCH) --help, so the
# binary is built first when it is the release build's and missing.
docs: deps
	@if [ "$(HPSEARCH)" = "$(RELEASE_DIR)/hpsearch" ] && [ ! -x "$(HPSEARCH)" ]; then \
	  cmake --preset release && cmake --build --preset release -j $(JOBS) --target hpsearch_cli; \
	fi
	rm -rf $(DOCS_DIR)
	HPSEARCH="$(HPSEARCH)" sphinx-build -W --keep-going -q -b html docs $(DOCS_DIR)

# The docs as a test: built with warnings as errors (make docs), internal
# links, every runnable block of the pages run with $(HPSEARCH) on PATH, and
# every page opened in headless Chromium (scripts/check-docs.py).
check-docs: docs
	python3 scripts/check-docs.py --hpsearch "$(HPSEARCH)" --html $(DOCS_DIR)

# The demo's build: only the hpsearch executable (hpsearch_cli, which builds
# hpsearch-torch too) and the libraries it links, in the release build
# folder, configured without the tests and benchmarks (they need packages of
# the "all" profile; `cmake --preset release`, as every other target runs it,
# turns them on again).
build-demo: deps-demo
	cmake --preset release -DHPSEARCH_BUILD_TESTS=OFF -DHPSEARCH_BUILD_BENCH=OFF
	cmake --build --preset release -j $(JOBS) --target hpsearch_cli

demo: build-demo
	$(DEMO_CMD)
	./$(RELEASE_DIR)/hpsearch report fmnist-demo.db -o $(DEMO_REPORT)
	@echo "demo: the study's report: $(abspath $(DEMO_REPORT)) (open it in a browser)"

install: build
	cmake --install $(RELEASE_DIR) --prefix "$(PREFIX)"

bench: build
	@$(BENCH_CMD)

clean:
	rm -rf build

# gotree — make verbs a newcomer guesses. `make demo` and `make test` are the
# two commands of the README's Quick start; both set up what they need.
SHELL := /bin/bash
.ONESHELL:
.SHELLFLAGS := -eu -o pipefail -c

GO      ?= go
PYTHON  ?= python3
VENV    ?= .venv
VPY     := $(VENV)/bin/python
TORCH   ?= torch==2.11.0
NPROC   ?= 4
BUILD   := build
LIB     := $(BUILD)/libgotree.so
CLI     := $(BUILD)/gotree
GOFILES := $(shell find . -name '*.go' -not -path './$(VENV)/*' -not -path './build/*' 2>/dev/null) $(wildcard capi/*.c capi/*.h backend/reduce/*.c backend/reduce/*.h) \
	$(wildcard cuda/kernels.fatbin cuda/kernels.fatbin.sha256 cuda/kernels/*.cu cuda/kernels/*.cuh)

export CGO_ENABLED := 1
# go-nvml's bindings name NVML functions deprecated in CUDA 13: quiet, not an error.
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations

.PHONY: all build lib cli venv wheel install demo test test-go test-abi test-python lint bench clean kernels kernels-check torch-compat

all: build

build: lib cli

lib: $(LIB)
$(LIB): $(GOFILES) go.mod
	mkdir -p $(BUILD)
	$(GO) build -buildmode=c-shared -o $(LIB) ./capi

cli: $(CLI)
$(CLI): $(GOFILES) go.mod
	mkdir -p $(BUILD)
	$(GO) build -o $(CLI) ./cmd/gotree

# A virtual environment with torch (CPU side; from PyPI) and the test tools.
venv: $(VENV)/.ready
$(VENV)/.ready:
	$(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip
	$(VPY) -c 'import torch' 2>/dev/null || $(VPY) -m pip install -q $(TORCH)
	# ninja: torch's extension builder then compiles incrementally, so the
	# wheel build after an in-place build (make test) reuses its object file.
	$(VPY) -m pip install -q numpy pytest wheel setuptools expecttest ninja
	touch $@

wheel: venv
	rm -rf dist
	MAX_JOBS=1 $(VPY) -m pip wheel . -w dist --no-build-isolation --no-deps -q
	ls dist/gotree-*.whl

install: wheel
	$(VPY) -m pip install -q --force-reinstall --no-deps dist/gotree-*.whl

# Quick start (a): set everything up and run the main job on this machine.
demo: install
	cd /tmp && OMP_NUM_THREADS=1 $(abspath $(VENV))/bin/torchrun --standalone --nproc-per-node $(NPROC) -m gotree.demo

# Quick start (b): every test.
test: lint test-go test-abi test-python

# Packages that start no goroutines (algorithms/purity_test.go holds
# algorithms/ to it): the race detector has nothing to find there and makes
# them seven times slower.
NORACE_PKGS = ./algorithms/ ./topology/ ./backend/reduce/

test-go:
	$(GO) test -race -count=1 $$($(GO) list ./... | grep -vxF "$$($(GO) list $(NORACE_PKGS))")
	$(GO) test -count=1 $(NORACE_PKGS)
	# Without the race detector: allocation counts (its sync.Pool drops
	# items), and what the race run trims (internal/race.Enabled): the full
	# soak, the widest world sizes, the 16 MiB emulated kernels.
	$(GO) test -count=1 -run 'AllocatesLittle|^TestSoak$$|^TestCollectivesAcrossWorldSizes$$|^TestMismatchedRootsFailEveryRank$$|^TestRankCommTorchSequenceBounds$$' ./pg/ ./cuda/

$(BUILD)/abi_test: tests/c/abi_test.c capi/gotree.h $(LIB)
	cc -std=c99 -Wall -Wextra -Werror -O1 -g -Icapi -o $@ tests/c/abi_test.c -L$(BUILD) -lgotree -Wl,-rpath,'$$ORIGIN' -Wl,-z,lazy -Wl,--allow-shlib-undefined -lm

# The same program built with LeakSanitizer: the C side of the ABI must not leak.
$(BUILD)/abi_test_lsan: tests/c/abi_test.c capi/gotree.h $(LIB)
	cc -std=c99 -Wall -Wextra -Werror -O1 -g -fsanitize=leak -Icapi -o $@ tests/c/abi_test.c -L$(BUILD) -lgotree -Wl,-rpath,'$$ORIGIN' -Wl,-z,lazy -Wl,--allow-shlib-undefined -lm

test-abi: $(BUILD)/abi_test $(BUILD)/abi_test_lsan
	$(BUILD)/abi_test --nranks 1
	$(BUILD)/abi_test --nranks 3
	$(BUILD)/abi_test --nranks 4
	GOTREE_ALGO=allreduce:direct GOTREE_CPU_ALLOCATOR=shared,min_bytes:1M $(BUILD)/abi_test --nranks 3
	$(BUILD)/abi_test_lsan --nranks 3

# Compiles the torch extension against the headers of other torch releases
# (tests/compat/torch_headers.sh; keeps each release's headers in build/).
# The oldest and newest tested, and both sides of each TORCH_VERSION test in
# python/csrc (split from 2.9, stream handles from 2.11, C++20 from 2.12).
TORCH_COMPAT ?= 2.4.1 2.8.0 2.9.0 2.10.0 2.12.1 2.15.0
torch-compat: venv
	PY=$(VPY) tests/compat/torch_headers.sh $(TORCH_COMPAT)

# Builds python/gotree in place (setup.py build_ext --inplace) and runs torchrun-based tests.
test-python: venv
	MAX_JOBS=1 $(VPY) -m pytest -q --durations=12 tests/python

lint:
	test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo 'gofmt needed'; exit 1; }
	$(GO) vet ./...

# cuda/kernels/*.cu -> cuda/kernels.fatbin (committed, embedded); nvcc from PyPI's CUDA 13.0
# wheels in build/cuda-venv. kernels-check rebuilds and fails if the committed fatbin is stale.
kernels:
	cuda/build_kernels.sh
kernels-check:
	cuda/build_kernels.sh --check

bench:
	$(GO) test -run '^$$' -bench . -benchtime 200ms ./backend/reduce/

clean:
	rm -rf $(BUILD) dist *.egg-info

# P-MOSS — one-command setup, demo, tests and benchmarks on a fresh Debian 12 machine.
# Every target runs `setup` first; every step is idempotent (stamps and CMake's own state).
SHELL := /bin/bash
.DEFAULT_GOAL := help
VENV  := .venv
PY    := $(VENV)/bin/python
BUILD := build
SUDO  := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
export DVC_NO_ANALYTICS := 1
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export PMOSS_LIB := $(CURDIR)/$(BUILD)/runtime/libpmoss.so
export MLFLOW_TRACKING_URI ?= sqlite:///$(CURDIR)/mlflow/mlflow.db
# Every pipeline stage is a new Python process: with PYTHONDONTWRITEBYTECODE set (some shells and
# CI images set it) and pip's --no-compile below, each one would compile torch, Lightning and MLflow
# from source again (~9 s a stage); unset, the first import writes the bytecode into .venv once.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: help setup apt apt-test venv native demo scenario test test-py test-c test-sanitize bench clean
help:  ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

setup: apt venv native  ## what the demo needs: apt packages, .venv with pinned packages, C build

# Two lists: the demo's (apt-packages.txt) and what only the tests and benchmarks use (qemu guest,
# fuzzer, absl baseline: apt-test-packages.txt), so `make demo` does not install a kernel and clang.
apt: .stamp-apt
.stamp-apt: setup/apt-packages.txt
	$(SUDO) apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $$(grep -v '^#' setup/apt-packages.txt)
	touch $@

apt-test: .stamp-apt-test
.stamp-apt-test: setup/apt-test-packages.txt .stamp-apt
	DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $$(grep -v '^#' setup/apt-test-packages.txt)
	touch $@

venv: .stamp-venv
# torch==2.13.0 first: it is the CPU build on disk; any other spec pulls a multi-GB CUDA build.
# --no-compile: Python compiles what is imported on first use; pip would byte-compile every module
# of every package (Ray's alone is 240 MB), most of which the pipeline never imports.
# setup/pmoss_venv_path.py: `.venv/bin/dvc repro` from a shell without the venv activated still finds
# the stages' `pmoss` (the venv's Python processes put .venv/bin first on PATH, as activating does).
.stamp-venv: pyproject.toml setup/constraints.txt setup/pmoss_venv_path.py
	[ -x $(PY) ] || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q --no-compile torch==2.13.0
	$(PY) -m pip install -q --no-compile -c setup/constraints.txt -e '.[test]'
	$(PY) setup/pmoss_venv_path.py
	touch $@

native: .stamp-apt  ## build libpmoss + pmoss-runtime (CMake, Release with debug info)
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@# the build's ~170 progress lines go to a log (shown only when it fails), so the demo's screen stays readable
	@cmake --build $(BUILD) -j2 >$(BUILD)/build.log 2>&1 || { cat $(BUILD)/build.log; exit 1; }
	@echo "native: $(BUILD)/runtime/libpmoss.so and pmoss-runtime built (log: $(BUILD)/build.log)"

demo: setup  ## run the whole pipeline (dvc repro) on the embedded tiny defaults, then one screen of results
	$(VENV)/bin/dvc repro
	@echo
	@$(VENV)/bin/pmoss summary

# The dynamic scenario (lookup -> scan -> read-write) served by the promoted champion, on a simulated
# Skylake-X-like machine and on this host's real runtime. Needs the demo's registered model.
scenario: demo  ## promote the candidate (gated) and serve the dynamic scenario; plots in serve/
	-pmoss registry promote --eval datasets/pools/eval-tiny.yaml
	pmoss serve --backend sim --machine intel-skx-4s --phases ycsb-c:20,scan:20,ycsb-a:20 -o serve/sim
	pmoss serve --backend runtime --keys 1000000 --phases ycsb-c:5,scan:5,ycsb-a:5 -o serve/runtime

# apt-test before setup: the C build then configures with the test-only packages present.
test: apt-test setup  ## ctest, sanitizer builds, pytest (fast set + the `ci` slice of the slow ones)
	$(MAKE) test-c
	$(MAKE) test-sanitize
	$(MAKE) test-py

test-c:
	ctest --test-dir $(BUILD) --output-on-failure -j2

# ASan/UBSan: every C unit test; TSan: the concurrent ones. Separate trees, same sources.
test-sanitize:
	cmake -S . -B build-asan -DPMOSS_SANITIZE=address,undefined -DCMAKE_BUILD_TYPE=Debug >/dev/null
	cmake --build build-asan -j2
	ctest --test-dir build-asan --output-on-failure -j2 -E 'fuzz|guest'
	cmake -S . -B build-tsan -DPMOSS_SANITIZE=thread -DCMAKE_BUILD_TYPE=Debug >/dev/null
	cmake --build build-tsan -j2
	TSAN_OPTIONS=halt_on_error=1 ctest --test-dir build-tsan --output-on-failure -R '_mt|test_runtime|probe'

test-py:
	$(VENV)/bin/pytest -q -m "not slow"
	$(VENV)/bin/pytest -q -m "slow and ci"

bench: apt-test setup  ## every benchmark; JSON records land in benchmarks/results/
	@# the concurrency stresses of docs/concurrency.md, longer than ctest runs them (2 s, 0.6 s a mix)
	$(BUILD)/runtime/test_tree_stress_mt 60
	$(BUILD)/runtime/test_runtime_shared_mt 15
	for b in benchmarks/bench_*.py; do $(PY) $$b || exit 1; done
	$(PY) benchmarks/report.py

clean:
	rm -rf $(BUILD) build-asan build-tsan .stamp-*

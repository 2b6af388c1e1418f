# Build / set-up scaffolding for torch_zyx. Everything runs from the local .venv.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.stamp
# Pinned on purpose: a loose `torch` requirement resolves to a multi-GB CUDA build.
TORCH_VERSION := 2.13.0

.PHONY: venv demo test test-opencl test-cuda test-ops fuzz fuzz-cuda opinfo-expected opinfo-expected-opencl bench lint ocl clean

venv: $(STAMP)

$(VPY):
	$(PYTHON) -m venv $(VENV)

# Re-run when the install inputs change (the C node table is built by this install) or the venv is new.
$(STAMP): pyproject.toml setup.py torch_zyx/lazy/_native.c torch_zyx/runtime/_launch.c torch_zyx/runtime/_cuda_launch.c torch_zyx/runtime/_words.h | $(VPY)
	@TORCH_DEVICE_BACKEND_AUTOLOAD=0 $(VPY) -c "import torch" 2>/dev/null || $(VPY) -m pip install -q torch==$(TORCH_VERSION)
	$(VPY) -m pip install -q -e '.[test,cuda]'
	@touch $(STAMP)

demo: venv
	$(VPY) -m torch_zyx.demo

# OpenCL through PoCL (CPU). Non-fatal: without it the OpenCL tests skip with a reason.
ocl: venv
	@if ! command -v clinfo >/dev/null 2>&1 || ! ls /etc/OpenCL/vendors/*.icd >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "ocl: installing PoCL (pocl-opencl-icd ocl-icd-libopencl1 clinfo)"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	      pocl-opencl-icd ocl-icd-libopencl1 clinfo) >/dev/null 2>&1 \
	      || echo "ocl: apt-get install of PoCL failed; OpenCL tests will be skipped"; \
	  else \
	    echo "ocl: no OpenCL ICD and cannot apt-get install (need root + apt-get); OpenCL tests will be skipped"; \
	  fi; \
	fi
	@$(VPY) -c "import pyopencl" 2>/dev/null || $(VPY) -m pip install -q pyopencl \
	  || echo "ocl: pip install pyopencl failed; OpenCL tests will be skipped"

# The CPU pass (which also renders every kernel of the fusion and op tests as CUDA C and compiles
# it with NVRTC, no GPU needed: tests/cuda_render_check.py), the OpenCL pass, and a short pass on
# the Python node table (ZYX_NATIVE=0: the fallback where the install could not compile
# torch_zyx/lazy/_native.c) over the tests that lean on the graph most: fusion and the schedule
# cache, aliasing and mutation, memory.
test: venv ocl
	ZYX_CHECK_CUDA_RENDER=cubin $(VPY) -m pytest -n auto -q tests
	ZYX_NATIVE=0 $(VPY) -m pytest -n auto -q tests/test_fusion.py tests/test_semantics.py tests/test_memory.py
	$(MAKE) --no-print-directory test-opencl

# The whole suite again with an OpenCL device (PoCL here) as zyx:0, but for test_backends.py
# (the CPU pass runs it: it puts the OpenCL devices next to the CPU itself) and with a smaller
# OpInfo slice, every 96th test instead of every 12th (a subset of the CPU pass's): PoCL
# spends ~0.2-0.5 s on each new kernel at its first launch (plus one build per batch of
# kernels, runtime/opencl.py), and OpInfo samples make many. OpInfo tests run in a spawned
# worker process there (tests/test_opinfo.py: OpenCL does not survive fork). test_linalg.py
# and the transformer/small-CNN training tests run here too since OpenCL builds are batched
# and the factorizations compile the same kernels for every step: the whole pass took 18.4
# min on 2 cores with an empty PoCL cache (test_linalg.py 270 s of test time, the training
# tests ~2 min). Every 48th OpInfo test took 4:04 of the pass's 12:38 in session 25, and the
# whole make test 23:58 of its 25-minute bound: every 96th since. Skipped, with the reason,
# when no OpenCL platform is available.
OPENCL_OPINFO_STRIDE := 96
test-opencl: venv ocl
	@if $(VPY) -c "import pyopencl as cl; assert cl.get_platforms()" >/dev/null 2>&1; then \
	  ZYX_BACKENDS=opencl ZYX_OPINFO_STRIDE=$(OPENCL_OPINFO_STRIDE) $(VPY) -m pytest -n auto -q \
	    --ignore=tests/test_backends.py tests; \
	else echo "test-opencl: skipped: no OpenCL platform (pyopencl or an ICD is missing)"; fi

# The whole suite with the first CUDA GPU as zyx:0 (OpInfo slice included; OpInfo tests run in
# a spawned worker, since CUDA does not survive fork), on a machine with an NVIDIA driver.
# CUDA_PY is the Python to run it with: by default the venv, given the `cuda` extra (its torch is
# the CPU build: the tests of copies with torch's own cuda tensors then skip); a Python that has
# a CUDA build of torch, cuda-bindings, NVRTC, pytest and expecttest already can run it as is
# (`make test-cuda CUDA_PY=python3`; the C extensions are built in place).
CUDA_PY ?= $(VPY)
test-cuda:
	@if [ "$(CUDA_PY)" = "$(VPY)" ]; then $(MAKE) --no-print-directory venv \
	  && $(VPY) -m pip install -q -e '.[cuda,test]'; \
	else $(CUDA_PY) setup.py -q build_ext --inplace >/dev/null; fi
	ZYX_BACKENDS=cuda $(CUDA_PY) -m pytest -n auto -q --ignore=tests/test_backends.py tests

# Regenerate tests/opinfo_expected_failures_opencl.json (the failures only OpenCL has) from a
# run of the OpenCL slice.
opinfo-expected-opencl: venv ocl
	rm -rf $(OPINFO_RECORD)-opencl
	-ZYX_BACKENDS=opencl ZYX_OPINFO_STRIDE=$(OPENCL_OPINFO_STRIDE) ZYX_OPINFO_RECORD=$(OPINFO_RECORD)-opencl \
	  $(VPY) -m pytest -n auto -q tests/test_opinfo.py
	$(VPY) tests/opinfo_report.py $(OPINFO_RECORD)-opencl --backend opencl --write

# `make test` runs a deterministic ~1/12 slice of the OpInfo tests (and ~1/20 of them through
# torch.compile, tests/test_opinfo_compile.py); this runs all of them, eager and compiled, and
# prints the pass rates (tests/opinfo_report.py) from the recorded outcomes.
OPINFO_RECORD := build/opinfo-record
test-ops: venv
	rm -rf $(OPINFO_RECORD)
	ZYX_OPINFO_FULL=1 ZYX_OPINFO_RECORD=$(OPINFO_RECORD) $(VPY) -m pytest -n auto -q tests/test_opinfo.py \
	  tests/test_opinfo_compile.py; \
	  status=$$?; $(VPY) tests/opinfo_report.py $(OPINFO_RECORD); exit $$status

# Regenerate tests/opinfo_expected_failures.json from a fresh full run.
opinfo-expected: venv
	rm -rf $(OPINFO_RECORD)
	-ZYX_OPINFO_FULL=1 ZYX_OPINFO_RECORD=$(OPINFO_RECORD) $(VPY) -m pytest -n auto -q tests/test_opinfo.py
	$(VPY) tests/opinfo_report.py $(OPINFO_RECORD) --write

# The random-program fuzzer (tests/test_fuzz.py) at length: 10,000 programs with a random seed on
# the CPU backend, then on OpenCL and CUDA where they are available (make test runs 200 with a
# fixed seed). FUZZ_JOBS processes share each backend's programs (each its own random seed).
FUZZ_EXAMPLES ?= 10000
FUZZ_JOBS ?= 1
FUZZ_RUN = seq $(FUZZ_JOBS) | xargs -P $(FUZZ_JOBS) -I{} env $(2) ZYX_FUZZ_RANDOM=1 \
  ZYX_FUZZ_EXAMPLES=$$(( $(FUZZ_EXAMPLES) / $(FUZZ_JOBS) )) $(1) -m pytest -q -p no:cacheprovider tests/test_fuzz.py
fuzz: venv ocl
	$(call FUZZ_RUN,$(VPY))
	@if $(VPY) -c "import pyopencl as cl; assert cl.get_platforms()" >/dev/null 2>&1; then \
	  $(call FUZZ_RUN,$(VPY),ZYX_BACKENDS=opencl); \
	else echo "fuzz: OpenCL skipped: no OpenCL platform"; fi
	@$(MAKE) --no-print-directory fuzz-cuda CUDA_PY=$(VPY)

# The CUDA part of make fuzz (CUDA_PY as for test-cuda); skipped with the reason without a GPU.
fuzz-cuda:
	@why=$$($(CUDA_PY) -c "from torch_zyx.runtime.cuda import probe; print(probe()[1])" 2>&1 | tail -1); \
	if [ -z "$$why" ]; then $(call FUZZ_RUN,$(CUDA_PY),ZYX_BACKENDS=cuda); \
	else echo "fuzz: CUDA skipped: $$why"; fi

bench: venv
	$(VPY) bench/bench.py

lint: venv
	@$(VPY) -m ruff --version >/dev/null 2>&1 || $(VPY) -m pip install -q ruff
	$(VPY) -m ruff check .

clean:
	rm -rf build *.egg-info .pytest_cache .ruff_cache
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -exec rm -rf {} +

# portmat quick start: `make bench` or `make test` on a fresh Debian/Ubuntu machine (as root, or
# with sudo). Each sets up what it needs: system packages, .venv, a build of portmat in it.
#   make bench   every device of this machine against NumPy (and its peers: MKL and matplotlib are
#                pip-installed for it when they can be; dpnp too with BENCH_SYCL=1), written to
#                bench/results/$(MACHINE)-<device>-<dtype>.json and the tables of bench/results/README.md
#                and README.md; MACHINE defaults to "<cores>core" (BENCH_ARGS="--only cpu --sizes 512,1024")
#   make test    every test suite: C++ (GoogleTest via ctest), Python (pytest), and the installed
#                CMake package built into examples/cpp (test-example); then both suites again on
#                Intel's OpenCL CPU runtime (test-intel-opencl), a second vendor's OpenCL compiler
#   make sanitize  the C++ tests under sanitizers, as CI runs them after `make test`: all of them
#                under AddressSanitizer + UBSan (make sanitize-asan, in build/asan), the CPU
#                backend's and the core's under ThreadSanitizer (make sanitize-tsan, build/tsan)
# OFFLINE=1 uses what the machine already has (no apt-get, no downloads, no venv: portmat is
# installed into $(PYTHON)'s environment): for machines without network, such as the GPU machine.
PYTHON      ?= python3
VENV        := .venv
VPY         := $(VENV)/bin/python
BUILD_CPP   := build/cpp
BUILD_ASAN  := build/asan
BUILD_TSAN  := build/tsan
CMAKE_ARGS  ?=
BENCH_ARGS  ?=
MACHINE     ?= $(shell nproc 2>/dev/null || echo 1)core
JOBS        ?= $(shell nproc 2>/dev/null || echo 2)
OFFLINE     ?= 0
PIP_ARGS    ?=

# Debian/Ubuntu packages: compilers and CMake, Python's venv and headers, the Khronos OpenCL
# headers, an ICD loader with PoCL (OpenCL on the CPU, so every machine has a device), GoogleTest.
APT_PACKAGES := build-essential cmake ninja-build python3-dev python3-venv \
                opencl-c-headers ocl-icd-libopencl1 pocl-opencl-icd clinfo libgtest-dev
PY_PACKAGES  := "numpy>=1.24" "nanobind>=2.0" "scikit-build-core>=0.10" pytest hypothesis threadpoolctl tqdm ml_dtypes "dask[array,distributed]"
# Optional peers and tools of `make bench` (pyproject.toml's `bench` extra), each installed when pip
# can (MKL's wheel exists for x86-64 only): the vendor's gemm as the CPU peer, and matplotlib for
# `portmat bench --plot`. With BENCH_SYCL=1 also Intel's SYCL dpnp as a CPU peer (the `sycl` extra:
# wheels for x86-64 Linux only, about 2.8 GB with the oneMKL they bring, so not by default;
# bench/every_device.py registers Intel's OpenCL runtime for it). portmat never needs them to
# build, import or test.
BENCH_SYCL ?= 0
BENCH_PACKAGES := mkl matplotlib
ifeq ($(BENCH_SYCL),1)
BENCH_PACKAGES += dpnp dpctl intel-opencl-rt
endif

ifeq ($(OFFLINE),1)
VPY := $(PYTHON)
endif

# Sanitizer builds: the C++ tests only (no CUDA: nothing runs it without a GPU; no Python module).
# The runtimes (libasan, libubsan, libtsan) come with g++ (build-essential). Full stacks for
# allocations (fast_unwind_on_malloc=0) so that tests/sanitizers/lsan.supp can name PoCL's
# functions (see there); the options apply to the build too, which lists the tests by running them.
# Full stacks make PoCL's kernel compiler slow: after `make test` PoCL's kernel cache holds every
# kernel the tests use and the ASan run takes seconds; on a cold cache it takes minutes.
# use_sigaltstack=0: PoCL's LLVM swaps ASan's alternate signal stack for one it mallocs, on the
# big-stack thread that probes OpenCL; when that thread ends, GCC 12's ASan unmaps whatever stack
# is installed and aborts ("failed to deallocate ... unable to unmap"; google/sanitizers#1152,
# fixed in compiler-rt only in 2026). The price: a stack overflow crashes without ASan's report.
SAN_CMAKE_ARGS := -G Ninja -DPORTMAT_BUILD_TESTS=ON -DPORTMAT_BUILD_PYTHON=OFF -DPORTMAT_WITH_CUDA=OFF
ASAN_ENV := ASAN_OPTIONS=fast_unwind_on_malloc=0:check_initialization_order=1:use_sigaltstack=0 \
            LSAN_OPTIONS=suppressions=$(CURDIR)/tests/sanitizers/lsan.supp \
            UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
TSAN_ENV := TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1

.PHONY: bench bench-packages test test-intel-opencl test-cpp test-python test-example sanitize sanitize-asan sanitize-tsan system venv install clean
bench: install bench-packages
	$(VPY) -m portmat devices
	$(VPY) bench/every_device.py --machine $(MACHINE) $(BENCH_ARGS)

test: test-cpp test-python test-example test-intel-opencl

test-cpp: system
	cmake -S . -B $(BUILD_CPP) -G Ninja -DPORTMAT_BUILD_TESTS=ON -DPORTMAT_BUILD_PYTHON=OFF $(CMAKE_ARGS)
	cmake --build $(BUILD_CPP) -j $(JOBS)
	ctest --test-dir $(BUILD_CPP) --output-on-failure -j $(JOBS)

# The installed CMake package, used as a user's project would (examples/cpp).
test-example: test-cpp
	cmake --install $(BUILD_CPP) --prefix build/install >/dev/null
	cmake -S examples/cpp -B build/example -G Ninja -DCMAKE_PREFIX_PATH=$(CURDIR)/build/install >/dev/null
	cmake --build build/example
	build/example/matmul_example

# Then host memory, the NumPy contract and process safety on the OpenCL devices again, sent down a
# discrete GPU's pipelined path (PORTMAT_OPENCL_DISCRETE=1; docs/opencl.md), ~30 s on 2 cores.
# host memory first: its 'kept results stay ordinary' assumes no free pooled block of their size,
# which larger products of the other suites may leave behind (as in the full suite's order).
test-python: install
	$(VPY) -m pytest -q tests/python
	PORTMAT_OPENCL_DISCRETE=1 $(VPY) -m pytest -q tests/python/test_host_memory.py \
	  tests/python/test_numpy_contract.py tests/python/test_process_safety.py -k opencl || test $$? -eq 5  # 5: no OpenCL device

sanitize: sanitize-asan sanitize-tsan

# The C++ and Python suites on Intel's OpenCL CPU runtime (PyPI intel-opencl-rt; issue 19), so that
# every change is compiled by two independent OpenCL compilers (PoCL's, above, and Intel's). The
# wheel's own .icd names a placeholder path, so build/intel-opencl/vendors holds ours, naming its
# libintelocl.so; its libraries are found through a folder of links to the venv's (not the venv's
# lib itself, whose libOpenCL.so.1 would shadow the system's ICD loader). x86-64 only: where the
# wheel cannot be installed, or OFFLINE=1, this says so and passes.
INTEL_OCL := $(CURDIR)/build/intel-opencl
INTEL_ENV := OCL_ICD_VENDORS=$(INTEL_OCL)/vendors LD_LIBRARY_PATH=$(INTEL_OCL)/lib
test-intel-opencl: install test-cpp
ifeq ($(OFFLINE),1)
	@echo "test-intel-opencl: skipped (OFFLINE=1)"
else
	@if ! $(VPY) -m pip install -q intel-opencl-rt intel-cmplr-lib-rt; then \
	  echo "test-intel-opencl: skipped: Intel's OpenCL runtime cannot be installed here"; exit 0; fi; \
	rm -rf $(INTEL_OCL) && mkdir -p $(INTEL_OCL)/vendors $(INTEL_OCL)/lib && \
	echo "$(CURDIR)/$(VENV)/lib/libintelocl.so" > $(INTEL_OCL)/vendors/intel.icd && \
	for f in $(CURDIR)/$(VENV)/lib/*.so*; do \
	  case $$(basename $$f) in libOpenCL*) ;; *) ln -sf $$f $(INTEL_OCL)/lib/ ;; esac; done && \
	$(INTEL_ENV) $(VPY) -m portmat devices && \
	$(INTEL_ENV) $(VPY) -c "import portmat, sys; sys.exit(0 if any(d.backend == 'opencl' for d in portmat.devices()) else 'no Intel OpenCL device')" && \
	$(INTEL_ENV) ctest --test-dir $(BUILD_CPP) --output-on-failure -j $(JOBS) && \
	$(INTEL_ENV) $(VPY) -m pytest -q tests/python
endif

# Every C++ test: core, CPU backend, OpenCL on whatever device the machine has (PoCL on CI).
sanitize-asan: system
	cmake -S . -B $(BUILD_ASAN) $(SAN_CMAKE_ARGS) -DPORTMAT_SANITIZE=address,undefined $(CMAKE_ARGS)
	$(ASAN_ENV) cmake --build $(BUILD_ASAN) -j $(JOBS)
	$(ASAN_ENV) ctest --test-dir $(BUILD_ASAN) --output-on-failure -j $(JOBS)

# The CPU backend (thread pool, gemm driver, concurrent callers) and the core; OpenCL is not built:
# PoCL's own threads are not instrumented, so TSan could not see their synchronisation. The fork
# tests are left out: TSan does not support a child of a multi-threaded process starting threads
# (it kills the child: "starting new threads after multi-threaded fork is not supported"), and
# that is what they check; the ASan run and `make test` run them.
sanitize-tsan: system
	cmake -S . -B $(BUILD_TSAN) $(SAN_CMAKE_ARGS) -DPORTMAT_WITH_OPENCL=OFF -DPORTMAT_SANITIZE=thread $(CMAKE_ARGS)
	$(TSAN_ENV) cmake --build $(BUILD_TSAN) -j $(JOBS)
	$(TSAN_ENV) ctest --test-dir $(BUILD_TSAN) --output-on-failure -j $(JOBS) -E 'Process.*Fork'

system:
ifneq ($(OFFLINE),1)
	@if command -v dpkg >/dev/null && ! dpkg -s $(APT_PACKAGES) >/dev/null 2>&1; then \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q --no-install-recommends $(APT_PACKAGES); \
	fi
endif

$(VENV)/bin/python: | system
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip

ifeq ($(OFFLINE),1)
venv:
else
venv: $(VENV)/bin/python
	$(VPY) -m pip install -q $(PY_PACKAGES)
endif

bench-packages: install
ifneq ($(OFFLINE),1)
	@for p in $(BENCH_PACKAGES); do \
	  $(VPY) -m pip install -q $$p || echo "note: $$p not installed: the benchmark goes on without it"; \
	done
endif

install: venv
	$(VPY) -m pip install -q --no-build-isolation $(PIP_ARGS) .

clean:
	rm -rf build $(VENV)

# portmat quick start: `make bench` or `make test` on a fresh Debian/Ubuntu machine (as root, or
# with sudo). Each sets up what it needs: system packages, .venv, a build of portmat in it.
#   make bench   every device of this machine against NumPy (and its peers), written to
#                bench/results/$(MACHINE)-<device>-<dtype>.json and the tables of bench/results/README.md
#                and README.md; MACHINE defaults to "<cores>core" (BENCH_ARGS="--only cpu --sizes 512,1024")
#   make test    every test suite: C++ (GoogleTest via ctest) and Python (pytest)
# OFFLINE=1 uses what the machine already has (no apt-get, no downloads, no venv: portmat is
# installed into $(PYTHON)'s environment): for machines without network, such as the GPU machine.
PYTHON      ?= python3
VENV        := .venv
VPY         := $(VENV)/bin/python
BUILD_CPP   := build/cpp
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
PY_PACKAGES  := "numpy>=1.22" "nanobind>=2.0" "scikit-build-core>=0.10" pytest hypothesis threadpoolctl

ifeq ($(OFFLINE),1)
VPY := $(PYTHON)
endif

.PHONY: bench test test-cpp test-python system venv install clean
bench: install
	$(VPY) -m portmat devices
	$(VPY) bench/every_device.py --machine $(MACHINE) $(BENCH_ARGS)

test: test-cpp test-python

test-cpp: system
	cmake -S . -B $(BUILD_CPP) -G Ninja -DPORTMAT_BUILD_TESTS=ON -DPORTMAT_BUILD_PYTHON=OFF $(CMAKE_ARGS)
	cmake --build $(BUILD_CPP) -j $(JOBS)
	ctest --test-dir $(BUILD_CPP) --output-on-failure -j $(JOBS)

test-python: install
	$(VPY) -m pytest -q tests/python

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

install: venv
	$(VPY) -m pip install -q --no-build-isolation $(PIP_ARGS) .

clean:
	rm -rf build $(VENV)

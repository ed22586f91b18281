#!/usr/bin/env bash
# Issue 2 on the H200 machine through NVIDIA's OpenCL driver: tune gemm.cl's parameters, run the
# benchmark (with cuBLAS peers), then `make test`. Run from the project root on the device machine
# after `source .device/setup.sh`; results go to $OUT.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
only="-DPORTMAT_WITH_CPU=OFF -DPORTMAT_WITH_CUDA=OFF"   # this run measures the OpenCL backend
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv
make install OFFLINE=1 PIP_ARGS="-C cmake.define.PORTMAT_WITH_CPU=OFF -C cmake.define.PORTMAT_WITH_CUDA=OFF" 2>&1 | tail -3
python3 -m portmat devices
python3 bench/h200_diag.py gpu opencl:1 || { echo "GPU diagnostics failed"; exit 1; }
python3 bench/tune_opencl.py --device gpu --sizes 1024,4096 --repeat 5 2>&1 | tee "$OUT/tune_f32.txt"
python3 -m portmat bench --device gpu --json "$OUT/h200_opencl_f32.json" 2>&1
python3 -m portmat bench --device gpu --dtype float64 --sizes 1024,2048 --repeat 5 --json "$OUT/h200_opencl_f64.json" 2>&1
make test OFFLINE=1 PIP_ARGS="-C cmake.define.PORTMAT_WITH_CPU=OFF -C cmake.define.PORTMAT_WITH_CUDA=OFF" \
  CMAKE_ARGS="$only -DPORTMAT_GTEST_SOURCE=/tmp/devroot/usr/src/googletest" > "$OUT/make_test.log" 2>&1
echo "make test exit: $?"
grep -E "tests passed|tests failed|passed|failed|error" "$OUT/make_test.log" | tail -8
# PoCL, where the image has it, crashed in Python processes on this machine: where?
timeout 120 cuda-gdb -batch -ex run -ex bt --args python3 bench/h200_diag.py opencl:0 > "$OUT/pocl_gdb.txt" 2>&1
tail -30 "$OUT/pocl_gdb.txt"

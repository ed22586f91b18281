#!/usr/bin/env bash
# Everything on the H200 machine in one call (device time is scarce): build with every backend,
# a first check of each GPU device, the benchmarks (OpenCL and CUDA on the GPU with cuBLAS peers,
# the native CPU backend against NumPy on the 16-core host), then `make test`.
# From the project root on the device machine: source .device/setup.sh; bash bench/h200_all.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv
make install OFFLINE=1 2>&1 | tail -3
python3 -m portmat devices
gpus=$(python3 -c "import portmat; print(' '.join(d.id for d in portmat.devices() if d.kind == 'gpu'))")
python3 bench/h200_diag.py $gpus || echo "GPU diagnostics failed"
python3 -m portmat bench --device opencl --json "$OUT/opencl_f32.json"
python3 -m portmat bench --device cuda --sizes 512,1024,2048,4096,8192 --json "$OUT/cuda_f32.json"
python3 -m portmat bench --device cpu --sizes 256,512,1024,2048,4096 --json "$OUT/cpu16_f32.json"
python3 -m portmat bench --device cpu --dtype float64 --sizes 2048 --repeat 5 --json "$OUT/cpu16_f64.json"
make test OFFLINE=1 JOBS=16 CMAKE_ARGS="-DPORTMAT_GTEST_SOURCE=/tmp/devroot/usr/src/googletest" > "$OUT/make_test.log" 2>&1
echo "make test exit: $?"
grep -E "tests passed|tests failed|passed|failed" "$OUT/make_test.log" | tail -6

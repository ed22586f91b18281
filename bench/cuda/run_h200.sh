#!/bin/bash
# One lease on the H200, everything that needs the GPU in one go: build (C++ tests and the Python
# package), CUDA tests, compute-sanitizer (memcheck, racecheck) on small cases, Python tests on the
# CUDA device, then the benchmarks (device-resident tiles vs cuBLAS, host-path sweeps, NumPy-in/out
# vs CuPy and torch, CPU/GPU crossover). Run from the repository root with $OUT set:
#   source .device/setup.sh; bash bench/cuda/run_h200.sh [quick]
set -o pipefail
OUT=${OUT:-/tmp/cuda_out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PATH=/usr/local/cuda/bin:$PATH
J=$OUT/cuda_bench.json
step() { echo; echo "==== $* ($(date +%T))"; }

step gpu; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit --format=csv
if [ ! -e /usr/include/gtest/gtest.h ]; then for f in .device/gtest/*.deb; do dpkg -x "$f" /tmp/devroot; done; fi

# The CPU backend is another helper's work in progress: built only when PORTMAT_CPU=ON.
CPU=${PORTMAT_CPU:-OFF}
if [ "$1" != bench ]; then
step cpp build
rm -rf build/h200
cmake -S . -B build/h200 -G Ninja -DPORTMAT_BUILD_TESTS=ON -DPORTMAT_BUILD_PYTHON=OFF -DPORTMAT_WITH_CPU=$CPU >/dev/null &&
  cmake --build build/h200 -j 16 2>&1 | grep -E "error|warning|FAILED" | head -20
if [ ! -x build/h200/portmat_tests ]; then
  echo "build failed: retrying without the CPU backend"; CPU=OFF
  cmake -S . -B build/h200 -G Ninja -DPORTMAT_BUILD_TESTS=ON -DPORTMAT_BUILD_PYTHON=OFF -DPORTMAT_WITH_CPU=OFF >/dev/null &&
    cmake --build build/h200 -j 16 2>&1 | grep -E "error|FAILED" | head -20
fi
fi
step pip install  # its own build dir: one left on the machine by another build may have CUDA off
rm -rf build/py-cuda; (python3 -m pip install -q --no-build-isolation -C build-dir=build/py-cuda -C cmake.define.PORTMAT_WITH_CUDA=ON \
   -C cmake.define.PORTMAT_WITH_CPU=$CPU . 2>&1 | tail -5) &
PIP=$!

if [ "$1" != bench ]; then
step cuda tests; timeout 240 build/h200/portmat_tests --gtest_filter='Cuda*:*CudaTiles*' 2>&1 | tee $OUT/ctest.log | grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure|error|expected" | head -40
step sass; cuobjdump -sass -fun gemm_sm80_f32_128x128_rr build/h200/embedded/cuda_gemm.fatbin 2>/dev/null > /tmp/rr.sass
for i in FFMA LDS.128 LDS LDL STL LDGSTS BAR.SYNC; do echo "$i $(grep -c "$i" /tmp/rr.sass)"; done | tr '\n' ' '; echo

fi
if [ "$1" = "" ]; then
step sanitizer
( timeout 150 compute-sanitizer --tool memcheck --leak-check no build/h200/portmat_tests --gtest_filter='CudaGemm.DeviceResident*:CudaGemm.OutOfMemory*:CudaGemm.Chunked*' 2>&1 | grep -E "Program hit|PASSED|FAILED|SUMMARY"
  timeout 120 compute-sanitizer --tool racecheck build/h200/portmat_tests --gtest_filter='CudaGemm.DeviceResident*' 2>&1 | tail -3
  PORTMAT_CUDA_TILE=128x128 timeout 120 compute-sanitizer --tool racecheck build/h200/portmat_tests --gtest_filter='CudaGemm.DeviceResident*' 2>&1 | tail -3
  PORTMAT_CUDA_TILE=128x256 timeout 120 compute-sanitizer --tool synccheck build/h200/portmat_tests --gtest_filter='CudaGemm.DeviceResident*' 2>&1 | tail -3
) 2>&1 | tee $OUT/sanitizer.log
fi
wait $PIP
python3 -c "import portmat; print(portmat.__file__, [d.id + ' ' + d.name for d in portmat.devices()])"
step python tests; timeout 200 python3 -m pytest -q -x -k cuda tests/python 2>&1 | tail -6

step device-resident tiles vs cuBLAS
timeout 200 python3 bench/cuda/bench_cuda.py device --sizes 1024,2048,4096,8192 --tiles ${TILES:-,128x128,128x256,64x64} --json $J
if [ "$1" != quick ] && [ -z "$NOSWEEP" ]; then
step host sweep n=4096
for c in 16 32 64; do PORTMAT_CUDA_CHUNK_MB=$c timeout 30 python3 bench/cuda/bench_cuda.py hostone --n 4096 --json $J; done
step group_m sweep n=8192 tile 128x256
for g in 4 16; do PORTMAT_CUDA_GROUP_M=$g timeout 60 python3 bench/cuda/bench_cuda.py device --sizes 8192 --json $J; done
fi
step host vs CuPy, torch
timeout 200 python3 bench/cuda/bench_cuda.py host --sizes 512,1024,2048,4096,8192 --json $J
step crossover
timeout 100 python3 bench/cuda/bench_cuda.py crossover --sizes 64,128,192,256,384,512,768,1024 --repeat 20 --json $J
step done

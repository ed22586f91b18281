#!/bin/bash
# One H200 call for a round of CUDA work: build (C++ tests + the Python package), the CUDA C++
# tests (every tile at awkward shapes), host-memory diagnostics, the tile sweep against cuBLAS,
# the Python tests on CUDA, and the NumPy-in/NumPy-out path with its switches.
#   source .device/setup.sh; TILES=128x256,128x256_db [CPU=OFF] [DIAG=1] [SANITIZE=1] [BENCH=1] \
#     bash bench/cuda/h200_iter.sh
# (CPU=OFF builds without the CPU backend; DIAG runs host_diag.py; BENCH the portmat bench.)
set -o pipefail
OUT=${OUT:-/tmp/cuda_out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PATH=/usr/local/cuda/bin:$PATH
J=$OUT/cuda_iter.json
step() { echo; echo "==== $* ($(date +%T))"; }
step gpu; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit --format=csv
if [ ! -e /usr/include/gtest/gtest.h ]; then for f in .device/gtest/*.deb; do dpkg -x "$f" /tmp/devroot; done; fi
step builds
rm -rf build/h200 build/py-cuda
(cmake -S . -B build/h200 -G Ninja -DPORTMAT_BUILD_TESTS=ON -DPORTMAT_BUILD_PYTHON=OFF \
   -DPORTMAT_GTEST_SOURCE=/tmp/devroot/usr/src/googletest -DPORTMAT_WITH_CPU=${CPU:-ON} >/dev/null &&
 cmake --build build/h200 -j 8 2>&1 | grep -E "error|warning|FAILED" | head -20) &
CPP=$!
(python3 -m pip install -q --no-build-isolation -C build-dir=build/py-cuda -C cmake.define.PORTMAT_WITH_CPU=${CPU:-ON} . 2>&1 | tail -5) &
PIP=$!
[ -n "$DIAG" ] && python3 bench/cuda/host_diag.py --mb 64 --json $OUT/host_diag.json 2>&1 | tail -40
wait $CPP $PIP
step cuda tests
timeout 300 build/h200/portmat_tests --gtest_filter='Cuda*:*CudaTiles*' 2>&1 | tee $OUT/ctest.log |
  grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure|error|expected" | head -40
if [ -n "$SANITIZE" ]; then
step sanitizer
( timeout 150 compute-sanitizer --tool memcheck --leak-check no build/h200/portmat_tests \
    --gtest_filter='CudaHostMemory*:CudaGemm.Chunked*:CudaGemm.DeviceResident*:CudaGemm.StreamK*' 2>&1 |
    grep -E "ERROR SUMMARY|PASSED|FAILED|Program hit|^=========     Host Frame:.*portmat" | sort | uniq -c | sort -rn | head -12
  for t in 128x256_fp 128x256_sk; do
    PORTMAT_CUDA_TILE=$t PORTMAT_CUDA_SK_UNITS=5 timeout 100 compute-sanitizer --tool racecheck build/h200/portmat_tests \
      --gtest_filter='CudaGemm.DeviceResident*' 2>&1 | tail -2
  done
  PORTMAT_CUDA_TILE=128x256_fp timeout 100 compute-sanitizer --tool synccheck build/h200/portmat_tests \
    --gtest_filter='CudaGemm.DeviceResident*' 2>&1 | tail -2
) 2>&1 | tee $OUT/sanitizer.log
fi
for u in 3 5 7; do PORTMAT_CUDA_SK_UNITS=$u PORTMAT_CUDA_TILE=128x256_sk timeout 60 build/h200/portmat_tests \
  --gtest_filter='*CudaTiles*:CudaGemm.Chunked*' 2>&1 | grep -E "^\[  (FAILED|PASSED) " ; done
step tiles vs cuBLAS
timeout 200 python3 bench/cuda/bench_cuda.py device --sizes 4096,8192 --tiles ${TILES:-128x256} --json $J
for g in ${GROUPS_M:-}; do PORTMAT_CUDA_GROUP_M=$g timeout 60 python3 bench/cuda/bench_cuda.py device --sizes 4096,8192 \
  --tiles ${TILES:-128x256} --json $J; done
step python tests on cuda
timeout 240 python3 -m pytest -q -x tests/python -k "cuda or host_memory" 2>&1 | tail -5
step host path switches n=4096
for env in "" "PORTMAT_CUDA_PIN_OPERANDS=0" ${HOST_ENVS:-}; do
  env $env timeout 40 python3 bench/cuda/bench_cuda.py hostone --n 4096 --repeat 15 --json $J
done
step host vs CuPy, torch
timeout 200 python3 bench/cuda/bench_cuda.py host --sizes 512,1024,2048,4096,8192 --json $J
if [ -n "$BENCH" ]; then
step portmat bench
timeout 300 python3 -m portmat bench --device cuda --sizes 512,1024,2048,4096,8192 --json $OUT/cuda_bench.json
fi
step done

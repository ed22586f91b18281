#!/bin/bash
# The last H200 call of a session: the package with every backend and the C++ tests of the CUDA
# backend (built side by side), the CUDA and host-memory Python tests, then the figures the issues
# ask for: `portmat bench` on CUDA (NumPy in/out, device-resident, CuPy / torch peers), the NumPy
# path at 4096 and 8192 against the pinned-transfer floor measured in the same run
# (bench_cuda.py host), and on the 16-core host CPU (float32 1024-4096, float64 2048; NO_CPU=1
# leaves these out).
#   source .device/setup.sh; bash bench/cuda/h200_final.sh
set -o pipefail
export PYTHONUNBUFFERED=1 PATH=/usr/local/cuda/bin:$PATH
OUT=${OUT:-/tmp/cuda_out}; mkdir -p "$OUT"
echo "== build $(date +%T)"
if [ ! -e /usr/include/gtest/gtest.h ]; then for f in .device/gtest/*.deb; do dpkg -x "$f" /tmp/devroot; done; fi
(cmake -S . -B build/h200 -G Ninja -DPORTMAT_BUILD_TESTS=ON -DPORTMAT_BUILD_PYTHON=OFF \
   -DPORTMAT_GTEST_SOURCE=/tmp/devroot/usr/src/googletest -DPORTMAT_WITH_CPU=OFF >/dev/null &&
 cmake --build build/h200 -j 6 2>&1 | grep -E "error|FAILED" | head -20) &
CPP=$!
python3 -m pip install -q --no-build-isolation -C build-dir=build/py-all . 2>&1 | tail -3
wait $CPP
python3 -c "import portmat; print([d.id + ' ' + d.name for d in portmat.devices()])"
echo "== ctest $(date +%T)"
timeout 120 build/h200/portmat_tests --gtest_filter='*Cuda*:HostBlockPool*' 2>&1 | tee $OUT/ctest.log |
  grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure" | head -20
echo "== pytest $(date +%T)"
timeout 90 python3 -m pytest -q -x tests/python -k "cuda or host_memory" 2>&1 | tee $OUT/pytest.log | tail -2
echo "== bench cuda $(date +%T)"
timeout 200 python3 -m portmat bench --device cuda --sizes 512,1024,2048,4096,8192 --json $OUT/cuda_bench.json 2>&1 | tail -9
echo "== NumPy path against the pinned floor $(date +%T)"
timeout 60 python3 bench/cuda/bench_cuda.py host --sizes 4096,8192 --json $OUT/host_floor.json 2>&1 | grep "^host"
[ -n "$NO_CPU" ] && { echo "== done $(date +%T)"; exit 0; }
echo "== bench cpu $(date +%T)"
timeout 90 python3 -m portmat bench --device cpu --sizes 1024,2048,4096 --json $OUT/cpu16_f32.json 2>&1 | tail -5
timeout 40 python3 -m portmat bench --device cpu --dtype float64 --sizes 2048 --repeat 5 --json $OUT/cpu16_f64.json 2>&1 | tail -3
echo "== done $(date +%T)"

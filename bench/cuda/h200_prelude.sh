# Sourced first by the H200 call scripts (h200_final.sh, h200_s7*.sh): builds the package with
# every backend and the C++ tests of the CUDA backend side by side, then runs the CUDA C++ tests
# (ctest.log) and the CUDA / host-memory Python tests (pytest.log) into $OUT.
set -o pipefail
export PYTHONUNBUFFERED=1 PATH=/usr/local/cuda/bin:$PATH
OUT=${OUT:-/tmp/cuda_out}; mkdir -p "$OUT"
echo "== build $(date +%T)"
if [ ! -e /usr/include/gtest/gtest.h ]; then for f in .device/gtest/*.deb; do dpkg -x "$f" /tmp/devroot; done; fi
(cmake -S . -B build/h200 -G Ninja -DPORTMAT_BUILD_TESTS=ON -DPORTMAT_BUILD_PYTHON=OFF \
   -DPORTMAT_GTEST_SOURCE=/tmp/devroot/usr/src/googletest -DPORTMAT_WITH_CPU=OFF >/dev/null &&
 cmake --build build/h200 -j 8 2>&1 | grep -E "error|FAILED" | head -20) &
CPP=$!
python3 -m pip install -q --no-build-isolation -C build-dir=build/py-all . 2>&1 | tail -3
wait $CPP
python3 -c "import portmat; print([d.id + ' ' + d.name for d in portmat.devices()])"
echo "== ctest $(date +%T)"
timeout 150 build/h200/portmat_tests --gtest_filter='*Cuda*:HostBlockPool*' 2>&1 | tee $OUT/ctest.log |
  grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure" | head -20
echo "== pytest $(date +%T)"
timeout 90 python3 -m pytest -q -x tests/python -k "cuda or host_memory" 2>&1 | tee $OUT/pytest.log | tail -2

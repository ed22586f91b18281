#!/usr/bin/env bash
# portmat's canonical figures on the H200 machine (one NVIDIA H200, 16-core host): build with
# every backend, every test suite (C++ under ctest, Python under pytest, on cuda:0, cpu:0 and both
# OpenCL devices: NVIDIA's and PoCL's), then `portmat bench` on every device
# (bench/every_device.py --machine h200). The results go to $OUT when it is set (the lent device
# machine copies that folder back), else to bench/results; then run `python bench/results_tables.py`.
#
#   source .device/setup.sh; bash bench/h200.sh [build] [test] [bench]     (default: all three)
#
# The steps can run in separate calls on one machine (the build stays between them), so that no
# call runs past the device tool's 10 minutes: `build test`, then `bench`.
set -uo pipefail
export PYTHONUNBUFFERED=1 PATH=/usr/local/cuda/bin:$PATH
RESULTS=${OUT:-bench/results}
LOGS=${OUT:-/tmp/portmat-h200}
mkdir -p "$RESULTS" "$LOGS"
steps=${*:-build test bench}
status=0

if [[ " $steps " == *" build "* ]]; then
  echo "== build $(date +%T)"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
  # GoogleTest for the C++ tests: the machine has none and no network; Debian's packages travel in
  # .device/gtest (here: mkdir -p .device/gtest; cd .device/gtest; apt-get download googletest
  # libgtest-dev), unpacked beside the OpenCL headers that .device/setup.sh unpacked.
  if [ ! -e /usr/include/gtest/gtest.h ]; then for f in .device/gtest/*.deb; do dpkg -x "$f" /tmp/devroot; done; fi
  # The C++ tests and the Python package side by side (each compiles the CUDA fatbin).
  (cmake -S . -B build/cpp -G Ninja -DPORTMAT_BUILD_TESTS=ON -DPORTMAT_BUILD_PYTHON=OFF >/dev/null &&
   cmake --build build/cpp -j 8 2>&1 | grep -E "error|FAILED" | head -20) &
  make install OFFLINE=1 2>&1 | tail -3
  wait
  python3 -m portmat devices
fi

if [[ " $steps " == *" test "* ]]; then
  echo "== ctest $(date +%T)"
  (cd build/cpp && timeout 400 ctest -j 6 --timeout 200 --output-on-failure > "$LOGS/ctest.log" 2>&1) || status=1
  grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)" "$LOGS/ctest.log" | head -20
  echo "== pytest $(date +%T)"
  xdist=$(python3 -c "import xdist" 2>/dev/null && echo "-n 8")
  timeout 480 python3 -m pytest -q $xdist -p no:cacheprovider tests/python > "$LOGS/pytest.log" 2>&1 || status=1
  tail -2 "$LOGS/pytest.log"; grep -E "^(FAILED|ERROR)" "$LOGS/pytest.log" | head -20
fi

if [[ " $steps " == *" bench "* ]]; then
  echo "== bench $(date +%T)"
  python3 bench/every_device.py --machine h200 --out "$RESULTS" --no-tables || status=1
fi
echo "== done $(date +%T), status $status"
exit $status

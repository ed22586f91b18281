#!/bin/bash
# One H200 call for the warp-specialized experiment (_ws / _wsk, gemm_body_ws: a copying
# warpgroup, mbarrier hand-over, setmaxnreg): build, the tile tests (_ws and _wsk over awkward
# shapes and every layout; `timeout` guards against a hand-over that never completes), float64
# checks (also through _wsk's stream-K paths), then _ws against _fp at whole waves of 128x256
# tiles and _wsk against _sk at 4096 and 8192, each twice, with cuBLAS in the same runs.
#   source .device/setup.sh; bash bench/cuda/h200_ws.sh
set -o pipefail
OUT=${OUT:-/tmp/cuda_out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PATH=/usr/local/cuda/bin:$PATH
if [ ! -e /usr/include/gtest/gtest.h ]; then for f in .device/gtest/*.deb; do dpkg -x "$f" /tmp/devroot; done; fi
(cmake -S . -B build/h200 -G Ninja -DPORTMAT_BUILD_TESTS=ON -DPORTMAT_BUILD_PYTHON=OFF \
   -DPORTMAT_GTEST_SOURCE=/tmp/devroot/usr/src/googletest -DPORTMAT_WITH_CPU=OFF >/dev/null &&
 cmake --build build/h200 -j 8 2>&1 | grep -E "error|FAILED" | head -20) &
CPP=$!
python3 -m pip install -q --no-build-isolation -C build-dir=build/py-cuda -C cmake.define.PORTMAT_WITH_CPU=OFF . 2>&1 | tail -3
wait $CPP
cuobjdump --list-elf build/py-cuda/embedded/cuda_gemm.fatbin 2>/dev/null | head -5
echo "== tile tests $(date +%T)"
timeout 120 build/h200/portmat_tests --gtest_filter='*CudaTiles*:CudaGemm.DeviceResident*' 2>&1 | tee $OUT/ctest_ws.log |
  grep -E "^\[  (FAILED|PASSED) |Failure|ws" | head -20
echo "== verify $(date +%T)"
timeout 60 python3 bench/cuda/verify_tiles.py --shapes 4224x4096x4096,1000x1300x777,257x513x129 128x256_ws 128x256_fp
# _wsk through its stream-K paths: 3 units (hybrid with _ws, split tiles), then every tile shared
PORTMAT_CUDA_SK_UNITS=3 timeout 60 python3 bench/cuda/verify_tiles.py --shapes 1000x33x300,131x257x667,700x1100x1333 128x256_wsk
PORTMAT_CUDA_SK_UNITS=7 PORTMAT_CUDA_SK_ALL=1 timeout 60 python3 bench/cuda/verify_tiles.py --shapes 700x1100x1333,300x260x1000 128x256_wsk
echo "== kernel diag $(date +%T)"
timeout 200 python3 bench/cuda/kernel_diag.py --seconds 1.2 --shapes 4224x4096x4096,8448x8192x8192 \
  --tiles 128x256_fp,128x256_ws,128x256_fp,128x256_ws --json $OUT/ws_diag.json 2>&1 | grep -v -i warn
# the stream-K pair as the default runs it (4096: every tile shared; 8192: hybrid)
timeout 200 python3 bench/cuda/kernel_diag.py --seconds 1.2 --shapes 4096x4096x4096,8192x8192x8192 \
  --tiles 128x256_sk,128x256_wsk,128x256_sk,128x256_wsk --json $OUT/wsk_diag.json 2>&1 | grep -v -i warn

#!/bin/bash
# Session 7's second H200 call: the warp-specialized tiles as the default on sm_90 (_wsk's hybrid
# grid: _ws for whole waves, _wsk for the rest). Build, the CUDA C++ and Python tests, then
# _sk (every tile shared up to 7 waves, else hybrid) against _wsk hybrid and _wsk with every tile
# shared at 2048-8192 with cuBLAS, the NumPy path with each family (PORTMAT_CUDA_WS alternated),
# `portmat bench --device cuda`, and compute-sanitizer over small runs of the new kernels.
#   source .device/setup.sh; bash bench/cuda/h200_s7b.sh
source bench/cuda/h200_prelude.sh  # build, CUDA C++ and Python tests
echo "== kernel diag $(date +%T)"
S=2048x2048x2048,3072x3072x3072,4096x4096x4096,5120x5120x5120,6144x6144x6144,8192x8192x8192
timeout 150 python3 bench/cuda/kernel_diag.py --seconds 0.8 --shapes $S --json $OUT/ws_rule.json \
  --tiles 128x256_sk,128x256_wsk,128x256_wsk:PORTMAT_CUDA_SK_ALL=1 2>&1 | grep -v -i "warn\|kernels:"
timeout 60 python3 bench/cuda/kernel_diag.py --seconds 0.8 --shapes 4096x4096x4096,8192x8192x8192 \
  --json $OUT/ws_rule2.json --tiles 128x256_wsk,128x256_sk 2>&1 | grep -v -i "warn\|kernels:"
echo "== NumPy path, each family $(date +%T)"
timeout 60 python3 bench/cuda/bench_cuda.py hostab --sizes 4096,8192 --var PORTMAT_CUDA_WS --values 0,1 \
  --rounds 5 --repeat 8 --json $OUT/ws_host_ab.json
echo "== bench cuda $(date +%T)"
timeout 200 python3 -m portmat bench --device cuda --sizes 512,1024,2048,4096,8192 --json $OUT/cuda_bench.json 2>&1 | tail -9
echo "== sanitizer $(date +%T)"
for tool in memcheck racecheck synccheck; do
  PORTMAT_CUDA_SK_UNITS=7 timeout 50 compute-sanitizer --tool $tool python3 bench/cuda/verify_tiles.py \
    --shapes 700x1100x1333,257x513x129 128x256_wsk 2>&1 | grep -E "SUMMARY|OK|FAIL|rror" | head -6
done 2>&1 | tee $OUT/sanitizer.log
PORTMAT_CUDA_SK_UNITS=7 PORTMAT_CUDA_SK_ALL=1 timeout 40 compute-sanitizer --tool racecheck python3 bench/cuda/verify_tiles.py \
  --shapes 700x1100x1333 128x256_wsk 2>&1 | grep -E "SUMMARY|OK|FAIL|rror" | tee -a $OUT/sanitizer.log
timeout 60 compute-sanitizer --tool memcheck build/h200/portmat_tests --gtest_filter='CudaGemm.ChunkedPipelineKSplitStart' 2>&1 |
  grep -E "SUMMARY|PASSED|FAILED" | tee -a $OUT/sanitizer.log
echo "== done $(date +%T)"

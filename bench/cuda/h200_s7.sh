#!/bin/bash
# Session 7's first H200 call (branch experiment/s7-combined): build, the CUDA C++ and Python tests
# (with the NumPy path's k-split start and the warp-specialized tiles), the k-split start against
# the plain order (PORTMAT_CUDA_EARLY_ROWS alternated in one process), the warp-specialized kernels
# against _fp / _sk with cuBLAS, then `portmat bench --device cuda`.
#   source .device/setup.sh; bash bench/cuda/h200_s7.sh
source bench/cuda/h200_prelude.sh  # build, CUDA C++ and Python tests
echo "== k-split start $(date +%T)"
timeout 90 python3 bench/cuda/bench_cuda.py hostab --sizes 4096,8192 --var PORTMAT_CUDA_EARLY_ROWS \
  --values 0,1024,2048,3072 --rounds 5 --repeat 8 --json $OUT/ksplit_ab.json
echo "== ws verify $(date +%T)"
timeout 60 python3 bench/cuda/verify_tiles.py --shapes 4224x4096x4096,1000x1300x777,257x513x129 128x256_ws 128x256_fp
PORTMAT_CUDA_SK_UNITS=3 timeout 60 python3 bench/cuda/verify_tiles.py --shapes 1000x33x300,131x257x667,700x1100x1333 128x256_wsk
PORTMAT_CUDA_SK_UNITS=7 PORTMAT_CUDA_SK_ALL=1 timeout 60 python3 bench/cuda/verify_tiles.py --shapes 700x1100x1333,300x260x1000 128x256_wsk
echo "== ws kernel diag $(date +%T)"
timeout 120 python3 bench/cuda/kernel_diag.py --seconds 1.0 --shapes 4224x4096x4096,8448x8192x8192 \
  --tiles 128x256_fp,128x256_ws,128x256_fp,128x256_ws --json $OUT/ws_diag.json 2>&1 | grep -v -i warn
timeout 120 python3 bench/cuda/kernel_diag.py --seconds 1.0 --shapes 4096x4096x4096,8192x8192x8192 \
  --tiles 128x256_sk,128x256_wsk,128x256_sk,128x256_wsk --json $OUT/wsk_diag.json 2>&1 | grep -v -i warn
echo "== bench cuda $(date +%T)"
timeout 200 python3 -m portmat bench --device cuda --sizes 512,1024,2048,4096,8192 --json $OUT/cuda_bench.json 2>&1 | tail -9
echo "== done $(date +%T)"

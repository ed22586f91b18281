#!/bin/bash
# One H200 call: does the way of timing decide portmat against cuBLAS? kernel_diag.py with every
# timed run one product (as `portmat bench` times portmat, CuPy and torch) and five products queued
# back to back (as kernel_diag.py timed cuBLAS before session 4), for _sk (the default) and cuBLAS
# at n = 4096 / 8192. Builds and runs the CUDA C++ tests first (h200_kernel_diag.sh).
#   source .device/setup.sh; bash bench/cuda/h200_launches.sh
OUT=${OUT:-/tmp/cuda_out}; export OUT
NO_PYTEST=1 NO_NCU=1 TILES=128x256_sk SECONDS_PER=1.0 LAUNCHES=5 SHAPES=4096x4096x4096,8192x8192x8192 \
  bash bench/cuda/h200_kernel_diag.sh 2>&1 | grep -E "PASSED|FAILED|TF @|error|Failure"
echo "== one product per timed run"
timeout 100 python3 bench/cuda/kernel_diag.py --tiles 128x256_sk --seconds 1.0 --launches 1 \
  --shapes 4096x4096x4096,8192x8192x8192 --json $OUT/kernel_diag_launches1.json 2>&1 | grep "TF @"

#!/bin/bash
# One H200 call: the hybrid stream-K grid of _sk against _fp and cuBLAS (session 4). Build and
# CUDA tests (h200_kernel_diag.sh: ctest Cuda*, pytest -k "cuda or host_memory"), then at
# n = 4096 / 8192: _fp; _sk (the last tiles % 132 tiles shared by 132 stream-K blocks, launched
# after the whole waves of _fp). (Session 4's run also timed a PORTMAT_CUDA_SK_FIRST switch,
# since removed: bench/results/README.md.) Then compute-sanitizer
# (memcheck, racecheck, synccheck) over the stream-K test, whose blocks hand split tiles over
# through flags in global memory.
#   source .device/setup.sh; bash bench/cuda/h200_sk_diag.sh
OUT=${OUT:-/tmp/cuda_out}; export OUT PATH=/usr/local/cuda/bin:$PATH
SK=128x256_sk
NO_NCU=1 SECONDS_PER=${SECONDS_PER:-1.5} SHAPES=${SHAPES:-4096x4096x4096,8192x8192x8192} \
  TILES=${TILES:-128x256_fp,$SK} \
  bash bench/cuda/h200_kernel_diag.sh 2>&1 | grep -E "PASSED|FAILED|passed|failed|TF @|error|Failure"
echo "== sanitizer $(date +%T)"
( timeout 150 compute-sanitizer --tool memcheck --leak-check no build/h200/portmat_tests \
    --gtest_filter='CudaGemm.StreamK*' 2>&1 | grep -E "ERROR SUMMARY|PASSED|FAILED" | sort | uniq -c
  for tool in racecheck synccheck; do
    PORTMAT_CUDA_SK_UNITS=5 timeout 100 compute-sanitizer --tool $tool build/h200/portmat_tests \
      --gtest_filter='CudaGemm.StreamK*' 2>&1 | grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" | sort | uniq -c
  done ) 2>&1 | tee $OUT/sanitizer.log

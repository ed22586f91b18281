#!/bin/bash
# The last H200 call of a session: the package with every backend and the C++ tests of the CUDA
# backend (built side by side), the CUDA and host-memory Python tests, then the figures the issues
# ask for: `portmat bench` on CUDA (NumPy in/out, device-resident, CuPy / torch peers), the NumPy
# path at 4096 and 8192 against the pinned-transfer floor measured in the same run
# (bench_cuda.py host), and on the 16-core host CPU (float32 1024-4096, float64 2048; NO_CPU=1
# leaves these out).
#   source .device/setup.sh; bash bench/cuda/h200_final.sh
source bench/cuda/h200_prelude.sh  # build, CUDA C++ and Python tests
echo "== bench cuda $(date +%T)"
timeout 200 python3 -m portmat bench --device cuda --sizes 512,1024,2048,4096,8192 --json $OUT/cuda_bench.json 2>&1 | tail -9
echo "== NumPy path against the pinned floor $(date +%T)"
timeout 60 python3 bench/cuda/bench_cuda.py host --sizes 4096,8192 --json $OUT/host_floor.json 2>&1 | grep "^host"
[ -n "$NO_CPU" ] && { echo "== done $(date +%T)"; exit 0; }
echo "== bench cpu $(date +%T)"
timeout 90 python3 -m portmat bench --device cpu --sizes 1024,2048,4096 --json $OUT/cpu16_f32.json 2>&1 | tail -5
timeout 40 python3 -m portmat bench --device cpu --dtype float64 --sizes 2048 --repeat 5 --json $OUT/cpu16_f64.json 2>&1 | tail -3
echo "== done $(date +%T)"

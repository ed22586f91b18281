#!/bin/bash
# One H200 call: build, CUDA tests, then where the device-resident kernel loses to cuBLAS
# (kernel_diag.py: clocks, power, whole-wave shapes, cuBLAS's kernel names; then Nsight Compute
# on one launch of each at n = 4096, clocks left alone).
#   source .device/setup.sh; TILES=128x256_fp,128x256_sk bash bench/cuda/h200_kernel_diag.sh
set -o pipefail
OUT=${OUT:-/tmp/cuda_out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PATH=/usr/local/cuda/bin:$PATH
step() { echo; echo "==== $* ($(date +%T))"; }
step gpu; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv
if [ ! -e /usr/include/gtest/gtest.h ]; then for f in .device/gtest/*.deb; do dpkg -x "$f" /tmp/devroot; done; fi
step builds
(cmake -S . -B build/h200 -G Ninja -DPORTMAT_BUILD_TESTS=ON -DPORTMAT_BUILD_PYTHON=OFF \
   -DPORTMAT_GTEST_SOURCE=/tmp/devroot/usr/src/googletest -DPORTMAT_WITH_CPU=OFF >/dev/null &&
 cmake --build build/h200 -j 8 2>&1 | grep -E "error|warning|FAILED" | head -20) &
CPP=$!
(python3 -m pip install -q --no-build-isolation -C build-dir=build/py-cuda -C cmake.define.PORTMAT_WITH_CPU=OFF . 2>&1 | tail -5) &
PIP=$!
wait $CPP $PIP
step cuda tests
timeout 200 build/h200/portmat_tests --gtest_filter='Cuda*:*CudaTiles*' 2>&1 | tee $OUT/ctest.log |
  grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure|error|expected" | head -30
step python tests on cuda
[ -z "$NO_PYTEST" ] && timeout 200 python3 -m pytest -q -x tests/python -k "cuda or host_memory" 2>&1 | tee $OUT/pytest.log | tail -3
step kernel diag
timeout 300 python3 bench/cuda/kernel_diag.py --tiles ${TILES:-128x256_fp,128x256_sk} --seconds ${SECONDS_PER:-1.5} ${SHAPES:+--shapes $SHAPES} ${LAUNCHES:+--launches $LAUNCHES} --json $OUT/kernel_diag.json
step ncu
[ -n "$STALLS" ] && TILES="$STALLS" bash bench/cuda/ncu_stalls.sh
[ -n "$NO_NCU" ] && exit 0
for t in ${NCU_TILES:-128x256_fp}; do
  PORTMAT_CUDA_TILE=$t timeout 120 ncu --clock-control none --kernel-name regex:gemm_sm80 --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
    --section InstructionStats --section MemoryWorkloadAnalysis \
    python3 -c "from portmat import _ext; _ext.time_gemm('cuda:0', 4096, 4096, 4096, 'float32', 4)" 2>&1 |
    grep -vE "^==PROF==|^\s*$" | tee $OUT/ncu_$t.txt | head -150
done
timeout 120 ncu --clock-control none --kernel-name regex:"gemm|Kernel" --launch-skip 3 --launch-count 1 \
  --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
  --section InstructionStats --section LaunchStats --section MemoryWorkloadAnalysis \
  python3 -c "
import torch; torch.backends.cuda.matmul.allow_tf32 = False
a = torch.rand(4096, 4096, device='cuda'); b = torch.rand(4096, 4096, device='cuda')
for _ in range(6): c = a @ b
torch.cuda.synchronize()" 2>&1 | grep -vE "^==PROF==|^\s*$" | tee $OUT/ncu_cublas.txt | head -150
step done

#!/bin/bash
# Nsight Compute's stall reasons (per issued instruction), shared-memory wavefronts and instruction
# counts for one launch of each tile and of cuBLAS at 8448 x 8192 x 8192 (16 whole waves of
# 128x256 tiles), clocks left alone. Run on the H200 after the package is built:
#   TILES="128x256_fp 128x256_fs" [CUBLAS=1] bash bench/diagnostics/ncu_stalls.sh
set -o pipefail
export PYTHONUNBUFFERED=1 PATH=/usr/local/cuda/bin:$PATH
M='regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__inst_executed_op_shared_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__inst_executed_pipe_fma.sum,smsp__inst_executed.sum,sm__cycles_active.avg,smsp__inst_executed_op_global_ld.sum,smsp__inst_executed_op_ldgsts.sum,lts__t_sector_hit_rate.pct,dram__bytes_read.sum,sm__cycles_elapsed.avg,gpu__time_duration.sum'
OUT=${OUT:-/tmp/cuda_out}; mkdir -p "$OUT"
for t in ${TILES:-128x256_fp}; do echo "== $t"
PORTMAT_CUDA_TILE=$t timeout 120 ncu --clock-control none --kernel-name ${KNAME:-regex:gemm_sm80} --launch-skip 2 --launch-count 1 --metrics "$M" \
  python3 -c "from portmat import _ext; _ext.time_gemm('cuda:0', ${SHAPE:-8448, 8192, 8192}, 'float32', 4)" 2>&1 | grep -vE "^==PROF==|^\s*$" | tee $OUT/ncu_stall_$t.txt | grep -vE "ratio +0(\.0+)?$" 
done
[ -z "$CUBLAS" ] && exit 0
echo "== cublas"
timeout 120 ncu --clock-control none --kernel-name regex:"gemm|Kernel" --launch-skip 3 --launch-count 1 --metrics "$M" python3 -c "
import torch; torch.backends.cuda.matmul.allow_tf32 = False
a = torch.rand(8448, 8192, device='cuda'); b = torch.rand(8192, 8192, device='cuda')
for _ in range(6): c = a @ b
torch.cuda.synchronize()" 2>&1 | grep -vE "^==PROF==|^\s*$" | tee $OUT/ncu_stall_cublas.txt | grep -vE "ratio +0(\.0+)?$"

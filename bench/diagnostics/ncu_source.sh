#!/bin/bash
# Where, instruction by instruction, a kernel's warps wait: Nsight Compute's warp-state samples per
# SASS instruction (the source page, printed as CSV) for one launch of a portmat tile and one of
# cuBLAS (through torch, TF32 off), clocks left alone. Run on the H200 after the package is built:
#   TILES="128x256_fp" SHAPE="4224, 4096, 4096" bash bench/diagnostics/ncu_source.sh
export PYTHONUNBUFFERED=1 PATH=/usr/local/cuda/bin:$PATH
OUT=${OUT:-/tmp/cuda_out}; mkdir -p "$OUT"
SHAPE=${SHAPE:-4224, 4096, 4096}
page() {  # report -> CSV of the source page (SASS) + the first lines on stdout
  ncu -i "$1.ncu-rep" --page source --csv --print-source sass > "$1_sass.csv" 2> "$1_sass.err"
  echo "$(wc -l < "$1_sass.csv") lines in $1_sass.csv"; head -3 "$1_sass.csv" | cut -c1-600; head -3 "$1_sass.err"
}
for t in ${TILES:-128x256_fp}; do echo "== $t"
  PORTMAT_CUDA_TILE=$t timeout 150 ncu --clock-control none --kernel-name regex:gemm_sm80 --launch-skip 2 --launch-count 1 \
    --section SourceCounters --section WarpStateStats --import-source no -f -o "$OUT/src_$t" \
    python3 -c "from portmat import _ext; _ext.time_gemm('cuda:0', $SHAPE, 'float32', 4)" 2>&1 | grep -vE "^==PROF==|^\s*$" | tail -3
  page "$OUT/src_$t"
done
[ -z "$CUBLAS" ] && exit 0
echo "== cublas"
timeout 150 ncu --clock-control none --kernel-name regex:"gemm|Kernel" --launch-skip 3 --launch-count 1 \
  --section SourceCounters --section WarpStateStats --import-source no -f -o "$OUT/src_cublas" python3 -c "
import torch; torch.backends.cuda.matmul.allow_tf32 = False
a = torch.rand($(echo $SHAPE | cut -d, -f1), $(echo $SHAPE | cut -d, -f3), device='cuda'); b = torch.rand($(echo $SHAPE | cut -d, -f3), $(echo $SHAPE | cut -d, -f2), device='cuda')
for _ in range(6): c = a @ b
torch.cuda.synchronize()" 2>&1 | grep -vE "^==PROF==|^\s*$" | tail -3
page "$OUT/src_cublas"

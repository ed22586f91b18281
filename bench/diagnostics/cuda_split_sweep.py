"""Split-K on the CUDA backend (issue 16): for the small and thin products of the suite, the time of
the tile model's own choice and of every forced split (PORTMAT_CUDA_SPLIT_K slices on each batched
tile, PORTMAT_CUDA_SPLIT_TILE), against cuBLAS as a CUDA graph of the same products (torch, TF32
off), in one process. Device-resident, medians of RUNS runs of LAUNCHES queued products
(`_ext.time_gemm`). docs/cuda.md, "Split-K for small results and long k", has the H200's figures
and the fit of tile_choice.cpp's split costs to them.

  python3 bench/diagnostics/cuda_split_sweep.py [--shapes "M,K,N;..."] [--tiles 64x128,64x64c,...]

64x64c is the cluster kernel (split-K in one launch, sm_90; at most 8 slices); 64x128_sl the sliced-k
tile's batched kernel (64x128_slb: 8 warps in two k groups; not in the default list until measured).
"""

import argparse
import os
import statistics

import torch

import portmat
from bench_cuda import torch_operands  # this script's folder is on sys.path
from portmat import _ext
from portmat.peers import _queued_seconds, torch_graph

RUNS, LAUNCHES = 11, 10
SHAPES = [(256, 256, 256), (384, 384, 384), (512, 512, 512), (640, 640, 640), (768, 768, 768), (1024, 1024, 1024),
          (4096, 4096, 64), (64, 4096, 4096), (8192, 256, 256), (65536, 64, 64), (64, 64, 65536),
          (4096, 4096, 16), (64, 16384, 256), (64, 65536, 64), (16, 4096, 4096), (2048, 64, 2048)]  # (M, K, N)
SLICES = (2, 3, 4, 5, 6, 7, 8, 12, 16, 32, 64, 132)
TILES = ("64x128", "128x64", "64x64", "64x64c")
CLUSTER_MAX = 8  # gemm_tiles.h, kClusterMaxSlices
WORKSPACE = 32 << 20  # cuda_backend.cpp's kSplitMaxBytes: larger splits fall back


def cublas_seconds(m, k, n):
    a, b, c = torch_operands(m, n, k)
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    graph = torch_graph(torch, lambda: torch.matmul(a, b, out=c), LAUNCHES)
    runs = _queued_seconds(start, stop, lambda: start.elapsed_time(stop), graph.replay, RUNS, 1)
    return statistics.median(t / LAUNCHES for t in runs)


def portmat_seconds(dev, m, k, n):
    return statistics.median(x for x in _ext.time_gemm(dev, m, n, k, "float32", RUNS, LAUNCHES) if x >= 0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", help='"M,K,N;M,K,N" (default: the built-in list)')
    ap.add_argument("--tiles", default=",".join(TILES))
    args = ap.parse_args()
    shapes = [tuple(int(x) for x in s.split(",")) for s in args.shapes.split(";")] if args.shapes else SHAPES
    dev = next(d.id for d in portmat.devices() if d.backend == "cuda")
    for m, k, n in shapes:
        cb = cublas_seconds(m, k, n)
        for v in ("PORTMAT_CUDA_SPLIT_K", "PORTMAT_CUDA_SPLIT_TILE"):
            os.environ.pop(v, None)
        default = portmat_seconds(dev, m, k, n)
        cells, best = [], (default, "model")
        for tile in args.tiles.split(","):
            os.environ["PORTMAT_CUDA_SPLIT_TILE"] = tile
            cluster = tile.endswith("c")
            for s in SLICES:
                if s * 16 > k or (cluster and s > CLUSTER_MAX) or (not cluster and 4 * s * m * n > WORKSPACE):
                    continue
                os.environ["PORTMAT_CUDA_SPLIT_K"] = str(s)
                t = portmat_seconds(dev, m, k, n)
                cells.append(f"{tile}/{s}:{t * 1e6:.1f}")
                best = min(best, (t, f"{tile}/{s}"))
        for v in ("PORTMAT_CUDA_SPLIT_K", "PORTMAT_CUDA_SPLIT_TILE"):
            os.environ.pop(v, None)
        print(f"{m}x{k}@{k}x{n}: cuBLAS {cb * 1e6:.1f} us, model's choice {default * 1e6:.1f} ({cb / default:.2f}x), "
              f"best {best[1]} {best[0] * 1e6:.1f} ({cb / best[0]:.2f}x)\n    " + " ".join(cells), flush=True)


if __name__ == "__main__":
    main()

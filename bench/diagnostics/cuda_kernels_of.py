"""Which kernels the CUDA backend's default choice launches for each product, with their grids.

The tile model (src/cuda/tile_choice.cpp) picks a kernel family, a tile, a slice count and for
clusters a cluster shape; its estimates are what tests check, but what runs is best seen from the
GPU's side. This runs each product once under torch.profiler (CUPTI sees launches from the driver
API too) and prints each kernel's name, grid, block and duration, in launch order.

  python3 bench/diagnostics/cuda_kernels_of.py 256,256,256 448,448,448     # M,K,N (K is a's columns)
  python3 bench/diagnostics/cuda_kernels_of.py --shapes shapes.txt         # one M,K,N a line
  PORTMAT_CUDA_SPLIT_K=4 python3 bench/diagnostics/cuda_kernels_of.py 512,512,512   # a knob's effect
"""

import argparse
import json
import os
import tempfile

import torch

import portmat
from portmat import _ext


def kernels_of(dev, m, n, k):
    """[(name, grid, block, us)] of one float32 product on `dev`, in launch order."""
    _ext.time_gemm(dev, m, n, k, "float32", 1, 1)  # plans and modules ready before the trace
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        _ext.time_gemm(dev, m, n, k, "float32", 1, 1)
        torch.cuda.synchronize()
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    finally:
        os.unlink(path)
    launched = sorted((e for e in events if e.get("cat") == "kernel"), key=lambda e: e.get("ts", 0))
    # time_gemm times its products between events; keep one product's kernels (the first of each name)
    seen, out = set(), []
    for e in launched:
        if e["name"] in seen:
            continue
        seen.add(e["name"])
        out.append((e["name"], e["args"].get("grid"), e["args"].get("block"), e.get("dur")))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("products", nargs="*", help="M,K,N")
    ap.add_argument("--shapes", help="a file of M,K,N lines (as portmat bench --shapes reads it)")
    args = ap.parse_args()
    shapes = [tuple(int(x) for x in p.split(",")) for p in args.products]
    if args.shapes:
        from portmat.bench import load_shapes
        shapes += [(m or 1, k, n or 1) for m, k, n in load_shapes(args.shapes)]
    dev = next(d.id for d in portmat.devices() if d.backend == "cuda")
    for m, k, n in shapes:
        found = kernels_of(dev, m, n, k)
        text = " | ".join(f"{name} grid {grid} block {block} {us} us" for name, grid, block, us in found)
        print(f"({m} x {k}) @ ({k} x {n}): {text}", flush=True)


if __name__ == "__main__":
    main()

"""Two tile choices of the CUDA backend's float32 model, each forced by knobs, on the same products:
before a change of tile_choice.cpp, the old choice against the new one (docs/cuda.md, "Sliced k on
the 128x64 tile", session 35). Device-resident, each a median of cuda_vs_cublas.py's runs of queued
products (`_ext.time_gemm`), the two alternated ROUNDS times in one process; then the model's own choice
(no knob) and cuBLAS (torch, TF32 off) as a CUDA graph of the same products.

  python3 bench/diagnostics/cuda_choice_ab.py FILE

FILE: one product a line, `M K N OLD NEW`, each choice as TILE/SLICES: a data-parallel tile by
PORTMAT_CUDA_TILE's short name with 0 slices (`128x64_fp/0`), or a split's batched kernel and its
slices (`128x64_fpb/4`, `64x64b/32`, `64x64c/8`, `128x64_slb/4`, `64x128_slb/4`, `64x128_fpb/11`).
`128x64_sk/0` and `128x256_wsk/0` run with PORTMAT_CUDA_SK_ALL=1, every tile shared by launch()'s
own block count, which need not be the model's.
"""
import statistics
import sys

import portmat
from cuda_split_sweep import cublas_seconds  # cuBLAS as a CUDA graph; this script's folder is on sys.path
from cuda_vs_cublas import portmat_seconds  # portmat under a set of knobs, then the environment as it was

ROUNDS = 3
SPLIT_TILES = {"128x64_fpb": "128x64", "64x128_fpb": "64x128", "64x64b": "64x64", "64x64c": "64x64c",
               "128x64_slb": "128x64_sl", "64x128_slb": "64x128_sl"}


def knobs(choice):
    """The PORTMAT_CUDA_ variables that force `choice` (TILE/SLICES)."""
    tile, slices = choice.split("/")
    if int(slices) > 1:
        return {"PORTMAT_CUDA_SPLIT_K": slices, "PORTMAT_CUDA_SPLIT_TILE": SPLIT_TILES[tile]}
    if tile.endswith("_sk") or tile.endswith("_wsk"):
        return {"PORTMAT_CUDA_TILE": tile, "PORTMAT_CUDA_SK_ALL": "1"}
    return {"PORTMAT_CUDA_TILE": tile}


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    dev = next(d.id for d in portmat.devices() if d.backend == "cuda")
    print("(M x K) @ (K x N): old choice us / new choice us (old / new) / the model's own us / cuBLAS graph us")
    for line in open(sys.argv[1]):
        if not line.strip() or line.startswith("#"):
            continue
        m, k, n, old, new = line.split()
        m, k, n = int(m), int(k), int(n)
        times = {old: [], new: []}
        for _ in range(ROUNDS):
            for choice in (old, new):
                times[choice].append(portmat_seconds(dev, m, n, k, knobs(choice)))
        t_old, t_new = statistics.median(times[old]), statistics.median(times[new])
        own = portmat_seconds(dev, m, n, k, {})
        cb = cublas_seconds(m, k, n)
        print(f"{m}x{k}@{k}x{n}: {old} {t_old * 1e6:.1f} / {new} {t_new * 1e6:.1f} ({t_old / t_new:.3f}x) / "
              f"model {own * 1e6:.1f} / cuBLAS {cb * 1e6:.1f} (model {cb / own:.2f}x)", flush=True)


if __name__ == "__main__":
    main()

"""Thin products on the CUDA backend (issue 16; kernels/gemm_thin.cuh): for the suite's products
with a side of c of at most 16, the time of the model's own choice, of the thin kernels forced
(PORTMAT_CUDA_THIN=1, with the model's slices of k and with SLICES of them: PORTMAT_CUDA_THIN_SLICES)
and of the tiles forced (PORTMAT_CUDA_THIN=0), against cuBLAS as a CUDA
graph of the same products (torch, TF32 off), in one process. Device-resident, medians of RUNS runs of LAUNCHES
queued products (`_ext.time_gemm`, row-major operands). docs/cuda.md, "Thin products", has the
H200's figures.

  python3 bench/diagnostics/cuda_thin_sweep.py [--json FILE]
"""

import argparse
import json
import os
import statistics

import portmat
from cuda_split_sweep import cublas_seconds, portmat_seconds  # this script's folder is on sys.path

SHAPES = [(4096, 4096, n) for n in (1, 2, 4, 8, 16)] + [(m, 4096, 4096) for m in (1, 2, 4, 8, 16)]
SHAPES += [(256, 256, n) for n in (1, 2, 4, 8, 16)] + [(m, 256, 256) for m in (1, 2, 4, 8, 16)]
SHAPES += [(65536, 16, 16), (16, 65536, 16), (16, 16, 65536), (1, 1 << 20, 1), (16384, 1024, 8), (8, 1024, 16384),
           (1024, 1024, 16), (16, 1024, 1024), (4096, 16384, 4), (4, 16384, 4096)]  # (M, K, N)
SLICES = (1, 2, 4, 8, 16, 64)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    args = ap.parse_args()
    dev = next(d.id for d in portmat.devices() if d.backend == "cuda")
    rows = []
    for m, k, n in SHAPES:
        cb = cublas_seconds(m, k, n)
        times = {}
        for name, value in (("model", None), ("thin", "1"), ("tiles", "0")):
            if value is None:
                os.environ.pop("PORTMAT_CUDA_THIN", None)
            else:
                os.environ["PORTMAT_CUDA_THIN"] = value
            times[name] = portmat_seconds(dev, m, k, n)
        os.environ["PORTMAT_CUDA_THIN"] = "1"
        for slices in SLICES:
            if slices * 64 <= k:
                os.environ["PORTMAT_CUDA_THIN_SLICES"] = str(slices)
                times[f"thin/{slices}"] = portmat_seconds(dev, m, k, n)
        os.environ.pop("PORTMAT_CUDA_THIN_SLICES", None)
        os.environ.pop("PORTMAT_CUDA_THIN", None)
        best = min(times.values())
        rows.append({"m": m, "k": k, "n": n, "cublas_us": cb * 1e6, **{f"{x}_us": t * 1e6 for x, t in times.items()}})
        print(f"{m}x{k}@{k}x{n}: cuBLAS {cb * 1e6:.1f} us; model {times['model'] * 1e6:.1f} ({cb / times['model']:.2f}x), "
              f"thin {times['thin'] * 1e6:.1f} ({cb / times['thin']:.2f}x), tiles {times['tiles'] * 1e6:.1f} "
              f"({cb / times['tiles']:.2f}x); GB/s of the thin kernel "
              f"{4 * (m * k + k * n + m * n) / times['thin'] / 1e9:.0f}"
              + ("" if times["model"] <= best * 1.05 else "   <- the model missed") + "\n    slices: "
              + " ".join(f"{x[5:]}:{t * 1e6:.1f}" for x, t in times.items() if x.startswith("thin/")), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()

"""Thin products (a side of c at most 16) at every forced slice count of k, and the model's own choice:
the measurements the thin model's constants are fitted to (tile_choice.cpp, choose_thin; docs/cuda.md,
"The thin model refitted").

For each product and layout (rr: both operands row-major, cc: both column-major), device-resident,
queued: the default plan (the model's kernels and slices, or another path where it wins) and the thin
kernels forced (PORTMAT_CUDA_THIN=1) with k in about 1, 2, 4, ..., 64 slices
(PORTMAT_CUDA_THIN_SLICES). Each time is the faster of 2 rounds of the median of 7 runs of 10 queued
products (`_ext.time_gemm`). The built-in grid is R = 256-16384 long rows, S = 1, 4, 16 short ones,
k = 256-16384, few rows and few columns, both layouts (192 products, about 5 minutes on an H100);
`--shapes FILE` takes lines of "M,K,N LAYOUT".

    python3 bench/diagnostics/cuda_thin_slices.py --json out.json
    python3 bench/diagnostics/cuda_thin_slices.py --shapes shapes.txt
"""

import argparse
import json
import os
import statistics

COUNTS = (1, 2, 4, 8, 16, 32, 64)


def grid() -> list:
    shapes = []
    for r in (256, 1024, 4096, 16384):
        for s in (1, 4, 16):
            for k in (256, 1024, 4096, 16384):
                for few_rows in (False, True):
                    m, n = (s, r) if few_rows else (r, s)
                    shapes += [((m, k, n), layout) for layout in ("rr", "cc")]
    return shapes


def read_shapes(path: str) -> list:
    """((M, K, N), LAYOUT) of each "M,K,N LAYOUT" line of a file (# starts a comment line)."""
    shapes = []
    for line in open(path):
        if line.strip() and not line.lstrip().startswith("#"):
            mkn, layout = line.split()
            shapes.append((tuple(int(x) for x in mkn.split(",")), layout))
    return shapes


def set_knobs(values: dict) -> None:
    """Sets each PORTMAT_CUDA_ variable of `values` (str() of its value), or unsets it where None."""
    for name, value in values.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = str(value)


def time_us(device: str, m: int, k: int, n: int, layout: str) -> float:
    """Median us of 7 runs of 10 float32 products (a `layout`: rr, rc, cr, cc) queued on `device`, or
    replayed as a CUDA graph under PORTMAT_CUDA_TIME_GRAPH=1."""
    from portmat import _ext

    runs = _ext.time_gemm(device, m, n, k, "float32", 7, 10, layout)
    return statistics.median(x for x in runs if x >= 0) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", help='a file of "M,K,N LAYOUT" lines (default: the built-in grid)')
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--json", help="write the times (us) to this file")
    args = ap.parse_args()
    shapes = read_shapes(args.shapes) if args.shapes else grid()

    def knobs(thin=None, slices=None):
        set_knobs({"PORTMAT_CUDA_THIN": thin, "PORTMAT_CUDA_THIN_SLICES": slices})

    records = []
    print("M,K,N,layout: default us | slices:us with the thin kernels forced", flush=True)
    for (m, k, n), layout in shapes:
        got = {}
        for _ in range(2):
            knobs()
            got.setdefault("default", []).append(time_us(args.device, m, k, n, layout))
            for count in COUNTS:
                knobs(1, count)
                got.setdefault(count, []).append(time_us(args.device, m, k, n, layout))
        knobs()
        best = {key: min(v) for key, v in got.items()}
        records.append({"m": m, "k": k, "n": n, "layout": layout, "default_us": best["default"],
                        "forced_us": {str(c): best[c] for c in COUNTS}})
        print(f"{m},{k},{n},{layout}: default {best['default']:.1f} | "
              + " ".join(f"{c}:{best[c]:.1f}" for c in COUNTS), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=1)


if __name__ == "__main__":
    main()

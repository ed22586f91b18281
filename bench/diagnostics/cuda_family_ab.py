"""A kernel family of the CUDA backend forced on and off against the default plan: the measurements
its choice (tile_choice.cpp: choose_thin's `use`, choose_resident's, choose_short_k's) is fitted to
(docs/cuda.md, "Thin against the others").

For each float32 product and layout (rr: both operands row-major, cc: both column-major, rc, cr),
device-resident: the default plan, the family forced on (PORTMAT_CUDA_<FAMILY>=1) and forced off
(=0), each as a CUDA graph's replay and queued from the host, the faster of 2 alternating rounds of
the median of 7 runs of 10 products (`_ext.time_gemm`), in us. The products come from a file
(`--shapes`, lines of "M,K,N LAYOUT") or are drawn at random (`--random N --seed S`) from a grid of
the family's products: for thin, R = 16-65536 long rows, S = 1-16 short ones, k = 16-65536 (R * k at
most 2^26), few rows and few columns, every layout; for resident and short_k, R = 2-262144 rows
against S = 1-64 columns, k = 1-256 (short_k: at most 32).

    python3 bench/diagnostics/cuda_family_ab.py --family thin --random 400 --seed 11 --json thin.json
    python3 bench/diagnostics/cuda_family_ab.py --family resident --shapes shapes.txt
"""

import argparse
import json
import random
import time

from cuda_thin_slices import read_shapes, set_knobs, time_us  # this script's folder is on sys.path

FAMILIES = {"thin": "PORTMAT_CUDA_THIN", "resident": "PORTMAT_CUDA_RESIDENT", "short_k": "PORTMAT_CUDA_SHORT_K"}
LAYOUTS = ("rr", "rc", "cr", "cc")


def grid(family: str) -> list:
    shapes = set()
    if family == "thin":
        for r in (16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 65536):
            for s in (1, 2, 3, 4, 8, 16):
                for k in (16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 16384, 65536):
                    if r * k <= 1 << 26:
                        shapes |= {((r, k, s), lay) for lay in LAYOUTS} | {((s, k, r), lay) for lay in LAYOUTS}
    else:
        ks = (1, 2, 4, 8, 16, 32) + (() if family == "short_k" else (48, 64, 96, 128, 192, 256))
        for r in (2, 4, 8, 16, 64, 256, 1024, 4096, 16384, 65536, 262144):
            for s in (1, 2, 4, 8, 16, 32, 48, 64):
                for k in ks:
                    shapes |= {((r, k, s), lay) for lay in ("rr", "cr")}
    return sorted(shapes)


def time_variants(device: str, m: int, k: int, n: int, layout: str, variants) -> dict:
    """{(mode, name): us} for each (name, {knob: value}) of `variants` (a knob not named is unset),
    mode "graph" (PORTMAT_CUDA_TIME_GRAPH=1) or "queued": the faster of 2 rounds that alternate
    them all; the knobs are unset again after."""
    names = {v for _, knobs in variants for v in knobs} | {"PORTMAT_CUDA_TIME_GRAPH"}
    got = {}
    for _ in range(2):
        for mode in ("graph", "queued"):
            for name, knobs in variants:
                set_knobs({**dict.fromkeys(names), **knobs, "PORTMAT_CUDA_TIME_GRAPH": "1" if mode == "graph" else None})
                got.setdefault((mode, name), []).append(time_us(device, m, k, n, layout))
    set_knobs(dict.fromkeys(names))
    return {key: min(v) for key, v in got.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", choices=sorted(FAMILIES), default="thin")
    ap.add_argument("--shapes", help='a file of "M,K,N LAYOUT" lines')
    ap.add_argument("--random", type=int, default=200, help="products drawn from the family's grid (no --shapes)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--wall", type=float, default=1e9, help="stop after this many seconds")
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--json", help="write the times (us) to this file")
    args = ap.parse_args()
    if args.shapes:
        shapes = read_shapes(args.shapes)
    else:
        shapes = grid(args.family)
        random.Random(args.seed).shuffle(shapes)
        shapes = shapes[: args.random]

    knob = FAMILIES[args.family]
    variants = (("default", {}), ("on", {knob: "1"}), ("off", {knob: "0"}))

    records, start = [], time.time()
    print(f"M,K,N,layout | graph us: default, {knob}=1, =0 | queued us: the same", flush=True)
    for (m, k, n), layout in shapes:
        best = time_variants(args.device, m, k, n, layout, variants)
        records.append({"m": m, "k": k, "n": n, "layout": layout,
                        **{f"{mode}_{name}_us": best[(mode, name)] for mode in ("graph", "queued") for name, _ in variants}})
        print(f"{m},{k},{n},{layout} | " + " | ".join(
            " ".join(f"{best[(mode, name)]:.2f}" for name, _ in variants) for mode in ("graph", "queued")), flush=True)
        if time.time() - start > args.wall:
            print(f"stopped after {len(records)} products (--wall)", flush=True)
            break
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"family": args.family, "knob": knob, "records": records}, f, indent=1)


if __name__ == "__main__":
    main()

"""The products whose CUDA float32 plan differs between a revision of the model and this tree, as a
plans file for cuda_plans_ab.py: how a change of src/cuda/tile_choice.cpp is checked on products
its fit never saw (docs/cuda.md, "A start for every family").

Builds cuda_plan_probe.cpp (the plan as CudaDevice::plan makes it, without a GPU: an H100 or H200's
132 SMs) twice with g++, against this tree's tile_choice.cpp and against REV's (its tile_choice.cpp,
tile_choice.hpp and kernels/gemm_tiles.h; the probe is this tree's, so REV must have today's
interface: choose_f32_plan and h100_cluster_room, which came after 43bbc72). Then
for each product, drawn at random (sides log-uniform in 1-16384, m * n * k at most 2^33, every
layout) or read from a file of "M,K,N LAYOUT" lines, writes
`M,K,N LAYOUT | old:KNOBS | new:KNOBS | default:` where the two plans differ and knobs can force both.

    python3 bench/diagnostics/cuda_plan_moves.py --base 0d6cffc --random 6000 --seed 77 > moves.txt
    python3 bench/diagnostics/cuda_plans_ab.py moves.txt --json moves.json      # on the GPU
"""

import argparse
import os
import random
import subprocess
import sys
import tempfile

from cuda_thin_slices import read_shapes  # this script's folder is on sys.path

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
MODEL = ("src/cuda/tile_choice.cpp", "src/cuda/tile_choice.hpp", "src/cuda/kernels/gemm_tiles.h")


def build_probe(src_root: str, out: str) -> None:
    subprocess.run(["g++", "-O2", "-std=c++17", "-I", os.path.join(src_root, "src"),
                    os.path.join(ROOT, "bench", "diagnostics", "cuda_plan_probe.cpp"),
                    os.path.join(src_root, "src", "cuda", "tile_choice.cpp"), "-o", out], check=True)


def plans(probe: str, shapes: list) -> list:
    text = "".join(f"{m} {k} {n} {layout}\n" for (m, k, n), layout in shapes)
    out = subprocess.run([probe], input=text, capture_output=True, text=True, check=True).stdout.split("\n")
    return [line.split()[4] for line in out if line.strip()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="the git revision to compare with (e.g. main~1)")
    ap.add_argument("--shapes", help='a file of "M,K,N LAYOUT" lines (default: drawn at random)')
    ap.add_argument("--random", type=int, default=6000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.shapes:
        shapes = read_shapes(args.shapes)
    else:
        rnd, drawn = random.Random(args.seed), set()
        while len(drawn) < args.random:
            m, k, n = (int(2 ** rnd.uniform(0, 14)) for _ in range(3))
            if m * n * k <= 2 ** 33:
                drawn.add(((m, k, n), rnd.choice(("rr", "rc", "cr", "cc"))))
        shapes = sorted(drawn)
    with tempfile.TemporaryDirectory() as tmp:
        for path in MODEL:
            os.makedirs(os.path.join(tmp, os.path.dirname(path)), exist_ok=True)
            with open(os.path.join(tmp, path), "wb") as f:
                f.write(subprocess.run(["git", "-C", ROOT, "show", f"{args.base}:{path}"], capture_output=True,
                                       check=True).stdout)
        build_probe(tmp, os.path.join(tmp, "old"))
        build_probe(ROOT, os.path.join(tmp, "new"))
        old, new = plans(os.path.join(tmp, "old"), shapes), plans(os.path.join(tmp, "new"), shapes)
    moves = [(s, o, n) for s, o, n in zip(shapes, old, new) if o != n and "-" not in (o, n)]
    if not args.shapes:
        random.Random(args.seed).shuffle(moves)
    for ((m, k, n), layout), o, nw in moves:
        print(f"{m},{k},{n} {layout} | old:{o} | new:{nw} | default:")
    print(f"{len(shapes)} products, {len(moves)} change plan", file=sys.stderr)


if __name__ == "__main__":
    main()

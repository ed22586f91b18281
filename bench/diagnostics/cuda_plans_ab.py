"""Several plans of the CUDA backend for each float32 product, each forced by knobs and timed in the
same rounds: the measurements a change of the choice among all the kernel families (the tiles, split-K
in two launches or one cluster launch, thin, short-k, resident) is weighed by, before it lands
(docs/cuda.md, "A start for every family").

FILE: one product a line, `M,K,N LAYOUT | NAME:KNOBS | NAME:KNOBS ...`, LAYOUT rr, rc, cr or cc (a
operand's then b's order: row- or column-major), each plan a name and the PORTMAT_CUDA_ variables
that force it (`VAR=VALUE,VAR=VALUE`; none: the default plan), e.g.

    64,64,64 rr | 64x64/0:PORTMAT_CUDA_TILE=64x64 | 64x64c/4:PORTMAT_CUDA_SPLIT_K=4,PORTMAT_CUDA_SPLIT_TILE=64x64c

Each plan is timed device-resident as a CUDA graph's replay and queued from the host, the faster
of 2 rounds that alternate the plans, each the median of 7 runs of 10 products (cuda_family_ab.py's
time_variants), in us.

    python3 bench/diagnostics/cuda_plans_ab.py FILE [--wall S] [--json out.json]
"""

import argparse
import json
import time

from cuda_family_ab import time_variants  # this script's folder is on sys.path


def read_plans(path: str) -> list:
    """[((M, K, N), LAYOUT, [(NAME, {VAR: VALUE})])] of a plans file (# starts a comment line)."""
    products = []
    for line in open(path):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        head, *plans = (f.strip() for f in line.split("|"))
        mkn, layout = head.split()
        variants = []
        for plan in plans:
            name, _, knobs = plan.partition(":")
            variants.append((name, dict(a.split("=", 1) for a in knobs.split(",") if a)))
        products.append((tuple(int(x) for x in mkn.split(",")), layout, variants))
    return products


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("plans", help="the plans file")
    ap.add_argument("--wall", type=float, default=1e9, help="stop after this many seconds")
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--json", help="write the times (us) to this file")
    args = ap.parse_args()
    records, start = [], time.time()
    print("M,K,N,layout | graph us of each plan | queued us", flush=True)
    for (m, k, n), layout, variants in read_plans(args.plans):
        best = time_variants(args.device, m, k, n, layout, variants)
        records.append({"m": m, "k": k, "n": n, "layout": layout,
                        **{mode: {name: best[(mode, name)] for name, _ in variants} for mode in ("graph", "queued")}})
        print(f"{m},{k},{n},{layout} | " + " | ".join(
            " ".join(f"{name}={best[(mode, name)]:.2f}" for name, _ in variants) for mode in ("graph", "queued")),
              flush=True)
        if time.time() - start > args.wall:
            print(f"stopped after {len(records)} products (--wall)", flush=True)
            break
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"records": records}, f, indent=1)


if __name__ == "__main__":
    main()

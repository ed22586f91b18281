"""Checks CUDA tiles against NumPy in float64, through portmat.matmul (NumPy in, NumPy out).

For each tile named (PORTMAT_CUDA_TILE, read per call) and each shape, one float32 product of
random normal inputs; the error is max |c - ref| / max (|a| @ |b|), and above 1e-5 the run fails
(exit status 1). Used to check experimental tiles before timing them, and, small, under
compute-sanitizer: with PORTMAT_CUDA_SK_ALL=1 every tile of the stream-K kernel is split across
blocks, so the flag hand-over is exercised (racecheck instruments every shared-memory access).

    python3 bench/diagnostics/verify_tiles.py 128x256_fp 128x256_sk
    PORTMAT_CUDA_SK_ALL=1 compute-sanitizer --tool racecheck \\
        python3 bench/diagnostics/verify_tiles.py --shapes 300x520x200,131x257x667 128x256_sk
"""
import argparse
import os
import sys

import numpy as np

import portmat


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("tiles", nargs="+")
    p.add_argument("--shapes", default="1000x1300x777,4224x4096x4096,257x513x129")
    args = p.parse_args()
    dev = next((d.id for d in portmat.devices() if d.backend == "cuda"), None)
    if dev is None:
        sys.exit("verify_tiles: portmat finds no CUDA device")
    rng = np.random.default_rng(5)
    bad = 0
    for tile in args.tiles:
        os.environ["PORTMAT_CUDA_TILE"] = tile
        for shape in args.shapes.split(","):
            m, n, k = (int(x) for x in shape.split("x"))
            a = rng.standard_normal((m, k), dtype=np.float32)
            b = rng.standard_normal((k, n), dtype=np.float32)
            c = portmat.matmul(a, b, device=dev)
            ref = a.astype(np.float64) @ b.astype(np.float64)
            scale = (np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)).max()
            err = float(np.abs(c - ref).max() / scale)
            bad += err >= 1e-5
            print(f"{tile} {shape} (SK_ALL={os.environ.get('PORTMAT_CUDA_SK_ALL', '0')}): "
                  f"max scaled error {err:.2e} {'OK' if err < 1e-5 else 'FAIL'}", flush=True)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()

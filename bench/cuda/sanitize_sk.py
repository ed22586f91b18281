"""A small stream-K run for compute-sanitizer (memcheck, racecheck, synccheck) on the H200.

The stream-K kernel (gemm_body_fp with SK) on every tile (PORTMAT_CUDA_SK_ALL=1), through
portmat.matmul, on shapes whose tiles are split across several blocks (and edge tiles), each
checked against NumPy in float64. Small enough for racecheck, which instruments every shared-memory
access.

    compute-sanitizer --tool racecheck python3 bench/cuda/sanitize_sk.py [MxNxK ...]
"""
import os
import sys

os.environ.setdefault("PORTMAT_CUDA_TILE", "128x256_sk")
os.environ.setdefault("PORTMAT_CUDA_SK_ALL", "1")

import numpy as np  # noqa: E402

import portmat  # noqa: E402


def main():
    shapes = sys.argv[1:] or ["300x520x200", "131x257x667"]
    dev = next(d.id for d in portmat.devices() if d.backend == "cuda")
    rng = np.random.default_rng(11)
    bad = 0
    for s in shapes:
        m, n, k = (int(x) for x in s.split("x"))
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = rng.standard_normal((k, n), dtype=np.float32)
        c = portmat.matmul(a, b, device=dev)
        ref = a.astype(np.float64) @ b.astype(np.float64)
        scale = (np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)).max()
        err = float(np.abs(c - ref).max() / scale)
        ok = err < 1e-5
        bad += not ok
        print(f"{s} ({os.environ['PORTMAT_CUDA_TILE']}, SK_ALL={os.environ['PORTMAT_CUDA_SK_ALL']}): "
              f"max scaled error {err:.2e} {'OK' if ok else 'FAIL'}", flush=True)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()

"""A/B of CPU settings that are read once per process (PORTMAT_CPU_BLOCKS, PORTMAT_CPU_ISA, ...):
each variant runs in its own process, variants alternate round by round (so a machine that speeds
up or slows down affects all of them alike), and NumPy and Intel MKL (the PyPI `mkl` wheel, through
portmat.peers.MKLPeer, as `portmat bench` calls it) can be variants.

    python bench/diagnostics/cpu_env_ab.py --n 2048 --dtype float64 --rounds 3 \\
        - "PORTMAT_CPU_BLOCKS=f64:4200,256,256" numpy
    python bench/diagnostics/cpu_env_ab.py --shape 65536,64,64 - PORTMAT_CPU_SMALL=0 numpy

A variant is "-" (the defaults), "numpy", "mkl", or space-separated NAME=VALUE assignments, with
"numpy" or "mkl" among them for that library under those settings (e.g. "OPENBLAS_NUM_THREADS=1 numpy"). Each process
verifies one product against NumPy, warms up, and prints the median GFLOP/s of --repeat calls
(2 n^3 / t, or 2 M K N / t with --shape M,K,N; 8 for complex dtypes, whose blocks are those of the real type; NumPy arrays in and out); the table gives every round's figure per variant.
"""

import argparse
import os
import statistics
import subprocess
import sys
import time


def worker(m, k, n, dtype, repeat, who, offset):
    import numpy as np

    rng = np.random.default_rng(0)
    a = rng.random((m, k)).astype(dtype)
    b = rng.random((k, n)).astype(dtype)
    if offset >= 0:  # both operands `offset` bytes past a 4 KiB page (so past a cache line too)
        def placed(x):
            buf = np.empty(x.nbytes + 8192, np.uint8)
            start = (-buf.ctypes.data) % 4096 + offset
            y = buf[start:start + x.nbytes].view(x.dtype).reshape(x.shape)
            y[...] = x
            return y
        a, b = placed(a), placed(b)
    if np.dtype(dtype).kind == "c":
        a += 1j * rng.random((m, k))
        b += 1j * rng.random((k, n))
    if who == "numpy":
        f = lambda: a @ b  # noqa: E731
    elif who == "mkl":
        from portmat.peers import MKLPeer

        mkl = MKLPeer()
        f = lambda: mkl.host(a, b)  # noqa: E731
    else:
        import portmat

        f = lambda: portmat.matmul(a, b, device="cpu")  # noqa: E731
        ref = a.astype(np.complex128) @ b.astype(np.complex128)
        err = np.max(np.abs(f() - ref)) / np.max(np.abs(ref))
        # Rounding grows with K (each element sums K products): about sqrt(K) units of the last place.
        eps = np.finfo(np.dtype(dtype)).eps
        if err > max(1e-5 if dtype in ("float32", "complex64") else 1e-12, 4 * np.sqrt(k) * eps):
            sys.exit(f"wrong result: relative error {err:.2e}")
    for _ in range(2):
        f()
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t0)
    flops = (8 if np.dtype(dtype).kind == "c" else 2) * m * k * n  # a complex multiply-add is 8 flops
    print(f"{flops / statistics.median(ts) / 1e9:.1f}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("variants", nargs="*")
    p.add_argument("--n", type=int, default=2048)
    p.add_argument("--shape", default="", help="M,K,N instead of a square of --n")
    p.add_argument("--dtype", default="float32", choices=["float32", "float64", "complex64", "complex128"])
    p.add_argument("--repeat", type=int, default=0, help="timed calls per process (default: ~2 s)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--offset", type=int, default=-1,
                   help="place both operands this many bytes past a 4 KiB boundary (NumPy's arrays: mostly "
                        "16 past a cache line); default: where NumPy puts them")
    p.add_argument("--worker", default="", help=argparse.SUPPRESS)
    args = p.parse_args()
    m, k, n = (int(x) for x in args.shape.split(",")) if args.shape else (args.n,) * 3
    repeat = args.repeat or max(2, min(2000, int(2 * 300e9 / (8 * m * k * n))))
    if args.worker:
        worker(m, k, n, args.dtype, repeat, args.worker, args.offset)
        return
    if not args.variants:
        p.error("give at least one variant")
    results = {v: [] for v in args.variants}
    for _ in range(args.rounds):
        for v in args.variants:
            env = dict(os.environ)
            words = v.split()
            env.update(w.split("=", 1) for w in words if w not in ("-", "numpy", "mkl"))
            who = next((w for w in words if w in ("numpy", "mkl")), "portmat")
            out = subprocess.run([sys.executable, __file__, "--worker", who,
                                  "--n", str(args.n), "--shape", args.shape, "--dtype", args.dtype,
                                  "--repeat", str(repeat), "--offset", str(args.offset)],
                                 env=env, capture_output=True, text=True)
            if out.returncode:
                sys.exit(f"{v}: {out.stderr.strip() or out.stdout.strip()}")
            results[v].append(float(out.stdout.split()[-1]))
    what = f"({m} x {k}) @ ({k} x {n})" if args.shape else f"n = {args.n}"
    print(f"GFLOP/s, {args.dtype} {what}, {repeat} calls per process, one column per round")
    for v, r in results.items():
        print(f"{v:50s} " + " ".join(f"{x:7.1f}" for x in r) + f"   median {statistics.median(r):7.1f}")


if __name__ == "__main__":
    main()

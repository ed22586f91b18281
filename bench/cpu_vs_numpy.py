"""portmat's native CPU backend against NumPy (its BLAS) in the same process, interleaved.

Verifies each product against NumPy before timing, warms up, then alternates the two libraries
call by call (or, with --blocks, block by block after an idle pause, which lets OpenBLAS's worker
threads finish their ~0.1 s post-call busy-wait before portmat runs) and reports medians, GFLOP/s (2*M*N*K/t), the ratio NumPy-time / portmat-time
(> 1: portmat is faster) and portmat's share of the device's peak_gflops. Optionally saves JSON
with the device and the BLAS NumPy uses.

    python bench/cpu_vs_numpy.py --sizes 256,512,1024,2048,4096 --f64-sizes 2048 --json out.json
"""

import argparse
import json
import os
import statistics
import time

import numpy as np

import portmat


def repeats_for(n):
    return max(3, min(200, int(3e10 / (2 * n**3))))


def bench(n, dtype, device, repeat, blocks):
    rng = np.random.default_rng(n)
    a = rng.standard_normal((n, n)).astype(dtype)
    b = rng.standard_normal((n, n)).astype(dtype)
    want = a @ b
    got = portmat.matmul(a, b, device=device)
    tol = (1e-4 if dtype == np.float32 else 1e-12) * np.sqrt(n)
    err = np.max(np.abs(got - want)) / np.max(np.abs(want))
    assert err < tol, f"n={n} {dtype.__name__}: relative error {err:.2e} > {tol:.1e}"
    for _ in range(2):  # warm-up: pools, page faults, frequency
        a @ b
        portmat.matmul(a, b, device=device)
    t_np, t_pm = [], []
    if blocks:
        per = max(1, repeat // blocks)
        for _ in range(blocks):
            for f, out in ((lambda: a @ b, t_np), (lambda: portmat.matmul(a, b, device=device), t_pm)):
                time.sleep(0.3)
                f()
                for _ in range(per):
                    t0 = time.perf_counter()
                    f()
                    out.append(time.perf_counter() - t0)
        return statistics.median(t_np), statistics.median(t_pm)
    for _ in range(repeat):
        t0 = time.perf_counter()
        a @ b
        t1 = time.perf_counter()
        portmat.matmul(a, b, device=device)
        t2 = time.perf_counter()
        t_np.append(t1 - t0)
        t_pm.append(t2 - t1)
    return statistics.median(t_np), statistics.median(t_pm)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="256,512,1024,2048,4096")
    ap.add_argument("--f64-sizes", default="2048")
    ap.add_argument("--device", default="cpu:0")
    ap.add_argument("--repeat", type=int, default=0, help="timed pairs per size (0: by size)")
    ap.add_argument("--blocks", type=int, default=0,
                    help="alternate this many blocks per library, 0.3 s apart (0: call by call)")
    ap.add_argument("--json")
    args = ap.parse_args()
    info = portmat._ext.find_device(args.device)
    print(f"device {info.id}: {info.name}, {info.driver_version}, {info.compute_units} threads, "
          f"peak {info.peak_gflops:.0f} GFLOP/s float32")
    cases = [(int(n), np.float32) for n in args.sizes.split(",") if n]
    cases += [(int(n), np.float64) for n in args.f64_sizes.split(",") if n]
    rows = []
    print(f"{'n':>5} {'dtype':>7} {'numpy ms':>9} {'portmat ms':>10} {'np GF/s':>8} "
          f"{'pm GF/s':>8} {'np/pm':>6} {'% peak':>6}")
    for n, dtype in cases:
        t_np, t_pm = bench(n, dtype, args.device, args.repeat or repeats_for(n), args.blocks)
        flops = 2.0 * n**3
        peak = info.peak_gflops * (0.5 if dtype == np.float64 else 1.0)
        row = dict(n=n, dtype=np.dtype(dtype).name, numpy_s=t_np, portmat_s=t_pm,
                   numpy_gflops=flops / t_np / 1e9, portmat_gflops=flops / t_pm / 1e9,
                   ratio=t_np / t_pm, percent_of_peak=100 * flops / t_pm / 1e9 / peak if peak else 0)
        rows.append(row)
        print(f"{n:>5} {row['dtype']:>7} {t_np * 1e3:>9.3f} {t_pm * 1e3:>10.3f} "
              f"{row['numpy_gflops']:>8.1f} {row['portmat_gflops']:>8.1f} {row['ratio']:>6.2f} "
              f"{row['percent_of_peak']:>6.1f}")
    if args.json:
        blas = {}
        try:
            blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        except Exception:
            pass
        with open(args.json, "w") as f:
            json.dump(dict(device=dict(id=info.id, name=info.name, driver=info.driver_version,
                                       threads=info.compute_units, peak_gflops=info.peak_gflops),
                           numpy=dict(version=np.__version__, blas=blas),
                           env={k: os.environ.get(k) for k in
                                ("PORTMAT_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                                 "OPENBLAS_THREAD_TIMEOUT")},
                           method="blocks" if args.blocks else "interleaved",
                           results=rows), f, indent=1)


if __name__ == "__main__":
    main()

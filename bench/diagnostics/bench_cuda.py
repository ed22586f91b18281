"""CUDA backend benchmark: portmat's CUDA kernels and NumPy-in/NumPy-out path against cuBLAS
(torch, TF32 off) and CuPy in the same run, with medians and verified results.

  python3 bench/diagnostics/bench_cuda.py device  --sizes 1024,2048,4096,8192 [--tiles 128x256,128x256_fp]
  python3 bench/diagnostics/bench_cuda.py host    --sizes 512,1024,2048,4096,8192
  python3 bench/diagnostics/bench_cuda.py hostone --n 4096        (portmat only; for env-var sweeps)
  python3 bench/diagnostics/bench_cuda.py hostab  --sizes 4096,8192 --var PORTMAT_CUDA_EARLY_ROWS --values 0,2048
                                           (portmat only, one process: the values in alternating rounds)
  python3 bench/diagnostics/bench_cuda.py crossover --sizes 64,128,256,384,512,768,1024
Every mode appends its records to --json (a list of dicts) and prints a table.
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time

import numpy as np

import portmat
from portmat import _ext


def median_ms(fn, repeat, warmup=2):
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3


def rel_err(c, a, b):
    # float64 reference on a row sample: ||c - ref|| / ||ref|| (float32 lands far under 1e-5)
    rows = np.linspace(0, a.shape[0] - 1, min(64, a.shape[0])).astype(int)
    ref = a[rows].astype(np.float64) @ b.astype(np.float64)
    return float(np.linalg.norm(c[rows] - ref) / np.linalg.norm(ref))


def cuda_id():
    for d in portmat.devices():
        if d.backend == "cuda":
            return d.id
    sys.exit("no CUDA device in portmat.devices(): " + ", ".join(d.id for d in portmat.devices()))


def torch_operands(m, n, k):
    """cuBLAS FP32 through torch (TF32 off): a (m x k), b (k x n), c, after three warm-up products."""
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    a = torch.rand(m, k, device="cuda") - 0.5
    b = torch.rand(k, n, device="cuda") - 0.5
    c = torch.empty(m, n, device="cuda")
    for _ in range(3):
        torch.matmul(a, b, out=c)
    torch.cuda.synchronize()
    return a, b, c


def torch_device_tflops(n, repeat):
    import torch
    a, b, c = torch_operands(n, n, n)
    ts = []
    for _ in range(repeat):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        torch.matmul(a, b, out=c)
        e1.record()
        e1.synchronize()
        ts.append(e0.elapsed_time(e1) * 1e-3)
    return 2 * n**3 / statistics.median(ts) / 1e12


def mode_device(args, records):
    dev = cuda_id()
    tiles = args.tiles.split(",") if args.tiles else [""]
    rng = np.random.default_rng(0)
    for n in args.sizes:
        reps = args.repeat if n <= 4096 else max(5, args.repeat // 2)
        peer = torch_device_tflops(n, reps)
        row = {"mode": "device", "n": n, "cublas_tflops": peer}
        for tile in tiles:
            if tile:
                os.environ["PORTMAT_CUDA_TILE"] = tile
            else:
                os.environ.pop("PORTMAT_CUDA_TILE", None)
            # verify this tile first (host path runs the same kernel), then time it
            m = min(n, 2048)
            a = rng.standard_normal((m, m), dtype=np.float32)
            b = rng.standard_normal((m, m), dtype=np.float32)
            err = rel_err(portmat.matmul(a, b, device=dev), a, b)
            ts = _ext.time_gemm(dev, n, n, n, "float32", reps)
            tf = 2 * n**3 / statistics.median(ts) / 1e12
            row[f"portmat_{tile or 'default'}_tflops"] = tf
            row[f"portmat_{tile or 'default'}_relerr"] = err
            print(f"device n={n} tile={tile or 'default'}: {tf:.1f} TFLOP/s (cuBLAS {peer:.1f}, "
                  f"ratio {tf / peer:.3f}) relerr {err:.1e}", flush=True)
        os.environ.pop("PORTMAT_CUDA_TILE", None)
        records.append(row)


def pinned_floor_ms(n, repeat):
    import torch
    nbytes = n * n * 4
    h = [torch.empty(n * n, dtype=torch.float32).pin_memory() for _ in range(3)]
    d = [torch.empty(n * n, dtype=torch.float32, device="cuda") for _ in range(3)]

    def go():
        d[0].copy_(h[0], non_blocking=True)
        d[1].copy_(h[1], non_blocking=True)
        h[2].copy_(d[2], non_blocking=True)
        torch.cuda.synchronize()

    return median_ms(go, repeat), 3 * nbytes


def mode_host(args, records):
    import cupy as cp
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = cuda_id()
    rng = np.random.default_rng(1)
    for n in args.sizes:
        reps = args.repeat if n <= 4096 else max(5, args.repeat // 2)
        a = rng.standard_normal((n, n), dtype=np.float32)
        b = rng.standard_normal((n, n), dtype=np.float32)
        err = rel_err(portmat.matmul(a, b, device=dev), a, b)
        t_pm = median_ms(lambda: portmat.matmul(a, b, device=dev), reps)
        err_cp = rel_err(cp.asnumpy(cp.asarray(a) @ cp.asarray(b)), a, b)
        t_cp = median_ms(lambda: cp.asnumpy(cp.asarray(a) @ cp.asarray(b)), reps)
        t_th = median_ms(lambda: (torch.from_numpy(a).cuda() @ torch.from_numpy(b).cuda()).cpu().numpy(), reps)
        t_pin, nbytes = pinned_floor_ms(n, reps)
        ts = _ext.time_gemm(dev, n, n, n, "float32", 5)
        t_k = statistics.median(ts) * 1e3
        row = {"mode": "host", "n": n, "portmat_ms": t_pm, "cupy_ms": t_cp, "torch_ms": t_th,
               "pinned_transfer_ms": t_pin, "kernel_ms": t_k, "relerr": err, "cupy_relerr": err_cp,
               "env": {k: v for k, v in os.environ.items() if k.startswith("PORTMAT_")}}
        records.append(row)
        floor = max(t_pin, t_k)
        print(f"host n={n}: portmat {t_pm:.2f} ms, CuPy {t_cp:.2f} ({t_cp / t_pm:.1f}x), torch {t_th:.2f}, "
              f"pinned floor {t_pin:.2f}, kernel {t_k:.2f}, portmat/max(floor,kernel) {t_pm / floor:.2f}, "
              f"relerr {err:.1e}", flush=True)


def mode_hostone(args, records):
    dev = cuda_id()
    rng = np.random.default_rng(2)
    n = args.n
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    portmat.matmul(a[:64], b, device=dev)  # context, module, device buffers: not this call's cost
    t0 = time.perf_counter()
    c = portmat.matmul(a, b, device=dev)  # the first call of this size (pinned pool still cold)
    first = (time.perf_counter() - t0) * 1e3
    err = rel_err(c, a, b)
    del c
    t = median_ms(lambda: portmat.matmul(a, b, device=dev), args.repeat)
    env = {k: v for k, v in os.environ.items() if k.startswith("PORTMAT_")}
    records.append({"mode": "hostone", "n": n, "portmat_ms": t, "first_ms": first, "relerr": err, "env": env})
    print(f"hostone n={n} {env}: {t:.2f} ms (first call {first:.2f} ms) relerr {err:.1e}", flush=True)


def mode_hostab(args, records):
    # The NumPy path reads its PORTMAT_CUDA_* settings at every call, so one process can alternate
    # them: each round times `repeat` calls per value, in turn; medians over all calls per value.
    dev = cuda_id()
    rng = np.random.default_rng(4)
    values = args.values.split(",")
    for n in args.sizes:
        a = rng.standard_normal((n, n), dtype=np.float32)
        b = rng.standard_normal((n, n), dtype=np.float32)
        times = {v: [] for v in values}
        errs = {}
        for v in values:  # check each once (and warm up: pins the operands, fills the result pool)
            os.environ[args.var] = v
            errs[v] = rel_err(portmat.matmul(a, b, device=dev), a, b)
            portmat.matmul(a, b, device=dev)
        for _ in range(args.rounds):
            for v in values:
                os.environ[args.var] = v
                for _ in range(args.repeat):
                    t0 = time.perf_counter()
                    portmat.matmul(a, b, device=dev)
                    times[v].append(time.perf_counter() - t0)
        os.environ.pop(args.var, None)
        for v in values:
            ms = [t * 1e3 for t in times[v]]
            q = statistics.quantiles(ms, n=4)
            records.append({"mode": "hostab", "n": n, "var": args.var, "value": v,
                            "portmat_ms": statistics.median(ms), "q1_ms": q[0], "q3_ms": q[2],
                            "calls": len(ms), "relerr": errs[v]})
            print(f"hostab n={n} {args.var}={v}: {statistics.median(ms):.3f} ms "
                  f"(quartiles {q[0]:.3f}-{q[2]:.3f}, {len(ms)} calls) relerr {errs[v]:.1e}", flush=True)


def mode_crossover(args, records):
    dev = cuda_id()
    rng = np.random.default_rng(3)
    for n in args.sizes:
        a = rng.standard_normal((n, n), dtype=np.float32)
        b = rng.standard_normal((n, n), dtype=np.float32)
        t_np = median_ms(lambda: a @ b, args.repeat)
        t_pm = median_ms(lambda: portmat.matmul(a, b, device=dev), args.repeat)
        records.append({"mode": "crossover", "n": n, "numpy_ms": t_np, "portmat_cuda_ms": t_pm})
        print(f"crossover n={n}: NumPy (host CPU) {t_np:.3f} ms, portmat cuda {t_pm:.3f} ms "
              f"-> {'GPU' if t_pm < t_np else 'CPU'}", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["device", "host", "hostone", "hostab", "crossover"])
    p.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], default=[1024, 2048, 4096])
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--tiles", default="")
    p.add_argument("--var", default="PORTMAT_CUDA_EARLY_ROWS")
    p.add_argument("--values", default="0,2048")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--json", default="")
    args = p.parse_args()
    records = []
    globals()["mode_" + args.mode](args, records)
    if args.json:
        old = json.load(open(args.json)) if os.path.exists(args.json) else []
        meta = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "host": platform.node(),
                "devices": [f"{d.id} {d.name}" for d in portmat.devices()], "argv": sys.argv}
        for r in records:
            r["meta"] = meta
        json.dump(old + records, open(args.json, "w"), indent=1)


if __name__ == "__main__":
    main()

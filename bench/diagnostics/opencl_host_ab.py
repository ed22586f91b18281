"""OpenCL's NumPy-in/NumPy-out path against itself with the pipeline off and against the CUDA
backend on the same GPU, in alternating rounds in one process (issue 19, issue 16's skinny shapes).

  python3 bench/diagnostics/opencl_host_ab.py --device opencl:1
  python3 bench/diagnostics/opencl_host_ab.py --device opencl:1 --shapes 4096,4096,4096 --var PORTMAT_OPENCL_CHUNK_MB --values 8,16,32
  python3 bench/diagnostics/opencl_host_ab.py --device opencl:1 --shapes="-,1048576,-;16,65536,16" --var PORTMAT_OPENCL_SPLIT_K --values 1,0

Each shape (M,K,N; M or N "-" for a 1-D vector, as in `portmat bench --shapes`, then written
--shapes=...; float32, fresh C-contiguous operands, NumPy results) is timed for: the OpenCL
device with every value of --var (default PORTMAT_OPENCL_PIPELINE = 1 and 0), and cuda:0 when
there is one. The OpenCL knobs are read on every call, so one process alternates them: each round
times --repeat calls per entry, in turn; medians over all rounds. Every entry's result is checked
once against a float64 reference on a sample of rows. Prints a table with ratios to the CUDA backend
and appends records to --json when given.
"""

import argparse
import json
import os
import statistics
import time

import numpy as np

import portmat


def rel_err(c, a, b):
    if a.ndim == 1 or b.ndim == 1:  # a vector product: the whole reference is cheap
        ref = a.astype(np.float64) @ b.astype(np.float64)
        return float(np.linalg.norm(c - ref) / np.linalg.norm(ref))
    rows = np.linspace(0, a.shape[0] - 1, min(64, a.shape[0])).astype(int)
    ref = a[rows].astype(np.float64) @ b.astype(np.float64)
    return float(np.linalg.norm(c[rows] - ref) / np.linalg.norm(ref))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", required=True, help="the OpenCL device, e.g. opencl:1 (python -m portmat devices)")
    p.add_argument("--shapes", default="4096,4096,4096;4096,64,4096;1,4096,4096;4096,4096,1;2048,2048,2048",
                   help="M,K,N;M,K,N;...")
    p.add_argument("--var", default="PORTMAT_OPENCL_PIPELINE")
    p.add_argument("--values", default="1,0")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--no-cuda", action="store_true", help="leave the CUDA backend out")
    p.add_argument("--json", help="append records to this file (a JSON list)")
    args = p.parse_args()

    cuda = None if args.no_cuda else next((d.id for d in portmat.devices() if d.backend == "cuda"), None)
    entries = [(f"{args.device} {args.var}={v}", args.device, v) for v in args.values.split(",")]
    if cuda:
        entries.append((cuda, cuda, None))
    rng = np.random.default_rng(19)
    records = []
    for shape in args.shapes.split(";"):
        ms, ks, ns = shape.split(",")
        k = int(ks)
        m, n = (None if x.strip() == "-" else int(x) for x in (ms, ns))
        a = rng.standard_normal((k,) if m is None else (m, k), dtype=np.float32)
        b = rng.standard_normal((k,) if n is None else (k, n), dtype=np.float32)
        name = f"{'' if m is None else f'({m} x '}{k}{'' if m is None else ')'} @ " \
               f"{'' if n is None else '('}{k}{'' if n is None else f' x {n})'}"
        times = {label: [] for label, _, _ in entries}
        errs = {}

        def call(dev, value):
            if value is not None:
                os.environ[args.var] = value
            try:
                return portmat.matmul(a, b, device=dev)
            finally:
                os.environ.pop(args.var, None)

        for label, dev, value in entries:  # check each once, and warm up (builds, pools, staging)
            errs[label] = rel_err(call(dev, value), a, b)
            call(dev, value)
        for _ in range(args.rounds):
            for label, dev, value in entries:
                for _ in range(args.repeat):
                    t0 = time.perf_counter()
                    call(dev, value)
                    times[label].append(time.perf_counter() - t0)
        base = statistics.median(times[cuda]) if cuda else None
        for label, _, _ in entries:
            ms = [t * 1e3 for t in times[label]]
            med = statistics.median(ms)
            q = statistics.quantiles(ms, n=4)
            ratio = f"  {med / (base * 1e3):.2f}x CUDA" if base else ""
            print(f"{name}  {label:45s} {med:9.3f} ms (quartiles {q[0]:.3f}-{q[2]:.3f})"
                  f"{ratio}  relerr {errs[label]:.1e}", flush=True)
            records.append({"m": m, "k": k, "n": n, "shape": name, "entry": label, "median_ms": med, "q1_ms": q[0],
                            "q3_ms": q[2], "calls": len(ms), "relerr": errs[label]})
    if args.json:
        old = json.load(open(args.json)) if os.path.exists(args.json) else []
        json.dump(old + records, open(args.json, "w"), indent=1)


if __name__ == "__main__":
    main()

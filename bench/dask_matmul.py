"""Issue 20's dask figure: portmat.dask.matmul(x, y).compute() against dask.array's own
(x @ y).compute() (NumPy block products) on the same dask.distributed cluster.

For each size n and block size: x and y are n x n random arrays in (block x block) chunks, made and
persisted on the workers. Both results are computed once and verified first (a random sample of
entries of each against a float64 reference of those entries, to the bound K * eps * (|x| @ |y|):
a wrong result is not timed), then `--rounds` timed runs of each, the two alternating run by run
(the order swapped each round, a quiet pause before each run), so that drift on a shared machine
hits both alike. Each run is the whole `.compute()`: building the graph, the products on the
workers, and gathering the n x n result into this process, as a user waits for it. Reported:
medians, min and max, GFLOP/s (2 n^3 / median), and numpy / portmat (issue 20's target: >= 5 for
n = 32768 float32 in 8192-blocks on the H200 machine, one GPU worker against its 16 cores).

The cluster: a LocalCluster of --workers processes with --threads each (defaults: the dask
defaults for this machine's cores), or the one at --scheduler ADDRESS. Its workers get the
PinDevices plugin: --device ID pins every worker to that device; without it each worker of a host
gets one of its GPUs, or keeps portmat's automatic choice where there is none. portmat's CPU
backend is given cores // workers threads in each worker (its default, every core, would have two
workers' products fight over the cores), as dask's workers give NumPy's BLAS one thread per worker
thread (OMP/OPENBLAS/MKL_NUM_THREADS=1): each side has the host's cores once.

    python bench/dask_matmul.py                                   # n = 4096 in 1024-blocks, ~1 min on 2 cores
    python bench/dask_matmul.py --sizes 2048,4096 --blocks 512,1024 --json /tmp/dask.json
    python bench/dask_matmul.py --sizes 32768 --blocks 8192 --workers 1 --threads 16 \\
        --device cuda:0 --rounds 3 --json "$OUT/h200-dask.json"    # the H200 machine
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time

import numpy as np

import portmat
from portmat.bench import error_bound

try:
    import dask
    import dask.array as da
    import distributed
except ImportError as e:
    sys.exit(f"bench/dask_matmul.py needs dask and dask.distributed ({e}): pip install portmat[dask]")
import portmat.dask as pdask  # noqa: E402

_PAUSE_S = 0.5  # quiet time before each timed run
_SAMPLE = 64  # rows and columns whose crossing entries are verified


def _ints(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, not {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, not {text!r}")
    return values


def verify(c: np.ndarray, x, y, rng) -> float:
    """max |c - ref| / (|x| @ |y|) over the entries where _SAMPLE random rows and columns cross,
    ref in float64 (x's rows and y's columns fetched from the cluster)."""
    n, m = c.shape
    rows = np.sort(rng.choice(n, min(_SAMPLE, n), replace=False))
    cols = np.sort(rng.choice(m, min(_SAMPLE, m), replace=False))
    xr, yc = dask.compute(x[rows, :], y[:, cols])
    xr, yc = xr.astype(np.float64), yc.astype(np.float64)
    ref = xr @ yc
    mag = np.abs(xr) @ np.abs(yc)
    got = c[np.ix_(rows, cols)].astype(np.float64)
    if not np.all(np.isfinite(got)):
        return float("inf")
    return float(np.max(np.abs(got - ref) / np.maximum(mag, np.finfo(np.float64).tiny)))


def run_one(client, n: int, block: int, dtype: str, rounds: int, seed: int, say) -> dict:
    rng = np.random.default_rng(seed)
    chunks = (block, block)
    # Made on the workers, block by block, and kept there: neither contender's time includes them.
    rs = da.random.default_rng(seed)
    x = rs.uniform(-1, 1, (n, n), chunks=chunks).astype(dtype)
    y = rs.uniform(-1, 1, (n, n), chunks=chunks).astype(dtype)
    x, y = client.persist([x, y])
    distributed.wait([x, y])
    contenders = {
        "numpy": lambda: (x @ y).compute(),
        "portmat": lambda: pdask.matmul(x, y).compute(),
    }
    bound = error_bound(n, dtype)
    record = {"n": n, "block": block, "dtype": dtype, "flop": 2.0 * n ** 3, "error_bound": bound}
    for name, fn in contenders.items():  # verified (and warmed up) first
        say(f"n={n} block={block}: verifying {name}")
        t0 = time.perf_counter()
        c = fn()
        record[f"{name}_first_s"] = time.perf_counter() - t0
        if c.shape != (n, n) or c.dtype != np.dtype(dtype):
            raise SystemExit(f"{name}: result of shape {c.shape} and dtype {c.dtype}, expected ({n}, {n}) {dtype}")
        err = verify(c, x, y, rng)
        record[f"{name}_max_rel_error"] = err
        if not err <= bound:
            raise SystemExit(f"{name}: wrong result at n={n}, block={block}: error {err:.3e} over the bound {bound:.3e}")
        del c
    times = {name: [] for name in contenders}
    for r in range(rounds):
        order = list(contenders) if r % 2 == 0 else list(reversed(contenders))
        for name in order:
            time.sleep(_PAUSE_S)
            t0 = time.perf_counter()
            contenders[name]()
            times[name].append(time.perf_counter() - t0)
        say(f"n={n} block={block}: round {r + 1}/{rounds}: " +
            ", ".join(f"{k} {v[-1]:.3f} s" for k, v in times.items()))
    for name, t in times.items():
        med = statistics.median(t)
        record[f"{name}_s"] = t
        record[f"{name}_median_s"] = med
        record[f"{name}_gflops"] = record["flop"] / med / 1e9
    record["numpy_over_portmat"] = record["numpy_median_s"] / record["portmat_median_s"]
    client.cancel([x, y])
    return record


def table(records: list[dict]) -> str:
    lines = [f"{'n':>6} {'block':>6} {'dtype':>8} {'numpy s':>9} {'(min-max)':>17} {'portmat s':>10} "
             f"{'(min-max)':>17} {'numpy GF/s':>10} {'portmat GF/s':>12} {'numpy/portmat':>13}"]
    for r in records:
        lines.append(
            f"{r['n']:>6} {r['block']:>6} {r['dtype']:>8} {r['numpy_median_s']:>9.3f} "
            f"{min(r['numpy_s']):>8.3f}-{max(r['numpy_s']):<8.3f} {r['portmat_median_s']:>10.3f} "
            f"{min(r['portmat_s']):>8.3f}-{max(r['portmat_s']):<8.3f} {r['numpy_gflops']:>10.1f} "
            f"{r['portmat_gflops']:>12.1f} {r['numpy_over_portmat']:>12.2f}x")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=_ints, default=[4096], help="n of the n x n operands, comma-separated (4096)")
    p.add_argument("--blocks", type=_ints, default=[1024], help="block sizes, comma-separated (1024); "
                   "every size is run with every block size not above it")
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    p.add_argument("--rounds", type=int, default=3, help="timed runs of each contender (3)")
    p.add_argument("--workers", type=int, default=None, help="LocalCluster worker processes (dask's default)")
    p.add_argument("--threads", type=int, default=None, help="threads per worker (dask's default)")
    p.add_argument("--device", default=None, help="the device every worker's products run on (default: "
                   "one GPU per worker of a host, else portmat's automatic choice)")
    p.add_argument("--scheduler", default=None, help="the address of a running cluster's scheduler "
                   "instead of a LocalCluster")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--json", default=None, metavar="FILE", help="write the records (and the setup) here")
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    seed = args.seed if args.seed is not None else int(np.random.SeedSequence().entropy % 2**32)

    def say(msg):
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    if args.scheduler:
        cluster = None
        client = distributed.Client(args.scheduler)
    else:
        cluster = distributed.LocalCluster(n_workers=args.workers, threads_per_worker=args.threads,
                                           processes=True, dashboard_address=None)
        client = distributed.Client(cluster)
    try:
        workers = client.scheduler_info()["workers"]
        # Each worker's host's cores, shared by that host's workers.
        cores_of = client.run(os.cpu_count)
        hosts = {}
        for address, w in workers.items():
            hosts.setdefault(w["host"], []).append(cores_of.get(address) or 1)
        threads = max(1, min(c[0] // len(c) for c in hosts.values()))
        cores = {h: c[0] for h, c in hosts.items()}
        client.register_plugin(pdask.PinDevices(None if args.device is None else [args.device],
                                                num_threads=threads))
        pinned = client.run(lambda dask_worker: dask_worker.plugins[pdask.PinDevices.name].device)
        say(f"{len(workers)} workers, {sum(w['nthreads'] for w in workers.values())} threads; portmat "
            f"devices pinned: {pinned} (None: portmat's automatic choice); portmat CPU threads per worker: {threads}")
        setup = {
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "machine": platform.node(), "cores_per_host": cores, "seed": seed,
            "workers": len(workers), "threads_per_worker": sorted({w["nthreads"] for w in workers.values()}),
            "portmat_threads_per_worker": threads, "pinned_devices": pinned, "device_arg": args.device,
            "versions": {"portmat": portmat.__version__, "dask": dask.__version__,
                         "distributed": distributed.__version__, "numpy": np.__version__,
                         "python": platform.python_version()},
            "command": " ".join([os.path.basename(sys.argv[0])] + (argv if argv is not None else sys.argv[1:])),
        }
        records = []
        for n in args.sizes:
            for block in args.blocks:
                if block > n:
                    continue
                records.append(run_one(client, n, block, args.dtype, args.rounds, seed, say))
                say(table(records[-1:]).splitlines()[-1])
                if args.json:  # after every record: a run cut short keeps what it measured
                    with open(args.json, "w") as f:
                        json.dump({"setup": setup, "records": records}, f, indent=1)
                    say(f"wrote {args.json}")
        print(table(records), flush=True)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

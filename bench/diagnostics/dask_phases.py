"""Where bench/dask_matmul.py's time goes (issue 20): on one dask.distributed cluster, each phase
of portmat.dask.matmul(x, y).compute() and of dask.array's (x @ y).compute() timed alone, medians
of --rounds, for persisted n x n float32 operands in (block x block) chunks:
  gather      x.compute() of a persisted n x n array: moving n^2 elements to the client and
              joining them there, which both contenders pay for their result;
  panels      portmat.dask's row panels of x and column panels of y (the rechunk), persisted;
  products    the block products on the workers from persisted panels, persisted (no gather);
  one product a single panel product timed inside a worker (portmat.matmul, its device), on
              arrays it has seen before with results let go (its best case), and as a task meets
              them: operands new to portmat (first use, then second use, when they are pinned),
              results kept (so never recycled pinned blocks), or written into a faulted-in out=;
  task stream each product task's compute span in the products phase (dask's task stream):
              how many ran at once and how long each took, against the phase's wall time;
  numpy       dask.array's x @ y persisted (no gather).

    python3 bench/diagnostics/dask_phases.py --n 32768 --block 8192 --workers 1 --threads 16 --device cuda:0
"""

import argparse
import statistics
import sys
import time

import numpy as np

import dask.array as da
import distributed

import portmat
import portmat.dask as pdask


def timed(client, fn, rounds):
    ts = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        r = fn()
        ts.append(time.perf_counter() - t0)
        if isinstance(r, list) or hasattr(r, "dask"):
            client.cancel(r)  # so that the next round computes it again
        del r
        time.sleep(0.5)
    return statistics.median(ts), min(ts), max(ts)


def as_a_task_meets_them(xb, yb, device):
    """Times one panel product as the products phase's tasks meet it (run inside a worker)."""
    def timed_call(f):
        t0 = time.perf_counter()
        r = f()
        return time.perf_counter() - t0, r
    out = []
    keep = []
    t, _ = timed_call(lambda: portmat.matmul(xb, yb, device=device))  # warm: seen arrays
    t, r = timed_call(lambda: portmat.matmul(xb, yb, device=device))
    out.append(("seen operands, result let go", t))
    del r
    t, xa = timed_call(lambda: xb.copy())
    out.append(("copy of a panel (host)", t))
    ya = yb.copy()
    t, r = timed_call(lambda: portmat.matmul(xa, ya, device=device))
    keep.append(r)
    out.append(("new operands, result kept", t))
    t, r = timed_call(lambda: portmat.matmul(xa, ya, device=device))
    keep.append(r)
    out.append(("2nd use (pinned now), result kept", t))
    t, r = timed_call(lambda: portmat.matmul(xa, ya, device=device))
    keep.append(r)
    out.append(("3rd use, result kept", t))
    t, c = timed_call(lambda: np.ones((xb.shape[0], yb.shape[1]), np.float32))
    out.append(("np.ones of a result (faulting in)", t))
    t, r = timed_call(lambda: portmat.matmul(xa, ya, out=c, device=device))
    out.append(("3rd use, out= faulted in", t))
    xa2, ya2 = xb.copy(), yb.copy()
    t, r = timed_call(lambda: portmat.matmul(xa2, ya2, out=c, device=device))
    out.append(("new operands, out= faulted in", t))
    del keep
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--block", type=int, default=1024)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--device", default=None)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--skip-numpy", action="store_true")
    a = p.parse_args()
    cluster = distributed.LocalCluster(n_workers=a.workers, threads_per_worker=a.threads, processes=True,
                                       dashboard_address=None)
    client = distributed.Client(cluster)
    client.register_plugin(pdask.PinDevices(None if a.device is None else [a.device]))
    rs = da.random.default_rng(1)
    x = rs.uniform(-1, 1, (a.n, a.n), chunks=(a.block, a.block)).astype(np.float32)
    y = rs.uniform(-1, 1, (a.n, a.n), chunks=(a.block, a.block)).astype(np.float32)
    x, y = client.persist([x, y])
    distributed.wait([x, y])

    def persisted(arr):
        arr = client.persist(arr)
        distributed.wait(arr)
        return arr

    def report(name, t):
        print(f"{name:12s} {t[0]:9.3f} s  ({t[1]:.3f}-{t[2]:.3f})", flush=True)

    report("gather", timed(client, lambda: x.compute(), a.rounds))
    report("panels", timed(client, lambda: persisted([x.rechunk({1: -1}), y.rechunk({0: -1})]), a.rounds))
    xp, yp = persisted([x.rechunk({1: -1}), y.rechunk({0: -1})])
    z = pdask.matmul(xp, yp)
    report("products", timed(client, lambda: persisted(z), a.rounds))
    report("whole", timed(client, lambda: pdask.matmul(x, y).compute(), a.rounds))
    xf = client.compute(xp.blocks[0, 0])
    yf = client.compute(yp.blocks[0, 0])
    distributed.wait([xf, yf])

    def one(xb, yb, device):
        portmat.matmul(xb, yb, device=device)
        ts = []
        for _ in range(3):
            t0 = time.perf_counter()
            portmat.matmul(xb, yb, device=device)
            ts.append(time.perf_counter() - t0)
        return statistics.median(ts)

    t1 = client.submit(one, xf, yf, a.device, pure=False).result()
    print(f"one product  {t1:9.3f} s  ({a.block} x {a.n} @ {a.n} x {a.block} in a worker)", flush=True)
    for name, t in client.submit(as_a_task_meets_them, xf, yf, a.device, pure=False).result():
        print(f"  {name:34s} {t:7.3f} s", flush=True)
    with distributed.get_task_stream(client) as stream:
        t0 = time.perf_counter()
        persisted(z)
        wall = time.perf_counter() - t0
    spans = sorted((ss["start"], ss["stop"]) for task in stream.data if "portmat-matmul" in str(task["key"])
                   for ss in task["startstops"] if ss["action"] == "compute")
    if spans:
        first = spans[0][0]
        durations = [e - s for s, e in spans]
        stops = sorted(e - first for _, e in spans)
        print(f"task stream  {len(spans)} products in {wall:.3f} s: compute spans median "
              f"{statistics.median(durations):.3f} s (min {min(durations):.3f}, max {max(durations):.3f}); "
              f"first start to last stop {max(e for _, e in spans) - first:.3f} s", flush=True)
        print("  stops (s from the first start): " + " ".join(f"{x:.2f}" for x in stops), flush=True)
    if not a.skip_numpy:
        report("numpy", timed(client, lambda: persisted(x @ y), a.rounds))
    client.close()
    cluster.close()


if __name__ == "__main__":
    sys.exit(main())

"""The benchmark: the seed's race against NumPy, grown up.

For each size n, square (n x n) @ (n x n) on fresh random data: verify portmat against a float64
reference first, warm both up, then time `repeat` runs of NumPy and of portmat in alternating
blocks, so that drift on a shared machine hits both alike, and report medians. Small products get
more runs (the slower of NumPy and portmat at least _MIN_TIMED_S of timed calls, in blocks of at
least _MIN_BLOCK_S): ten runs of a 0.15 ms product give a median that one late wake-up of a thread
can move by 15%. Blocks, not single calls: after each call OpenBLAS's worker threads spin for about
0.1 s, taking cores from whatever runs next; a short pause before each block lets either library
run as it would on its own, and a few milliseconds of untimed calls after it wake the idle cores
up again.
- numpy_s:   NumPy's a @ b (its BLAS, all cores);
- portmat_s: portmat.matmul(a, b) as a user calls it, NumPy in and NumPy out, called repeatedly
  on the same arrays (on a discrete GPU, portmat then keeps them and the recycled results in
  pinned memory: see _host_memory.py);
- new_arrays_s: one portmat call on arrays it has not seen before (copies of a and b): what a
  one-off call costs;
- kernel_s:  portmat's kernel alone on device-resident data (device timer; on a GPU each run is the
  mean of _RESIDENT_LAUNCHES products queued back to back, peers alike: one product between two
  events would also time its launch, which costs a Python library more than portmat's C++);
- max_rel_error: max |c - ref| / (|a| @ |b|) over the checked entries: the componentwise error,
  which float32 arithmetic keeps near sqrt(n) * 6e-8 and never above n * 6e-8.
Peers (peers.py: cuBLAS through CuPy and torch on NVIDIA GPUs, Intel MKL on the CPU) are verified
against the same bound and timed the same way, NumPy in/out, and device-resident where they have a
device (a CPU peer has only the NumPy in/out time).
"""

from __future__ import annotations

import datetime
import json
import math
import os
import platform
import statistics
import time

import numpy as np

import portmat
from portmat import _ext, peers as _peers

# Checking every entry of a 4096^2 result against float64 costs more than the benchmark; above this
# many rows, a fixed random sample of rows is checked (every column of each).
_FULL_CHECK_ROWS = 1024
_SAMPLE_ROWS = 128
_BLOCK = 5  # runs per block of one library
_PAUSE_S = 0.3  # quiet time before each block: longer than OpenBLAS's ~0.1 s of spinning
_WARM_S = 0.005  # untimed calls after the pause, before a block is timed (_warm_up)
_MIN_TIMED_S = 0.25  # timed calls of the slower of NumPy and portmat per size, at least
_MIN_BLOCK_S = 0.025  # a block's calls, at least
_MAX_RUNS = 5000
_RESIDENT_LAUNCHES = 5  # device-resident products per timed run on a GPU (kernel_s)


def blas_info() -> str:
    """Which BLAS NumPy calls, as well as it can be told (not a peer's, such as MKL's)."""
    try:
        import threadpoolctl

        infos = [i for i in threadpoolctl.threadpool_info() if i.get("user_api") == "blas"
                 and os.path.realpath(i.get("filepath", "")) not in _peers.LOADED_LIBRARIES]
        if infos:
            i = infos[0]
            return f"{i.get('internal_api')} {i.get('version')} ({i.get('threading_layer')}, {i.get('num_threads')} threads)"
    except ImportError:
        pass
    try:
        cfg = np.show_config(mode="dicts")
        blas = cfg["Build Dependencies"]["blas"]
        return f"{blas.get('name')} {blas.get('version')}"
    except Exception:
        return "unknown"


def random_operand(rng: np.random.Generator, shape, dtype) -> np.ndarray:
    """Fresh values for the dtype: uniform in [-1, 1) for floats (both parts for complex numbers),
    integers in [-100, 100) (the product may wrap: NumPy's does too), booleans at random."""
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        return rng.integers(0 if dtype.kind == "u" else -100, 100, shape).astype(dtype)
    x = rng.uniform(-1, 1, shape)
    if dtype.kind == "c":
        x = x + 1j * rng.uniform(-1, 1, shape)
    return x.astype(dtype)


def max_rel_error(a: np.ndarray, b: np.ndarray, c: np.ndarray, rng: np.random.Generator) -> float:
    """max |c - ref| / (|a| @ |b|) over checked entries (floats, complex numbers), or 0 / inf for
    integers and booleans, which must equal NumPy's result exactly. Of a stack, the first, the
    last and a random matrix are checked; of a large matrix, a random sample of rows."""
    if a.ndim == 3:
        picks = sorted({0, a.shape[0] - 1, int(rng.integers(a.shape[0]))})
        return max(max_rel_error(a[i], b[i], c[i], rng) for i in picks)
    rows = np.arange(a.shape[0])
    if a.shape[0] > _FULL_CHECK_ROWS:
        rows = np.sort(rng.choice(a.shape[0], _SAMPLE_ROWS, replace=False))
    if a.dtype.kind in "biu":
        return 0.0 if np.array_equal(c[rows], np.matmul(a[rows], b)) else float("inf")
    wide = np.complex128 if a.dtype.kind == "c" else np.float64
    a64 = a[rows].astype(wide)
    b64 = b.astype(wide)
    ref = a64 @ b64
    mag = np.abs(a64) @ np.abs(b64)
    err = np.abs(c[rows].astype(wide) - ref) / np.maximum(mag, np.finfo(np.float64).tiny)
    worst = float(np.max(err)) if err.size else 0.0
    return float("inf") if np.isnan(worst) or not np.all(np.isfinite(c[rows])) else worst


def error_bound(k: int, dtype) -> float:
    """The classical bound on max_rel_error for an inner dimension k: k * eps (twice that for
    complex numbers, NumPy's four real products per term; float16, accumulated in float32 and
    rounded once, gets four times); 0 for integers and booleans (exact)."""
    dt = np.dtype(dtype)
    if dt.kind not in "fc":
        return 0.0
    return max(k, 1) * float(np.finfo(dt).eps) * (2 if dt.kind == "c" else 1) * (4 if dt == np.float16 else 1)


def _time_once(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _time_typical(fn) -> float:
    fn()
    return statistics.median(_time_once(fn) for _ in range(3))


def _warm_up(fn) -> None:
    # After the pause, the first calls run on cores that were idle: on the 2-core VM the first call
    # of a 256^3 product took 8-15 ms and the second 0.2-1 ms against 0.15 ms warm, for NumPy and
    # portmat alike. Untimed calls for at least _WARM_S (and two calls) bring the machine back.
    t0 = time.perf_counter()
    calls = 0
    while calls < 2 or time.perf_counter() - t0 < _WARM_S:
        fn()
        calls += 1


def _plan(repeat: int, t_call: float) -> tuple[int, int]:
    """(runs, block): at least `repeat` runs and _MIN_TIMED_S of calls, blocks of at least _BLOCK
    calls and _MIN_BLOCK_S, for a product that takes about t_call seconds."""
    t_call = max(t_call, 1e-6)
    block = max(_BLOCK, math.ceil(_MIN_BLOCK_S / t_call))
    runs = max(repeat, min(math.ceil(_MIN_TIMED_S / t_call), _MAX_RUNS))
    return runs, min(block, runs)


def _time_blocks(contenders: dict, repeat: int, say, block_size: int = _BLOCK) -> dict:
    """`repeat` timings of each contender, taken in alternating blocks of `block_size` calls, each
    block after a quiet pause and a short untimed warm-up (see the module docstring)."""
    times = {name: [] for name in contenders}
    done = 0
    while done < repeat:
        block = min(block_size, repeat - done)
        say(f"runs {done + 1}-{done + block} of {repeat}")
        for name, fn in contenders.items():
            time.sleep(_PAUSE_S)
            _warm_up(fn)
            times[name] += [_time_once(fn) for _ in range(block)]
        done += block
    return times


def run(sizes, repeat, device, dtype="float32", progress=None, with_peers=True, batch=None) -> list[dict]:
    """One record per size n: (n x n) @ (n x n) products, or stacks of `batch` of them."""
    dev = portmat._ext.find_device(portmat._device_spec(device))
    peers = _peers.available(dev) if with_peers else []
    blas = blas_info()
    host = platform.node()
    today = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    records = []
    kind = np.dtype(dtype).kind
    # Operations per multiply-add: 2 (real), 8 (complex: four real multiplies and four adds).
    ops_per_madd = 8 if kind == "c" else 2

    if progress is not None and not (hasattr(progress, "isatty") and progress.isatty()):
        progress = None  # a log file gets the table, not carriage-return animations

    def say(msg):
        if progress is not None:
            progress.write("\r" + msg.ljust(60))
            progress.flush()

    for n in sizes:
        rng = np.random.default_rng(n)
        shape = (n, n) if batch is None else (batch, n, n)
        a = random_operand(rng, shape, dtype)
        b = random_operand(rng, shape, dtype)
        say(f"n={n}: verifying")
        c = portmat.matmul(a, b, device=dev)
        err = max_rel_error(a, b, c, rng)
        verified = err <= error_bound(n, dtype)
        say(f"n={n}: warming up")
        a @ b
        portmat.matmul(a, b, device=dev)
        fresh_a, fresh_b = a.copy(), b.copy()
        time.sleep(_PAUSE_S)  # NumPy's BLAS threads still spin after the warm-up above
        _warm_up(lambda: portmat.matmul(a, b, device=dev))  # wakes the machine, not the copies
        t_new = _time_once(lambda: portmat.matmul(fresh_a, fresh_b, device=dev))
        del fresh_a, fresh_b
        # Verify and warm up each peer, then time every contender in the same alternating blocks.
        contenders = {"numpy": lambda: a @ b, "portmat": lambda: portmat.matmul(a, b, device=dev)}
        peer_errors = {}
        for peer in peers:
            say(f"n={n}: verifying {peer.name}")
            try:
                peer_errors[peer.name] = max_rel_error(a, b, peer.host(a, b), rng)
            except Exception:  # a dtype the peer does not multiply (torch's integers on CUDA)
                continue
            peer.host(a, b)
            contenders[peer.name] = lambda peer=peer: peer.host(a, b)
        # How many runs: from the slower of NumPy and portmat (on a GPU, NumPy's host product
        # sets the pace; every contender gets the same count), each the median of three calls
        # (a single call can catch the other library's threads still spinning: one 0.15 ms
        # product took 1.2 ms that way and cut the runs of n = 256 from ~1500 to 197).
        t_call = max(_time_typical(contenders["numpy"]), _time_typical(contenders["portmat"]))
        runs, block = _plan(repeat, t_call)
        times = _time_blocks(contenders, runs, lambda msg: say(f"n={n}: {msg}"), block)
        t_np, t_pm = times["numpy"], times["portmat"]
        say(f"n={n}: kernel only")
        launches = _RESIDENT_LAUNCHES if dev.kind == "gpu" else 1
        t_k = []  # the kernel alone on device-resident data: 2-D float32 / float64 products
        if batch is None and dtype in ("float32", "float64"):
            t_k = [t for t in _ext.time_gemm(dev.id, n, n, n, dtype, runs, launches) if t >= 0]
        flop = ops_per_madd * n**3 * (batch or 1)
        peer_results = {}
        for peer in (p for p in peers if p.name in contenders):
            t_host = times[peer.name]
            peer_results[peer.name] = {
                "host_s": statistics.median(t_host),
                "host_spread_s": [min(t_host), max(t_host)],
                "max_rel_error": peer_errors[peer.name],
                "verified": bool(peer_errors[peer.name] <= error_bound(n, dtype)),
                "version": getattr(peer, "version", None),
            }
            if not hasattr(peer, "resident"):  # a CPU peer: NumPy in/out is its whole story
                continue
            say(f"n={n}: {peer.name} device-resident")
            try:
                t_res = peer.resident(a, b, runs, launches)
            except Exception:  # a dtype the peer does not multiply on the device
                continue
            peer_results[peer.name]["resident_s"] = statistics.median(t_res)
            peer_results[peer.name]["gflops_resident"] = flop / statistics.median(t_res) / 1e9
        rec = {
            "size": n,
            "batch": batch,
            "dtype": dtype,
            "device": dev.id,
            "device_name": dev.name,
            "numpy_s": statistics.median(t_np),
            "portmat_s": statistics.median(t_pm),
            "new_arrays_s": t_new,
            "kernel_s": statistics.median(t_k) if t_k else None,
            "numpy_spread_s": [min(t_np), max(t_np)],
            "portmat_spread_s": [min(t_pm), max(t_pm)],
            "max_rel_error": err,
            "verified": bool(verified),
            "repeat": runs,
            "resident_launches": launches,
            "blas": blas,
            "numpy_version": np.__version__,
            "host": host,
            "date": today,
        }
        rec["peers"] = peer_results
        if dev.peak_gflops > 0:
            rec["peak_gflops"] = dev.peak_gflops
        rec["speedup_vs_numpy"] = rec["numpy_s"] / rec["portmat_s"]
        rec["gflops_numpy"] = flop / rec["numpy_s"] / 1e9
        rec["gflops_portmat"] = flop / rec["portmat_s"] / 1e9
        rec["gflops_kernel"] = flop / rec["kernel_s"] / 1e9 if rec["kernel_s"] else None
        records.append(rec)
    if progress is not None:
        progress.write("\r" + " " * 60 + "\r")
        progress.flush()
    return records


def _runs_text(records: list[dict]) -> str:
    counts = sorted({r["repeat"] for r in records})
    if len(counts) == 1:
        return f"{counts[0]} runs"
    return f"{counts[0]}-{counts[-1]} runs (n = " + ", ".join(
        f"{r['size']}: {r['repeat']}" for r in records) + ")"


def _peer_versions(records: list[dict]) -> list[str]:
    versions = {name: p["version"] for r in records for name, p in r.get("peers", {}).items() if p.get("version")}
    return ["peers: " + "; ".join(f"{name}: {v}" for name, v in sorted(versions.items()))] if versions else []


def table(records: list[dict]) -> str:
    if not records:
        return "(no results)"
    r0 = records[0]
    head = [
        f"portmat bench: {r0['dtype']} {'' if not r0.get('batch') else str(r0['batch']) + ' x '}"
        f"(n x n) @ (n x n) on {r0['device']} ({r0['device_name']})",
        f"NumPy {r0['numpy_version']} with {r0['blas']}; host {r0['host']}; {r0['date']}",
        *_peer_versions(records),
        f"medians of {_runs_text(records)}; ratio = NumPy time / portmat time "
        "(NumPy in, NumPy out, "
        "same arrays each call); new arrays = one call on arrays portmat has not seen; "
        f"kernel = device-resident (on a GPU each run the mean of {_RESIDENT_LAUNCHES} queued products, "
        "peers alike); "
        "peers: NumPy in/out ms, vs peer = its time / portmat's, and device-resident GFLOP/s (GPU peers)",
        "",
    ]
    peer_names = sorted({name for r in records for name in r.get("peers", {})})
    cols = ["n", "NumPy ms", "GFLOP/s", "portmat ms", "GFLOP/s", "new arrays ms", "kernel ms",
            "GFLOP/s"]
    if any("peak_gflops" in r for r in records):
        cols.append("% peak")
    resident = {name for r in records for name, p in r.get("peers", {}).items() if "gflops_resident" in p}
    for name in peer_names:
        cols += [f"{name} ms", f"vs {name}"] + ([f"{name} kern GF/s"] if name in resident else [])
    cols += ["ratio", "max rel err", "ok"]
    rows = [cols]
    for r in records:
        k = r["kernel_s"]
        extra = []
        if "% peak" in cols:
            best = max(r["gflops_portmat"], r["gflops_kernel"] or 0)
            extra.append(f"{100 * best / r['peak_gflops']:.0f}%" if "peak_gflops" in r else "")
        for name in peer_names:
            p = r.get("peers", {}).get(name)
            cells = [f"{p['host_s'] * 1e3:.3f}" + ("" if p.get("verified", True) else " (WRONG)"),
                     f"{p['host_s'] / r['portmat_s']:.2f}x"] if p else ["", ""]
            if name in resident:
                cells.append(f"{p['gflops_resident']:.0f}" if p and "gflops_resident" in p else "")
            extra += cells
        rows.append([
            str(r["size"]),
            f"{r['numpy_s'] * 1e3:.3f}", f"{r['gflops_numpy']:.1f}",
            f"{r['portmat_s'] * 1e3:.3f}", f"{r['gflops_portmat']:.1f}",
            f"{r['new_arrays_s'] * 1e3:.3f}" if "new_arrays_s" in r else "",
            f"{k * 1e3:.3f}" if k else "n/a", f"{r['gflops_kernel']:.1f}" if k else "n/a",
            *extra,
            f"{r['speedup_vs_numpy']:.2f}x", f"{r['max_rel_error']:.2e}",
            "yes" if r["verified"] else "NO",
        ])
    widths = [max(len(row[i]) for row in rows) for i in range(len(cols))]
    body = ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in rows]
    return "\n".join(head + body)


def write_json(records: list[dict], path: str) -> None:
    with open(path, "w") as f:
        json.dump(records, f, indent=2)
        f.write("\n")

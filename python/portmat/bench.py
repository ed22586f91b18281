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
  events would also time its launch, which costs a Python library more than portmat's C++; torch
  is also timed replaying them as a CUDA graph, and the faster counts: peers.py);
- max_rel_error: max |c - ref| / (|a| @ |b|) over the checked entries: the componentwise error,
  which float32 arithmetic keeps near sqrt(n) * 6e-8 and never above n * 6e-8.
Peers (peers.py: cuBLAS through CuPy and torch on NVIDIA GPUs, Intel MKL on the CPU, Intel's dpnp
on the CPU and OpenCL CPU devices) are verified against the same bound and timed the same way, NumPy
in/out, and device-resident where they have a device (MKL has only the NumPy in/out time). dpnp's
device-resident product (dpnp.matmul of operands already on its SYCL queue, then queue.wait()) is
verified too and timed on the host's clock in the same alternating blocks as everything else: on a
CPU device that is what a SYCL user waits for, and it includes dpnp's per-call cost, as portmat's
kernel time on the CPU includes portmat's. A peer that belongs to the device but could not be used
(not installed, no SYCL device) is named with the reason in each record's peers_missing.

run_shapes() is the benchmark over shapes (`--shapes FILE` or the built-in SUITE): one product
(M x K) @ (K x N) per shape, either side possibly a 1-D vector, every contender (NumPy, portmat,
each peer) verified against float64 and timed the same way, in 3 to 6 alternating blocks (12 to 24
after shorter pauses for products NumPy runs on one thread: _SINGLE_THREAD_MADDS), with
the memory bandwidth of a large np.copyto measured in the same run (at its start and end) as the
yardstick of the bandwidth-bound products.
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


def _round_order(names: list, round_index: int) -> list:
    """The contenders' order in round `round_index`: the rows of a Williams design (a balanced
    Latin square: row i is the first row 0, 1, n-1, 2, n-2, ... plus i, modulo n; for an odd n
    also each row reversed), so that over its n (odd n: 2n) rounds every contender runs right
    after every other one equally often. In a fixed order the same contender always followed
    NumPy's block: on the H200's 16-core host tiny products measured bimodal there (quartiles
    1.0-1.7 us) whichever device portmat was on."""
    n = len(names)
    if n < 2:
        return list(names)
    first = [0] + [(j + 1) // 2 if j % 2 else n - j // 2 for j in range(1, n)]  # 0, 1, n-1, 2, n-2, ...
    i = round_index % (2 * n if n % 2 else n)
    row = [names[(x + i) % n] for x in first]
    return row[::-1] if i >= n else row


def _time_blocks(contenders: dict, repeat: int, say, block_size: int = _BLOCK, pause_s: float | None = None) -> dict:
    """`repeat` timings of each contender, taken in alternating blocks of `block_size` calls (in an
    order that changes round by round: _round_order), each block after a quiet pause (`pause_s`,
    default _PAUSE_S) and a short untimed warm-up (see the module docstring)."""
    pause_s = _PAUSE_S if pause_s is None else pause_s
    times = {name: [] for name in contenders}
    done = 0
    round_index = 0
    while done < repeat:
        block = min(block_size, repeat - done)
        say(f"runs {done + 1}-{done + block} of {repeat}")
        for name in _round_order(list(contenders), round_index):
            fn = contenders[name]
            time.sleep(pause_s)
            _warm_up(fn)
            times[name] += [_time_once(fn) for _ in range(block)]
        done += block
        round_index += 1
    return times


# What each precision mode may add to max_rel_error (issue 18; src/core/reference.hpp, error_bound,
# has the derivation): the operands' rounding per product, and the float32 accumulation (three
# additions per k for float32_tc).
_MODE_OPERAND_ERROR = {"float32": 0.0, "float32_tc": 3 * 2.0**-22, "tf32": 2 * 2.0**-11 + 2.0**-22,
                       "bfloat16": 2 * 2.0**-8 + 2.0**-16}


def mode_error_bound(k: int, precision: str) -> float:
    """The worst-case max_rel_error of a float32 product in precision mode `precision`."""
    return _MODE_OPERAND_ERROR[precision] + (3 if precision == "float32_tc" else 1) * max(k, 1) * 2.0**-23


def run(sizes, repeat, device, dtype="float32", progress=None, with_peers=True, batch=None,
        precision=None) -> list[dict]:
    """One record per size n: (n x n) @ (n x n) products, or stacks of `batch` of them.
    precision: portmat's precision mode (float32 products only), the peers in their matching
    mode (peers.py says which), each one's max_rel_error against float64 reported."""
    if precision is not None and dtype != "float32":
        raise ValueError(f"bench: --precision is for float32 products, not {dtype}")
    dev = portmat._ext.find_device(portmat._device_spec(device))
    missing = {}
    peers = _peers.available(dev, missing, precision) if with_peers else []
    mode = precision or ""
    bound = (lambda k: mode_error_bound(k, precision)) if precision else (lambda k: error_bound(k, dtype))

    def product(x, y):  # portmat's product as every timing and check below calls it
        return portmat.matmul(x, y, device=dev, precision=precision)
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
        c = product(a, b)
        err = max_rel_error(a, b, c, rng)
        verified = err <= bound(n)
        say(f"n={n}: warming up")
        a @ b
        product(a, b)
        fresh_a, fresh_b = a.copy(), b.copy()
        time.sleep(_PAUSE_S)  # NumPy's BLAS threads still spin after the warm-up above
        _warm_up(lambda: product(a, b))  # wakes the machine, not the copies
        t_new = _time_once(lambda: product(fresh_a, fresh_b))
        del fresh_a, fresh_b
        # Verify and warm up each peer, then time every contender in the same alternating blocks.
        contenders = {"numpy": lambda: a @ b, "portmat": lambda: product(a, b)}
        peer_errors = {}
        for peer in peers:
            say(f"n={n}: verifying {peer.name}")
            try:
                peer_errors[peer.name] = max_rel_error(a, b, peer.host(a, b), rng)
            except Exception:  # a dtype the peer does not multiply (torch's integers on CUDA)
                continue
            peer.host(a, b)
            contenders[peer.name] = lambda peer=peer: peer.host(a, b)
            if hasattr(peer, "resident_call"):  # dpnp: device-resident, host-clocked, same blocks
                try:
                    call = peer.resident_call(a, b)
                    peer_errors[f"{peer.name} resident"] = max_rel_error(a, b, peer.fetch(call()), rng)
                    call()
                except Exception:
                    continue
                contenders[f"{peer.name} resident"] = call
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
        t_k = []  # the kernel alone on device-resident data: float products, stacks as one
        if dtype in ("float32", "float64", "complex64", "complex128"):
            # A stack on a device without a batched kernel loops over its products: fewer runs.
            runs_k = runs if batch is None else min(runs, max(3, int(_MIN_TIMED_S / max(t_call, 1e-9))))
            try:
                t_k = [t for t in _ext.time_gemm(dev.id, n, n, n, dtype, runs_k, launches, "rr", batch or 1,
                                                 mode) if t >= 0]
            except portmat.Error:  # complex products that the device does not run itself
                t_k = []
        flop = ops_per_madd * n**3 * (batch or 1)
        peer_results = {}
        for peer in (p for p in peers if p.name in contenders):
            t_host = times[peer.name]
            peer_results[peer.name] = {
                "host_s": statistics.median(t_host),
                "host_spread_s": [min(t_host), max(t_host)],
                "max_rel_error": peer_errors[peer.name],
                "verified": bool(peer_errors[peer.name] <= bound(n)),
                "version": getattr(peer, "version", None),
                "mode": getattr(peer, "mode", None),
            }
            peer_results[peer.name]["host_verified"] = peer_results[peer.name]["verified"]
            if f"{peer.name} resident" in times:  # timed in the blocks above, on the host's clock
                t_res, err_res = times[f"{peer.name} resident"], peer_errors[f"{peer.name} resident"]
                ok = err_res <= error_bound(n, dtype)
                peer_results[peer.name].update({
                    "resident_s": statistics.median(t_res),
                    "resident_spread_s": [min(t_res), max(t_res)],
                    "resident_clock": "host",
                    "resident_max_rel_error": err_res,
                    "resident_verified": bool(ok),
                    "gflops_resident": flop / statistics.median(t_res) / 1e9,
                })
                peer_results[peer.name]["verified"] = bool(peer_results[peer.name]["verified"] and ok)
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
            "precision": precision or "float32",
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
        rec["peers_missing"] = dict(missing)
        if dev.peak_gflops > 0 and precision in (None, "float32"):  # the FMA units' peak, not the tensor cores'
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
    """A line naming each peer's version, and one naming each peer of the device left out, and why."""
    versions = {name: p["version"] for r in records for name, p in r.get("peers", {}).items() if p.get("version")}
    lines = ["peers: " + "; ".join(f"{name}: {v}" for name, v in sorted(versions.items()))] if versions else []
    missing = {name: why for r in records for name, why in r.get("peers_missing", {}).items()}
    if missing:
        lines.append("peers not run: " + "; ".join(f"{name}: {why}" for name, why in sorted(missing.items())))
    return lines


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
        "peers alike; torch's also as a CUDA graph, the faster counting); "
        "peers: NumPy in/out ms, vs peer = its time / portmat's, and device-resident GFLOP/s (GPU peers: "
        "device timer; dpnp: dpnp.matmul + queue.wait() on the host's clock, in the same blocks)",
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
            cells = [f"{p['host_s'] * 1e3:.3f}" + ("" if p.get("host_verified", p.get("verified", True)) else " (WRONG)"),
                     f"{p['host_s'] / r['portmat_s']:.2f}x"] if p else ["", ""]
            if name in resident:
                cells.append(f"{p['gflops_resident']:.0f}" + ("" if p.get("resident_verified", True) else " (WRONG)")
                             if p and "gflops_resident" in p else "")
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


# ---- The benchmark over shapes (issue 16, "every shape fast") ----------------------------------

# A shape is (M, K, N): (M x K) @ (K x N); M or N None makes that side a 1-D vector of length K
# (np.matmul's matrix-vector and vector-matrix products; both None: a dot product).
Shape = tuple

_OVERHEAD_S = 20e-6  # NumPy under this: call overhead dominates, and the target is 0.8x, else 1.0x
# Alternating blocks per shape: at least 3, even for microsecond products (5000 runs would be one
# block), and at most 6, larger blocks instead (run()'s plan gave a 3 ms product 10 blocks: with
# four contenders 12 s of pauses a shape, and a suite of 56 shapes took 6.5 minutes).
_SHAPE_MIN_BLOCKS, _SHAPE_MAX_BLOCKS = 3, 6
# Products under OpenBLAS's threading threshold (65536 x GEMM_MULTITHREAD_THRESHOLD, 4, multiply-
# adds) run on one thread in NumPy, and portmat's small path runs them on the calling thread: no
# worker spins after them, so a short pause will do, and they get many more, shorter blocks. On the
# H200's 16-core host such products measured bimodal for either library (the same 24 x 24 product
# 1.5 us in one block, 2.5 in the next), and 3 blocks each let one state decide a shape's ratio.
_SINGLE_THREAD_MADDS = 4 * 65536
_TINY_PAUSE_S = 0.02
_TINY_MIN_BLOCKS, _TINY_MAX_BLOCKS = 12, 24
_COPY_BYTES = 256 * 2**20  # the bandwidth yardstick: far beyond any last-level cache


def _suite() -> list[Shape]:
    v = None
    shapes = [(4096, 4096, v), (v, 4096, 4096), (256, 256, v), (v, 256, 256), (v, 1 << 20, v)]
    shapes += [(4096, 4096, n) for n in (1, 2, 4, 8, 16)]    # few columns: matrix-vector-like
    shapes += [(m, 4096, 4096) for m in (1, 2, 4, 8, 16)]    # few rows
    shapes += [(256, 256, n) for n in (1, 2, 4, 8, 16)]      # the same, in cache
    shapes += [(m, 256, 256) for m in (1, 2, 4, 8, 16)]
    shapes += [(2048, k, 2048) for k in (1, 8, 64)]          # short inner dimension: rank-k updates
    shapes += [(256, k, 256) for k in (1, 8, 64)]
    shapes += [(n, n, n) for n in (2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256)]
    shapes += [(65536, 16, 16), (65536, 64, 64), (16384, 256, 64),   # tall-skinny
               (16, 65536, 16), (64, 65536, 64), (64, 16384, 256),   # short-wide: long reductions
               (16, 16, 65536), (64, 64, 65536)]                     # wide results
    return shapes


# The built-in suite (`--shapes suite`): vectors on either side and a dot product; N and M in
# {1, 2, 4, 8, 16} against 4096 x 4096 (beyond the caches) and 256 x 256 (in them); K in {1, 8, 64};
# squares from 2 to 256; tall-skinny, short-wide and wide products. 54 shapes, a few minutes on 2 cores.
SUITE: list[Shape] = _suite()


def parse_shapes(text: str, source: str = "shapes") -> list[Shape]:
    """Shapes from text: one `M,K,N` a line, positive integers, M or N `-` for a 1-D vector;
    blank lines and `#` comments are skipped. ValueError names the line of anything else."""
    shapes = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        fields = [f.strip() for f in line.split(",")]
        try:
            if len(fields) != 3:
                raise ValueError
            m, k, n = (None if f == "-" and i != 1 else int(f) for i, f in enumerate(fields))
            if any(x is not None and x < 1 for x in (m, k, n)):
                raise ValueError
        except ValueError:
            raise ValueError(f"{source}, line {number}: {line!r} is not M,K,N (three positive integers; "
                             "M or N may be '-' for a 1-D vector)") from None
        shapes.append((m, k, n))
    if not shapes:
        raise ValueError(f"{source}: no shapes (one M,K,N a line)")
    return shapes


def load_shapes(spec: str) -> list[Shape]:
    """`suite` (the built-in SUITE) or the path of a shapes file (parse_shapes)."""
    if spec == "suite":
        return list(SUITE)
    try:
        with open(spec) as f:
            text = f.read()
    except OSError as e:
        raise ValueError(f"cannot read the shapes file {spec}: {e.strerror}") from None
    return parse_shapes(text, spec)


def shape_label(a_shape, b_shape) -> str:
    """'4096x4096 @ 4096', '1x256 @ 256x256': the operands as NumPy sees them."""
    return " @ ".join("x".join(str(d) for d in s) for s in (a_shape, b_shape))


def copy_bandwidth(nbytes: int = _COPY_BYTES, trials: int = 5) -> dict:
    """Memory bandwidth as a large np.copyto achieves it, in GB/s of bytes read plus bytes written
    (the bytes the shapes count: operands read once, result written once): the median of `trials`
    copies on one thread, and split in slices over every CPU the process may use (NumPy copies
    without the GIL). The destination is written once untimed first, so no page is faulted in while
    timed. `gbps` is the better of the two."""
    from concurrent.futures import ThreadPoolExecutor

    threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    src = np.ones(nbytes // 8)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    cuts = np.linspace(0, src.size, threads + 1).astype(int)
    slices = [slice(cuts[i], cuts[i + 1]) for i in range(threads)]
    with ThreadPoolExecutor(threads) as pool:
        def spread():
            for f in [pool.submit(np.copyto, dst[s], src[s]) for s in slices]:
                f.result()
        spread()
        rate = lambda fn: 2 * src.nbytes / statistics.median(_time_once(fn) for _ in range(trials)) / 1e9
        one = rate(lambda: np.copyto(dst, src))
        many = rate(spread)
    return {"gbps": max(one, many), "gbps_1_thread": one, "gbps_threads": many, "threads": threads,
            "bytes": int(src.nbytes)}


def _shape_error(a, b, c, rng) -> float:
    """max_rel_error of a product whose operands may be 1-D: as 2-D matrices; inf when c does not
    have np.matmul's shape."""
    m = a.shape[0] if a.ndim == 2 else 1
    n = b.shape[1] if b.ndim == 2 else 1
    expected = (a.shape[:1] if a.ndim == 2 else ()) + (b.shape[1:] if b.ndim == 2 else ())
    if np.shape(c) != expected:
        return float("inf")
    return max_rel_error(a.reshape(m, -1), b.reshape(-1, n), np.asarray(c).reshape(m, n), rng)


def _sayer(progress):
    """say(msg) shows progress on a terminal, on one line; say(None) clears that line."""
    if progress is not None and not (hasattr(progress, "isatty") and progress.isatty()):
        progress = None  # a log file gets the table, not carriage-return animations

    def say(msg):
        if progress is not None:
            progress.write("\r" + " " * 60 + "\r" if msg is None else "\r" + msg.ljust(60))
            progress.flush()
    return say


def _summary(t: list[float]) -> dict:
    q1, _, q3 = statistics.quantiles(t, n=4) if len(t) > 1 else (t[0], 0, t[0])
    return {"s": statistics.median(t), "spread_s": [min(t), max(t)], "quartiles_s": [q1, q3]}


def run_shapes(shapes, repeat, device, dtype="float32", progress=None, with_peers=True,
               on_record=None) -> list[dict]:
    """One record per shape (M, K, N) (see Shape): fresh operands, every contender's result checked
    against float64 within error_bound(K), then NumPy, portmat and each peer timed in alternating
    blocks (as run() does, in _SHAPE_MIN_BLOCKS to _SHAPE_MAX_BLOCKS blocks; _TINY_MIN_BLOCKS to
    _TINY_MAX_BLOCKS below _SINGLE_THREAD_MADDS). Each record carries the memory
    bandwidth of np.copyto measured at the start and at the end of the run (copy_bandwidth).
    device "auto": portmat makes its automatic choice per product (no device named), each record
    saying which device it chose; instead of peers, portmat on each single device is timed in the
    same blocks ("on <device>", issue 16: the automatic choice should be no slower than the faster
    of NumPy and portmat on each device), except OpenCL CPU devices where the native CPU backend
    is there (the same cores, never the faster). on_record(records), when given, is called with the
    records so far after each shape (the memory bandwidth fields come at the end)."""
    auto = device == "auto"
    dev = portmat._ext.find_device("" if auto else portmat._device_spec(device))
    missing = {}
    peers = _peers.available(dev, missing) if with_peers and not auto else []
    singles = []
    if auto:
        every = portmat._ext.devices()
        has_cpu = any(d.backend == "cpu" for d in every)
        singles = [d for d in every if not (has_cpu and d.backend == "opencl" and d.kind == "cpu")]
    say = _sayer(progress)
    blas = blas_info()
    host = platform.node()
    today = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    dt = np.dtype(dtype)
    ops_per_madd = 8 if dt.kind == "c" else 2
    say("memory bandwidth (np.copyto)")
    bw_start = copy_bandwidth()
    records = []
    for i, (m, k, n) in enumerate(shapes):
        a_shape = (k,) if m is None else (m, k)
        b_shape = (k,) if n is None else (k, n)
        label = shape_label(a_shape, b_shape)
        rng = np.random.default_rng([i, k, m or 0, n or 0])
        a = random_operand(rng, a_shape, dtype)
        b = random_operand(rng, b_shape, dtype)
        contenders = {"numpy": lambda: a @ b,
                      "portmat": (lambda: portmat.matmul(a, b)) if auto else lambda: portmat.matmul(a, b, device=dev)}
        for peer in peers:
            contenders[peer.name] = lambda peer=peer: peer.host(a, b)
        for d in singles:
            contenders[f"on {d.id}"] = lambda d=d: portmat.matmul(a, b, device=d)
        # Where the automatic choice sends it (m rows of a, k, n columns of b; 1 for a vector).
        chosen = portmat._ext.device_for("", m or 1, n or 1, k).id if auto else dev.id
        say(f"{label}: verifying")
        errors = {}
        for name, fn in list(contenders.items()):
            try:
                c = fn()
            except Exception:
                if name in ("numpy", "portmat"):
                    raise
                del contenders[name]  # a product this peer does not do (a dtype, a stack)
                continue
            errors[name] = _shape_error(a, b, c, rng)
            fn()  # a second call before timing: first-call costs are not the product's
        del c
        bound = error_bound(k, dtype)
        time.sleep(_PAUSE_S)
        t_call = max(_time_typical(contenders["numpy"]), _time_typical(contenders["portmat"]))
        runs, block = _plan(repeat, t_call)
        mm, nn = m or 1, n or 1
        tiny = mm * k * nn < _SINGLE_THREAD_MADDS
        fewest, most = (_TINY_MIN_BLOCKS, _TINY_MAX_BLOCKS) if tiny else (_SHAPE_MIN_BLOCKS, _SHAPE_MAX_BLOCKS)
        block = max(min(block, math.ceil(runs / fewest)), math.ceil(runs / most))
        times = _time_blocks(contenders, runs, lambda msg: say(f"{label}: {msg}"), block,
                             pause_s=min(_PAUSE_S, _TINY_PAUSE_S) if tiny else _PAUSE_S)
        flop = ops_per_madd * mm * k * nn
        nbytes = dt.itemsize * (mm * k + k * nn + mm * nn)
        summary = {name: _summary(t) for name, t in times.items()}
        rec = {
            "bench": "shapes",
            "shape": label,
            "M": mm, "K": k, "N": nn,
            "a_shape": list(a_shape), "b_shape": list(b_shape),
            "vector_product": bool(mm == 1 or nn == 1 or k == 1),
            "dtype": str(dt),
            "device": f"auto:{chosen}" if auto else dev.id,
            "device_name": dev.name,
            "flop": flop,
            "bytes": nbytes,
            "numpy_s": summary["numpy"]["s"],
            "portmat_s": summary["portmat"]["s"],
            "numpy_spread_s": summary["numpy"]["spread_s"],
            "portmat_spread_s": summary["portmat"]["spread_s"],
            "numpy_quartiles_s": summary["numpy"]["quartiles_s"],
            "portmat_quartiles_s": summary["portmat"]["quartiles_s"],
            "numpy_max_rel_error": errors["numpy"],
            "numpy_verified": bool(errors["numpy"] <= bound),
            "max_rel_error": errors["portmat"],
            "verified": bool(errors["portmat"] <= bound),
            "repeat": runs,
            "block": block,
            "blas": blas,
            "numpy_version": np.__version__,
            "host": host,
            "date": today,
        }
        for name in ("numpy", "portmat"):
            rec[f"gflops_{name}"] = flop / rec[f"{name}_s"] / 1e9
            rec[f"gbps_{name}"] = nbytes / rec[f"{name}_s"] / 1e9
        rec["speedup_vs_numpy"] = rec["numpy_s"] / rec["portmat_s"]
        rec["target_vs_numpy"] = 1.0 if rec["numpy_s"] > _OVERHEAD_S else 0.8
        rec["meets_target"] = bool(rec["speedup_vs_numpy"] >= rec["target_vs_numpy"])
        rec["peers"] = {}
        rec["peers_missing"] = dict(missing)
        for peer in (p for p in peers if p.name in contenders):
            s = summary[peer.name]
            rec["peers"][peer.name] = {
                "host_s": s["s"], "host_spread_s": s["spread_s"], "host_quartiles_s": s["quartiles_s"],
                "gflops": flop / s["s"] / 1e9, "gbps": nbytes / s["s"] / 1e9,
                "max_rel_error": errors[peer.name], "verified": bool(errors[peer.name] <= bound),
                "version": getattr(peer, "version", None),
            }
            rec[f"speedup_vs_{peer.name}"] = s["s"] / rec["portmat_s"]
        if singles:
            rec["single_devices"] = {}
            for d in singles:
                s = summary[f"on {d.id}"]
                rec["single_devices"][d.id] = {"s": s["s"], "spread_s": s["spread_s"], "quartiles_s": s["quartiles_s"],
                                               "max_rel_error": errors[f"on {d.id}"],
                                               "verified": bool(errors[f"on {d.id}"] <= bound)}
            # The best of NumPy and portmat on each single device, against the automatic choice.
            best = min([("numpy", rec["numpy_s"])] + [(i, v["s"]) for i, v in rec["single_devices"].items()],
                       key=lambda x: x[1])
            rec["best_single"], rec["best_single_s"] = best
            rec["speedup_vs_best_single"] = best[1] / rec["portmat_s"]
        records.append(rec)
        if on_record is not None:  # e.g. the records so far to a file, in case the run is cut short
            on_record(records)
    say("memory bandwidth (np.copyto) again")
    bw_end = copy_bandwidth()
    gbps = max(bw_start["gbps"], bw_end["gbps"])
    for rec in records:
        rec["bandwidth_gbps"] = gbps
        rec["bandwidth"] = {"start": bw_start, "end": bw_end,
                            "what": "np.copyto of 256 MiB, GB/s = (bytes read + bytes written) / time, "
                                    "the better of 1 thread and all threads, the higher of start and end"}
        rec["bandwidth_fraction_portmat"] = rec["gbps_portmat"] / gbps
    say(None)
    return records


def _us(s: float) -> str:
    us = s * 1e6
    return f"{us:.3g}" if us < 1000 else f"{us:.0f}"


def _iqr(r: dict, name: str) -> str:
    """Half the interquartile range, in % of the median: the spread of the timed runs."""
    q = r[f"{name}_quartiles_s"] if name in ("numpy", "portmat") else r["peers"][name]["host_quartiles_s"]
    med = r[f"{name}_s"] if name in ("numpy", "portmat") else r["peers"][name]["host_s"]
    return f"{50 * (q[1] - q[0]) / med:.0f}%"


def shapes_verdict(records: list[dict]) -> dict:
    """Counts against issue 16's targets: >= 1.0x NumPy where NumPy takes over 20 us, >= 0.8x where
    it takes less; and the matrix-vector products' share of the copy bandwidth."""
    slow = [r for r in records if r["target_vs_numpy"] == 1.0]
    fast = [r for r in records if r["target_vs_numpy"] != 1.0]
    mv = [r for r in records if r["vector_product"] and r["K"] > 1 and r["M"] * r["K"] * r["N"] >= 2**22]
    auto = [r for r in records if "speedup_vs_best_single" in r]
    return {
        "auto_shapes": len(auto),
        "auto_at_best": sum(r["speedup_vs_best_single"] >= 1.0 for r in auto),
        "auto_within_5pct": sum(r["speedup_vs_best_single"] >= 0.95 for r in auto),
        "auto_below": [(r["shape"], r["speedup_vs_best_single"], r["best_single"]) for r in auto
                       if r["speedup_vs_best_single"] < 0.95],
        "shapes": len(records),
        "over_20us": len(slow), "over_20us_met": sum(r["meets_target"] for r in slow),
        "under_20us": len(fast), "under_20us_met": sum(r["meets_target"] for r in fast),
        "below": [(r["shape"], r["speedup_vs_numpy"], r["target_vs_numpy"]) for r in records if not r["meets_target"]],
        "large_vector_products": [(r["shape"], r["bandwidth_fraction_portmat"]) for r in mv],
    }


def shapes_table(records: list[dict]) -> str:
    if not records:
        return "(no results)"
    r0 = records[0]
    bw0, bw1 = r0["bandwidth"]["start"], r0["bandwidth"]["end"]
    runs = sorted(r["repeat"] for r in records)
    head = [
        f"portmat bench --shapes: {r0['dtype']} (M x K) @ (K x N) on {r0['device']} ({r0['device_name']})",
        f"NumPy {r0['numpy_version']} with {r0['blas']}; host {r0['host']}; {r0['date']}",
        *_peer_versions(records),
        f"memory bandwidth (np.copyto of {bw0['bytes'] >> 20} MiB, read + write; 1 / {bw0['threads']} threads): "
        f"{bw0['gbps_1_thread']:.1f} / {bw0['gbps_threads']:.1f} GB/s at the start, "
        f"{bw1['gbps_1_thread']:.1f} / {bw1['gbps_threads']:.1f} at the end; reference {r0['bandwidth_gbps']:.1f} GB/s",
        f"medians of {runs[0]}-{runs[-1]} runs, alternating blocks; +- = half the interquartile range; "
        "vs X = X's time / portmat's (above 1: portmat faster);",
        "target = issue 16's: 1.0x NumPy where NumPy takes over 20 us, 0.8x where less; "
        "GB/s = (operands read once + result written once) / time, for vector products (a side or K of 1)",
        "",
    ]
    peer_names = sorted({name for r in records for name in r["peers"]})
    cols = ["a @ b", "NumPy us", "+-", "portmat us", "+-"]
    for name in peer_names:
        cols += [f"{name} us", "+-"]
    single_ids = sorted({i for r in records for i in r.get("single_devices", {})})
    for i in single_ids:
        cols += [f"on {i} us"]
    if single_ids:
        cols += ["auto chose", "vs best"]
    cols += ["vs NumPy", "target"] + [f"vs {name}" for name in peer_names]
    cols += ["GFLOP/s", "GB/s", "% bw", "max rel err", "ok"]
    rows = [cols]
    for r in records:
        row = [r["shape"], _us(r["numpy_s"]), _iqr(r, "numpy"), _us(r["portmat_s"]), _iqr(r, "portmat")]
        for name in peer_names:
            p = r["peers"].get(name)
            row += [_us(p["host_s"]) + ("" if p["verified"] else " WRONG"), _iqr(r, name)] if p else ["", ""]
        for i in single_ids:
            d = r.get("single_devices", {}).get(i)
            row += [_us(d["s"]) + ("" if d["verified"] else " WRONG") if d else ""]
        if single_ids:
            row += [r["device"].removeprefix("auto:"),
                    f"{r['speedup_vs_best_single']:.2f}x ({r['best_single']})" if "best_single" in r else ""]
        row += [f"{r['speedup_vs_numpy']:.2f}x", f"{r['target_vs_numpy']:.1f}" + ("" if r["meets_target"] else " BELOW")]
        row += [f"{r[f'speedup_vs_{name}']:.2f}x" if name in r["peers"] else "" for name in peer_names]
        vec = r["vector_product"]
        row += [f"{r['gflops_portmat']:.3g}", f"{r['gbps_portmat']:.3g}" if vec else "",
                f"{100 * r['bandwidth_fraction_portmat']:.0f}%" if vec else "",
                f"{r['max_rel_error']:.1e}", ("yes" if r["verified"] else "NO") + ("" if r["numpy_verified"] else " (NumPy NOT)")]
        rows.append(row)
    widths = [max(len(row[i]) for row in rows) for i in range(len(cols))]
    body = ["  ".join((c.ljust(w) if i == 0 else c.rjust(w)) for i, (c, w) in enumerate(zip(row, widths))).rstrip()
            for row in rows]
    v = shapes_verdict(records)
    foot = ["", f"targets: {v['over_20us_met']} of {v['over_20us']} shapes where NumPy takes over 20 us at >= 1.0x NumPy; "
                f"{v['under_20us_met']} of {v['under_20us']} under 20 us at >= 0.8x"]
    if v["auto_shapes"]:
        foot.append(f"automatic choice ({r0['device']} is the first shape's) against the best of NumPy and portmat on "
                    f"each single device: {v['auto_at_best']} of {v['auto_shapes']} at >= 1.0x, "
                    f"{v['auto_within_5pct']} at >= 0.95x")
        if v["auto_below"]:
            foot.append("auto below 0.95x the best: " + ", ".join(f"{s} {x:.2f}x (best: {b})" for s, x, b in v["auto_below"]))
    if v["below"]:
        foot.append("below target: " + ", ".join(f"{s} {x:.2f}x (< {t:.1f})" for s, x, t in v["below"]))
    if v["large_vector_products"]:
        foot.append("vector products of 4M+ multiply-adds, portmat at % of the copy bandwidth: " + ", ".join(
            f"{s} {100 * f:.0f}%" for s, f in v["large_vector_products"]))
    return "\n".join(head + body + foot)


def plot_available() -> str | None:
    """None when matplotlib can be imported, else the message that says how to get it."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return "--plot needs matplotlib, which is not installed here: pip install matplotlib"
    return None


def plot(records: list[dict], path: str) -> None:
    """Draws the records into a PNG (matplotlib, Agg): for shapes, GFLOP/s of the compute-bound
    products, GB/s of the vector products (with the copy bandwidth), and portmat's ratio to NumPy
    and each peer against the targets; for square sizes, GFLOP/s against n."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    plain = FuncFormatter(lambda v, _: f"{v:g}")

    peer_names = sorted({name for r in records for name in r.get("peers", {})})
    names = ["numpy", "portmat"] + peer_names
    value = lambda r, name, unit: (r[f"{unit}_{name}"] if name in ("numpy", "portmat")
                                   else r["peers"].get(name, {}).get(unit))
    r0 = records[0]
    if r0.get("bench") != "shapes":
        fig, ax = plt.subplots(figsize=(8, 5))
        sizes = [r["size"] for r in records]
        for name in names:  # a peer's GFLOP/s from portmat's: the same flop count
            ys = [r[f"gflops_{name}"] if name in ("numpy", "portmat") else
                  r["gflops_portmat"] * r["portmat_s"] / r["peers"][name]["host_s"] if name in r["peers"]
                  else float("nan") for r in records]
            ax.plot(sizes, ys, "o-", label=name)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("n")
        ax.set_ylabel("GFLOP/s (NumPy in, NumPy out)")
        ax.set_title(f"{r0['dtype']} (n x n) @ (n x n) on {r0['device_name']}, {r0['date']}")
        ax.legend()
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return
    compute = [r for r in records if not r["vector_product"]]
    vectors = [r for r in records if r["vector_product"]]
    panels = [p for p in ((compute, "gflops", "GFLOP/s"), (vectors, "gbps", "GB/s")) if p[0]]
    fig, axes = plt.subplots(len(panels) + 1, 1, figsize=(max(10, 0.3 * len(records)), 5 * (len(panels) + 1)))
    markers = "o^sDv<>"
    for ax, (recs, unit, ylabel) in zip(axes, panels):
        xs = range(len(recs))
        for j, name in enumerate(names):
            ys = [value(r, name, unit) for r in recs]
            ax.plot(xs, [y if y is not None else float("nan") for y in ys], markers[j % len(markers)],
                    label=name, alpha=0.8)
        if unit == "gbps":
            ax.axhline(r0["bandwidth_gbps"], color="gray", ls="--", label="np.copyto bandwidth")
            ax.axhline(0.8 * r0["bandwidth_gbps"], color="gray", ls=":", label="80% of it")
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(plain)
        ax.set_ylabel(ylabel + " (NumPy in, NumPy out)")
        ax.set_xticks(list(xs))
        ax.set_xticklabels([r["shape"] for r in recs], rotation=75, fontsize=7)
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    ax = axes[-1]
    xs = range(len(records))
    ax.plot(xs, [r["speedup_vs_numpy"] for r in records], "o", label="NumPy time / portmat time")
    for j, name in enumerate(peer_names):
        ax.plot(xs, [r.get(f"speedup_vs_{name}", float("nan")) for r in records], markers[(j + 2) % len(markers)],
                label=f"{name} time / portmat time")
    ax.plot(xs, [r["target_vs_numpy"] for r in records], "_", color="red", ms=12, label="target vs NumPy")
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(plain)
    ax.set_ylabel("ratio (above 1: portmat faster)")
    ax.set_xticks(list(xs))
    ax.set_xticklabels([r["shape"] for r in records], rotation=75, fontsize=7)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.suptitle(f"portmat bench --shapes: {r0['dtype']} on {r0['device_name']}, {r0['host']}, {r0['date']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

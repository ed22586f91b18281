"""Issue 17's three "done when" figures: portmat on arrays that stay on a device, against its peers.

One run times portmat and the peers side by side, the contenders alternating round by round (the
order rotated each round, so drift and position hit all alike), and reports medians, the spread
(min-max) and the ratios against issue 17's targets:

1. cupy_resident: CuPy float32 arrays in and out (n = 4096, 8192): wall time per product of
   portmat.matmul(a, b) on CuPy arrays (10 queued, then the stream synchronised) against portmat's
   kernel alone (_ext.time_gemm, device events, 10 launches) and CuPy's own a @ b (cuBLAS; CuPy
   leaves TF32 off unless CUPY_TF32=1). Target: portmat-with-CuPy-arrays / kernel-only <= 1.03.
   One result is verified against float64 on the host first; a wrong one is not timed.
2. per_call_256: 1000 calls of a 256 x 256 float32 product, then one synchronisation: portmat on
   CuPy arrays against CuPy's a @ b, portmat on torch tensors against torch.matmul (TF32 off).
   Target: peer / portmat >= 1.0 (portmat's per-call cost no higher than the peer's).
3. opencl_chain: 10 chained products y = x @ y of 4096 x 4096 float32 portmat Arrays on the
   OpenCL GPU (matmul of Arrays waits for its product), against 10 x the kernel alone. Target:
   chain / (10 x kernel) <= 1.1. Without an OpenCL GPU: the first OpenCL device at n = 512.

CuPy and torch are optional: a section (or half of per_call_256) is skipped, with the reason
printed, when its library or a CUDA device is missing. A table goes to stdout, everything (raw
times too) to a JSON file.

    python bench/device_arrays.py --machine h200 --out "$OUT/h200-device-arrays.json"   # ~1-2 min
    python bench/device_arrays.py                        # -> bench/results/local-device-arrays.json
    python bench/device_arrays.py --only opencl_chain --opencl-device opencl:1 --rounds 5
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SECTIONS = ("cupy_resident", "per_call_256", "opencl_chain")
EPS32 = float(np.finfo(np.float32).eps)
CHECK_ROWS = 512  # rows of a result checked against float64 on the host
QUEUED = 10       # products queued per timing in cupy_resident
CHAIN = 10        # products per chain in opencl_chain


class Skip(Exception):
    """A section (or part of one) that cannot run here; the message says why."""


class WrongResult(Exception):
    """A result outside the float32 error bound: nothing is reported for it."""


# ---- helpers ------------------------------------------------------------------------------------
def operand(rng: np.random.Generator, n: int, scale: float = 1.0) -> np.ndarray:
    """n x n float32, uniform in [-scale, scale)."""
    x = rng.random((n, n), dtype=np.float32)
    x *= np.float32(2 * scale)
    x -= np.float32(scale)
    return x


def check_rows(a: np.ndarray, b: np.ndarray, c_rows: np.ndarray, rows: np.ndarray, what: str) -> float:
    """max |c - ref| / (|a| @ |b|) over the given rows, c_rows being those rows of the result;
    raises WrongResult unless every entry is within K * eps32 * (|a| @ |b|) (K: the inner size)."""
    a64 = a[rows].astype(np.float64)
    b64 = b.astype(np.float64)
    ref = a64 @ b64
    mag = np.abs(a64) @ np.abs(b64)
    err = np.abs(c_rows.astype(np.float64) - ref)
    bound = a.shape[1] * EPS32
    ok = bool(np.all(np.isfinite(c_rows))) and bool(np.all(err <= bound * mag))
    worst = float(np.max(err / np.maximum(mag, np.finfo(np.float64).tiny)))
    if not ok:
        raise WrongResult(f"{what}: max |c - ref| / (|a| @ |b|) = {worst:.3g} over {len(rows)} rows, "
                          f"bound K * eps32 = {bound:.3g}; not timed")
    return worst


def summary(times: list[float]) -> dict:
    return {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times), "n": len(times)}


def rounds_of(contenders: dict, rounds: int) -> dict:
    """`rounds` timings of each contender (a function returning seconds), alternating: in round r
    the order is rotated by r."""
    names = list(contenders)
    times = {name: [] for name in names}
    for r in range(rounds):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            times[name].append(contenders[name]())
    return times


def fmt_s(s: float) -> str:
    if s < 1e-3:
        return f"{s * 1e6:8.1f} us"
    if s < 1:
        return f"{s * 1e3:8.3f} ms"
    return f"{s:8.3f} s "


def contender_rows(times: dict, per: str) -> tuple[dict, list[str]]:
    """The JSON entries and table lines of a group of contenders' times (seconds `per` ...)."""
    out, lines = {}, []
    for name, t in times.items():
        s = summary(t)
        out[name] = {"times_s": t, **s}
        lines.append(f"    {name:<34} {fmt_s(s['median_s'])}  (min-max {fmt_s(s['min_s']).strip()} - "
                     f"{fmt_s(s['max_s']).strip()}, {s['n']} rounds) per {per}")
    return out, lines


def ratio_entry(name: str, num: str, den: str, times: dict, target: float, sense: str) -> tuple[dict, str]:
    """median(num) / median(den) against the target (sense '<=' or '>=')."""
    r = statistics.median(times[num]) / statistics.median(times[den])
    met = r <= target if sense == "<=" else r >= target
    entry = {"name": name, "numerator": num, "denominator": den, "ratio": r,
             "target": f"{sense} {target}", "met": met}
    return entry, f"    {name:<34} {r:8.3f}   target {sense} {target}: {'met' if met else 'NOT MET'}"


# ---- section 1: CuPy arrays in and out, large products ------------------------------------------
def need_cupy():
    try:
        import cupy
    except ImportError as e:
        raise Skip(f"CuPy is not installed ({e})") from None
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # CUDARuntimeError without a driver or a GPU
        raise Skip(f"CuPy finds no CUDA device ({type(e).__name__}: {e})") from None
    if count < 1:
        raise Skip("CuPy finds no CUDA device")
    return cupy


def need_portmat_cuda(portmat) -> str:
    for d in portmat.devices():
        if d.backend == "cuda":
            return d.id
    raise Skip("portmat has no CUDA device (built without the CUDA backend, or no GPU)")


def cupy_resident(portmat, args, say) -> dict:
    cupy = need_cupy()
    dev = need_portmat_cuda(portmat)
    if dev != "cuda:0":
        raise Skip(f"portmat's first CUDA device is {dev}, CuPy's current one device 0")
    from portmat import _ext

    tf32 = os.environ.get("CUPY_TF32", "0")
    rng = np.random.default_rng(17)
    result = {"device": dev, "queued": QUEUED, "cupy_tf32": tf32,
              "note": "CuPy's float32 a @ b is cuBLAS sgemm; CuPy leaves TF32 off unless CUPY_TF32=1 "
                      f"(CUPY_TF32={tf32} in this run)", "sizes": []}
    say(f"  note: CuPy's float32 a @ b is cuBLAS; TF32 is off unless CUPY_TF32=1 (here CUPY_TF32={tf32})")
    stream = cupy.cuda.get_current_stream()
    for n in args.sizes:
        say(f"  n = {n}: data, verification")
        a_h, b_h = operand(rng, n), operand(rng, n)
        a, b = cupy.asarray(a_h), cupy.asarray(b_h)
        rows = np.sort(rng.choice(n, min(CHECK_ROWS, n), replace=False))
        c = portmat.matmul(a, b)
        if type(c) is not cupy.ndarray or c.dtype != np.float32 or c.shape != (n, n):
            raise WrongResult(f"portmat.matmul of CuPy arrays returned {type(c).__name__} "
                              f"{getattr(c, 'dtype', '?')} {getattr(c, 'shape', '?')}")
        err = check_rows(a_h, b_h, cupy.asnumpy(c[cupy.asarray(rows)]), rows,
                         f"portmat.matmul(cupy a, cupy b) at n = {n}")
        c_peer = a @ b
        try:
            err_peer = check_rows(a_h, b_h, cupy.asnumpy(c_peer[cupy.asarray(rows)]), rows, "cupy a @ b")
        except WrongResult as e:  # the peer's error is reported, not refused (TF32 would do this)
            err_peer = str(e)
        del c, c_peer

        def queued(fn):
            def timed():
                stream.synchronize()
                t0 = time.perf_counter()
                for _ in range(QUEUED):
                    r = fn()
                stream.synchronize()
                t = (time.perf_counter() - t0) / QUEUED
                del r
                return t
            return timed

        contenders = {
            "portmat.matmul(cupy a, cupy b)": queued(lambda: portmat.matmul(a, b)),
            "portmat kernel only (time_gemm)": lambda: _ext.time_gemm(dev, n, n, n, "float32", 1, QUEUED)[0],
            "cupy a @ b (cuBLAS)": queued(lambda: a @ b),
        }
        for fn in contenders.values():  # warm-up: kernels loaded, cuBLAS handle made, pools filled
            fn()
        say(f"  n = {n}: {args.rounds} rounds")
        times = rounds_of(contenders, args.rounds)
        entries, lines = contender_rows(times, "product")
        r1, l1 = ratio_entry("portmat(cupy) / kernel-only", "portmat.matmul(cupy a, cupy b)",
                             "portmat kernel only (time_gemm)", times, 1.03, "<=")
        r2 = statistics.median(times["cupy a @ b (cuBLAS)"]) / statistics.median(times["portmat.matmul(cupy a, cupy b)"])
        say(f"  n = {n} (max rel. error: portmat {err:.3g}, cupy {err_peer if isinstance(err_peer, str) else f'{err_peer:.3g}'}; "
            f"bound {n * EPS32:.3g})")
        for line in lines:
            say(line)
        say(l1)
        say(f"    {'cupy / portmat(cupy) (info)':<34} {r2:8.3f}")
        result["sizes"].append({"n": n, "verified": True, "max_rel_error": err, "cupy_max_rel_error": err_peer,
                                "error_bound": n * EPS32, "contenders": entries, "ratio": r1,
                                "cupy_over_portmat": r2})
        del a, b
        cupy.get_default_memory_pool().free_all_blocks()
    return result


# ---- section 2: per-call cost of a small product ------------------------------------------------
def per_call_256(portmat, args, say) -> dict:
    n, calls = 256, args.calls
    rng = np.random.default_rng(256)
    a_h, b_h = operand(rng, n), operand(rng, n)
    rows = np.arange(n)
    result = {"n": n, "calls": calls, "pairs": {}, "skipped": {}}
    contenders, pairs = {}, []

    def looped(fn, sync):
        def timed():
            sync()
            t0 = time.perf_counter()
            for _ in range(calls):
                c = fn()
            sync()
            t = (time.perf_counter() - t0) / calls
            del c
            return t
        return timed

    try:
        cupy = need_cupy()
        need_portmat_cuda(portmat)
        a, b = cupy.asarray(a_h), cupy.asarray(b_h)
        check_rows(a_h, b_h, cupy.asnumpy(portmat.matmul(a, b)), rows, "portmat.matmul(cupy 256)")
        check_rows(a_h, b_h, cupy.asnumpy(a @ b), rows, "cupy a @ b (256)")
        sync = cupy.cuda.get_current_stream().synchronize
        contenders["portmat.matmul(cupy a, cupy b)"] = looped(lambda: portmat.matmul(a, b), sync)
        contenders["cupy a @ b"] = looped(lambda: a @ b, sync)
        pairs.append(("cupy / portmat(cupy)", "cupy a @ b", "portmat.matmul(cupy a, cupy b)"))
    except Skip as e:
        result["skipped"]["cupy"] = str(e)
        say(f"  cupy pair skipped: {e}")
    try:
        try:
            import torch
        except ImportError as e:
            raise Skip(f"torch is not installed ({e})") from None
        if not torch.cuda.is_available():
            raise Skip("torch finds no CUDA device")
        need_portmat_cuda(portmat)
        torch.backends.cuda.matmul.allow_tf32 = False
        ta, tb = torch.from_numpy(a_h).cuda(), torch.from_numpy(b_h).cuda()
        check_rows(a_h, b_h, portmat.matmul(ta, tb).cpu().numpy(), rows, "portmat.matmul(torch 256)")
        check_rows(a_h, b_h, torch.matmul(ta, tb).cpu().numpy(), rows, "torch.matmul (256)")
        sync = torch.cuda.synchronize
        contenders["portmat.matmul(torch a, torch b)"] = looped(lambda: portmat.matmul(ta, tb), sync)
        contenders["torch.matmul(a, b)"] = looped(lambda: torch.matmul(ta, tb), sync)
        pairs.append(("torch / portmat(torch)", "torch.matmul(a, b)", "portmat.matmul(torch a, torch b)"))
        result["torch_allow_tf32"] = torch.backends.cuda.matmul.allow_tf32
    except Skip as e:
        result["skipped"]["torch"] = str(e)
        say(f"  torch pair skipped: {e}")
    if not contenders:
        raise Skip("; ".join(result["skipped"].values()))
    for fn in contenders.values():  # warm-up
        fn()
    say(f"  {args.rounds} rounds of {calls} calls each")
    times = rounds_of(contenders, args.rounds)
    entries, lines = contender_rows(times, "call")
    result["verified"] = True
    result["contenders"] = entries
    for line in lines:
        say(line)
    result["ratios"] = []
    for name, peer, ours in pairs:
        entry, line = ratio_entry(name, peer, ours, times, 1.0, ">=")
        result["ratios"].append(entry)
        say(line)
    return result


# ---- section 3: a chain of products on the OpenCL GPU -------------------------------------------
def opencl_chain(portmat, args, say) -> dict:
    from portmat import _ext

    ocl = [d for d in portmat.devices() if d.backend == "opencl"]
    note = None
    if args.opencl_device:
        dev = _ext.find_device(args.opencl_device)
        if dev.backend != "opencl":
            raise Skip(f"--opencl-device {args.opencl_device} is {dev.id}, not an OpenCL device")
        n = args.chain_size or (4096 if dev.kind == "gpu" else 512)
    elif any(d.kind == "gpu" for d in ocl):
        dev = next(d for d in ocl if d.kind == "gpu")
        n = args.chain_size or 4096
    elif ocl:
        dev = ocl[0]
        n = args.chain_size or 512
        note = (f"no OpenCL GPU here: the first OpenCL device ({dev.id}, {dev.kind}) at n = {n}, "
                "not the figure issue 17 asks for")
        say(f"  {note}")
    else:
        raise Skip("portmat has no OpenCL device (built without the OpenCL backend, or no platform)")
    say(f"  device {dev.id} ({dev.name}), n = {n}, chains of {CHAIN} products")
    rng = np.random.default_rng(4096)
    a_h = operand(rng, n, 1.0 / math.sqrt(n))  # uniform in [-1, 1] / sqrt(n): the powers stay finite
    x = portmat.asarray(a_h, device=dev.id)

    # Correctness, untimed: the first product entrywise (rows sampled), within K * eps32.
    rows = np.sort(rng.choice(n, min(CHECK_ROWS, n), replace=False))
    first = portmat.matmul(x, x)
    if not isinstance(first, portmat.Array) or first.device.id != dev.id:
        raise WrongResult(f"matmul of Arrays on {dev.id} returned {first!r}")
    err = check_rows(a_h, a_h, first.numpy()[rows], rows, f"x @ x on {dev.id}")
    del first

    last = {}

    def chain():
        y = x
        t0 = time.perf_counter()
        for _ in range(CHAIN):
            y = portmat.matmul(x, y)
        t = time.perf_counter() - t0
        last["y"] = y
        return t

    kernel_runs = 3  # per round (one time_gemm call: its data setup is outside its device timer)

    def kernel():
        ts = _ext.time_gemm(dev.id, n, n, n, "float32", kernel_runs, 1)
        kernel_all.extend(ts)
        return statistics.median(ts) * CHAIN

    kernel_all: list[float] = []
    chain()
    kernel()  # warm-up
    kernel_all.clear()
    say(f"  {args.rounds} rounds")
    times = rounds_of({"chain of 10 portmat.matmul(x, y)": chain,
                       "10 x kernel only (time_gemm)": kernel}, args.rounds)

    # The last chain against float64, normwise on random vectors: y = x^(CHAIN+1). Rounding lands
    # near 1e-6; a wrong, missing or low-precision product misses (CHAIN+1) * sqrt(n) * eps32 by far.
    y = last.pop("y").numpy()
    v = rng.standard_normal((n, 4))
    ref = v
    a64 = a_h.astype(np.float64)
    for _ in range(CHAIN + 1):
        ref = a64 @ ref
    chain_err = float(np.linalg.norm(y.astype(np.float64) @ v - ref) / np.linalg.norm(ref))
    chain_tol = (CHAIN + 1) * math.sqrt(n) * EPS32
    if not np.all(np.isfinite(y)) or not chain_err <= chain_tol:
        raise WrongResult(f"the chain's result on {dev.id}: normwise relative error {chain_err:.3g} on random "
                          f"vectors, above {chain_tol:.3g}; not reported")

    entries, lines = contender_rows(times, "chain")
    entries["10 x kernel only (time_gemm)"]["kernel_runs_s"] = kernel_all
    r, line = ratio_entry("chain / (10 x kernel-only)", "chain of 10 portmat.matmul(x, y)",
                          "10 x kernel only (time_gemm)", times, 1.1, "<=")
    say(f"  verified: first product max rel. error {err:.3g} (bound {n * EPS32:.3g}); chain normwise "
        f"{chain_err:.3g} (tolerance {chain_tol:.3g})")
    for l in lines:
        say(l)
    say(line)
    return {"device": dev.id, "device_name": dev.name, "device_kind": dev.kind, "n": n, "chain": CHAIN,
            "note": note, "verified": True, "first_product_max_rel_error": err, "error_bound": n * EPS32,
            "chain_rel_error": chain_err, "chain_tolerance": chain_tol, "kernel_median_s":
            statistics.median(kernel_all), "contenders": entries, "ratio": r}


# ---- the run -------------------------------------------------------------------------------------
def versions() -> dict:
    import portmat

    v = {"python": platform.python_version(), "numpy": np.__version__, "portmat": portmat.__version__}
    for name in ("cupy", "torch"):
        mod = sys.modules.get(name)
        if mod is not None:
            v[name] = mod.__version__
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        try:
            v["cuda_runtime"] = cupy.cuda.runtime.runtimeGetVersion()
            v["cuda_driver"] = cupy.cuda.runtime.driverGetVersion()
        except Exception:
            pass
    torch = sys.modules.get("torch")
    if torch is not None:
        v["torch_cuda"] = torch.version.cuda
    return v


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--machine", default="local", help="short name of this machine (default: local)")
    p.add_argument("--out", default="", help="JSON file (default: bench/results/<machine>-device-arrays.json)")
    p.add_argument("--only", default="", help=f"comma-separated sections to run ({', '.join(SECTIONS)})")
    p.add_argument("--sizes", default="4096,8192", help="cupy_resident's sizes n (default: 4096,8192)")
    p.add_argument("--rounds", type=int, default=7, help="alternating rounds per measurement (default: 7)")
    p.add_argument("--calls", type=int, default=1000, help="per_call_256's calls per timing (default: 1000)")
    p.add_argument("--opencl-device", default="", help="opencl_chain's device (default: the first OpenCL GPU)")
    p.add_argument("--chain-size", type=int, default=0,
                   help="opencl_chain's n (default: 4096 on a GPU, 512 on another OpenCL device)")
    args = p.parse_args()
    args.sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    only = [s.strip() for s in args.only.split(",") if s.strip()] or list(SECTIONS)
    unknown = [s for s in only if s not in SECTIONS]
    if unknown or args.rounds < 1 or args.calls < 1 or not args.sizes:
        p.error(f"unknown sections {unknown}" if unknown else "--rounds, --calls and --sizes must be positive")
    out = args.out or os.path.join(HERE, "results", f"{args.machine}-device-arrays.json")

    import portmat

    def say(msg):
        print(msg, flush=True)

    started = time.perf_counter()
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    devices = [{"id": d.id, "name": d.name, "backend": d.backend, "kind": d.kind, "vendor": d.vendor,
                "driver_version": d.driver_version, "memory_bytes": d.memory_bytes,
                "compute_units": d.compute_units} for d in portmat.devices()]
    say(f"portmat device arrays (issue 17) on {args.machine} ({platform.node()}), {date}")
    say("devices: " + "; ".join(f"{d['id']} {d['name']}" for d in devices))
    record = {"date": date, "machine": args.machine, "host": platform.node(), "devices": devices,
              "rounds": args.rounds, "sections": {}}
    status = 0
    for name in only:
        say(f"\n== {name}")
        t0 = time.perf_counter()
        try:
            record["sections"][name] = globals()[name](portmat, args, say)
        except Skip as e:
            say(f"  skipped: {e}")
            record["sections"][name] = {"skipped": str(e)}
        except WrongResult as e:
            say(f"  WRONG RESULT, not reported: {e}")
            record["sections"][name] = {"wrong_result": str(e)}
            status = 1
        except Exception as e:  # out of memory, a device error: recorded, the other sections still run
            say(f"  failed: {type(e).__name__}: {e}")
            record["sections"][name] = {"error": f"{type(e).__name__}: {e}"}
            status = 1
        record["sections"][name]["section_s"] = time.perf_counter() - t0
    record["versions"] = versions()  # after the sections imported cupy / torch
    record["total_s"] = time.perf_counter() - started
    say("\nversions: " + ", ".join(f"{k} {v}" for k, v in record["versions"].items()))
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump(record, f, indent=2)
        f.write("\n")
    say(f"{record['total_s']:.1f} s; written to {out}")
    return status


if __name__ == "__main__":
    sys.exit(main())

"""Issue 20's out-of-core figure: a float32 n x n NumPy-in/NumPy-out product on one device under
portmat's device memory cap (out-of-core: the product runs in blocks that fit) against the same
product with the device's whole memory, in the same run. Target on the H200: n = 32768 (4 GiB a
matrix, 12 GiB for one call) under an 8 GiB cap at >= 0.8x the uncapped speed.

Both results are computed once and verified first (the entries where 64 random rows and columns
cross, against a float64 reference of those entries, to the bound K * eps * (|a| @ |b|): a wrong
result is not timed), then `--rounds` timed runs of each, alternating run by run (the order swapped
each round, a quiet pause before each run), so that drift hits both alike. Each run is the whole
portmat.matmul(a, b) call, result allocation included, as a user waits for it. Reported: medians,
min and max, GFLOP/s (2 n^3 / median), capped / full speed (full median / capped median), and
what the capped product did (portmat.device_usage: calls into the device, the peak of device
memory, which must stay under the cap).

--devices LIST times one product split across the listed devices (comma-separated specs, e.g.
"cuda:0,cpu") against the first of them alone, the same way, without a cap (--no-cap skips the
capped/full comparison).

    python bench/out_of_core.py                                        # n = 32768 under 8G on cuda:0
    python bench/out_of_core.py --n 32768 --cap 8G --rounds 3 --json "$OUT/h200-out-of-core.json"
    python bench/out_of_core.py --n 16384 --devices cuda:0,cpu --json "$OUT/h200-devices.json"
    PORTMAT_OPENCL_DISCRETE=1 python bench/out_of_core.py --n 1024 --cap 2M --device opencl:0   # 2 cores
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

_PAUSE_S = 0.5  # quiet time before each timed run
_SAMPLE = 64  # rows and columns whose crossing entries are verified


def verify(c: np.ndarray, a: np.ndarray, b: np.ndarray, rng) -> float:
    """max |c - ref| / (|a| @ |b|) over the entries where _SAMPLE random rows and columns cross."""
    rows = np.sort(rng.choice(a.shape[0], min(_SAMPLE, a.shape[0]), replace=False))
    cols = np.sort(rng.choice(b.shape[1], min(_SAMPLE, b.shape[1]), replace=False))
    ar, bc = a[rows].astype(np.float64), b[:, cols].astype(np.float64)
    ref, mag = ar @ bc, np.abs(ar) @ np.abs(bc)
    got = c[np.ix_(rows, cols)].astype(np.float64)
    if not np.all(np.isfinite(got)):
        return float("inf")
    return float(np.max(np.abs(got - ref) / np.maximum(mag, np.finfo(np.float64).tiny)))


def measure(contenders: dict, a, b, rounds: int, rng, say, label: str) -> dict:
    """Verifies each contender once, then times them alternating; returns the record's fields."""
    n, dtype = a.shape[1], a.dtype
    bound = error_bound(n, dtype)
    record = {"error_bound": bound}
    for name, (setup, fn) in contenders.items():
        setup()
        say(f"{label}: verifying {name}")
        t0 = time.perf_counter()
        c = fn()
        record[f"{name}_first_s"] = time.perf_counter() - t0
        err = verify(c, a, b, rng)
        record[f"{name}_max_rel_error"] = err
        if not err <= bound:
            raise SystemExit(f"{name}: wrong result ({label}): error {err:.3e} over the bound {bound:.3e}")
        del c
    times = {name: [] for name in contenders}
    for r in range(rounds):
        order = list(contenders) if r % 2 == 0 else list(reversed(contenders))
        for name in order:
            setup, fn = contenders[name]
            setup()
            time.sleep(_PAUSE_S)
            t0 = time.perf_counter()
            c = fn()
            times[name].append(time.perf_counter() - t0)
            del c
        say(f"{label}: round {r + 1}/{rounds}: " + ", ".join(f"{k} {v[-1]:.3f} s" for k, v in times.items()))
    flop = 2.0 * a.shape[0] * b.shape[1] * n
    record["flop"] = flop
    for name, t in times.items():
        med = statistics.median(t)
        record[f"{name}_s"] = t
        record[f"{name}_median_s"] = med
        record[f"{name}_gflops"] = flop / med / 1e9
    return record


def operands(n: int, dtype: str, rng, say):
    """Two fresh n x n operands, uniform in [-0.5, 0.5)."""
    say(f"making two {n} x {n} {dtype} operands")
    a = rng.random((n, n), dtype=np.float32 if dtype == "float32" else np.float64)
    a -= 0.5
    b = rng.random((n, n), dtype=a.dtype)
    b -= 0.5
    return a, b


def run_cap(device: str, n: int, dtype: str, cap: int, rounds: int, rng, say) -> dict:
    a, b = operands(n, dtype, rng, say)
    usage = {}

    def capped():
        portmat.reset_device_usage(device)
        c = portmat.matmul(a, b, device=device)
        usage.update(portmat.device_usage(device))
        return c

    contenders = {
        "full": (lambda: portmat.set_device_memory_limit(None), lambda: portmat.matmul(a, b, device=device)),
        "capped": (lambda: portmat.set_device_memory_limit(cap), capped),
    }
    try:
        record = measure(contenders, a, b, rounds, rng, say, f"n={n} cap={cap}")
    finally:
        portmat.set_device_memory_limit(None)
    record.update({"kind": "cap", "device": device, "n": n, "dtype": dtype, "cap_bytes": cap,
                   "capped_usage": usage,
                   "capped_over_full_speed": record["full_median_s"] / record["capped_median_s"]})
    if usage.get("peak_bytes", 0) > cap:
        raise SystemExit(f"the capped product held {usage['peak_bytes']} bytes of device memory, over the cap {cap}")
    return record


def run_devices(devices: list[str], n: int, dtype: str, rounds: int, rng, say) -> dict:
    a, b = operands(n, dtype, rng, say)
    shares = {}

    def split():
        for d in devices:
            portmat.reset_device_usage(d)
        c = portmat.matmul(a, b, device=devices)
        for d in devices:
            shares[d] = portmat.device_usage(d)["flops"]
        return c

    nothing = lambda: None  # noqa: E731
    contenders = {"one": (nothing, lambda: portmat.matmul(a, b, device=devices[0])), "list": (nothing, split)}
    record = measure(contenders, a, b, rounds, rng, say, f"n={n} on {','.join(devices)}")
    total = sum(shares.values()) or 1.0
    record.update({"kind": "devices", "devices": devices, "n": n, "dtype": dtype,
                   "flop_share": {d: f / total for d, f in shares.items()},
                   "list_over_one_speed": record["one_median_s"] / record["list_median_s"]})
    return record


def table(records: list[dict]) -> str:
    lines = []
    for r in records:
        if r["kind"] == "cap":
            u = r["capped_usage"]
            lines.append(
                f"{r['device']} n={r['n']} {r['dtype']}: full {r['full_median_s']:.3f} s ({r['full_gflops']:.0f} GF/s), "
                f"capped at {r['cap_bytes'] / 2**30:.3g} GiB {r['capped_median_s']:.3f} s ({r['capped_gflops']:.0f} GF/s, "
                f"{u.get('host_calls')} calls, peak {u.get('peak_bytes', 0) / 2**30:.3g} GiB): "
                f"capped/full speed {r['capped_over_full_speed']:.3f}x")
        else:
            shares = ", ".join(f"{d} {s:.1%}" for d, s in r["flop_share"].items())
            lines.append(
                f"{','.join(r['devices'])} n={r['n']} {r['dtype']}: {r['devices'][0]} alone {r['one_median_s']:.3f} s "
                f"({r['one_gflops']:.0f} GF/s), the list {r['list_median_s']:.3f} s ({r['list_gflops']:.0f} GF/s; "
                f"{shares}): list/one speed {r['list_over_one_speed']:.3f}x")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=32768, help="n of the n x n operands (32768)")
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    p.add_argument("--cap", default="8G", help="the device memory cap of the capped runs (8G)")
    p.add_argument("--device", default=None, help="the device (default: cuda:0 where there is one, else the default)")
    p.add_argument("--devices", default=None, metavar="LIST",
                   help="also time one product on these devices (comma-separated) against the first alone")
    p.add_argument("--no-cap", action="store_true", help="skip the capped/full comparison (with --devices)")
    p.add_argument("--rounds", type=int, default=3, help="timed runs of each contender (3)")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--json", default=None, metavar="FILE", help="write the records (and the setup) here")
    args = p.parse_args(argv)
    if args.rounds < 1 or args.n < 1:
        p.error("--rounds and --n must be positive")
    try:
        cap = portmat._ext.parse_memory_size(args.cap)
    except ValueError as e:
        p.error(f"--cap: {e}")
    if os.environ.get("PORTMAT_DEVICE_MEMORY"):
        p.error("unset PORTMAT_DEVICE_MEMORY: the uncapped runs must have the whole device")
    device = args.device or next((d.id for d in portmat.devices() if d.backend == "cuda"), portmat.default_device().id)
    devices = [d for d in args.devices.split(",") if d] if args.devices else None
    seed = args.seed if args.seed is not None else int(np.random.SeedSequence().entropy % 2**32)
    rng = np.random.default_rng(seed)

    def say(msg):
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    setup = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": platform.node(), "seed": seed,
        "devices": {d.id: d.name for d in portmat.devices()},
        "versions": {"portmat": portmat.__version__, "numpy": np.__version__, "python": platform.python_version()},
        "command": " ".join([os.path.basename(sys.argv[0])] + (argv if argv is not None else sys.argv[1:])),
    }
    records = []

    def save():
        if args.json:  # after every record: a run cut short keeps what it measured
            with open(args.json, "w") as f:
                json.dump({"setup": setup, "records": records}, f, indent=1)
            say(f"wrote {args.json}")

    if not args.no_cap:
        records.append(run_cap(device, args.n, args.dtype, cap, args.rounds, rng, say))
        say(table(records[-1:]))
        save()
    if devices:
        records.append(run_devices(devices, args.n, args.dtype, args.rounds, rng, say))
        say(table(records[-1:]))
        save()
    print(table(records), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

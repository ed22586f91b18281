"""The precision modes on the CUDA backend's tensor cores (issue 18): for n in SIZES, each mode
(float32 exact, tf32, float32_tc, bfloat16) on each tensor-core kernel (PORTMAT_CUDA_TC_KERNEL =
mma: gemm_tc.cuh, mma.sync; wgmma: gemm_wgmma.cuh, wgmma + TMA, sm_90 only) against torch in the
matching mode (cuBLAS: float32 with TF32 off; TF32 through torch.backends.cuda.matmul.allow_tf32;
bfloat16 on bfloat16 tensors, bfloat16 result), in one process. Device-resident, medians of RUNS
runs of LAUNCHES queued products on CUDA events (portmat: `_ext.time_gemm`, the pre-pass of the
wgmma kernels included; torch: a CUDA graph of the products). Then the error of each against a
float64 product of the same float32 operands (torch, float64, on the GPU): max and mean of
|c - a.b| / (|a| |b|) over the entries (portmat's own measure, reference.hpp's
worst_relative_error). For each tensor-core run also the device time of each kernel it launches
(the wgmma pre-pass apart from the main kernel), from torch's profiler. float32_tc has no peer: it
is held against cuBLAS's float32 (issue 18's target: >= 2.2x its speed, float32-level error).
float32_tc on wgmma runs once per entry of F32TC_VARIANTS, each its own row (kernel "wgmma:LABEL"):
the register-promotion kernels (gemm_wgmma_f32tc.cuh) at each tile width and several promotion
intervals (PORTMAT_CUDA_F32TC_KERNEL, PORTMAT_CUDA_TC_PROMOTE), and the first design (global: the
sums added into c); --f32tc default runs only the default (plain "wgmma").

  python3 bench/diagnostics/cuda_tc_sweep.py [--sizes 4096 8192] [--f32tc all|default] [--json FILE]

Writes JSON to --json, else to $OUT/cuda_tc_sweep.json when $OUT is set. About a minute on an H200.
"""

import argparse
import datetime
import json
import os
import statistics
import sys

import numpy as np
import torch

import portmat
from portmat import _ext
from portmat.peers import _queued_seconds, torch_graph

RUNS, LAUNCHES = 7, 5
MODES = ("float32", "tf32", "float32_tc", "bfloat16")
# float32_tc's wgmma rows: (label, PORTMAT_CUDA_F32TC_KERNEL, PORTMAT_CUDA_TC_PROMOTE); None: unset.
# "" is the default (regs: 128 x 128 tiles, promotion every 4 chunks of 32 k); p0 never promotes
# (one tensor-core chain over the whole k: the speed that promotion costs, and the error it saves).
F32TC_VARIANTS = (
    ("", None, None),
    ("regs128/p1", "regs128", "1"),
    ("regs128/p2", "regs128", "2"),
    ("regs128/p8", "regs128", "8"),
    ("regs128/p0", "regs128", "0"),
    ("regs192", "regs192", None),
    ("regs192/p2", "regs192", "2"),
    ("regs192/p8", "regs192", "8"),
    ("global", "global", None),
)
KNOBS = ("PORTMAT_CUDA_TC_KERNEL", "PORTMAT_CUDA_F32TC_KERNEL", "PORTMAT_CUDA_TC_PROMOTE")


def set_knobs(values):
    """The three knobs as given (None: unset)."""
    for name, value in zip(KNOBS, values):
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def portmat_seconds(dev, n, mode):
    return statistics.median(t for t in _ext.time_gemm(dev, n, n, n, "float32", RUNS, LAUNCHES, "rr", 1, mode)
                             if t >= 0)


def kernel_breakdown(dev, n, mode, launches=3):
    """Device time per product of each kernel that a portmat product in `mode` launches (wgmma:
    wg_prep twice, then gemm_wgmma_*), in microseconds, from torch's profiler (CUPTI sees the
    kernels of every library in the process); {} where the profiler cannot say."""
    try:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            _ext.time_gemm(dev, n, n, n, "float32", 1, launches, "rr", 1, mode)
            torch.cuda.synchronize()
        out = {}
        for ev in prof.key_averages():
            us = getattr(ev, "device_time_total", None)
            if us is None:
                us = getattr(ev, "cuda_time_total", 0)
            if us and not ev.key.startswith(("Memcpy", "Memset", "cuda", "Activity")):
                out[ev.key] = us / launches
        return out
    except Exception as e:  # no CUPTI, an old torch: the totals above still stand
        return {"error": f"{type(e).__name__}: {e}"}


def torch_setup(n, mode, a32, b32):
    """torch's operands and output for mode ('float32', 'tf32' or 'bfloat16'), TF32 switched to match."""
    torch.backends.cuda.matmul.allow_tf32 = mode == "tf32"
    torch.backends.cudnn.allow_tf32 = mode == "tf32"
    if mode == "bfloat16":
        a, b = a32.to(torch.bfloat16), b32.to(torch.bfloat16)
        c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    else:
        a, b, c = a32, b32, torch.empty(n, n, device="cuda")
    return a, b, c


def torch_seconds(n, mode, a32, b32):
    a, b, c = torch_setup(n, mode, a32, b32)
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    graph = torch_graph(torch, lambda: torch.matmul(a, b, out=c), LAUNCHES)
    runs = _queued_seconds(start, stop, lambda: start.elapsed_time(stop), graph.replay, RUNS, 1)
    return statistics.median(t / LAUNCHES for t in runs)


def errors(c, ref, mag):
    """max and mean of |c - ref| / mag (c any float tensor on the GPU; ref, mag float64)."""
    e = (c.double() - ref).abs_().div_(mag)
    if torch.isnan(e).any():
        return float("inf"), float("inf")
    return float(e.max()), float(e.mean())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[4096, 8192])
    ap.add_argument("--f32tc", choices=("all", "default"), default="all",
                    help="float32_tc on wgmma: every entry of F32TC_VARIANTS, or the default kernel only")
    ap.add_argument("--json")
    args = ap.parse_args()
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    command = " ".join(["python3 bench/diagnostics/cuda_tc_sweep.py"] + sys.argv[1:])
    dev = next(d for d in portmat.devices() if d.backend == "cuda")
    kernels = ["mma", "wgmma"]
    rows = []
    for n in args.sizes:
        flop = 2.0 * n**3
        rng = np.random.default_rng(n)
        a_np = rng.random((n, n), dtype=np.float32) - np.float32(0.5)
        b_np = rng.random((n, n), dtype=np.float32) - np.float32(0.5)
        a32, b32 = torch.from_numpy(a_np).cuda(), torch.from_numpy(b_np).cuda()
        a64, b64 = a32.double(), b32.double()
        ref = a64 @ b64
        mag = a64.abs() @ b64.abs()
        del a64, b64
        torch_t, torch_err = {}, {}
        for mode in ("float32", "tf32", "bfloat16"):
            torch_t[mode] = torch_seconds(n, mode, a32, b32)
            a, b, _ = torch_setup(n, mode, a32, b32)
            torch_err[mode] = errors(torch.matmul(a, b), ref, mag)
            del a, b
        torch.backends.cuda.matmul.allow_tf32 = False
        print(f"n={n}: torch float32 {flop / torch_t['float32'] / 1e12:.1f} TFLOP/s, tf32 "
              f"{flop / torch_t['tf32'] / 1e12:.1f}, bfloat16 {flop / torch_t['bfloat16'] / 1e12:.1f}; errors (max/mean) "
              + ", ".join(f"{m} {e[0]:.2e}/{e[1]:.2e}" for m, e in torch_err.items()), flush=True)
        for mode in MODES:
            runs = [("-", (None, None, None))] if mode == "float32" else [(k, (k, None, None)) for k in kernels]
            if mode == "float32_tc":
                variants = F32TC_VARIANTS if args.f32tc == "all" else F32TC_VARIANTS[:1]
                runs = [r for r in runs if r[0] != "wgmma"] + [
                    ("wgmma" + (":" + label if label else ""), ("wgmma", f32tc, promote))
                    for label, f32tc, promote in variants]
            for kernel, knobs in runs:
                set_knobs(knobs)
                row = {"n": n, "mode": mode, "kernel": kernel}
                try:
                    t = portmat_seconds(dev.id, n, mode)
                    c = portmat.matmul(a_np, b_np, device=dev.id, precision=mode)
                    emax, emean = errors(torch.from_numpy(np.ascontiguousarray(c)).cuda(), ref, mag)
                except Exception as e:  # a kernel that cannot run here (wgmma off sm_90) or fails
                    row["error"] = f"{type(e).__name__}: {e}"
                    print(f"  {mode:10s} {kernel:18s}: {row['error']}", flush=True)
                    set_knobs((None, None, None))
                    rows.append(row)
                    continue
                peer = "float32" if mode in ("float32", "float32_tc") else mode
                row.update({"seconds": t, "tflops": flop / t / 1e12, "max_err": emax, "mean_err": emean,
                            "torch_mode": peer, "torch_seconds": torch_t[peer], "torch_tflops": flop / torch_t[peer] / 1e12,
                            "torch_max_err": torch_err[peer][0], "torch_mean_err": torch_err[peer][1],
                            "speedup_vs_torch": torch_t[peer] / t})
                if kernel != "-":
                    row["kernels_us"] = kernel_breakdown(dev.id, n, mode)
                rows.append(row)
                print(f"  {mode:10s} {kernel:18s}: {row['tflops']:7.1f} TFLOP/s ({row['speedup_vs_torch']:.2f}x torch "
                      f"{peer}); error max {emax:.2e} mean {emean:.2e} (torch {peer}: {torch_err[peer][0]:.2e} / "
                      f"{torch_err[peer][1]:.2e})", flush=True)
                if row.get("kernels_us"):
                    print("      per product, us: " + ", ".join(
                        f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}" for k, v in row["kernels_us"].items()),
                        flush=True)
        set_knobs((None, None, None))
        del ref, mag, a32, b32
        torch.cuda.empty_cache()
    out = args.json or (os.path.join(os.environ["OUT"], "cuda_tc_sweep.json") if os.environ.get("OUT") else None)
    if out:
        with open(out, "w") as f:
            json.dump({"date": started, "command": command, "device": dev.name, "runs": RUNS,
                       "launches": LAUNCHES, "rows": rows}, f, indent=1)
        print(f"wrote {out}")


if __name__ == "__main__":
    main()

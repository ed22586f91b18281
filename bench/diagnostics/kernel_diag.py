"""Where does the device-resident float32 gemm lose to cuBLAS? Three readings, same process:

  1. clocks and power: each kernel (cuBLAS through torch with TF32 off, portmat's tiles) runs for
     about `--seconds` while a thread samples the SM clock and board power (nvidia-smi); a kernel
     that draws more power per FLOP runs at a lower clock under the power limit.
  2. wave quantization: every shape is also run with M rounded up to a whole number of waves of
     128x256 tiles (132 SMs, one block each: M = 128 * 33 = 4224 for n = 4096), so the per-SM rate
     of each kernel shows without the last partial wave.
  3. cuBLAS's kernel names (torch.profiler): which tile and algorithm it picks per shape.

  python3 bench/diagnostics/kernel_diag.py --tiles 128x256_fp,128x256_sk,128x256_sk:PORTMAT_CUDA_GROUP_M=16 --json out.json
"""

import argparse
import json
import os
import statistics
import subprocess
import threading
import time

import numpy as np
import torch

import portmat
from bench_cuda import torch_operands  # this script's folder is on sys.path
from portmat import _ext


class Sampler:
    """SM clock (MHz) and board power (W) from nvidia-smi every ~50 ms while active."""

    def __init__(self):
        self.samples, self.on = [], False
        self.proc = subprocess.Popen(
            ["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
             "-lms", "50"], stdout=subprocess.PIPE, text=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            if self.on:
                try:
                    clk, pw = (float(x) for x in line.split(","))
                    self.samples.append((clk, pw))
                except ValueError:
                    pass

    def run(self, fn):
        self.samples = []
        self.on = True
        out = fn()
        self.on = False
        s = self.samples[len(self.samples) // 4:]  # past the ramp
        if not s:
            return out, float("nan"), float("nan")
        return out, statistics.median(x[0] for x in s), statistics.median(x[1] for x in s)


def cublas_times(m, n, k, seconds, launches):
    a, b, c = torch_operands(m, n, k)
    ts, t_end = [], time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(launches):
            torch.matmul(a, b, out=c)
        e1.record()
        e1.synchronize()
        ts.append(e0.elapsed_time(e1) * 1e-3 / launches)
    return ts


def cublas_kernels(m, n, k):
    a = torch.rand(m, k, device="cuda")
    b = torch.rand(k, n, device="cuda")
    torch.matmul(a, b)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        torch.matmul(a, b)
        torch.cuda.synchronize()
    return sorted({e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA})


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tiles", default="128x256_fp,128x256_sk")
    p.add_argument("--shapes", default="4096x4096x4096,4224x4096x4096,8192x8192x8192,8448x8192x8192")
    p.add_argument("--seconds", type=float, default=1.5)
    p.add_argument("--launches", type=int, default=5,
                   help="products queued back to back per timed run, for cuBLAS and portmat alike")
    p.add_argument("--json", default="")
    args = p.parse_args()
    dev = next(d.id for d in portmat.devices() if d.backend == "cuda")
    sampler = Sampler()
    time.sleep(0.5)
    records = []
    for shape in args.shapes.split(","):
        m, n, k = (int(x) for x in shape.split("x"))
        flop = 2.0 * m * n * k
        row = {"shape": shape, "cublas_kernels": cublas_kernels(m, n, k)}
        ts, clk, pw = sampler.run(lambda: cublas_times(m, n, k, args.seconds, args.launches))
        row["cublas"] = {"tflops": flop / statistics.median(ts) / 1e12, "mhz": clk, "watts": pw}
        for spec in args.tiles.split(","):
            # "tile" or "tile:NAME=VALUE:NAME=VALUE" (environment for this entry only)
            # ("LAYOUT=cr": a column-major, b row-major; not an environment variable)
            tile, *env = spec.split(":")
            env = dict(e.split("=", 1) for e in env)
            layout = env.pop("LAYOUT", "rr")
            os.environ["PORTMAT_CUDA_TILE"] = tile
            os.environ.update(env)
            _ext.time_gemm(dev, m, n, k, "float32", 3, 1, layout)  # load, warm
            reps = max(10, int(args.seconds / (flop / 50e12) / args.launches))
            ts, clk, pw = sampler.run(
                lambda: _ext.time_gemm(dev, m, n, k, "float32", reps, args.launches, layout))
            row[spec] = {"tflops": flop / statistics.median(ts) / 1e12, "mhz": clk, "watts": pw,
                         "spread": [flop / max(ts) / 1e12, flop / min(ts) / 1e12]}
            for name in env:
                os.environ.pop(name, None)
        os.environ.pop("PORTMAT_CUDA_TILE", None)
        # cuBLAS again: the first reading may have run on a cooler card
        ts, clk, pw = sampler.run(lambda: cublas_times(m, n, k, args.seconds, args.launches))
        row["cublas_again"] = {"tflops": flop / statistics.median(ts) / 1e12, "mhz": clk, "watts": pw}
        records.append(row)
        line = f"{shape}: " + "  ".join(
            f"{name} {v['tflops']:.1f} TF @ {v['mhz']:.0f} MHz {v['watts']:.0f} W"
            for name, v in row.items() if isinstance(v, dict))
        print(line, "\n   cuBLAS kernels:", row["cublas_kernels"], flush=True)
    sampler.proc.terminate()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=1)


if __name__ == "__main__":
    main()

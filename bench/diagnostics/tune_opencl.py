"""Sweeps gemm.cl's tunables on one OpenCL device: kernel-only time (device events, median of
`--repeat`) for each candidate parameter set at each size; every candidate is first verified
against a float64 reference. Prints a table and writes JSON.

    python bench/diagnostics/tune_opencl.py --device opencl:0 --sizes 1024,4096 --json out.json
"""

import argparse
import json
import os
import statistics
import sys

import numpy as np

import portmat
from portmat import _ext

# Each entry overrides the defaults chosen for the device (gemm_params.cpp) via
# PORTMAT_OPENCL_PARAMS; "" is the default itself.
CANDIDATES = [
    "",
    "GVW=1",
    "KWG=8",
    "KWG=8,GVW=1",
    "PADA=0",
    "PADB=4",
    "MWG=64,NWG=128,MDIMC=8,NDIMC=16",
    "MWG=128,NWG=64,MDIMC=16,NDIMC=8",
    "MWG=64,NWG=64,MDIMC=16,NDIMC=16",
    "MWG=64,NWG=64,MDIMC=8,NDIMC=8",
    "MWG=128,NWG=128,MDIMC=32,NDIMC=8,VWM=4,VWN=4",
    "MWG=128,NWG=128,MDIMC=8,NDIMC=32,VWM=4,VWN=4",
    "VWM=2,VWN=2",
    "VWM=8,VWN=8,MDIMC=16,NDIMC=16",
    "KWG=32,MWG=64,NWG=64",
    "KWG=32,MWG=64,NWG=64,MDIMC=8,NDIMC=8",
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="")
    ap.add_argument("--sizes", default="1024,4096")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--json")
    args = ap.parse_args()
    dev = _ext.find_device(args.device)
    sizes = [int(s) for s in args.sizes.split(",")]
    rng = np.random.default_rng(0)
    results = []
    print(f"tuning on {dev.id} ({dev.name}), {args.dtype}", flush=True)
    for cand in CANDIDATES:
        os.environ["PORTMAT_OPENCL_PARAMS"] = cand
        row = {"params": cand or "(default)", "gflops": {}}
        try:
            a = rng.uniform(-1, 1, (256, 512)).astype(args.dtype)  # tile multiples: the tuned path
            b = rng.uniform(-1, 1, (512, 256)).astype(args.dtype)
            c = portmat.matmul(a, b, device=dev)
            ref = a.astype(np.float64) @ b
            bound = 512 * np.finfo(args.dtype).eps * (np.abs(a).astype(np.float64) @ np.abs(b))
            if not np.all(np.abs(c - ref) <= bound):
                raise AssertionError("wrong result")
            for n in sizes:
                t = statistics.median(_ext.time_gemm(dev.id, n, n, n, args.dtype, args.repeat))
                row["gflops"][n] = 2.0 * n**3 / t / 1e9
        except Exception as e:  # invalid on this device, or wrong: report and go on
            row["error"] = str(e).splitlines()[0][:120]
        results.append(row)
        cells = "  ".join(f"n={n}: {g:8.0f}" for n, g in row["gflops"].items())
        print(f"{row['params']:<50} {cells} {row.get('error', '')}", flush=True)
    os.environ.pop("PORTMAT_OPENCL_PARAMS", None)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": dev.id, "device_name": dev.name, "dtype": args.dtype, "results": results}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())

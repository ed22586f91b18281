"""Times gemm.cl's tunables on one OpenCL device: kernel-only time (device events) for each
candidate parameter set at each size, every candidate first verified against a float64 reference;
the candidates alternate in `--rounds` rounds (the machine drifts), and on NVIDIA GPUs cuBLAS
(torch, TF32 off) runs in the same rounds. Prints medians (min-max) and writes JSON.

    python bench/diagnostics/tune_opencl.py --device opencl:0 --sizes 1024,4096 --json out.json
    python bench/diagnostics/tune_opencl.py --device opencl:1 --sizes 4096,8192 --rounds 3 \
        --candidates ";DBF=1;DBF=1,KWG=16"

`portmat tune` is the product's search; this is for experiments (a kernel change A/B, a sweep).
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


def _cublas(sizes, repeat, launches):
    """cuBLAS float32 (torch, TF32 off) per size: a function returning seconds per product, or None."""
    try:
        from portmat.peers import TorchPeer

        peer = TorchPeer()
    except Exception:  # no torch, or no CUDA device
        return None
    rng = np.random.default_rng(1)
    ops = {n: (rng.uniform(-1, 1, (n, n)).astype(np.float32), rng.uniform(-1, 1, (n, n)).astype(np.float32))
           for n in sizes}
    return lambda n: statistics.median(peer.resident(*ops[n], repeat, launches))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="")
    ap.add_argument("--sizes", default="1024,4096")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--launches", type=int, default=1, help="products queued per timed run")
    ap.add_argument("--rounds", type=int, default=1, help="alternating rounds over the candidates")
    ap.add_argument("--candidates", help="';'-separated PORTMAT_OPENCL_PARAMS sets ('' is the default) "
                    "instead of the built-in list; 'PARAMS|VAR=VALUE,...' also sets environment variables "
                    "for that candidate (e.g. '|PORTMAT_OPENCL_PAD=0')")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--layout", default="rr", choices=["rr", "rc", "cr", "cc"],
                    help="a's and b's storage, row- or column-major each (cuBLAS is timed row-major)")
    ap.add_argument("--json")
    args = ap.parse_args()
    dev = _ext.find_device(args.device)
    sizes = [int(s) for s in args.sizes.split(",")]
    candidates = args.candidates.split(";") if args.candidates is not None else CANDIDATES
    rng = np.random.default_rng(0)
    print(f"timing on {dev.id} ({dev.name}), {args.dtype}, layout {args.layout}", flush=True)
    rows = []
    def use(cand):  # PORTMAT_OPENCL_PARAMS and the candidate's own variables (others' unset)
        params, _, envs = ("" if cand == "(default)" else cand).partition("|")
        for c in candidates:
            for item in filter(None, c.partition("|")[2].split(",")):
                os.environ.pop(item.split("=")[0], None)
        for item in filter(None, envs.split(",")):
            name, _, value = item.partition("=")
            os.environ[name] = value
        os.environ["PORTMAT_OPENCL_PARAMS"] = params

    for cand in candidates:  # verify once, each program compiled before the timed rounds
        use(cand)
        row = {"params": cand or "(default)", "seconds": {n: [] for n in sizes}}
        try:
            row["resolved"] = _ext.kernel_params(dev.id, args.dtype, sizes[-1], sizes[-1])
            a = rng.uniform(-1, 1, (256, 512)).astype(args.dtype)  # tile multiples: the tuned path
            b = rng.uniform(-1, 1, (512, 256)).astype(args.dtype)
            for x, y in ((a, b), (a[:250, :509], b[:509, :251])):  # and with edges
                x = np.asfortranarray(x) if args.layout[0] == "c" else x
                y = np.asfortranarray(y) if args.layout[1] == "c" else y
                c = portmat.matmul(x, y, device=dev)
                ref = x.astype(np.float64) @ y
                bound = 512 * np.finfo(args.dtype).eps * (np.abs(x).astype(np.float64) @ np.abs(y))
                if not np.all(np.abs(c - ref) <= bound):
                    raise AssertionError(f"wrong result at {x.shape} @ {y.shape}")
        except Exception as e:  # invalid on this device, or wrong: report and leave it out
            row["error"] = str(e).splitlines()[0][:120]
        rows.append(row)
    cublas = _cublas(sizes, args.repeat, args.launches) if args.dtype == "float32" else None
    peer = {"params": "cuBLAS (torch, TF32 off)", "seconds": {n: [] for n in sizes}} if cublas else None
    for r in range(args.rounds):
        for row in rows + ([peer] if peer else []):
            if "error" in row:
                continue
            for n in sizes:
                if row is peer:
                    row["seconds"][n].append(cublas(n))
                    continue
                use(row["params"])
                ts = [t for t in _ext.time_gemm(dev.id, n, n, n, args.dtype, args.repeat, args.launches, args.layout)
                      if t > 0]
                row["seconds"][n].append(statistics.median(ts))
    os.environ.pop("PORTMAT_OPENCL_PARAMS", None)
    for row in rows + ([peer] if peer else []):
        row["gflops"] = {n: 2.0 * n**3 / statistics.median(ts) / 1e9 for n, ts in row["seconds"].items() if ts}
        row["gflops_range"] = {n: [2.0 * n**3 / max(ts) / 1e9, 2.0 * n**3 / min(ts) / 1e9]
                               for n, ts in row["seconds"].items() if ts}
    for row in rows + ([peer] if peer else []):
        cells = []
        for n, g in row["gflops"].items():
            lo, hi = row["gflops_range"][n]
            ratio = f" {g / peer['gflops'][n]:.3f}x" if peer and row is not peer else ""
            cells.append(f"n={n}: {g:8.0f} ({lo:.0f}-{hi:.0f}){ratio}")
        print(f"{row['params']:<60} {'  '.join(cells)} {row.get('error', '')}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": dev.id, "device_name": dev.name, "dtype": args.dtype, "layout": args.layout,
                       "rounds": args.rounds,
                       "results": rows, "cublas": peer}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())

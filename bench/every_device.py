"""Benchmarks every device of this machine with the canonical sizes and writes today's figures.

One `python -m portmat bench` per device and dtype, each in its own process (a GPU peer's memory
or NumPy's spinning threads never carry over), writing bench/results/<machine>-<device>-<dtype>.json
(or ...-<dtype>-stack<B>.json for stacks of B matrices; overwritten: git keeps the history); on the
CPU backend also issue 16's suite of shapes (`--shapes suite`), ...-<dtype>-shapes.json, and on a
machine with a GPU the same suite on the automatic device choice (`--device auto`,
<machine>-auto-float32-shapes.json, `--only auto` for it alone); then the
tables of bench/results/README.md and README.md (bench/results_tables.py). <device> is the backend (cpu, cuda) or, for OpenCL, the backend and the
kind (opencl-gpu, opencl-cpu); the first device of each is measured.

The CPU backend's runs see Intel's OpenCL CPU runtime (PyPI intel-opencl-rt, when installed in this
environment and $OCL_ICD_VENDORS is not set) registered alone, so that its SYCL peer, dpnp, finds
its device (on PoCL dpnp cannot allocate its memory); the OpenCL devices' runs keep the system's
registration, so opencl-cpu stays PoCL's device.

    python bench/every_device.py --machine 2core                 # what `make bench` runs
    python bench/every_device.py --machine h200 --out "$OUT"     # bench/h200.sh on the H200
    python bench/every_device.py --machine laptop --only cpu --sizes 512,1024
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

# (backend, kind) -> [(dtype, sizes, stack)]: what each kind of device is measured at. GPUs need
# large products to fill them; PoCL's CPU device is slow, so it gets small ones. Beside the square
# float products: integers and complex numbers, and stacks of small matrices (np.matmul's
# batched products), at the sizes the issues name.
PLAN = {
    ("cuda", "gpu"): [("float32", "512,1024,2048,4096,8192", None), ("float64", "1024,4096", None),
                      ("complex64", "1024,4096", None), ("int32", "512", None),
                      ("float32", "32", 10000), ("float32", "512", 64)],
    ("opencl", "gpu"): [("float32", "1024,2048,4096,8192", None)],
    ("cpu", "cpu"): [("float32", "256,512,1024,2048,4096", None), ("float64", "1024,2048", None),
                     ("complex64", "1024", None), ("complex128", "1024", None), ("int32", "512", None),
                     ("int64", "512", None), ("float32", "32", 10000), ("float32", "128", 1000)],
    ("opencl", "cpu"): [("float32", "256,512,1024", None)],
}
# (backend, kind) -> dtypes of the built-in suite of shapes (bench.SUITE: vectors, skinny, small and
# tall-skinny products), one file each.
SHAPES = {("cpu", "cpu"): ["float32"]}


def label(backend: str, kind: str) -> str:
    return f"{backend}-{kind}" if backend == "opencl" else backend


def intel_opencl_env(folder: str) -> dict | None:
    """os.environ with OCL_ICD_VENDORS naming a folder (made in `folder`) whose one .icd file names
    this environment's libintelocl.so (the wheel's own .icd names a placeholder path), or None
    where Intel's OpenCL runtime is not installed here or $OCL_ICD_VENDORS is already set."""
    lib = os.path.join(sys.prefix, "lib", "libintelocl.so")
    if os.environ.get("OCL_ICD_VENDORS") or not os.path.exists(lib):
        return None
    vendors = os.path.join(folder, "vendors")
    os.makedirs(vendors, exist_ok=True)
    with open(os.path.join(vendors, "intel.icd"), "w") as f:
        f.write(lib + "\n")
    return dict(os.environ, OCL_ICD_VENDORS=vendors)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--machine", required=True, help="short name of this machine kind: h200, 2core, ...")
    p.add_argument("--out", default=os.path.join(HERE, "results"), help="folder for the JSON files")
    p.add_argument("--only", default="", help="comma-separated devices to run (cpu, cuda, opencl-gpu, ...)")
    p.add_argument("--sizes", default="", help="override the sizes of every run (and leave out the stacks "
                                                "and the shapes)")
    p.add_argument("--repeat", default="", help="passed to portmat bench")
    p.add_argument("--no-tables", action="store_true", help="leave the README tables alone")
    args = p.parse_args()

    import portmat

    seen, failed = set(), []
    os.makedirs(args.out, exist_ok=True)
    scratch = tempfile.TemporaryDirectory(prefix="portmat-bench-")
    cpu_env = intel_opencl_env(scratch.name)  # dpnp's device, for the CPU backend's runs

    def bench(what: str, device: str, dtype: str, file: str, options: list[str], env=None) -> None:
        """One `portmat bench` of `device` in its own process, writing <out>/<machine>-<file>.json."""
        path = os.path.join(args.out, f"{args.machine}-{file}.json")
        cmd = [sys.executable, "-m", "portmat", "bench", "--device", device, "--dtype", dtype, *options, "--json", path]
        if args.repeat:
            cmd += ["--repeat", args.repeat]
        print(f"== {what}: {' '.join(cmd[1:])}", flush=True)
        if subprocess.run(cmd, env=env).returncode != 0:
            failed.append(what)

    for d in portmat.devices():
        key = (d.backend, d.kind)
        name = label(*key)
        if key not in PLAN or name in seen or (args.only and name not in args.only.split(",")):
            continue
        seen.add(name)
        env = cpu_env if key == ("cpu", "cpu") else None
        for dtype, sizes, stack in PLAN[key]:
            if dtype in ("float64", "complex128") and not d.supports_float64:
                continue
            if args.sizes and stack:  # --sizes narrows the square products; stacks keep theirs
                continue
            suffix = f"-stack{stack}" if stack else ""
            bench(f"{name} {dtype}", d.id, dtype, f"{name}-{dtype}{suffix}",
                  ["--sizes", args.sizes or sizes] + (["--batch", str(stack)] if stack else []), env)
        for dtype in SHAPES.get(key, []) if not args.sizes else []:
            if dtype in ("float64", "complex128") and not d.supports_float64:
                continue
            bench(f"{name} {dtype} shapes", d.id, dtype, f"{name}-{dtype}-shapes", ["--shapes", "suite"], env)
    # Issue 16's automatic device choice (no device named) over the same suite, against NumPy and
    # portmat on each single device in the same blocks: on machines with a GPU, where there is a choice.
    if not args.sizes and (not args.only or "auto" in args.only.split(",")) and any(
            d.kind == "gpu" for d in portmat.devices()):
        bench("auto float32 shapes", "auto", "float32", "auto-float32-shapes", ["--shapes", "suite"])
    if not args.no_tables:
        subprocess.run([sys.executable, os.path.join(HERE, "results_tables.py"), "--results", args.out], check=False)
    if failed:
        print("FAILED: " + ", ".join(failed), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""Command line: `python -m portmat bench [...]`, `python -m portmat devices` and
`python -m portmat tune [...]`.

`bench` times square products at --sizes (bench.run), or one product per shape with --shapes FILE
or --shapes suite (bench.run_shapes); --json writes the records, --plot draws them (matplotlib).
`tune` searches the OpenCL kernels' parameters on the device in hand and stores the fastest
(_tune.py)."""

from __future__ import annotations

import argparse
import sys

from . import bench


def _devices_table() -> str:
    import portmat

    rows = [("id", "kind", "name", "memory", "shares host memory", "float64")]
    notes = []
    try:
        default = portmat.default_device().id
    except (portmat.Error, ValueError) as e:  # e.g. a $PORTMAT_DEVICE that names no device
        default = None
        notes.append(f"note: no default device: {e}")
    for d in portmat.devices():
        mark = " *" if d.id == default else ""
        rows.append(
            (
                d.id + mark,
                d.kind,
                d.name,
                f"{d.memory_bytes / 2**30:.1f} GiB",
                "yes" if d.host_unified else "no",
                "yes" if d.supports_float64 else "no",
            )
        )
    notes += [f"note: {n}" for n in portmat._ext.backend_notes()]
    if len(rows) == 1:
        return "\n".join(["no devices found (is an OpenCL driver installed? e.g. apt-get install pocl-opencl-icd)"] + notes)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    return "\n".join(lines + ["* = default device"] + notes)


def _tune_command(parser, args) -> int:
    from . import _ext, _tune

    if args.show:
        rows = _tune.stored(args.device)
        for r in rows:
            print(f"{r['device']:9} {r['dtype']:8} {r['params']}  ({r['gflops']} GFLOP/s at n = {r['size']}; {r['key']})")
        print(f"{len(rows)} stored" + (f" in {rows[0]['file']}" if rows else ""))
        return 0
    if (args.size is not None and args.size < 1) or args.repeat < 1 or (
            args.max_candidates is not None and args.max_candidates < 1):
        parser.error("--size, --repeat and --max-candidates must be positive")
    try:
        devices = [_ext.find_device(args.device).id] if args.device else [
            d.id for d in _ext.devices() if d.backend == "opencl"]
    except ValueError as e:
        parser.error(str(e))
    if not devices:
        print("portmat tune: no OpenCL device here (`python -m portmat devices` lists what there is)", file=sys.stderr)
        return 1
    if args.forget:
        for d in devices:
            print(f"{d}: {_tune.forget(d)} entries removed")
        return 0
    status = 0
    for d in devices:
        for dtype in (["float32", "float64"] if args.dtype == "all" else [args.dtype]):
            if dtype == "float64" and not _ext.find_device(d).supports_float64:
                continue
            try:
                r = _tune.tune_device(d, dtype, args.size, args.repeat, args.max_candidates)
            except ValueError as e:
                print(e, file=sys.stderr)
                status = 1
                continue
            print(f"{r['device']} ({r['name']}), {dtype}, n = {r['size']}: {r['shipped_gflops']:.1f} GFLOP/s with the "
                  f"shipped parameters, {r['tuned_gflops']:.1f} tuned ({r['tuned_gflops'] / r['shipped_gflops']:.2f}x; "
                  f"{r['candidates']} candidates in {r['seconds']:.0f} s)\n  {r['tuned']}\n  stored in {r['file']}")
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m portmat", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("devices", help="list the devices portmat can use")
    b = sub.add_parser("bench", help="time portmat against NumPy (and peers) on one device")
    b.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")],
                   default=None, help="comma-separated n of the square products (default 512,1024,2048,4096)")
    b.add_argument("--shapes", metavar="FILE|suite",
                   help="time one product per shape instead: a file of M,K,N lines (M or N '-' for a 1-D "
                        "vector; '#' comments), or 'suite' for the built-in suite of issue 16")
    b.add_argument("--repeat", type=int, default=10,
                   help="timed runs per size, at least (default 10; small sizes get more, "
                        "0.25 s of calls for the slower of NumPy and portmat)")
    b.add_argument("--device", default=None, help="device spec, e.g. opencl:0, gpu, cpu (default: the default device); with --shapes also auto: the automatic choice per product")
    b.add_argument("--dtype", choices=["float32", "float64", "float16", "complex64", "complex128", "bool",
                                       "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                                       "uint64"], default="float32")
    b.add_argument("--precision", choices=["float32", "float32_tc", "tf32", "bfloat16"], default=None,
                   help="portmat's precision mode for float32 products (docs/usage.md), the CUDA peers in the "
                        "matching mode (torch set_float32_matmul_precision, CuPy's compute type); each one's "
                        "max error against float64 is reported")
    b.add_argument("--batch", type=int, default=None, metavar="B",
                   help="multiply stacks of B matrices, (B, n, n) @ (B, n, n), as one call")
    b.add_argument("--json", metavar="FILE", help="write the records as JSON to FILE")
    b.add_argument("--plot", metavar="FILE.png",
                   help="draw GFLOP/s (GB/s for vector products) of portmat and each peer into FILE.png "
                        "(needs matplotlib)")
    t = sub.add_parser("tune", help="search the OpenCL kernels' parameters on this machine's devices and store "
                                    "the fastest (later products use them)")
    t.add_argument("--device", default=None, help="an OpenCL device, e.g. opencl:0 (default: every OpenCL device)")
    t.add_argument("--dtype", choices=["float32", "float64", "all"], default="float32",
                   help="the element size to tune (float32 also serves the 32-bit integers; float64 the 64-bit ones)")
    t.add_argument("--size", type=int, default=None, help="n of the timed n x n product (default 1024 on CPUs, "
                                                           "4096 on GPUs)")
    t.add_argument("--repeat", type=int, default=5, help="timed runs per candidate (median)")
    t.add_argument("--max-candidates", type=int, default=None, help="stop after this many candidates")
    t.add_argument("--show", action="store_true", help="list what is stored, and tune nothing")
    t.add_argument("--forget", action="store_true", help="remove the device's stored parameters")
    args = parser.parse_args(argv)

    if args.command == "devices":
        print(_devices_table())
        return 0
    if args.command == "tune":
        return _tune_command(parser, args)
    if args.shapes is not None and (args.sizes is not None or args.batch is not None):
        parser.error("--shapes times its own shapes: leave out --sizes and --batch")
    if args.precision is not None and (args.shapes is not None or args.dtype != "float32"):
        parser.error("--precision is for float32 products of --sizes (not --shapes, not other dtypes) for now")
    sizes = args.sizes if args.sizes is not None else [512, 1024, 2048, 4096]
    if args.repeat < 1 or any(n < 1 for n in sizes) or (args.batch is not None and args.batch < 1):
        parser.error("--repeat, --sizes and --batch must be positive")
    if args.plot and bench.plot_available():
        parser.error(bench.plot_available())
    shapes = None
    if args.shapes is not None:
        try:
            shapes = bench.load_shapes(args.shapes)
        except ValueError as e:
            parser.error(str(e))
        # With --json the records so far are written after each shape, so that a run cut short (a
        # time limit on a lent machine) still leaves what it measured.
        save = (lambda recs: bench.write_json(recs, args.json)) if args.json else None
        records = bench.run_shapes(shapes, args.repeat, args.device, args.dtype, progress=sys.stderr,
                                   on_record=save)
    else:
        records = bench.run(sizes, args.repeat, args.device, args.dtype, progress=sys.stderr, batch=args.batch,
                            precision=args.precision)
    command = "python -m portmat " + " ".join(sys.argv[1:] if argv is None else argv)
    for r in records:
        r["command"] = command
    print(bench.shapes_table(records) if shapes is not None else bench.table(records))
    if args.json:
        bench.write_json(records, args.json)
        print(f"wrote {args.json}")
    if args.plot:
        bench.plot(records, args.plot)
        print(f"wrote {args.plot}")
    where = (lambda r: r["shape"]) if shapes is not None else (lambda r: f"n = {r['size']}")
    failed = [f"portmat at {where(r)}" for r in records if not r["verified"]]
    failed += [f"numpy at {where(r)}" for r in records if not r.get("numpy_verified", True)]
    failed += [f"{name} at {where(r)}" for r in records for name, p in r.get("peers", {}).items()
               if not p.get("verified", True)]
    if failed:
        print("FAILED verification: " + ", ".join(failed), file=sys.stderr)
        return 1
    return 0

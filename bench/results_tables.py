"""Writes the tables of today's figures from the result files, so that the words never drift from
the numbers: bench/results/README.md (every file, every size) and the headline table of README.md
(one row per file, between its `figures` markers).

    python bench/results_tables.py                      # after bench/every_device.py or by hand

A result file is what `python -m portmat bench --json FILE` writes: a list of records, one per
size, each with its device, date, command, NumPy's and portmat's times, and the peers measured in
the same run (cuBLAS through CuPy and PyTorch on NVIDIA GPUs, Intel MKL on CPUs). A file named
...-shapes.json holds one record per shape (`--shapes suite`): a table of its own, and a line of
the headline counting the shapes at issue 16's targets.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# What each machine label of bench/every_device.py stands for, and the command that makes its files.
MACHINES = {
    "h200": ("H200 machine: one NVIDIA H200 (141 GB HBM3e, 132 SMs) with a 16-core Xeon host, "
             "CUDA 13.0, driver 580", "`bash bench/h200.sh` on that machine"),
    "2core": ("2-core development VM without a GPU (x86-64; the CPU model varies between sessions: an AMD EPYC Zen 3 with AVX2, an Intel Xeon (Sapphire Rapids) and an AMD EPYC Zen 4 with AVX-512; each file names its CPU), 24 GiB, the kind CI "
              "runs on; OpenCL through PoCL", "`make bench`"),
}
DEVICE_NAMES = {"cuda": "CUDA", "cpu": "native CPU", "opencl-gpu": "OpenCL (GPU)",
                "opencl-cpu": "OpenCL (CPU, PoCL)", "auto": "automatic device choice"}
HEADLINE_SIZE = 4096  # the headline row of each file, or its largest size below that
BEGIN, END = "<!-- figures:begin -->", "<!-- figures:end -->"


def load(results: str, shapes: bool = False) -> list[tuple[str, str, str, list[dict]]]:
    """(machine, device label, dtype, records) for every result file of square sizes (or, with
    `shapes`, of shapes), in a stable order."""
    out = []
    for path in sorted(glob.glob(os.path.join(results, "*.json"))):
        m = re.fullmatch(r"(.+?)-(cpu|cuda|opencl-gpu|opencl-cpu|auto)-((?:float|complex|u?int)\d+|bool)"
                         r"(-stack\d+|-shapes)?\.json", os.path.basename(path))
        if not m or (m[4] == "-shapes") != shapes:
            continue
        with open(path) as f:
            records = json.load(f)
        if records:
            out.append((m[1], m[2], m[3] + ("" if shapes else m[4] or ""),
                        records if shapes else sorted(records, key=lambda r: r["size"])))
    order = {"h200": 0, "2core": 1}
    dev_order = list(DEVICE_NAMES)
    dtypes = ["float32", "float64", "float16", "complex64", "complex128", "int32", "int64"]
    rank = lambda d: (dtypes.index(d.split("-")[0]) if d.split("-")[0] in dtypes else 99, d)
    return sorted(out, key=lambda t: (order.get(t[0], 9), t[0], dev_order.index(t[1]), "-stack" in t[2], rank(t[2])))


def ms(s: float) -> str:
    return f"{s * 1e3:.3g}" if s < 1 else f"{s * 1e3:.0f}"


def tflops(g: float | None) -> str:
    return "" if not g else f"{g / 1e3:.1f}" if g >= 1e3 else f"{g / 1e3:.2f}"


def ratio(x: float) -> str:
    return f"{x:.2f}x"


def us(s: float) -> str:
    return f"{s * 1e6:.3g}" if s < 1e-3 else f"{s * 1e6:.0f}"


def peers_of(records: list[dict]) -> list[str]:
    return sorted({name for r in records for name in r.get("peers", {})})


def file_table(records: list[dict], gpu: bool) -> list[str]:
    peers = peers_of(records)
    head = ["n", "runs", "portmat ms", "portmat min-max ms", "NumPy ms", "vs NumPy"]
    for p in peers:
        head += [f"{p} ms", f"vs {p}"]
    if gpu:
        head += ["portmat kernel TFLOP/s"] + [f"{p} kernel TFLOP/s" for p in peers]
        head += [f"vs {p} kernel" for p in peers]
    head += ["max rel err"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in records:
        lo, hi = r.get("portmat_spread_s", [r["portmat_s"]] * 2)
        cells = [str(r["size"]), str(r.get("repeat", "")), ms(r["portmat_s"]), f"{ms(lo)}-{ms(hi)}",
                 ms(r["numpy_s"]), ratio(r["numpy_s"] / r["portmat_s"])]
        for p in peers:
            q = r.get("peers", {}).get(p)
            cells += [ms(q["host_s"]), ratio(q["host_s"] / r["portmat_s"])] if q else ["", ""]
        if gpu:
            cells.append(tflops(r.get("gflops_kernel")))
            for p in peers:
                q = r.get("peers", {}).get(p)
                cells.append(tflops(q.get("gflops_resident")) if q else "")
            for p in peers:
                q = r.get("peers", {}).get(p)
                cells.append(ratio(r["gflops_kernel"] / q["gflops_resident"]) if q and r.get("gflops_kernel") and q.get("gflops_resident") else "")
        cells.append(f"{r['max_rel_error']:.1e}" + ("" if r["verified"] else " FAILED"))
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def shapes_verdict(records: list[dict]) -> str:
    """A sentence: how many shapes meet issue 16's targets, and the large vector products' share of
    the copy bandwidth (python/portmat/bench.py's shapes_verdict, from the records alone)."""
    slow = [r for r in records if r["target_vs_numpy"] == 1.0]
    fast = [r for r in records if r["target_vs_numpy"] != 1.0]
    text = (f"{sum(r['meets_target'] for r in slow)} of {len(slow)} shapes where NumPy takes over 20 us at "
            f">= 1.0x NumPy, {sum(r['meets_target'] for r in fast)} of {len(fast)} under 20 us at >= 0.8x")
    auto = [r for r in records if "speedup_vs_best_single" in r]
    if auto:
        text += (f"; the automatic choice against the best of NumPy and portmat on each single device: "
                 f"{sum(r['speedup_vs_best_single'] >= 1.0 for r in auto)} of {len(auto)} at >= 1.0x, "
                 f"{sum(r['speedup_vs_best_single'] >= 0.95 for r in auto)} at >= 0.95x")
    mv = [r for r in records if r["vector_product"] and r["K"] > 1 and r["M"] * r["K"] * r["N"] >= 2**22]
    if mv:
        fr = sorted(100 * r["bandwidth_fraction_portmat"] for r in mv)
        text += (f"; vector products of 4M+ multiply-adds at {fr[0]:.0f}-{fr[-1]:.0f}% of the copy bandwidth "
                 f"({records[0]['bandwidth_gbps']:.1f} GB/s)")
    return text


def shapes_table(records: list[dict]) -> list[str]:
    peers = peers_of(records)
    head = ["a @ b", "runs", "NumPy us", "portmat us", "portmat IQR", "vs NumPy", "target"]
    for p in peers:
        head += [f"{p} us", f"vs {p}"]
    singles = sorted({d for r in records for d in r.get("single_devices", {})})
    head += [f"on {d} us" for d in singles] + (["chose", "vs best single"] if singles else [])
    head += ["portmat GFLOP/s", "portmat GB/s", "% of copy", "max rel err"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in records:
        q1, q3 = r["portmat_quartiles_s"]
        vec = r["vector_product"]
        cells = [r["shape"], str(r["repeat"]), us(r["numpy_s"]), us(r["portmat_s"]), f"{us(q1)}-{us(q3)}",
                 ratio(r["speedup_vs_numpy"]), f"{r['target_vs_numpy']:.1f}" + ("" if r["meets_target"] else " **below**")]
        for p in peers:
            q = r["peers"].get(p)
            cells += [us(q["host_s"]) + ("" if q["verified"] else " WRONG"), ratio(q["host_s"] / r["portmat_s"])] if q else ["", ""]
        for d in singles:
            q = r.get("single_devices", {}).get(d)
            cells.append(us(q["s"]) + ("" if q["verified"] else " WRONG") if q else "")
        if singles:
            cells += [r["device"].removeprefix("auto:"),
                      f"{ratio(r['speedup_vs_best_single'])} ({r['best_single']})" if "speedup_vs_best_single" in r else ""]
        cells += [f"{r['gflops_portmat']:.3g}", f"{r['gbps_portmat']:.3g}" if vec else "",
                  f"{100 * r['bandwidth_fraction_portmat']:.0f}%" if vec else "",
                  f"{r['max_rel_error']:.1e}" + ("" if r["verified"] else " FAILED")]
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def shapes_section(machine, dev, dtype, records) -> list[str]:
    r0 = records[0]
    bw = r0["bandwidth"]
    versions = sorted({f"{n}: {p['version']}" for r in records for n, p in r["peers"].items() if p.get("version")})
    return [
        "",
        f"## {machine}, {DEVICE_NAMES[dev]}, {dtype}, shapes (issue 16's suite)",
        "",
        f"{r0['device']} ({r0['device_name']}); {r0['date']}; NumPy {r0['numpy_version']} with {r0['blas']}"
        + "".join(f"; {v}" for v in versions) + f"; `{r0.get('command', 'python -m portmat bench --shapes suite')}`",
        "",
        f"Copy bandwidth (np.copyto of {bw['start']['bytes'] >> 20} MiB, bytes read + written, the better of 1 "
        f"and {bw['start']['threads']} threads): {bw['start']['gbps']:.1f} GB/s before the shapes, "
        f"{bw['end']['gbps']:.1f} after. {shapes_verdict(records)[0].upper()}{shapes_verdict(records)[1:]}.",
        "",
        *shapes_table(records),
    ]


def load_other(results: str) -> list[tuple[str, str, dict]]:
    """(machine, kind, data) for the result files of the other benchmarks: MACHINE-out-of-core.json
    (bench/out_of_core.py), MACHINE-dask.json (bench/dask_matmul.py) and
    MACHINE-cuda-precision-modes.json (bench/diagnostics/cuda_tc_sweep.py)."""
    out = []
    for path in sorted(glob.glob(os.path.join(results, "*.json"))):
        m = re.fullmatch(r"(.+?)-(out-of-core|dask|cuda-precision-modes)\.json", os.path.basename(path))
        if m:
            with open(path) as f:
                out.append((m[1], m[2], json.load(f)))
    return out


def other_section(machine: str, kind: str, data: dict) -> list[str]:
    setup = data.get("setup", data)
    head = f"{setup.get('date', '')}; `{setup.get('command', '')}`"
    if kind == "out-of-core":
        lines = ["", f"## {machine}, larger than the device (out-of-core) and device lists", "", head, "",
                 "| n | dtype | device(s) | what | whole s | other s | speed ratio | calls | peak device bytes |",
                 "|---|---|---|---|---|---|---|---|---|"]
        for r in data["records"]:
            if r.get("kind") == "cap":
                u = r.get("capped_usage", {})
                lines.append(f"| {r['n']} | {r['dtype']} | {r['device']} | capped at {r['cap_bytes'] / 2**30:.0f} GiB "
                             f"against the whole device | {r['full_median_s']:.3f} | {r['capped_median_s']:.3f} | "
                             f"{ratio(r['capped_over_full_speed'])} | {u.get('host_calls', '')} | "
                             f"{u.get('peak_bytes', 0) / 2**30:.2f} GiB |")
            else:
                lines.append(f"| {r.get('n')} | {r.get('dtype')} | {r.get('devices', r.get('device'))} | "
                             f"{r.get('kind')} | | | | | |")
        return lines
    if kind == "dask":
        lines = ["", f"## {machine}, dask (portmat.dask.matmul against dask.array's x @ y on one cluster)", "",
                 head + f"; {setup.get('workers')} worker(s) of {setup.get('threads_per_worker')} threads, "
                 f"devices {setup.get('pinned_devices')}", "",
                 "| n | block | dtype | dask.array s (min-max) | portmat.dask s (min-max) | dask.array / portmat |",
                 "|---|---|---|---|---|---|"]
        for r in data["records"]:
            lines.append(f"| {r['n']} | {r['block']} | {r['dtype']} | {r['numpy_median_s']:.2f} "
                         f"({min(r['numpy_s']):.2f}-{max(r['numpy_s']):.2f}) | {r['portmat_median_s']:.2f} "
                         f"({min(r['portmat_s']):.2f}-{max(r['portmat_s']):.2f}) | {ratio(r['numpy_over_portmat'])} |")
        return lines
    lines = ["", f"## {machine}, CUDA precision modes ({data.get('device', '')}, device-resident)", "", head, "",
             "| n | mode | kernel | TFLOP/s | cuBLAS (torch) mode | its TFLOP/s | ratio | max / mean error | cuBLAS's |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in data["rows"]:
        lines.append(f"| {r['n']} | {r['mode']} | {r['kernel']} | {r['tflops']:.1f} | {r['torch_mode']} | "
                     f"{r['torch_tflops']:.1f} | {ratio(r['speedup_vs_torch'])} | {r['max_err']:.1e} / "
                     f"{r['mean_err']:.1e} | {r['torch_max_err']:.1e} / {r['torch_mean_err']:.1e} |")
    return lines


def results_readme(files, shape_files=(), others=()) -> str:
    lines = [
        "# Benchmark results: today's figures",
        "",
        "Generated by `bench/results_tables.py` from the JSON files beside it; each file is",
        "overwritten by its machine's canonical command, and git keeps the history. What was tried and",
        "lost lives in the design notes (docs/cuda.md, docs/opencl.md, docs/cpu.md), not here.",
        "The records of earlier experiments that code comments and the notes cite (\"record",
        "2026-11-29_h200_....json\") were files of this folder until commit 596d99f:",
        "`git show 596d99f:bench/results/NAME` prints one, `git show 596d99f:bench/results/README.md`",
        "lists them with their commands.",
        "",
        "How a file is measured (`python -m portmat bench`, python/portmat/bench.py): fresh random",
        "(n x n) @ (n x n) operands; portmat's result is checked against float64 first (max rel err =",
        "max |c - ref| / (|a| @ |b|)); then NumPy, portmat and each peer are timed in alternating",
        "blocks on the same arrays (*runs* timed calls each, in blocks after a quiet pause and a warm-up)",
        "and the medians are reported, portmat's fastest and slowest run beside its median. *ms* columns",
        "are NumPy in, NumPy out,",
        "as a user calls each library; *vs X* = X's time / portmat's time (above 1: portmat faster).",
        "*kernel* columns are device-resident products (on a GPU each run the mean of 5 queued",
        "products, peers alike; in runs after 2026-12-01, PyTorch's also replayed as a CUDA graph, the",
        "faster counting); the peers are cuBLAS through CuPy and PyTorch (TF32 off) on NVIDIA",
        "GPUs and Intel MKL's gemm (the `mkl` wheel, through ctypes: about 5 us of binding a call) on",
        "CPUs.",
        "",
        "The *shapes* files (`--shapes suite`) hold one (M x K) @ (K x N) product per row, either side",
        "possibly a 1-D vector, each contender verified the same way and timed in at least three",
        "alternating blocks; times in microseconds, *IQR* the middle half of portmat's runs. *target* is",
        "issue 16's: 1.0x NumPy where NumPy takes over 20 us, 0.8x where less (call overhead). *GB/s* (for",
        "vector products: a side or K of 1) counts each operand read once and the result written once,",
        "*% of copy* against the np.copyto bandwidth measured in the same run.",
        "",
        "## Machines",
        "",
    ]
    for m in sorted({f[0] for f in (*files, *shape_files, *others)}, key=lambda m: (m not in MACHINES, m)):
        desc, cmd = MACHINES.get(m, (f"machine '{m}'", "`python bench/every_device.py --machine " + m + "`"))
        lines.append(f"- **{m}**: {desc}. Canonical command: {cmd}.")
    for machine, dev, dtype, records in files:
        r0 = records[0]
        gpu = dev in ("cuda", "opencl-gpu")
        what = dtype.replace("-stack", ", stacks of ") + (" matrices" if "-stack" in dtype else "")
        lines += [
            "",
            f"## {machine}, {DEVICE_NAMES[dev]}, {what}",
            "",
            f"{r0['device']} ({r0['device_name']}); {r0['date']}; NumPy {r0['numpy_version']} with "
            f"{r0['blas']}; `{r0.get('command', 'python -m portmat bench')}`",
            "",
        ]
        lines += file_table(records, gpu)
    for f in shape_files:
        lines += shapes_section(*f)
    for f in others:
        lines += other_section(*f)
    return "\n".join(lines) + "\n"


def headline(files, shape_files=()) -> str:
    # "measured": rows come from files of different days; a reader sees which figures are old.
    rows = ["| machine | device | dtype | n | portmat (NumPy in/out) | vs NumPy | vs MKL | vs CuPy (in/out) "
            "| kernel TFLOP/s | vs cuBLAS through CuPy (kernel) | measured |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for machine, dev, dtype, records in files:
        if dtype not in ("float32", "float64"):  # the front page: the square float products
            continue
        below = [r for r in records if r["size"] <= HEADLINE_SIZE]
        r = below[-1] if below else records[0]
        cupy = r.get("peers", {}).get("cupy")
        mkl = r.get("peers", {}).get("mkl")
        gpu = dev in ("cuda", "opencl-gpu")
        rows.append("| " + " | ".join([
            machine, f"{DEVICE_NAMES[dev]}: {r['device_name']}", dtype, str(r["size"]),
            f"{ms(r['portmat_s'])} ms", ratio(r["numpy_s"] / r["portmat_s"]),
            ratio(mkl["host_s"] / r["portmat_s"]) if mkl else "",
            ratio(cupy["host_s"] / r["portmat_s"]) if cupy else "",
            tflops(r.get("gflops_kernel")) if gpu else "",
            ratio(r["gflops_kernel"] / cupy["gflops_resident"]) if cupy and r.get("gflops_kernel") and cupy.get("gflops_resident") else "",
            r["date"][:10],
        ]) + " |")
    if shape_files:
        rows.append("")
    for machine, dev, dtype, records in shape_files:
        rows.append(f"Shapes, {machine} {DEVICE_NAMES[dev]} {dtype} ({records[0]['date'][:10]}, issue 16's suite of "
                    f"{len(records)}): {shapes_verdict(records)}.")
    return "\n".join(rows)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", default=os.path.join(HERE, "results"))
    p.add_argument("--readme", default=os.path.join(ROOT, "README.md"))
    args = p.parse_args()
    files = load(args.results)
    shape_files = load(args.results, shapes=True)
    others = load_other(args.results)
    with open(os.path.join(args.results, "README.md"), "w") as f:
        f.write(results_readme(files, shape_files, others))
    if os.path.exists(args.readme):
        with open(args.readme) as f:
            text = f.read()
        if BEGIN in text and END in text:
            start, stop = text.index(BEGIN) + len(BEGIN), text.index(END)
            with open(args.readme, "w") as f:
                f.write(text[:start] + "\n" + headline(files, shape_files) + "\n" + text[stop:])
    print(f"wrote the tables of {len(files) + len(shape_files) + len(others)} result files")


if __name__ == "__main__":
    main()

"""Device-resident float32 products on the CUDA backend's default tile choice against cuBLAS
(torch, TF32 off), squares from 256 to 4096 and the thin shapes of the suite. cuBLAS is timed both
as 10 calls queued from Python and as a CUDA graph of the same 10 (no launch gaps: below ~20 us a
queued product leaves the GPU idle); the ratio is the faster of the two over portmat's time
(`_ext.time_gemm`, 10 products queued from C++). docs/cuda.md, "Tiles for mid sizes and thin
sides", has the H200's figures.

  python3 bench/diagnostics/cuda_vs_cublas.py
  python3 bench/diagnostics/cuda_vs_cublas.py --shapes suite --variants "tiles:PORTMAT_CUDA_SHORT_K=0" --json out.json
  python3 bench/diagnostics/cuda_vs_cublas.py --shapes shapes.txt      # one M,K,N a line
  python3 bench/diagnostics/cuda_vs_cublas.py --variants "sl:PORTMAT_CUDA_TILE=64x128_sl;old:PORTMAT_CUDA_SLICED=0"

`--shapes suite` takes `portmat bench`'s built-in suite (a vector as a side of 1), `--shapes FILE`
the products of a file (one M,K,N a line, read as `portmat bench --shapes` reads it); `--variants`
times portmat again under each `NAME:VAR=VALUE,...` environment (the CUDA backend reads its knobs at
every call), in the same rounds. `graph:PORTMAT_CUDA_TIME_GRAPH=1` times portmat's 10 products as
a CUDA graph's replay, like cuBLAS's graph column (the backend collects its knobs once a call and
keeps its plans while they stay the same, so a variant's queued time compares with the default's).
"""

import argparse
import json
import os
import statistics

import torch

import portmat
from bench_cuda import torch_operands  # this script's folder is on sys.path
from portmat import _ext
from portmat.peers import _queued_seconds, torch_graph

LAUNCHES, RUNS = 10, 21
SHAPES = [(n, n, n) for n in (256, 384, 512, 640, 768, 1024, 1280, 1536, 2048, 4096)] + [  # (M, K, N)
    (4096, 4096, 64), (64, 4096, 4096), (4096, 64, 4096), (8192, 256, 256), (2048, 64, 2048),
    (65536, 64, 64), (16384, 256, 64), (64, 16384, 256), (64, 64, 65536), (16, 4096, 4096),
    (4096, 4096, 16), (65536, 16, 16), (16, 65536, 16), (16, 16, 65536), (64, 65536, 64)]


def cublas_seconds(m, n, k):
    """(queued, graph-replayed) seconds per product, medians of RUNS runs of LAUNCHES products."""
    a, b, c = torch_operands(m, n, k)
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    elapsed_ms = lambda: start.elapsed_time(stop)  # noqa: E731
    product = lambda: torch.matmul(a, b, out=c)  # noqa: E731
    queued = _queued_seconds(start, stop, elapsed_ms, product, RUNS, LAUNCHES)
    graph = torch_graph(torch, product, LAUNCHES)
    replayed = [t / LAUNCHES for t in _queued_seconds(start, stop, elapsed_ms, graph.replay, RUNS, 1)]
    return statistics.median(queued), statistics.median(replayed)


def portmat_seconds(dev, m, n, k, env):
    """Median seconds per product of portmat's default choice under the variables `env`."""
    saved = {v: os.environ.get(v) for v in env}
    os.environ.update(env)
    try:
        return statistics.median(x for x in _ext.time_gemm(dev, m, n, k, "float32", RUNS, LAUNCHES) if x >= 0)
    finally:
        for v, old in saved.items():
            if old is None:
                os.environ.pop(v, None)
            else:
                os.environ[v] = old


def parse_variants(text):
    variants = []
    for item in filter(None, (text or "").split(";")):
        name, _, assigns = item.partition(":")
        variants.append((name, dict(a.split("=", 1) for a in assigns.split(",") if a)))
    return variants


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="default",
                    help="default, suite (portmat bench's suite) or a file of M,K,N lines")
    ap.add_argument("--variants", default="")
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.shapes == "default":
        shapes = SHAPES
    else:  # portmat bench's reader: the suite or a file, a vector ('-') as a side of 1
        from portmat.bench import load_shapes
        shapes = [(m or 1, k, n or 1) for m, k, n in load_shapes(args.shapes)]
    variants = parse_variants(args.variants)
    dev = next(d.id for d in portmat.devices() if d.backend == "cuda")
    names = "".join(f", {name} us" for name, _ in variants)
    print(f"(M x K) @ (K x N): portmat us{names}, cuBLAS queued / graph us, the faster cuBLAS / portmat")
    records = []
    for m, k, n in shapes:
        queued, graph = cublas_seconds(m, n, k)
        t = portmat_seconds(dev, m, n, k, {})
        others = {name: portmat_seconds(dev, m, n, k, env) for name, env in variants}
        extra = "".join(f"  {name} {v * 1e6:8.1f}" for name, v in others.items())
        print(f"{m}x{k}@{k}x{n}: portmat {t * 1e6:8.1f}{extra}  cuBLAS {queued * 1e6:8.1f} / {graph * 1e6:8.1f}  "
              f"{min(queued, graph) / t:.2f}x  ({2 * m * n * k / t / 1e12:.2f} TFLOP/s)", flush=True)
        records.append({"m": m, "k": k, "n": n, "portmat_s": t, "cublas_queued_s": queued, "cublas_graph_s": graph,
                        "variants_s": others})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": dev, "records": records}, f, indent=1)


if __name__ == "__main__":
    main()

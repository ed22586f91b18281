"""Device-resident float32 products on the CUDA backend's default tile choice against cuBLAS
(torch, TF32 off), squares from 256 to 4096 and the thin shapes of the suite. cuBLAS is timed both
as 10 calls queued from Python and as a CUDA graph of the same 10 (no launch gaps: below ~20 us a
queued product leaves the GPU idle); the ratio is the faster of the two over portmat's time
(`_ext.time_gemm`, 10 products queued from C++). docs/cuda.md, "Tiles for mid sizes and thin
sides", has the H200's figures.

  python3 bench/diagnostics/cuda_vs_cublas.py
"""

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


def main():
    dev = next(d.id for d in portmat.devices() if d.backend == "cuda")
    print("(M x K) @ (K x N): portmat us, cuBLAS queued / graph us, the faster cuBLAS / portmat")
    for m, k, n in SHAPES:
        queued, graph = cublas_seconds(m, n, k)
        t = statistics.median(x for x in _ext.time_gemm(dev, m, n, k, "float32", RUNS, LAUNCHES) if x >= 0)
        print(f"{m}x{k}@{k}x{n}: portmat {t * 1e6:8.1f}  cuBLAS {queued * 1e6:8.1f} / {graph * 1e6:8.1f}  "
              f"{min(queued, graph) / t:.2f}x  ({2 * m * n * k / t / 1e12:.1f} TFLOP/s)", flush=True)


if __name__ == "__main__":
    main()

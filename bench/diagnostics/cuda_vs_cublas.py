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
from portmat import _ext

LAUNCHES, RUNS = 10, 21
SHAPES = [(n, n, n) for n in (256, 384, 512, 640, 768, 1024, 1280, 1536, 2048, 4096)] + [  # (M, K, N)
    (4096, 4096, 64), (64, 4096, 4096), (4096, 64, 4096), (8192, 256, 256), (2048, 64, 2048),
    (65536, 64, 64), (16384, 256, 64), (64, 16384, 256), (64, 64, 65536), (16, 4096, 4096),
    (4096, 4096, 16), (65536, 16, 16), (16, 65536, 16), (16, 16, 65536), (64, 65536, 64)]


def cublas_seconds(m, n, k):
    """(queued, graph-replayed) seconds per product, medians of RUNS runs of LAUNCHES products."""
    a = torch.rand(m, k, device="cuda") - 0.5
    b = torch.rand(k, n, device="cuda") - 0.5
    c = torch.empty(m, n, device="cuda")
    for _ in range(5):
        torch.matmul(a, b, out=c)
    torch.cuda.synchronize()

    def timed(run):
        ts = []
        for _ in range(RUNS):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            run()
            e1.record()
            e1.synchronize()
            ts.append(e0.elapsed_time(e1) * 1e-3 / LAUNCHES)
        return statistics.median(ts)

    queued = timed(lambda: [torch.matmul(a, b, out=c) for _ in range(LAUNCHES)])
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            torch.matmul(a, b, out=c)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(LAUNCHES):
            torch.matmul(a, b, out=c)
    return queued, timed(graph.replay)


def main():
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = next(d.id for d in portmat.devices() if d.backend == "cuda")
    print("(M x K) @ (K x N): portmat us, cuBLAS queued / graph us, the faster cuBLAS / portmat")
    for m, k, n in SHAPES:
        queued, graph = cublas_seconds(m, n, k)
        t = statistics.median(x for x in _ext.time_gemm(dev, m, n, k, "float32", RUNS, LAUNCHES) if x >= 0)
        print(f"{m}x{k}@{k}x{n}: portmat {t * 1e6:8.1f}  cuBLAS {queued * 1e6:8.1f} / {graph * 1e6:8.1f}  "
              f"{min(queued, graph) / t:.2f}x  ({2 * m * n * k / t / 1e12:.1f} TFLOP/s)", flush=True)


if __name__ == "__main__":
    main()

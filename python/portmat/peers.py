"""What users would pick instead of portmat, measured in the same benchmark run.

NumPy is always a peer (bench.py times it directly). On NVIDIA GPUs, cuBLAS through CuPy and
through PyTorch joins when importable, with TF32 off so all compute exact float32:
- host(a, b): NumPy in, NumPy out, the way a NumPy user would call it;
- resident(n, dtype, repeat, launches): seconds per product on device-resident data (CUDA
  events), each of `repeat` runs the mean of `launches` products queued back to back.
"""

from __future__ import annotations

import numpy as np


def _queued_seconds(start, stop, elapsed_ms, product, repeat, launches):
    """`repeat` runs of `launches` queued product() calls between the events start and stop
    (CuPy's or torch's, with their record() / synchronize()); elapsed_ms() reads the time between."""
    out = []
    for _ in range(repeat):
        start.record()
        for _ in range(launches):
            product()
        stop.record()
        stop.synchronize()
        out.append(elapsed_ms() / 1e3 / launches)
    return out


class CuPyPeer:
    name = "cupy"

    def __init__(self):
        import cupy

        self.cp = cupy
        cupy.cuda.Device(0).use()

    def host(self, a, b):
        cp = self.cp
        c = cp.asnumpy(cp.asarray(a) @ cp.asarray(b))
        return c

    def resident(self, n, dtype, repeat, launches=1):
        cp = self.cp
        rng = cp.random.default_rng(n)
        a = rng.uniform(-1, 1, (n, n), dtype=cp.float64).astype(dtype)
        b = rng.uniform(-1, 1, (n, n), dtype=cp.float64).astype(dtype)
        a @ b
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        return _queued_seconds(start, stop, lambda: cp.cuda.get_elapsed_time(start, stop),
                               lambda: a @ b, repeat, launches)


class TorchPeer:
    name = "torch"

    def __init__(self):
        import torch

        if not torch.cuda.is_available():
            raise ImportError("torch has no CUDA device")
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        self.torch = torch

    def host(self, a, b):
        torch = self.torch
        return (torch.from_numpy(a).cuda() @ torch.from_numpy(b).cuda()).cpu().numpy()

    def resident(self, n, dtype, repeat, launches=1):
        torch = self.torch
        t = torch.float32 if np.dtype(dtype) == np.float32 else torch.float64
        g = torch.Generator(device="cuda").manual_seed(n)
        a = torch.rand((n, n), generator=g, device="cuda", dtype=t) * 2 - 1
        b = torch.rand((n, n), generator=g, device="cuda", dtype=t) * 2 - 1
        a @ b
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        return _queued_seconds(start, stop, lambda: start.elapsed_time(stop), lambda: a @ b,
                               repeat, launches)


def available(device) -> list:
    """The peers that make sense for this portmat device and can be imported here."""
    peers = []
    is_nvidia = device.backend == "cuda" or "nvidia" in (device.vendor + device.name).lower()
    if device.kind != "gpu" or not is_nvidia:
        return peers
    for cls in (CuPyPeer, TorchPeer):
        try:
            peers.append(cls())
        except Exception:  # not installed, or no usable GPU: simply not a peer here
            pass
    return peers

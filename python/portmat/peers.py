"""What users would pick instead of portmat, measured in the same benchmark run.

NumPy is always a peer (bench.py times it directly). On NVIDIA GPUs, cuBLAS through CuPy and
through PyTorch joins when importable, with TF32 off so all compute exact float32:
- host(a, b): NumPy in, NumPy out, the way a NumPy user would call it;
- resident(a, b, repeat, launches): seconds per product of the same operands held on the device
  (CUDA events), each of `repeat` runs the mean of `launches` products queued back to back; any
  shape (stacks too) and any dtype the peer multiplies (it raises for others).
"""

from __future__ import annotations


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

    def resident(self, a, b, repeat, launches=1):
        cp = self.cp
        a, b = cp.asarray(a), cp.asarray(b)
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

    def resident(self, a, b, repeat, launches=1):
        torch = self.torch
        a, b = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
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

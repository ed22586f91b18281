"""What users would pick instead of portmat, measured in the same benchmark run.

NumPy is always a peer (bench.py times it directly). On NVIDIA GPUs, cuBLAS through CuPy and
through PyTorch joins when importable, with TF32 off so all compute exact float32. On the CPU
backend's device, Intel MKL's gemm joins when the PyPI `mkl` wheel is installed (loaded with
ctypes at run time: never needed to build or import portmat). A peer has:
- name, and version (a line for the record);
- host(a, b): NumPy in, NumPy out, the way a NumPy user would call it; it raises for shapes or
  dtypes the peer does not multiply, and the benchmark then leaves it out of that product;
- resident(a, b, repeat, launches), GPU peers only: seconds per product of the same operands held
  on the device (CUDA events), each of `repeat` runs the mean of `launches` products queued back
  to back (torch: or replayed as a CUDA graph, whichever is faster, so that small products are
  not timed at Python's launch rate); any shape (stacks too) and any dtype the peer multiplies
  (it raises for others).
"""

from __future__ import annotations

import ctypes
import glob
import os
import sys


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


# The peers' modes matching portmat's precision modes (`portmat bench --precision`, issue 18):
#   float32     torch "highest" (allow_tf32 off), CuPy's default compute type: cuBLAS 32F (FFMA)
#   float32_tc  no peer has it: torch "highest" and CuPy's default, the float32 it is measured against
#   tf32        torch "high" (allow_tf32), CuPy COMPUTE_TYPE_TF32: cuBLAS 32F_FAST_TF32
#   bfloat16    operands converted to bfloat16 on the device and multiplied there (torch; CuPy
#               COMPUTE_TYPE_BF16 on float32 data where it has it), float32 result
# Not yet run on a GPU: CuPy's compute-type switch (cupy._core._routines_linalg.set_compute_type)
# is private API; where it is missing the CuPy peer is left out for tf32 / bfloat16.
_TORCH_MODES = {None: "highest", "float32": "highest", "float32_tc": "highest", "tf32": "high", "bfloat16": "highest"}


class CuPyPeer:
    name = "cupy"

    def __init__(self, precision=None):
        import cupy

        self.cp = cupy
        self.version = f"CuPy {cupy.__version__}"
        cupy.cuda.Device(0).use()
        self.mode = "default compute type (cuBLAS 32F)"
        if precision in ("tf32", "bfloat16"):
            import numpy as np
            from cupy._core import _routines_linalg as linalg  # private: raises where it moved

            kind = linalg.COMPUTE_TYPE_TF32 if precision == "tf32" else linalg.COMPUTE_TYPE_BF16
            linalg.set_compute_type(np.float32, kind)
            self.mode = f"COMPUTE_TYPE_{precision.upper().replace('BFLOAT16', 'BF16')}"

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


def torch_graph(torch, product, launches):
    """A CUDA graph of `launches` product() calls, captured after three warm-up calls on a side
    stream (as capture wants: the work a first call sets up stays out of the graph). product()
    must write into memory allocated before (torch.matmul(a, b, out=c))."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            product()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(launches):
            product()
    return graph


class TorchPeer:
    name = "torch"

    def __init__(self, precision=None):
        import torch

        if not torch.cuda.is_available():
            raise ImportError("torch has no CUDA device")
        # allow_tf32 is what set_float32_matmul_precision("high") / ("highest") sets for CUDA matmuls.
        torch.backends.cuda.matmul.allow_tf32 = _TORCH_MODES[precision] == "high"
        torch.backends.cudnn.allow_tf32 = False
        self.torch = torch
        self.version = f"PyTorch {torch.__version__}"
        self.bf16 = precision == "bfloat16"
        self.mode = "bfloat16 operands" if self.bf16 else f"set_float32_matmul_precision('{_TORCH_MODES[precision]}')"

    def _on_device(self, x):
        t = self.torch.from_numpy(x).cuda()
        return t.bfloat16() if self.bf16 else t

    def host(self, a, b):
        c = self._on_device(a) @ self._on_device(b)
        return c.float().cpu().numpy()

    def resident(self, a, b, repeat, launches=1):
        """The faster of two timings: `launches` products queued from Python, and the same
        products replayed as one CUDA graph. Queued from Python, a product that takes the GPU
        less than ~20 us leaves it idle between launches (H200, n <= 512: 20-25 us queued against
        7-14 us replayed), and the comparison would be with Python's launch rate, not cuBLAS."""
        torch = self.torch
        a, b = self._on_device(a), self._on_device(b)
        c = a @ b
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        queued = _queued_seconds(start, stop, lambda: start.elapsed_time(stop),
                                 lambda: torch.matmul(a, b, out=c), repeat, launches)
        try:
            graph = torch_graph(torch, lambda: torch.matmul(a, b, out=c), launches)
            replayed = _queued_seconds(start, stop, lambda: start.elapsed_time(stop), graph.replay,
                                       repeat, 1)
            replayed = [t / launches for t in replayed]
        except Exception:  # graphs unsupported here (old driver, capture refused): queued only
            torch.cuda.synchronize()
            return queued
        return min(queued, replayed, key=lambda ts: sorted(ts)[len(ts) // 2])

_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112  # CBLAS enums

# Real paths of the BLAS libraries loaded here for peers: bench.blas_info() leaves them out when it
# says which BLAS NumPy calls.
LOADED_LIBRARIES: set = set()


def _mkl_rt_path() -> str:
    """libmkl_rt of the installed `mkl` wheel (its files list names it), else one in this
    environment's lib folder; ImportError when there is none."""
    try:
        import importlib.metadata as md

        for f in md.distribution("mkl").files or []:
            if f.name.startswith("libmkl_rt.so") or f.name in ("mkl_rt.2.dll", "libmkl_rt.dylib"):
                return os.path.realpath(f.locate())
    except Exception:  # not installed as a distribution: look where the wheel puts it
        pass
    found = sorted(glob.glob(os.path.join(sys.prefix, "lib", "libmkl_rt.so*")))
    if not found:
        raise ImportError("no libmkl_rt: pip install mkl")
    return found[0]


def _address(x) -> int:
    """The address of a contiguous array's first element: through the buffer protocol when the
    array is writable (0.4 us), else through x.ctypes (1.3 us, a third of an 8 x 8 product)."""
    try:
        return ctypes.addressof(ctypes.c_byte.from_buffer(x))
    except (TypeError, ValueError, BufferError):
        return x.ctypes.data


def _bind_numpy_blas_first() -> None:
    """Calls each kind of NumPy BLAS product once before MKL is loaded. libmkl_rt loads its layers
    globally, and they export cblas_sgemm & co. under the plain names: a NumPy linked against an
    unprefixed BLAS (Debian's) that had not yet called one of them would then bind it to MKL's
    and the "NumPy" contender would be MKL. (PyPI's NumPy calls scipy_openblas's prefixed names.)"""
    import numpy as np

    for dt in (np.float32, np.float64, np.complex64, np.complex128):
        m = np.ones((8, 8), dt)
        v = np.ones(8, dt)
        m @ m, m @ v, v @ m, v @ v, m @ m.T, np.dot(m, m)


class MKLPeer:
    """Intel MKL's cblas_?gemm through libmkl_rt (the PyPI `mkl` wheel), called on NumPy's arrays
    in place: row-major, a C-contiguous operand as is and a transposed (Fortran-ordered) one with
    CblasTrans; any other view is copied first, inside the timed call, as a user would have to.
    The result is a new C-ordered array, as NumPy returns it. float32 / float64 / complex64 /
    complex128 only (it raises for the other dtypes); 1-D operands as np.matmul takes them; a stack
    against a stack of the same length through cblas_?gemm_batch_strided, a stack against one
    matrix as one product of stacked rows. gemm for every shape, vectors too: what a user calls.
    Threads: every CPU this process may use (as portmat's default), unless $MKL_NUM_THREADS says."""

    name = "mkl"

    def __init__(self):
        import numpy as np

        self.np = np
        path = _mkl_rt_path()
        _bind_numpy_blas_first()
        lib = ctypes.CDLL(path)
        P, I = ctypes.c_void_p, ctypes.c_int
        self._gemm, self._batch = {}, {}
        for prefix, dt, scalar in (("s", np.float32, ctypes.c_float), ("d", np.float64, ctypes.c_double),
                                   ("c", np.complex64, P), ("z", np.complex128, P)):
            # real alpha / beta by value, complex ones through a pointer to (re, im)
            f = getattr(lib, f"cblas_{prefix}gemm")
            f.restype = None
            f.argtypes = [I, I, I, I, I, I, scalar, P, I, P, I, scalar, P, I]
            self._gemm[np.dtype(dt)] = (f, scalar)
            g = getattr(lib, f"cblas_{prefix}gemm_batch_strided", None)
            if g is not None:
                g.restype = None
                g.argtypes = [I, I, I, I, I, I, scalar, P, I, I, P, I, I, scalar, P, I, I, I]
                self._batch[np.dtype(dt)] = g
        if not os.environ.get("MKL_NUM_THREADS"):
            lib.MKL_Set_Num_Threads.argtypes = [I]
            lib.MKL_Set_Num_Threads(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                                    else os.cpu_count() or 1)
        lib.MKL_Get_Max_Threads.restype = I
        lib.MKL_Get_Version_String.argtypes = [ctypes.c_char_p, I]
        buf = ctypes.create_string_buffer(256)
        lib.MKL_Get_Version_String(buf, 256)
        self.version = f"{buf.value.decode().strip()} ({lib.MKL_Get_Max_Threads()} threads)"
        self.path = path
        LOADED_LIBRARIES.add(os.path.realpath(path))
        self._lib = lib
        self._scalars = {}
        for dt, (_, scalar) in self._gemm.items():
            if scalar is ctypes.c_void_p:  # keep (1, 0) and (0, 0) alive for the complex calls
                part = ctypes.c_float if dt == np.complex64 else ctypes.c_double
                one, zero = (part * 2)(1, 0), (part * 2)(0, 0)
                self._scalars[dt] = (one, zero, ctypes.addressof(one), ctypes.addressof(zero))
            else:
                self._scalars[dt] = (None, None, scalar(1), scalar(0))

    def _operand(self, x):
        """(array, trans, ld) for a 2-D operand, read in place when its layout allows."""
        if not x.flags.c_contiguous:
            if x.flags.f_contiguous:
                return x, _TRANS, max(1, x.shape[0])
            x = self.np.ascontiguousarray(x)
        return x, _NO_TRANS, max(1, x.shape[1])

    def host(self, a, b):
        np = self.np
        if a.dtype != b.dtype or a.dtype not in self._gemm:
            raise TypeError(f"MKL peer: no gemm for {a.dtype} @ {b.dtype}")
        if a.ndim == 1 or b.ndim == 1:
            if a.ndim > 2 or b.ndim > 2:
                raise NotImplementedError("MKL peer: a vector against a stack")
            a2 = a.reshape(1, -1) if a.ndim == 1 else a
            b2 = b.reshape(-1, 1) if b.ndim == 1 else b
            c = self._product(a2, b2)
            return c.reshape(c.shape[0] if a.ndim == 2 else c.shape[1] if b.ndim == 2 else ())
        if a.ndim == 2 and b.ndim == 2:
            return self._product(a, b)
        if a.ndim == 3 and b.ndim == 2:  # one product of stacked rows
            rows = np.ascontiguousarray(a).reshape(-1, a.shape[2])
            return self._product(rows, b).reshape(a.shape[0], a.shape[1], b.shape[1])
        if a.ndim == 3 and b.ndim == 3 and a.shape[0] == b.shape[0] and a.dtype in self._batch:
            return self._stack(a, b)
        raise NotImplementedError(f"MKL peer: shapes {a.shape} @ {b.shape}")

    def _product(self, a, b):
        np = self.np
        (m, k), (k2, n) = a.shape, b.shape
        if k != k2:
            raise ValueError(f"MKL peer: shapes {a.shape} @ {b.shape}")
        if k == 0 or m == 0 or n == 0:
            return np.zeros((m, n), a.dtype)
        c = np.empty((m, n), a.dtype)
        a, ta, lda = self._operand(a)
        b, tb, ldb = self._operand(b)
        f, _ = self._gemm[a.dtype]
        _, _, one, zero = self._scalars[a.dtype]
        f(_ROW_MAJOR, ta, tb, m, n, k, one, _address(a), lda, _address(b), ldb, zero,
          _address(c), max(1, n))
        return c

    def _stack(self, a, b):
        np = self.np
        a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
        (count, m, k), (_, k2, n) = a.shape, b.shape
        if k != k2:
            raise ValueError(f"MKL peer: shapes {a.shape} @ {b.shape}")
        if count == 0 or m == 0 or n == 0 or k == 0:
            return np.zeros((count, m, n), a.dtype)
        c = np.empty((count, m, n), a.dtype)
        _, _, one, zero = self._scalars[a.dtype]
        self._batch[a.dtype](_ROW_MAJOR, _NO_TRANS, _NO_TRANS, m, n, k, one, _address(a), k, m * k,
                             _address(b), n, k * n, zero, _address(c), n, m * n, count)
        return c


def available(device, precision=None) -> list:
    """The peers that make sense for this portmat device and can be imported here, in the mode
    matching portmat's precision mode (None: their exact float32)."""
    peers = []
    is_nvidia = device.backend == "cuda" or "nvidia" in (device.vendor + device.name).lower()
    if device.kind == "cpu" and device.backend == "cpu":
        classes = (MKLPeer,)
    elif device.kind == "gpu" and is_nvidia:
        classes = (CuPyPeer, TorchPeer)
    else:
        return peers
    for cls in classes:
        try:
            peers.append(cls(precision) if cls is not MKLPeer else cls())
        except Exception:  # not installed, or no usable GPU: simply not a peer here
            pass
    return peers

"""What users would pick instead of portmat, measured in the same benchmark run.

NumPy is always a peer (bench.py times it directly). On NVIDIA GPUs, cuBLAS through CuPy and
through PyTorch joins when importable, with TF32 off so all compute exact float32. On the CPU
backend's device, Intel MKL's gemm joins when the PyPI `mkl` wheel is installed (loaded with
ctypes at run time: never needed to build or import portmat); so does Intel's dpnp (below), there
and on OpenCL CPU devices. A peer has:
- name, and version (a line for the record);
- host(a, b): NumPy in, NumPy out, the way a NumPy user would call it; it raises for shapes or
  dtypes the peer does not multiply, and the benchmark then leaves it out of that product;
- resident(a, b, repeat, launches), GPU peers only: seconds per product of the same operands held
  on the device (CUDA events), each of `repeat` runs the mean of `launches` products queued back
  to back (torch: or replayed as a CUDA graph, whichever is faster, so that small products are
  not timed at Python's launch rate); any shape (stacks too) and any dtype the peer multiplies
  (it raises for others);
- resident_call(a, b) and fetch(c), host-clocked device peers (dpnp): resident_call puts the
  operands on the peer's device once and returns call(), which runs one product there and waits
  for it, returning the result on the device; fetch(c) brings that result back as NumPy. The
  benchmark times call() in the same alternating blocks as the NumPy in/out calls, with the host's
  clock (a SYCL queue has no events to read here without a profiling queue), and checks fetch(call()).

On the CPU backend's device and on OpenCL CPU devices, Intel's dpnp (SYCL + oneMKL) joins when it
is importable and dpctl finds its SYCL device ("opencl:cpu", or $PORTMAT_DPNP_DEVICE): the same
cores as portmat's, and what a user of the SYCL world would call instead. available(dev, missing)
writes why each peer that belongs to dev could not be used into `missing` (the benchmark prints it).
"""

from __future__ import annotations

import ctypes
import glob
import os
import subprocess
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
# CuPy's compute-type switch (cupy._core._routines_linalg.set_compute_type) is private API; where it
# is missing the CuPy peer is left out for tf32 / bfloat16. On the H200 (2026-12-02) its TF32 ran
# at 370-382 TFLOP/s, but COMPUTE_TYPE_BF16 on float32 data at 50 (FFMA's speed): torch, with
# bfloat16 operands, is the bfloat16 peer that counts.
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
        # bfloat16 results come back as float32 (NumPy has no bfloat16); every other dtype as it
        # is (a cast to float32 failed float64's check and dropped complex parts).
        return (c.float() if self.bf16 else c).cpu().numpy()

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


# Run in a child process before dpnp is imported here: a SYCL runtime that is broken (a missing
# library, an ICD that names nothing, an uncaught sycl::exception at load) can abort or hang the
# process that loads it, and the benchmark must go on without dpnp instead. portmat's own OpenCL
# devices are listed first, as the benchmark does, so that both share one ICD loader as they will.
_DPNP_PROBE = """
import sys
import numpy, portmat
portmat.devices()
import dpctl, dpnp
q = dpctl.SyclQueue(sys.argv[1])
print(q.sycl_device.name, "|", q.sycl_device.vendor, flush=True)
a = numpy.arange(12, dtype=numpy.float32).reshape(3, 4)
c = dpnp.matmul(dpnp.asarray(a, sycl_queue=q), dpnp.asarray(a.T.copy(), sycl_queue=q)).asnumpy()
if not numpy.array_equal(c, a @ a.T):
    sys.exit("dpnp's 3 x 4 @ 4 x 3 product is wrong on " + q.sycl_device.name)
"""
_DPNP_PROBE_TIMEOUT_S = 120


def _probe_dpnp(spec: str) -> None:
    """ImportError naming why dpnp cannot be used on the SYCL device `spec` (a dpctl filter string),
    from a child process (see _DPNP_PROBE); nothing when it can."""
    import importlib.util

    for module in ("dpctl", "dpnp"):
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # sys.modules[module] is None, or has no spec
            found = False
        if not found:
            raise ImportError(f"{module} is not installed (pip install dpnp dpctl intel-opencl-rt)")
    try:
        r = subprocess.run([sys.executable, "-c", _DPNP_PROBE, spec], capture_output=True, text=True,
                           timeout=_DPNP_PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise ImportError(f"dpnp on SYCL device {spec!r} took over {_DPNP_PROBE_TIMEOUT_S} s to multiply "
                          "a 3 x 4 matrix") from None
    if r.returncode != 0:
        lines = [ln.strip() for ln in (r.stderr or r.stdout).splitlines() if ln.strip()]
        why = lines[-1][:300] if lines else f"exit status {r.returncode}"
        if r.returncode < 0:
            why = f"killed by signal {-r.returncode}" + (f" ({why})" if lines else "")
        device = r.stdout.split("\n")[0].strip()  # "name | vendor" once the queue was made
        if device:
            name, _, vendor = device.partition(" | ")
            why += f" (on {name}" + ("" if "intel" in vendor.lower() else
                                     f", {vendor}'s: dpnp wants Intel's OpenCL CPU runtime, registered as "
                                     "bench/README.md says") + ")"
        raise ImportError(f"dpnp on SYCL device {spec!r}: {why}")


class DpnpPeer:
    """Intel's dpnp (Data Parallel Extension for NumPy: SYCL, with oneMKL's gemm) on one SYCL queue,
    by default dpctl's "opencl:cpu" device (Intel's OpenCL CPU runtime, PyPI intel-opencl-rt, whose
    ICD must be registered: see bench/README.md), or $PORTMAT_DPNP_DEVICE's filter string.
    host(a, b): dpnp.asarray of each operand on the queue, dpnp.matmul, asnumpy: what a NumPy user
    would write. resident_call(a, b): the operands copied to the queue once; each call a dpnp.matmul
    and queue.wait(), timed on the host's clock. Whatever dtype or shape dpnp.matmul refuses, it
    raises, and the benchmark leaves dpnp out of that product."""

    name = "dpnp"

    def __init__(self, spec: str | None = None):
        spec = spec or os.environ.get("PORTMAT_DPNP_DEVICE") or "opencl:cpu"
        _probe_dpnp(spec)
        import dpctl
        import dpnp

        self.dpnp = dpnp
        self.queue = dpctl.SyclQueue(spec)
        d = self.queue.sycl_device
        self.device_name = d.name
        backend = str(d.backend).split(".")[-1]
        self.version = (f"dpnp {dpnp.__version__}, dpctl {dpctl.__version__}, on {d.name} ({backend}, driver "
                        f"{d.driver_version}, {d.max_compute_units} compute units)")

    def _on_queue(self, x):
        return self.dpnp.asarray(x, sycl_queue=self.queue)

    def host(self, a, b):
        return self.dpnp.asnumpy(self.dpnp.matmul(self._on_queue(a), self._on_queue(b)))

    def resident_call(self, a, b):
        dpnp, queue = self.dpnp, self.queue
        da, db = self._on_queue(a), self._on_queue(b)
        queue.wait()

        def call():
            c = dpnp.matmul(da, db)
            queue.wait()
            return c
        return call

    def fetch(self, c):
        return self.dpnp.asnumpy(c)


def available(device, missing: dict | None = None, precision: str | None = None) -> list:
    """The peers that make sense for this portmat device and can be imported here, the GPU ones in
    the mode matching portmat's precision mode (None: their exact float32); into `missing` (when
    given), each of those peers that cannot be used, with the reason.
    dpnp belongs to the CPU backend's device and to OpenCL CPU devices: on this machine it runs on
    the same cores (through Intel's OpenCL CPU runtime), so it is what a user of either would
    compare with. MKL to the CPU backend's device; CuPy and torch to NVIDIA GPUs."""
    peers = []
    is_nvidia = device.backend == "cuda" or "nvidia" in (device.vendor + device.name).lower()
    if device.kind == "cpu" and device.backend == "cpu":
        classes = (MKLPeer, DpnpPeer)
    elif device.kind == "cpu" and device.backend == "opencl":
        classes = (DpnpPeer,)
    elif device.kind == "gpu" and is_nvidia:
        classes = (CuPyPeer, TorchPeer)
    else:
        return peers
    for cls in classes:
        try:
            peers.append(cls(precision) if cls in (CuPyPeer, TorchPeer) else cls())
        except Exception as e:  # not installed, or no usable device: simply not a peer here
            if missing is not None:
                missing[cls.name] = f"{type(e).__name__}: {e}" if not isinstance(e, ImportError) else str(e)
    return peers

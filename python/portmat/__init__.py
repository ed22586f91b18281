"""portmat: matrix multiplication with hand-written kernels on any GPU vendor and on the CPU.

    import numpy as np, portmat
    c = portmat.matmul(a, b)                  # NumPy in, NumPy out, on the default device
    portmat.devices()                         # every device; pick one with device=...
    c = portmat.matmul(a, b, device="opencl:0")
    x = portmat.asarray(a, device="cuda:0")   # an Array that stays on the device
    y = x @ x @ x                             # chained there; y.numpy() brings it back
    portmat.matmul(cupy_a, cupy_b)            # CuPy / torch GPU arrays in, the same kind out

This module owns NumPy semantics (array-likes, dtype promotion, the output array); the C++ core
(portmat._ext) owns devices and kernels.
"""

from __future__ import annotations

import sys as _sys

import numpy as _np

from . import _arrays, _ext, _host_memory, _ufunc_options
from ._arrays import Array, asarray
from ._ext import DeviceError, DeviceInfo, Error, OutOfDeviceMemory

__all__ = [
    "matmul",
    "Array",
    "asarray",
    "devices",
    "default_device",
    "set_default_device",
    "set_precision",
    "get_precision",
    "PRECISIONS",
    "set_num_threads",
    "num_threads",
    "DeviceInfo",
    "Error",
    "DeviceError",
    "OutOfDeviceMemory",
    "set_device_memory_limit",
    "device_memory_limit",
    "device_usage",
    "reset_device_usage",
]
__version__ = "0.1.0"

def devices() -> list[DeviceInfo]:
    """Every device portmat can use, of every backend."""
    return _ext.devices()


def _device_spec(device) -> str:
    if device is None:
        return ""
    if isinstance(device, DeviceInfo):
        return device.id
    if isinstance(device, str):
        try:
            device.encode("utf-8")  # the core takes UTF-8; a lone surrogate (a mis-decoded name) has none
        except UnicodeEncodeError:
            raise ValueError(f"portmat: device {device!r} is not a device name (it is not valid text)") from None
        return device
    if isinstance(device, (list, tuple)):
        raise TypeError("a list of devices is taken by portmat.matmul of NumPy arrays only (one product split "
                        "across them); give one device here")
    raise TypeError(
        f"device must be None, a string such as 'opencl:0' or an entry of portmat.devices(), "
        f"not {type(device).__name__}"
    )


def _matmul_spec(device) -> str:
    """matmul's device argument as the core's spec: one device as _device_spec, or a list / tuple
    of them as one comma-separated spec (the core splits each product among them)."""
    if isinstance(device, (list, tuple)):
        if not device:
            raise ValueError("matmul: device is an empty list; give at least one device spec")
        specs = []
        for d in device:
            if not isinstance(d, (str, DeviceInfo)):
                raise TypeError(f"matmul: each device of a list must be a string such as 'cuda:0' or an entry "
                                f"of portmat.devices(), not {type(d).__name__}")
            one = _device_spec(d)
            if not one or "," in one:
                raise ValueError(f"matmul: {d!r} in the list of devices is not a device spec")
            specs.append(one)
        return ",".join(specs)
    return _device_spec(device)


def set_device_memory_limit(nbytes) -> None:
    """Caps the device memory portmat allocates on each discrete device (GPU; an OpenCL device run
    as a discrete one), pooled buffers included: an int of bytes, or a string such as '8G' or
    '512M' (powers of 1024); None restores the automatic choice ($PORTMAT_DEVICE_MEMORY, read
    once per process, else no cap). NumPy products whose device buffers do not fit run out-of-core, in
    blocks; an allocation past the cap raises OutOfDeviceMemory."""
    if nbytes is None:
        _ext.set_device_memory_limit(None)
        return
    if isinstance(nbytes, str):
        nbytes = _ext.parse_memory_size(nbytes)  # ValueError naming the text
    elif isinstance(nbytes, bool) or not isinstance(nbytes, (int, _np.integer)):
        raise TypeError(f"set_device_memory_limit: nbytes must be an int, a string such as '8G', or None, "
                        f"not {type(nbytes).__name__}")
    nbytes = int(nbytes)
    if nbytes <= 0:
        raise ValueError(f"set_device_memory_limit: nbytes must be positive (or None for no limit), not {nbytes}")
    if nbytes >= 1 << 64:
        raise ValueError(f"set_device_memory_limit: {nbytes} bytes is too large")
    _ext.set_device_memory_limit(nbytes)


def device_memory_limit():
    """The device memory cap in force, in bytes (set_device_memory_limit, else
    $PORTMAT_DEVICE_MEMORY), or None; ValueError naming the variable for a bad value."""
    return _ext.device_memory_limit()


def device_usage(device) -> dict:
    """What portmat's NumPy path did on a device since reset_device_usage (diagnostics):
    bytes_in_use and peak_bytes of device memory portmat holds there, host_calls (calls into the
    device, one per block of an out-of-core product), tiled_products (products run in blocks) and
    their flops."""
    return _ext.device_usage(_device_spec(device))


def reset_device_usage(device) -> None:
    """Zeroes device_usage's counters, and sets its peak to the bytes in use now."""
    _ext.reset_device_usage(_device_spec(device))


def default_device() -> DeviceInfo:
    """The device used when none is given: set_default_device(), else $PORTMAT_DEVICE, else the
    first GPU, else a CPU."""
    return _ext.default_device()


def set_default_device(device) -> None:
    """Sets the default device (an entry of devices() or a spec such as 'opencl:0', 'gpu',
    'cpu'); None restores the automatic choice."""
    _ext.set_default_device(_device_spec(device))


def set_num_threads(n: int) -> None:
    """Threads each matmul uses on the native CPU backend (default: all cores, or
    $PORTMAT_NUM_THREADS); n <= 0 restores the default. Concurrent calls share one pool, so the
    machine is never oversubscribed."""
    if not hasattr(_ext, "set_num_threads"):
        raise RuntimeError("portmat was built without its CPU backend")
    _ext.set_num_threads(int(n))


def num_threads() -> int:
    """Threads each matmul uses on the native CPU backend."""
    if not hasattr(_ext, "num_threads"):
        raise RuntimeError("portmat was built without its CPU backend")
    return _ext.num_threads()


def _as_operand(x, name: str):
    ma = _sys.modules.get("numpy.ma")  # imported by whoever made a masked array
    if ma is not None and isinstance(x, ma.MaskedArray):
        raise TypeError(
            f"matmul: {name} is a masked array (numpy.ma.MaskedArray), and portmat would multiply "
            f"the values hidden under its mask; use numpy.ma.dot(a, b) for masked arithmetic, or "
            f"{name}.filled(0) to multiply with the masked entries as zeros"
        )
    if isinstance(x, _np.ndarray):
        return x
    if hasattr(x, "__dlpack__") and not hasattr(x, "__array__"):
        # A DLPack exporter in host memory (NumPy would make it a 0-d object array): viewed
        # without a copy; one on a device NumPy cannot reach raises here, naming it.
        try:
            return _np.from_dlpack(x)
        except (TypeError, ValueError, BufferError, RuntimeError) as e:
            raise TypeError(f"matmul: {name} ({type(x).__name__}) exports DLPack memory NumPy cannot view "
                            f"({e}); portmat takes host memory, portmat Arrays, and GPU arrays of "
                            f"CuPy, torch or any DLPack exporter on a CUDA device") from None
    try:
        return _np.asarray(x)
    except (TypeError, ValueError) as e:  # ragged lists and the like; MemoryError stays itself
        # NumPy's class of error (a ragged list is a ValueError there), with the operand named.
        raise (ValueError if isinstance(e, ValueError) else TypeError)(
            f"matmul: {name} is not an array ({type(x).__name__}): {e}") from None


def _host_operands(a, b, out):
    """a and b as NumPy arrays, and out (an array, a tuple of one, or None) as an array or None."""
    a, b = _as_operand(a, "a"), _as_operand(b, "b")
    if isinstance(out, tuple):
        if len(out) != 1:
            raise ValueError(f"matmul: out must be one array or a tuple of one, not {len(out)}")
        out = out[0]
    if out is not None and not isinstance(out, _np.ndarray):
        raise TypeError(f"matmul: out must be a numpy.ndarray, not {type(out).__name__}")
    return a, b, out


def _in_dtype(arr: _np.ndarray, dtype: _np.dtype) -> _np.ndarray:
    """arr as `dtype` (native byte order), in memory the kernels can read: a copy where the
    dtype or byte order differs, or where elements are not aligned to their size (a field of a
    packed structured array, a buffer at an odd offset), as NumPy itself copies for BLAS."""
    if arr.dtype != dtype:
        return arr.astype(dtype)
    if not arr.flags.aligned:
        return arr.copy()
    return arr


# The dtypes portmat multiplies with kernels of its own (C++ core: batch.hpp); NumPy computes the
# others (object, longdouble, clongdouble), so that the answer is always NumPy's.
_KERNEL_DTYPES = frozenset(_np.dtype(t) for t in (
    _np.bool_, _np.int8, _np.int16, _np.int32, _np.int64, _np.uint8, _np.uint16, _np.uint32,
    _np.uint64, _np.float16, _np.float32, _np.float64, _np.complex64, _np.complex128))
_POOLED = frozenset((_np.dtype(_np.float32), _np.dtype(_np.float64)))  # _host_memory's results
# (a dtype, b dtype, out dtype, dtype=, casting) -> NumPy's loop dtype: np.matmul.resolve_dtypes
# costs microseconds, and programs multiply few kinds of arrays.
_loops: dict = {}


def _loop_dtype(a, b, out, dtype, casting) -> _np.dtype:
    """NumPy's loop dtype for these operands, in native byte order."""
    key = (a.dtype, b.dtype, None if out is None else out.dtype, dtype, casting)
    loop = _loops.get(key)
    if loop is None:
        # NumPy's own resolution: its promotion, its casting checks and its exceptions.
        extra = {} if dtype is None else {"signature": (None, None, _np.dtype(dtype))}
        loop = _np.matmul.resolve_dtypes(key[:3], casting=casting, **extra)[2].newbyteorder("=")
        if len(_loops) < 1024:
            _loops[key] = loop
    return loop


# The precision modes of float32 products (issue 18; docs/usage.md, "Precision"): exact float32
# (the default), float32-accurate on tensor cores, TF32, bfloat16. Only CUDA GPUs of sm_80 and
# later run the last three; elsewhere they raise DeviceError naming the mode and the device.
PRECISIONS = ("float32", "float32_tc", "tf32", "bfloat16")
# The dtypes whose products are float32 products, which follow the mode.
_MODED = frozenset(("float32", "complex64", "float16", "bfloat16"))


def _precision_arg(precision):
    if precision is None:
        return ""
    if not isinstance(precision, str) or precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(map(repr, PRECISIONS))} or None, "
                         f"not {precision!r}")
    return precision


def set_precision(mode) -> None:
    """Sets the process-wide precision of float32 products (one of PRECISIONS); None restores
    the automatic choice ($PORTMAT_PRECISION, else 'float32'). A `precision=` argument of
    matmul wins over it."""
    _ext.set_precision(_precision_arg(mode))


def get_precision() -> str:
    """The precision float32 products use where matmul is given none."""
    return _ext.get_precision()


def _matmul(a, b, /, out=None, *, dtype=None, device=None, casting="same_kind", precision=None,
            order="K", subok=True, signature=None, axes=None, axis=None):
    """portmat.matmul's general path (matmul's docstring, in src/python/module.cpp, says what it
    computes). matmul is a C function (_ext.matmul) that does the common small case itself and
    calls this, with the same arguments, for everything else."""
    if order != "K" or subok is not True or signature is not None or axes is not None or axis is not None:
        # np.matmul's other ufunc arguments (_ufunc_options): the operands' matrix axes moved
        # last, a result laid out as NumPy lays it out, then this function without them.
        if axis is not None:
            raise TypeError(_ufunc_options.AXIS_MESSAGE)
        return _ufunc_options.matmul_with_options(_matmul, _numpy_matmul, _host_operands, a, b, out, dtype, device,
                                                  casting, precision, order, subok, signature, axes)
    mode = _precision_arg(precision)
    # The common small case in one call, as matmul's C entry tries it (issue 16: NumPy's own call
    # takes ~0.8-2.5 us at n = 8), here for the calls that entry leaves to this function (a
    # precision named, say): plain float32 / float64 arrays (or stacks) of one dtype, a small
    # result, no dtype or casting asked, and out, if given, a plain array the result can go
    # straight into. _ext.matmul_small returns None for anything else, and the general path below
    # decides (and raises NumPy's errors).
    if dtype is None and casting == "same_kind" and (out is None or type(out) is _np.ndarray):
        c = _ext.matmul_small(a, b, "" if device is None else device, out, mode)
        if c is not None:
            return c
    if type(a) is not _np.ndarray or type(b) is not _np.ndarray:
        # Arrays that stay on a device: portmat's own, or another library's GPU arrays (_arrays).
        if isinstance(a, Array) or isinstance(b, Array):
            if isinstance(out, tuple) and len(out) == 1:
                out = out[0]
            return _arrays._matmul_arrays(a, b, out, dtype, device, mode)
        if mode and (_arrays.is_foreign(a) or _arrays.is_foreign(b) or
                     _arrays.dlpack_cuda_index(a) is not None or _arrays.dlpack_cuda_index(b) is not None or
                     _arrays.has_cuda_array_interface(a) or _arrays.has_cuda_array_interface(b)):
            # Not plumbed yet: the process-wide setting does reach these paths (the C++ reads it).
            raise NotImplementedError("matmul: precision= is not taken yet for CuPy / torch / DLPack arrays; "
                                      "use portmat.set_precision(...) around the call")
        if out is None and dtype is None and device is None:
            c = _arrays.matmul_fast(a, b)
            if c is not None:
                return c
        if _arrays.is_foreign(a) or _arrays.is_foreign(b):
            if isinstance(out, tuple) and len(out) == 1:
                out = out[0]
            return _arrays.matmul_foreign(a, b, out, dtype, device, casting)
        if _arrays.dlpack_cuda_index(a) is not None or _arrays.dlpack_cuda_index(b) is not None:
            if isinstance(out, tuple) and len(out) == 1:
                out = out[0]
            return _arrays.matmul_dlpack(a, b, out, dtype, device)
        if _arrays.has_cuda_array_interface(a) or _arrays.has_cuda_array_interface(b):
            if isinstance(out, tuple) and len(out) == 1:
                out = out[0]
            return _arrays.matmul_cai(a, b, out, dtype, device)
    spec = _matmul_spec(device)
    a, b, out = _host_operands(a, b, out)
    loop = _loop_dtype(a, b, out, dtype, casting)
    # Subclasses (np.matrix, quantities with units) keep NumPy's treatment of them, as do the
    # dtypes without kernels; np.memmap results are plain arrays either way.
    if loop not in _KERNEL_DTYPES or type(a) not in _PLAIN or type(b) not in _PLAIN or (
            out is not None and type(out) not in _PLAIN):
        return _numpy_matmul(a, b, out, dtype, casting, precision, loop=loop)
    if a.ndim == 2 and b.ndim == 2 and a.shape[1] == b.shape[0]:  # the common case, in Python
        shape = (a.shape[0], b.shape[1])
    else:
        shape = tuple(_ext.matmul_shape(a.shape, b.shape))  # ValueError naming both shapes
    if out is not None:
        if out.shape != shape:
            raise ValueError(f"matmul: out has shape {out.shape}, expected {shape} for a of shape "
                             f"{a.shape} and b of shape {b.shape}")
        if not out.flags.writeable:
            raise ValueError("matmul: out is read-only")
    dtype = loop
    a = _in_dtype(a, dtype)
    b = _in_dtype(b, dtype)
    # Straight into out where the kernels can write it and nothing read shares its memory (NumPy
    # computes overlapping operands as if they did not overlap); else a fresh result, from
    # recycled memory, with operands pinned for a discrete GPU, where that pays (_host_memory:
    # float32 / float64 results of 1 MiB and more, operands of 4 MiB).
    into = out
    direct = out is not None and out.dtype == dtype and out.flags.aligned and \
        (out.flags.c_contiguous or (out.ndim == 2 and a.ndim == 2 and b.ndim == 2 and out.flags.f_contiguous)) and \
        not _np.may_share_memory(out, a) and not _np.may_share_memory(out, b)
    if direct and not out.flags.c_contiguous:
        # A matrix out in Fortran order: its transpose is C-ordered, and c^T = b^T a^T is written
        # straight there (not computed aside and copied: a second pass over c, on a GPU the
        # transfer's size again).
        a, b, into, shape = b.T, a.T, out.T, shape[::-1]
    dev = spec
    # Several devices (a list, or "cuda": every CUDA device) split the product in the core, which
    # is given the spec itself; a list's result is ordinary memory (no one device's pinned pool).
    several = _ext.names_device_list(spec)
    if direct:
        target = into
    elif dtype not in _POOLED or "," in spec or (a.nbytes < _host_memory.MIN_OPERAND_BYTES and
                                                 b.nbytes < _host_memory.MIN_OPERAND_BYTES and
                                                 _prod(shape) * dtype.itemsize < _host_memory.MIN_RESULT_BYTES):
        target = _np.empty(shape, dtype)
    else:
        n = b.shape[-1] if b.ndim > 1 else 1
        info = _ext.device_for(spec, _prod(shape) // n if n else 0, n, a.shape[-1])
        dev = info.id
        if _prod(shape) * a.shape[-1] == 0:
            target = _np.empty(shape, dtype)
        else:
            if not info.host_unified:
                _host_memory.pin_operands(dev, a, b)
            target = _host_memory.new_result(dev, shape, dtype)
    _ext.matmul_arrays(a, b, target, spec if several else dev, mode)
    if out is not None:
        if not direct:
            _np.copyto(out, target, casting="unsafe")  # resolve_dtypes checked the casting
        return out
    return target[()] if target.ndim == 0 else target


def _numpy_matmul(a, b, out, dtype, casting, precision, loop=None, **options):
    """NumPy's matmul, for what portmat leaves to it (subclasses, dtypes without kernels), where
    the precision asked for is exact float32 (NumPy has no other); `options` are np.matmul's."""
    if loop is None:
        loop = _loop_dtype(a, b, out, dtype, casting)
    active = (_precision_arg(precision) or _ext.get_precision()) if _np.dtype(loop).name in _MODED else "float32"
    if active != "float32":
        raise DeviceError(f"matmul: precision '{active}' is not available for "
                          f"{type(a).__name__} / {type(b).__name__} operands, which NumPy multiplies; "
                          f"pass plain numpy.ndarray operands (np.asarray) or precision='float32'")
    return _np.matmul(a, b, out=out, dtype=dtype, casting=casting, **options)


_ext.set_matmul_fallback(_matmul)
matmul = _ext.matmul  # the fast path in C, then _matmul (docstring and signature from module.cpp)

_PLAIN = (_np.ndarray, _np.memmap)


def _prod(shape) -> int:
    p = 1
    for d in shape:
        p *= d
    return p

"""portmat: matrix multiplication with hand-written kernels on any GPU vendor and on the CPU.

    import numpy as np, portmat
    c = portmat.matmul(a, b)                  # NumPy in, NumPy out, on the default device
    portmat.devices()                         # every device; pick one with device=...
    c = portmat.matmul(a, b, device="opencl:0")

This module owns NumPy semantics (array-likes, dtype promotion, the output array); the C++ core
(portmat._ext) owns devices and kernels.
"""

from __future__ import annotations

import sys as _sys

import numpy as _np

from . import _ext, _host_memory
from ._ext import DeviceError, DeviceInfo, Error, OutOfDeviceMemory

__all__ = [
    "matmul",
    "devices",
    "default_device",
    "set_default_device",
    "set_num_threads",
    "num_threads",
    "DeviceInfo",
    "Error",
    "DeviceError",
    "OutOfDeviceMemory",
]
__version__ = "0.1.0"

_SUPPORTED = (_np.dtype(_np.float32), _np.dtype(_np.float64))


def devices() -> list[DeviceInfo]:
    """Every device portmat can use, of every backend."""
    return _ext.devices()


def _device_spec(device) -> str:
    if device is None:
        return ""
    if isinstance(device, DeviceInfo):
        return device.id
    if isinstance(device, str):
        return device
    raise TypeError(
        f"device must be None, a string such as 'opencl:0' or an entry of portmat.devices(), "
        f"not {type(device).__name__}"
    )


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


def _as_operand(x, name: str) -> _np.ndarray:
    ma = _sys.modules.get("numpy.ma")  # imported by whoever made a masked array
    if ma is not None and isinstance(x, ma.MaskedArray):
        raise TypeError(
            f"matmul: {name} is a masked array (numpy.ma.MaskedArray), and portmat would multiply "
            f"the values hidden under its mask; use numpy.ma.dot(a, b) for masked arithmetic, or "
            f"{name}.filled(0) to multiply with the masked entries as zeros"
        )
    if isinstance(x, _np.ndarray):
        arr = x
    else:
        try:
            arr = _np.asarray(x)
        except (TypeError, ValueError) as e:  # ragged lists and the like; MemoryError stays itself
            raise TypeError(f"matmul: {name} is not an array ({type(x).__name__}): {e}") from None
        if arr.dtype.kind not in "biuf":
            raise TypeError(f"matmul: {name} is not a numeric array (got {type(x).__name__})")
    if arr.ndim != 2:
        raise ValueError(
            f"matmul: {name} must be 2-D (batched matmul is not supported yet), "
            f"got {arr.ndim}-D with shape {arr.shape}"
        )
    return arr


def _in_dtype(arr: _np.ndarray, dtype: _np.dtype) -> _np.ndarray:
    """arr as `dtype` (native byte order), in memory the kernels can read: a copy where the
    dtype or byte order differs, or where elements are not aligned to their size (a field of a
    packed structured array, a buffer at an odd offset), as NumPy itself copies for BLAS."""
    if arr.dtype != dtype:
        return arr.astype(dtype)
    if not arr.flags.aligned:
        return arr.copy()
    return arr


def matmul(a, b, *, device=None) -> _np.ndarray:
    """a @ b for 2-D arrays, as NumPy computes it, on a portmat device.

    float32 computes in float32 and float64 in float64; mixed float32/float64 promotes to float64
    as NumPy does. Any strides are accepted (transposed, sliced, negative). Returns a new
    C-contiguous numpy.ndarray of shape (a.shape[0], b.shape[1]).
    """
    a = _as_operand(a, "a")
    b = _as_operand(b, "b")
    if a.shape[1] != b.shape[0]:
        raise ValueError(
            f"matmul: inner dimensions differ: a has shape {a.shape}, b has shape {b.shape} "
            f"({a.shape[1]} != {b.shape[0]})"
        )
    for name, arr in (("a", a), ("b", b)):
        if arr.dtype.newbyteorder("=") not in _SUPPORTED:
            raise TypeError(
                f"matmul: {name} has dtype {arr.dtype}; portmat supports float32 and float64"
            )
    dtype = _np.result_type(a.dtype, b.dtype).newbyteorder("=")
    a = _in_dtype(a, dtype)
    b = _in_dtype(b, dtype)
    m, k, n = a.shape[0], a.shape[1], b.shape[1]
    info = _ext.device_for(_device_spec(device), m, n, k)
    dev = info.id
    if m * n * k == 0:
        out = _np.empty((m, n), dtype=dtype)
    else:  # recycled result memory, pinned operands on a discrete GPU (_host_memory says when)
        if not info.host_unified:
            _host_memory.pin_operands(dev, a, b)
        out = _host_memory.new_result(dev, m, n, dtype)
    _ext.matmul_into(a, b, out, dev)
    return out

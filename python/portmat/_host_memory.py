"""Host memory in NumPy terms: where results are written and, for discrete GPUs, which operands are
page-locked, so that the copy engines move them directly instead of through a host copy.

Results. A result of 1 MiB or more is written into a recycled block when the device has one free:
pinned memory for a CUDA GPU (the copy engine writes it directly), memory whose pages are already
faulted in for the CPU (a fresh array's page faults cost its first writer 1-3% of a product). A
new block is made (for a GPU a few ms per 64 MiB: faulted in and registered) only for a
(device, shape, dtype) whose earlier results have died: the pattern of repeated calls with
transient results, where the block is then reused call after call. A program that keeps its
results gets ordinary arrays and never pays for pinning. A discrete OpenCL GPU's blocks are
mapped page-locked buffers (CL_MEM_ALLOC_HOST_PTR); OpenCL devices that share host memory (PoCL,
integrated GPUs) always give ordinary arrays, which they write in place.

Operands. An array used a second time as an operand is page-locked where it is (~3.5 ms per
64 MiB), so that every later call copies it to the device directly; the lock goes when the array
dies (a weakref callback, which NumPy runs before it frees the memory). Only arrays that own their
memory are locked, never views of memory owned elsewhere (memory maps, other libraries' buffers).

The weakrefs also keep the memory where it is: NumPy refuses ndarray.resize() on an array that
has weakrefs (ValueError, as for an array another object refers to), so a pinned range cannot be
freed or moved behind portmat's back; np.resize() or a copy work as usual.

Both are limits-bounded in the C++ layer (a quarter of the machine's memory each) and can be
turned off with PORTMAT_CUDA_PINNED_RESULTS=0 and PORTMAT_CUDA_PIN_OPERANDS=0 (the CPU's result
blocks with PORTMAT_CPU_RESULT_POOL=0, OpenCL's with PORTMAT_OPENCL_PINNED_RESULTS=0). OpenCL has
no way to page-lock memory it did not allocate, so its operands are never pinned.
"""

from __future__ import annotations

import weakref

import numpy as np

from . import _ext

MIN_RESULT_BYTES = 1 << 20  # results below this are ordinary arrays
MIN_OPERAND_BYTES = 4 << 20  # operands below this are never pinned
_MAX_KEYS = 256

# (device, m, n, dtype) -> True once a result of that kind has died
_results_died: dict = {}
# np.dtype.name builds a new string on every access (~1-5 us): the two result dtypes' names, once
_DTYPE_NAMES = {np.dtype(np.float32): "float32", np.dtype(np.float64): "float64"}


class _Pin:
    __slots__ = ("ref", "device", "address", "nbytes", "handle", "__weakref__")

    def __init__(self, owner, device):
        key = id(owner)
        self.ref = weakref.ref(owner, lambda _, k=key: _pins.pop(k, None))
        self.device = device
        self.address = owner.ctypes.data
        self.nbytes = owner.nbytes
        self.handle = None  # the C++ pin once taken; False when the device refused


# id(owner array) -> _Pin
_pins: dict = {}


def new_result(device: str, shape: tuple, dtype: np.dtype) -> np.ndarray:
    """An uninitialised C-contiguous result of `shape` for `device`."""
    n = shape[-1] if shape else 1
    m = 1
    for d in shape[:-1]:
        m *= d
    if m * n * dtype.itemsize < MIN_RESULT_BYTES:
        return np.empty(shape, dtype)
    name = _DTYPE_NAMES.get(dtype) or dtype.name
    key = (device, m, n, name)
    out = _ext.empty_result(device, m, n, name, True)  # a free block
    if out is not None:
        # Recycled, the steady state of repeated calls: a result this size died, which is all the
        # watching below would learn, so it is skipped (a weakref.finalize per result cost ~25 us
        # of a 1 ms product at n = 512 on the 2-core machine).
        if _results_died.get(key) is not True:
            _remember(key, True)
        return out if out.shape == shape else out.reshape(shape)
    died = _results_died.get(key)
    if died:
        out = _ext.empty_result(device, m, n, name, False)  # a new one (pinned for a GPU)
    if out is None:
        out = np.empty((m, n), dtype)
    # Watch results of this kind until the first one dies: from then on, new blocks pay off.
    if not died:
        _remember(key, False)
        weakref.finalize(out, _results_died.__setitem__, key, True)
    return out if out.shape == shape else out.reshape(shape)


def _remember(key, died: bool) -> None:
    """_results_died[key] = died, forgetting every kind first when _MAX_KEYS are known."""
    if key not in _results_died and len(_results_died) >= _MAX_KEYS:
        _results_died.clear()
    _results_died[key] = died


def _memory_owner(arr: np.ndarray):
    owner = arr
    while isinstance(owner.base, np.ndarray):
        owner = owner.base
    if owner.base is not None or not owner.flags.owndata:
        return None  # memory owned by something else (a pinned block, a buffer, a memory map)
    return owner


def pin_operands(device: str, *arrays: np.ndarray) -> None:
    """Page-locks, for `device`, the memory of operands seen before (see the module's text)."""
    for arr in arrays:
        owner = _memory_owner(arr)
        if owner is None or owner.nbytes < MIN_OPERAND_BYTES:
            continue
        pin = _pins.get(id(owner))
        if (
            pin is None
            or pin.ref() is not owner
            or pin.address != owner.ctypes.data  # cannot move (see below): a guard all the same
            or pin.nbytes != owner.nbytes
        ):
            _pins[id(owner)] = _Pin(owner, device)  # first sighting: remember it, do not pin yet
            continue
        if pin.handle is None and pin.device == device:
            pin.handle = _ext.pin_host(device, pin.address, pin.nbytes) or False

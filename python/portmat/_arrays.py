"""Arrays that stay on a device (issue 17): portmat's own Array, and other libraries' GPU arrays.

- ``portmat.Array`` holds a matrix, vector or stack in one device's memory, on every backend
  (CUDA, OpenCL, the native CPU backend), so that products chain there: ``matmul`` of Arrays
  returns an Array on their device, and nothing crosses the link until ``numpy()``. It is small on
  purpose (shape, dtype, device, ``@``, ``astype``, copies to and from NumPy, DLPack export on
  CUDA and CPU devices); it is not a second NumPy. It holds every dtype np.matmul multiplies
  (ARRAY_DTYPE_NAMES, bfloat16 included: ml_dtypes.bfloat16 where installed, else its dtype is the
  string 'bfloat16'); mixed dtypes give NumPy's result dtype (result_name). Each product runs on the
  device in a compute dtype (_COMPUTE), with cast kernels in and out: float16 / bfloat16 in float32
  (accumulated there, rounded once), bool and 8/16-bit integers in int32 (wrapping as NumPy's; bool
  as the int32 sum != 0), complex through the real kernels (b's real form built on the device),
  the others in themselves.
- Other DLPack exporters (JAX, ...) and __cuda_array_interface__ objects (Numba, ...) on a CUDA GPU
  are multiplied where they are, in the same dtypes and compute dtypes: operands of another dtype
  are cast on the stream into portmat memory first (matmul_dlpack, matmul_cai).
- CuPy arrays and torch tensors on a CUDA GPU are multiplied where they are: their memory goes to
  the kernels by address, the work is queued on the caller's current stream (the stream their
  library would use for ``a @ b``, so no synchronisation is needed and none is done), and the
  result is an array of their own kind, allocated by their own (stream-aware, caching) allocator.
  dtypes the kernels lack are computed through a wider one by the library itself, on the device:
  float16 and bfloat16 in float32 (accumulating in float32, as NumPy's float16 does), bool and
  8/16-bit integers in int32 (wrapping as NumPy's do; bool as the logical product).
"""

from __future__ import annotations

import sys as _sys

import numpy as _np

from . import _ext

# dtypes a portmat Array may hold, by name: every dtype np.matmul multiplies that portmat computes
# on a device, and bfloat16 (ml_dtypes.bfloat16 where ml_dtypes is installed; without it, an
# Array's dtype is the string 'bfloat16'). Each is computed in _COMPUTE's dtype on the device.
ARRAY_DTYPE_NAMES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
                     "float32", "float64", "complex64", "complex128", "bfloat16")
ARRAY_DTYPES = frozenset(_np.dtype(t) for t in ARRAY_DTYPE_NAMES if t != "bfloat16")
_ITEMSIZE = {"bool": 1, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "float16": 2, "bfloat16": 2, "int32": 4,
             "uint32": 4, "float32": 4, "int64": 8, "uint64": 8, "float64": 8, "complex64": 8, "complex128": 16}
# The dtype each result dtype is computed in on a device (the C++ core's compute_dtype): float16 and
# bfloat16 in float32, bool and the 8/16-bit integers in int32, the others in themselves.
_COMPUTE = {"float16": "float32", "bfloat16": "float32", "bool": "int32", "int8": "int32", "int16": "int32",
            "uint8": "int32", "uint16": "int32"}

_ml_bfloat16 = []  # [ml_dtypes' bfloat16 dtype, or None], filled at the first use


def bfloat16_dtype():
    """NumPy's dtype for bfloat16 (ml_dtypes.bfloat16), or None where ml_dtypes is not installed."""
    if not _ml_bfloat16:
        try:
            import ml_dtypes
            _ml_bfloat16.append(_np.dtype(ml_dtypes.bfloat16))
        except ImportError:
            _ml_bfloat16.append(None)
    return _ml_bfloat16[0]


def dtype_name(dtype) -> str:
    """The name of a dtype-like (a NumPy dtype or type, 'float16', 'bfloat16', ml_dtypes.bfloat16)
    that a portmat.Array can hold; TypeError for others."""
    if isinstance(dtype, str) and dtype == "bfloat16":
        return "bfloat16"
    try:
        name = _np.dtype(dtype).name
    except TypeError as e:
        raise TypeError(f"{dtype!r} is not a dtype: {e}") from None
    if name not in _ITEMSIZE:
        raise TypeError(f"portmat arrays hold {', '.join(ARRAY_DTYPE_NAMES)}, not {name}")
    return name


def result_name(x: str, y: str) -> str:
    """The dtype of x @ y by NumPy's promotion (np.result_type), for dtype names. bfloat16 is not
    NumPy's: it promotes as float16 does, one step up (with bool, int8, uint8 and itself it stays
    bfloat16; with float16 and the 16-bit integers float32; with 32/64-bit integers float64; with
    the wider floating types and complex, theirs), with or without ml_dtypes installed."""
    if x == y:
        return x
    if "bfloat16" not in (x, y):
        return _np.result_type(_np.dtype(x), _np.dtype(y)).name
    other = y if x == "bfloat16" else x
    if other in ("bool", "int8", "uint8"):
        return "bfloat16"
    if other == "float16":
        return "float32"
    r = _np.result_type(_np.float16, _np.dtype(other)).name
    return "float32" if r == "float16" else r


class Array:
    """A C-contiguous array on one portmat device. Make one with ``portmat.asarray(x, device=...)``;
    ``portmat.matmul`` (or ``@``) of Arrays on one device returns an Array there."""

    __slots__ = ("_x", "__weakref__")
    __array_ufunc__ = None  # ndarray @ Array comes to Array.__rmatmul__ (which refuses a NumPy operand)

    def __init__(self, x):
        if not isinstance(x, _ext.DeviceArray):
            raise TypeError("portmat.Array is made by portmat.asarray(x, device=...), not by calling it")
        self._x = x

    @property
    def shape(self) -> tuple:
        return self._x.shape

    @property
    def dtype(self):
        """A NumPy dtype; bfloat16 is ml_dtypes.bfloat16's where ml_dtypes is installed, else the
        string 'bfloat16' (NumPy has no bfloat16 of its own)."""
        name = self._x.dtype
        if name == "bfloat16":
            bf = bfloat16_dtype()
            return bf if bf is not None else name
        return _np.dtype(name)

    @property
    def device(self) -> _ext.DeviceInfo:
        return self._x.device

    @property
    def ndim(self) -> int:
        return len(self._x.shape)

    @property
    def size(self) -> int:
        n = 1
        for d in self._x.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.size * _ITEMSIZE[self._x.dtype]

    def __len__(self) -> int:
        if not self.ndim:
            raise TypeError("len() of a 0-d portmat.Array")
        return self.shape[0]

    def numpy(self) -> _np.ndarray:
        """A NumPy copy of the array (from the device's memory to the host's). bfloat16 needs
        ml_dtypes (else TypeError: use astype('float32') first, on the device)."""
        if self._x.dtype == "bfloat16":
            bf = bfloat16_dtype()
            if bf is None:
                raise TypeError("portmat.Array.numpy(): NumPy holds bfloat16 only through ml_dtypes, which is not "
                                "installed; install it, or convert on the device first: x.astype('float32').numpy()")
            bits = _np.empty(self.shape, _np.uint16)
            self._x.to_numpy(bits, "bfloat16")
            return bits.view(bf)
        out = _np.empty(self.shape, self.dtype)
        self._x.to_numpy(out)
        return out

    def astype(self, dtype) -> "Array":
        """A copy cast to `dtype` on the array's device (a cast kernel: nothing crosses the link;
        NumPy's casting rules, casting='unsafe'); the array itself when it is of that dtype already."""
        name = dtype_name(dtype)
        return self if name == self._x.dtype else Array(self._x.astype(name))

    def __array__(self, dtype=None, copy=None):
        if copy is False:
            raise ValueError("a portmat.Array cannot be viewed as a NumPy array without a copy")
        a = self.numpy()
        return a if dtype is None else a.astype(dtype, copy=False)

    def __matmul__(self, other):
        return _matmul_arrays(self, other, None, None, None)

    def __rmatmul__(self, other):
        return _matmul_arrays(other, self, None, None, None)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        # Products of Arrays are finished when matmul returns, so no stream needs to wait.
        view = self._x.dlpack_view()  # BufferError on OpenCL devices
        return view.__dlpack__(stream=stream, max_version=max_version, dl_device=dl_device, copy=copy)

    def __dlpack_device__(self):
        return self._x.dlpack_view().__dlpack_device__()

    @property
    def __cuda_array_interface__(self) -> dict:
        """CUDA arrays only (version 3; the data are ready: products of Arrays are finished)."""
        if self.device.backend != "cuda":
            raise AttributeError(f"a portmat.Array on {self.device.id} has no __cuda_array_interface__")
        if self._x.dtype == "bfloat16":
            raise AttributeError("a bfloat16 portmat.Array has no __cuda_array_interface__ (the protocol has no "
                                 "bfloat16 typestr); use DLPack (__dlpack__)")
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self._x.address, False), "version": 3,
                "strides": None, "stream": None}

    def __repr__(self) -> str:
        return f"portmat.Array(shape={self.shape}, dtype={self.dtype}, device='{self.device.id}')"

    def __bool__(self):
        raise TypeError("the truth value of a portmat.Array is not defined; use numpy() first")

    __hash__ = None


def asarray(x, device=None, dtype=None) -> Array:
    """x as a portmat.Array on `device` (a spec such as 'cuda:0', 'opencl:1', 'cpu', or an entry of
    portmat.devices(); None: the default device). An Array already there (and of that dtype) is
    returned as it is; anything else is copied through a NumPy array."""
    from . import _device_spec  # the package's spec parsing (no import cycle at load time)

    spec = _device_spec(device)
    if isinstance(x, Array):
        same_device = not spec or _ext.find_device(spec).id == x.device.id
        if same_device:
            return x if dtype is None else x.astype(dtype)  # a cast on the device
        x = x.numpy() if x._x.dtype != "bfloat16" or bfloat16_dtype() is not None else x.astype("float32").numpy()
    if _foreign_kind(x) is not None:
        raise TypeError(f"portmat.asarray: {type(x).__module__}.{type(x).__name__} is another library's "
                        f"GPU array; portmat.matmul multiplies it where it is, or copy it to the host "
                        f"first (e.g. cupy.asnumpy(x), x.cpu().numpy())")
    want = None if dtype is None else dtype_name(dtype)
    if want == "bfloat16" and bfloat16_dtype() is None:
        # No NumPy bfloat16: the data come as float32, cast (rounded once) on the device.
        return asarray(x, device, "float32").astype("bfloat16")
    try:
        host = _np.asarray(x, dtype=None if want is None else (bfloat16_dtype() if want == "bfloat16" else want))
    except (TypeError, ValueError) as e:
        raise (ValueError if isinstance(e, ValueError) else TypeError)(
            f"portmat.asarray: {type(x).__name__} is not an array: {e}") from None
    bf = bfloat16_dtype()
    if bf is not None and host.dtype == bf:
        host = _np.ascontiguousarray(host).view(_np.uint16)
        return Array(_ext.DeviceArray.from_numpy(host, spec, "bfloat16"))
    if host.dtype not in ARRAY_DTYPES:
        raise TypeError(f"portmat.asarray: portmat arrays hold {', '.join(ARRAY_DTYPE_NAMES)}, not "
                        f"{host.dtype}; convert with astype() first")
    if not host.dtype.isnative:
        host = host.astype(host.dtype.newbyteorder("="))
    if not host.flags.aligned:
        host = host.copy()
    return Array(_ext.DeviceArray.from_numpy(host, spec))


def _describe(x) -> str:
    if isinstance(x, Array):
        return f"a portmat.Array on {x.device.id}"
    kind = _foreign_kind(x)
    if kind is not None:
        return f"a {kind} array on {_foreign_device(x, kind)}"
    return f"a {type(x).__module__}.{type(x).__name__}"


def _matmul_arrays(a, b, out, dtype, device, precision=""):
    """matmul where an operand is a portmat.Array: both must be, on one device. precision: a
    mode's name, "" for the process-wide setting."""
    if not isinstance(a, Array) or not isinstance(b, Array):
        raise TypeError(f"matmul: a is {_describe(a)} and b is {_describe(b)}; portmat arrays multiply "
                        f"only with portmat arrays on the same device (move the other with "
                        f"portmat.asarray(x, device=...), or come back with .numpy())")
    if a.device.id != b.device.id:
        raise ValueError(f"matmul: a is on {a.device.id} and b on {b.device.id}; copy one across first "
                         f"(portmat.asarray(b, device=a.device))")
    _checked_device(a.device.id, device, "the arrays are on")
    # NumPy's result dtype (or dtype=): the C++ core casts each operand to its compute dtype on the
    # device, multiplies there and rounds once into the result.
    rname = result_name(a._x.dtype, b._x.dtype) if dtype is None else dtype_name(dtype)
    shape = tuple(_ext.matmul_shape(a.shape, b.shape))
    if out is not None:
        if not isinstance(out, Array):
            raise TypeError(f"matmul: out must be a portmat.Array when the operands are, not {_describe(out)}")
        if out.device.id != a.device.id:
            raise ValueError(f"matmul: out is on {out.device.id}, the operands on {a.device.id}")
        if out._x.dtype != rname:
            raise TypeError(f"matmul: out is {out._x.dtype}, the product {rname}")
        if out.shape != shape:
            raise ValueError(f"matmul: out has shape {out.shape}, expected {shape} for a of shape {a.shape} "
                             f"and b of shape {b.shape}")
        if out._x.address and out._x.address in (a._x.address, b._x.address) or out is a or out is b:
            # The one way an Array overlaps another: it is the same memory.
            tmp = Array(_ext.DeviceArray.empty(a.device.id, rname, list(shape)))
            _ext.matmul_device_arrays(a._x, b._x, tmp._x, precision)
            return _copy_into(out, tmp)
        _ext.matmul_device_arrays(a._x, b._x, out._x, precision)
        return out
    r = _ext.DeviceArray.empty(a.device.id, rname, list(shape))
    _ext.matmul_device_arrays(a._x, b._x, r, precision)
    return Array(r)


def _copy_into(out: Array, src: Array) -> Array:
    # out and a (or b) are the same memory: the product went to src, which out now holds
    # (rare: x = x @ y with out=x); its old memory goes once the caller's other names let go.
    out._x = src._x
    return out


# ---- other libraries' GPU arrays ---------------------------------------------------------------
def _foreign_kind(x):
    """'torch' for a torch tensor on a CUDA GPU, 'cupy' for a CuPy array, else None."""
    torch = _sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        return "torch" if x.is_cuda else None
    cupy = _sys.modules.get("cupy")
    if cupy is not None and isinstance(x, cupy.ndarray):
        return "cupy"
    return None


def _foreign_device(x, kind) -> str:
    return f"cuda:{x.device.index if kind == 'torch' else x.device.id}"


def is_foreign(x) -> bool:
    return _foreign_kind(x) is not None


# The common call first (issue 17: a 256 x 256 product must cost no more than the library's own
# a @ b): two 2-D arrays of one library on one GPU, one dtype the kernels multiply directly, views
# a kernel reads in place, no out, dtype or device. None where anything else holds: the general
# path (matmul_foreign) decides, and raises.
_TORCH_DIRECT: dict = {}  # torch dtype -> its name, for those dtypes (filled at the first call)
_CUPY_DIRECT = frozenset(_np.dtype(t) for t in (_np.float32, _np.float64, _np.int32, _np.int64, _np.uint32,
                                                _np.uint64))


def matmul_fast(a, b):
    torch = _sys.modules.get("torch")
    if torch is not None and type(a) is torch.Tensor and type(b) is torch.Tensor:
        if not _TORCH_DIRECT:
            for name in ("float32", "float64", "int32", "int64"):
                _TORCH_DIRECT[getattr(torch, name)] = name
        dt = a.dtype
        name = _TORCH_DIRECT.get(dt)
        if (name is None or b.dtype != dt or a.dim() != 2 or b.dim() != 2 or not a.is_cuda or
                ((a.requires_grad or b.requires_grad) and torch.is_grad_enabled()) or a.is_neg() or b.is_neg()):
            return None
        index = a.get_device()
        if b.get_device() != index:
            return None
        (m, k), (k2, n) = a.shape, b.shape
        sa, sb = a.stride(), b.stride()
        if k != k2 or not _dense_matrices((m, k), sa) or not _dense_matrices((k, n), sb):
            return None
        r = a.new_empty((m, n))
        if m and n:
            _ext.matmul_on_stream(name, a.data_ptr(), (m, k), sa, b.data_ptr(), (k, n), sb, r.data_ptr(), (m, n),
                                  (n, 1), _cuda_ids[index], _torch_stream(torch, index))
        return r
    cupy = _sys.modules.get("cupy")
    if cupy is not None and type(a) is cupy.ndarray and type(b) is cupy.ndarray:
        dt = a.dtype
        if dt != b.dtype or dt not in _CUPY_DIRECT or a.ndim != 2 or b.ndim != 2:
            return None
        index = a.data.device_id
        if b.data.device_id != index or cupy.cuda.get_device_id() != index:
            return None
        (m, k), (k2, n) = a.shape, b.shape
        es = dt.itemsize
        (ra, ca), (rb, cb) = a.strides, b.strides
        if ra % es or ca % es or rb % es or cb % es:
            return None
        sa, sb = (ra // es, ca // es), (rb // es, cb // es)
        if k != k2 or not _dense_matrices((m, k), sa) or not _dense_matrices((k, n), sb):
            return None
        r = cupy.empty((m, n), dt)
        if m and n:
            _ext.matmul_on_stream(dt.name, a.data.ptr, (m, k), sa, b.data.ptr, (k, n), sb, r.data.ptr, (m, n),
                                  (n, 1), _cuda_ids[index], cupy.cuda.get_current_stream().ptr)
        return r
    return None


class _CudaIds(dict):
    def __missing__(self, index):
        self[index] = f"cuda:{index}"
        return self[index]


_cuda_ids = _CudaIds()


def matmul_foreign(a, b, out, dtype, device, casting):
    """a @ b for CuPy arrays or torch tensors on a CUDA GPU (at least one of a, b is)."""
    ka, kb = _foreign_kind(a), _foreign_kind(b)
    if ka is None or kb is None or ka != kb:
        raise TypeError(f"matmul: a is {_describe(a)} and b is {_describe(b)}; both operands must be "
                        f"arrays of one GPU library on one device (copy the other across first)")
    da, db = _foreign_device(a, ka), _foreign_device(b, kb)
    if da != db:
        raise ValueError(f"matmul: a is on {da} and b on {db}; copy one across first")
    _checked_device(da, device, f"the operands are {ka} arrays on")
    if out is not None and (_foreign_kind(out) != ka or _foreign_device(out, ka) != da):
        raise TypeError(f"matmul: out is {_describe(out)}; it must be a {ka} array on {da}, as the operands are")
    return (_torch_matmul if ka == "torch" else _cupy_matmul)(a, b, out, dtype, da, casting)


# ---- any other DLPack exporter or __cuda_array_interface__ object on a CUDA GPU -----------------
def dlpack_cuda_index(x):
    """The CUDA device index of a DLPack exporter that is neither a NumPy array, a portmat Array,
    a torch tensor nor a CuPy array, on a CUDA GPU; else None."""
    if isinstance(x, (_np.ndarray, Array)) or getattr(type(x), "__dlpack_device__", None) is None:
        return None
    try:
        kind, index = x.__dlpack_device__()
    except Exception:  # a producer that cannot say: not taken here
        return None
    return int(index) if int(kind) == 2 else None  # kDLCUDA


def has_cuda_array_interface(x) -> bool:
    """Whether x shows its memory only through __cuda_array_interface__ (Numba's device arrays,
    PyCUDA's, ...): no DLPack, and not an array portmat knows by its type."""
    return (not isinstance(x, (_np.ndarray, Array)) and getattr(type(x), "__dlpack_device__", None) is None
            and hasattr(type(x), "__cuda_array_interface__"))


def _cai_operand(x, name):
    """(address, shape, strides in elements, dtype name, CUDA index, stream) of a
    __cuda_array_interface__ object (version 2 or 3)."""
    cai = x.__cuda_array_interface__
    if cai.get("mask") is not None:
        raise TypeError(f"matmul: {name} is a masked array (__cuda_array_interface__ mask); portmat does not take masks")
    dt = _np.dtype(cai["typestr"])
    if not dt.isnative and dt.itemsize > 1:
        raise TypeError(f"matmul: {name}'s elements are of non-native byte order ({cai['typestr']})")
    shape = tuple(int(d) for d in cai["shape"])
    ptr = int(cai["data"][0])
    if cai.get("strides") is None:
        strides = _c_strides(shape)
    else:
        if any(s % dt.itemsize for s in cai["strides"]):
            raise TypeError(f"matmul: {name}'s strides {tuple(cai['strides'])} are not whole {dt} elements")
        strides = tuple(int(s) // dt.itemsize for s in cai["strides"])
    # Version 3: the consumer orders its work after the producer's on this stream (1: the legacy
    # default stream, 2: the per-thread one, else a CUstream); None or absent: the data are ready.
    stream = cai.get("stream") if int(cai.get("version", 2)) >= 3 else None
    if stream == 0:
        raise TypeError(f"matmul: {name}'s __cuda_array_interface__ names stream 0, which the protocol forbids")
    index = None
    if ptr != 0 and _np.prod(shape, dtype=_np.int64) > 0:
        for d in _ext.devices():
            if d.backend == "cuda" and _ext.device_holds_address(d.id, ptr):
                index = d.index
                break
        if index is None:
            raise TypeError(f"matmul: {name}'s memory (__cuda_array_interface__ pointer {ptr:#x}) is not on a CUDA "
                            f"device portmat has")
    return ptr, shape, strides, dt.name, index, stream


def matmul_dlpack(a, b, out, dtype, device):
    """a @ b for DLPack exporters on a CUDA GPU other than torch and CuPy (JAX arrays, ...).

    The exporters are asked for their memory in the order of the legacy default stream
    (``__dlpack__(stream=1)``: the producer makes it wait for its own work), the product runs
    there, and waits for it on that stream only; the result is portmat's own memory, handed to the
    operand's library through DLPack (``a.__array_namespace__().from_dlpack``) where it has one,
    else returned as a portmat.Array. Every dtype of ARRAY_DTYPE_NAMES, mixed ones promoted as NumPy
    does (result_name); operands of a dtype other than the compute dtype are cast on the stream
    first (_matmul_addresses). Views must be row- or column-major (make them contiguous with their
    library first); a complex a must be row-major."""
    ia, ib = dlpack_cuda_index(a), dlpack_cuda_index(b)
    if ia is None or ib is None:
        raise TypeError(f"matmul: a is {_describe(a)} and b is {_describe(b)}; both operands must be "
                        f"arrays of one GPU library on one device (copy the other across first)")
    _same_library(a, b)
    if ia != ib:
        raise ValueError(f"matmul: a is on cuda:{ia} and b on cuda:{ib}; copy one across first")
    # The capsules are used at once; a and b (held by the caller) keep the memory alive.
    pa, sha, sta, dta = _ext.dlpack_operand(a.__dlpack__(stream=1))[:4]
    pb, shb, stb, dtb = _ext.dlpack_operand(b.__dlpack__(stream=1))[:4]
    r = _matmul_addresses(type(a).__name__, (pa, sha, sta, dta), (pb, shb, stb, dtb), out, dtype,
                          _checked_device(_cuda_ids[ia], device), 0)
    if out is not None:
        return out
    namespace = getattr(a, "__array_namespace__", None)
    from_dlpack = getattr(namespace(), "from_dlpack", None) if namespace is not None else None
    return from_dlpack(r) if from_dlpack is not None else r


def matmul_cai(a, b, out, dtype, device):
    """a @ b for objects that offer only __cuda_array_interface__ (Numba's device arrays, ...),
    multiplied where they are: on the stream the producer names (version 3), waited for there;
    the result is a portmat.Array on that GPU (which itself offers __cuda_array_interface__, so
    ``numba.cuda.as_cuda_array(c)`` and the like take it without a copy). Same dtypes and
    layouts as matmul_dlpack (bfloat16 has no __cuda_array_interface__ typestr, so it comes only
    through DLPack)."""
    if not (has_cuda_array_interface(a) and has_cuda_array_interface(b)):
        raise TypeError(f"matmul: a is {_describe(a)} and b is {_describe(b)}; both operands must be "
                        f"arrays of one GPU library on one device (copy the other across first)")
    _same_library(a, b)
    pa, sha, sta, dta, ia, sa = _cai_operand(a, "a")
    pb, shb, stb, dtb, ib, sb = _cai_operand(b, "b")
    if ia is not None and ib is not None and ia != ib:
        raise ValueError(f"matmul: a is on cuda:{ia} and b on cuda:{ib}; copy one across first")
    index = ia if ia is not None else ib
    if index is None:  # empty operands: the device asked for, else the first GPU
        from . import _device_spec
        dev = _ext.find_device(_device_spec(device) if device is not None else "cuda").id
    else:
        dev = _checked_device(_cuda_ids[index], device)
    if sa is not None and sb is not None and sa != sb:
        _ext.stream_synchronize(dev, sb)  # b's producer first; the product then follows a's stream
    stream = sa if sa is not None else sb if sb is not None else 1
    return _matmul_addresses(type(a).__name__, (pa, sha, sta, dta), (pb, shb, stb, dtb), out, dtype, dev, stream)


def _same_library(a, b):
    if type(a) is not type(b):
        raise TypeError(f"matmul: a is a {type(a).__module__}.{type(a).__name__} and b a "
                        f"{type(b).__module__}.{type(b).__name__}; both must be arrays of one library")


def _checked_device(dev, device, what="the operands are on"):
    """dev, after checking that the device the caller named (if any) is dev."""
    if device is not None:
        from . import _device_spec

        want = _ext.find_device(_device_spec(device)).id
        if want != dev:
            raise ValueError(f"matmul: device={want} was asked for, but {what} {dev}")
    return dev


def _c_strides(shape) -> tuple:
    """Strides in elements of a C-contiguous array of this shape."""
    strides, step = [], 1
    for d in reversed(shape):
        strides.append(step)
        step *= max(d, 1)
    return tuple(reversed(strides))


def _matmul_addresses(kind, oa, ob, out, dtype, dev, stream):
    """The product of two operands given as (address, shape, strides in elements, dtype name) on
    CUDA device dev, queued on `stream` and waited for there; into out (a portmat.Array) or a new
    Array."""
    (pa, sha, sta, dta), (pb, shb, stb, dtb) = oa, ob
    for name, dt in (("a", dta), ("b", dtb)):
        if dt not in _ITEMSIZE:
            raise TypeError(f"matmul: portmat has no product of {kind} arrays of {dt} ({name})")
    rname = result_name(dta, dtb) if dtype is None else dtype_name(dtype)
    cname = _COMPUTE.get(rname, rname)
    for name, shp, st in (("a", sha, sta), ("b", shb, stb)):
        if not _dense_matrices(shp, st):
            raise TypeError(f"matmul: {name}'s matrices are neither row- nor column-major (strides {st}); make "
                            f"it contiguous with its library first")
    shape = tuple(_ext.matmul_shape(sha, shb))
    if out is not None:
        if (not isinstance(out, Array) or out.device.id != dev or out._x.dtype != rname or out.shape != shape):
            raise TypeError(f"matmul: out for {kind} operands must be a portmat.Array on {dev} of "
                            f"dtype {rname} and shape {shape}, not {_describe(out)}")
        r = out
    else:
        r = Array(_ext.DeviceArray.empty(dev, rname, list(shape)))
    if r.size:
        keep = []  # temporaries: alive until the stream has passed them (the synchronize below)

        def in_compute(p, shp, st, dt):
            # An operand of another dtype, cast on the stream into device memory of the compute
            # dtype: every element its strides reach (the span from the first to the last), so
            # that the same strides address the copy.
            if dt == cname or 0 in shp:  # an empty operand (K = 0) is not read
                return p
            span = 1 + sum((d - 1) * s for d, s in zip(shp, st))
            tmp = _ext.DeviceArray.empty(dev, cname, [span])
            keep.append(tmp)
            _ext.cast_on_stream(dev, p, dt, tmp.address, cname, span, stream)
            return tmp.address

        pa, pb = in_compute(pa, sha, sta, dta), in_compute(pb, shb, stb, dtb)
        c = r._x if cname == rname else _ext.DeviceArray.empty(dev, cname, list(shape))
        ws = 0
        nbytes = _ext.workspace_bytes(cname, tuple(shb)) if cname.startswith("complex") else 0
        if nbytes:
            w = _ext.DeviceArray.empty(dev, "uint8", [nbytes])
            keep.append(w)
            ws = w.address
        _ext.matmul_on_stream(cname, pa, sha, sta, pb, shb, stb, c.address, shape, _c_strides(shape), dev, stream, ws)
        if c is not r._x:
            keep.append(c)
            _ext.cast_on_stream(dev, c.address, cname, r._x.address, rname, r.size, stream)
        _ext.stream_synchronize(dev, stream)  # that stream only: the Array's product is then finished
    return r


def _dense_matrices(shape, strides) -> bool:
    """Whether a kernel reads the (last two axes') matrices where they are: row- or column-major,
    positive strides (element units)."""
    if any(s < 0 for s in strides):
        return False
    if len(shape) < 2:
        return True
    rows, cols = shape[-2], shape[-1]
    rs, cs = strides[-2], strides[-1]
    row_major = (cols <= 1 or cs == 1) and (rows <= 1 or rs >= cols)
    col_major = (rows <= 1 or rs == 1) and (cols <= 1 or cs >= rows)
    return row_major or col_major


def _row_major(shape, strides) -> bool:
    return len(shape) < 1 or shape[-1] <= 1 or strides[-1] == 1


def _overlaps(x_ptr, x_bytes, y_ptr, y_bytes) -> bool:
    return x_ptr < y_ptr + y_bytes and y_ptr < x_ptr + x_bytes


# The compute dtype of each result dtype the kernels lack, by name: float16 / bfloat16 in float32,
# bool and the narrow integers in int32.
_WIDER = {"float16": "float32", "bfloat16": "float32", "bool": "int32", "int8": "int32", "int16": "int32",
          "uint8": "int32", "uint16": "int32"}
_KERNEL = frozenset(("float32", "float64", "complex64", "complex128", "int32", "int64", "uint32", "uint64"))


def _torch_matmul(a, b, out, dtype, dev, casting):
    torch = _sys.modules["torch"]
    if torch.is_grad_enabled() and (a.requires_grad or b.requires_grad):
        raise ValueError("matmul: portmat does not record autograd; a torch tensor that requires grad must "
                         "be multiplied under torch.no_grad() or passed as x.detach()")
    rtype = dtype if dtype is not None else torch.promote_types(a.dtype, b.dtype)
    if not isinstance(rtype, torch.dtype):
        raise TypeError(f"matmul: dtype= for torch tensors must be a torch.dtype, not {rtype!r}")
    name = str(rtype).removeprefix("torch.")
    compute = _WIDER.get(name, name)
    if compute not in _KERNEL:
        raise TypeError(f"matmul: portmat has no product of torch {name} tensors")
    ctype = getattr(torch, compute)
    if out is not None and not torch.can_cast(rtype, out.dtype) and casting != "unsafe":
        raise TypeError(f"matmul: cannot cast the {name} product to out's {out.dtype} (casting='{casting}')")

    def operand(x):
        if x.is_conj():
            x = x.resolve_conj()
        if x.is_neg():
            x = x.resolve_neg()
        if x.dtype != ctype:
            x = x.to(ctype)
        if not _dense_matrices(x.shape, x.stride()) or (compute.startswith("complex") and
                                                       not _row_major(x.shape, x.stride())):
            x = x.contiguous()
        return x

    a, b = operand(a), operand(b)
    shape = tuple(_ext.matmul_shape(tuple(a.shape), tuple(b.shape)))
    if out is not None and tuple(out.shape) != shape:
        raise ValueError(f"matmul: out has shape {tuple(out.shape)}, expected {shape} for a of shape "
                         f"{tuple(a.shape)} and b of shape {tuple(b.shape)}")
    direct = (out is not None and out.dtype == ctype and not out.is_conj() and not out.is_neg() and
              _out_writable(shape, out.stride()) and not _torch_overlap(out, a) and not _torch_overlap(out, b))
    r = out if direct else torch.empty(shape, dtype=ctype, device=a.device)
    index = a.device.index
    stream = _torch_stream(torch, index)
    ws = None
    nbytes = _ext.workspace_bytes(compute, tuple(b.shape)) if compute.startswith("complex") else 0
    if nbytes:
        ws = torch.empty(nbytes, dtype=torch.uint8, device=a.device)  # freed in stream order
    if r.numel():
        _ext.matmul_on_stream(compute, a.data_ptr(), tuple(a.shape), a.stride(), b.data_ptr(), tuple(b.shape),
                              b.stride(), r.data_ptr(), shape, r.stride(), dev, stream,
                              0 if ws is None else ws.data_ptr())
    if direct:
        return out
    if out is not None:
        if out.dtype == torch.bool:
            out.copy_(r != 0)
        else:
            out.copy_(r)
        return out
    if rtype == torch.bool:
        return r != 0
    return r if rtype == ctype else r.to(rtype)


def _torch_stream(torch, index) -> int:
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # 0.2 us, where current_stream() takes 7
    if raw is not None:
        return int(raw(index))
    return int(torch.cuda.current_stream(index).cuda_stream)


def _torch_overlap(x, y) -> bool:
    sx = x.untyped_storage()
    sy = y.untyped_storage()
    return _overlaps(sx.data_ptr(), sx.nbytes(), sy.data_ptr(), sy.nbytes())


def _out_writable(shape, strides) -> bool:
    """out's matrices row-major with unit column stride (the kernels' result layout)."""
    if any(s < 0 for s in strides):
        return False
    if not shape or shape[-1] <= 1:
        return True
    if strides[-1] != 1:
        return False
    return len(shape) < 2 or shape[-2] <= 1 or strides[-2] >= shape[-1]


def _cupy_matmul(a, b, out, dtype, dev, casting):
    cupy = _sys.modules["cupy"]
    rtype = _np.dtype(dtype) if dtype is not None else cupy.result_type(a.dtype, b.dtype)
    if out is not None and not _np.can_cast(rtype, out.dtype, casting=casting):
        raise TypeError(f"matmul: cannot cast the {rtype} product to out's {out.dtype} (casting='{casting}')")
    name = rtype.name
    compute = _WIDER.get(name, name)
    if compute not in _KERNEL:
        raise TypeError(f"matmul: portmat has no product of {name} arrays")
    ctype = _np.dtype(compute)

    def operand(x):
        if x.dtype != ctype:
            x = x.astype(ctype)
        es = x.itemsize
        if any(s % es for s in x.strides):
            x = cupy.ascontiguousarray(x)
        strides = tuple(s // es for s in x.strides)
        if not _dense_matrices(x.shape, strides) or (compute.startswith("complex") and
                                                     not _row_major(x.shape, strides)):
            x = cupy.ascontiguousarray(x)
            strides = tuple(s // es for s in x.strides)
        return x, strides

    (a, sa), (b, sb) = operand(a), operand(b)
    shape = tuple(_ext.matmul_shape(a.shape, b.shape))
    if out is not None and out.shape != shape:
        raise ValueError(f"matmul: out has shape {out.shape}, expected {shape} for a of shape {a.shape} "
                         f"and b of shape {b.shape}")
    with cupy.cuda.Device(a.device.id):
        direct = False
        if out is not None and out.dtype == ctype and all(s % ctype.itemsize == 0 for s in out.strides):
            so = tuple(s // ctype.itemsize for s in out.strides)
            direct = _out_writable(shape, so) and not cupy.may_share_memory(out, a) and not cupy.may_share_memory(out, b)
        r = out if direct else cupy.empty(shape, ctype)
        so = tuple(s // ctype.itemsize for s in r.strides)
        ws = None
        nbytes = _ext.workspace_bytes(compute, b.shape) if compute.startswith("complex") else 0
        if nbytes:
            ws = cupy.empty(nbytes, _np.uint8)  # CuPy's pool reuses it in stream order
        if r.size:
            _ext.matmul_on_stream(compute, a.data.ptr, a.shape, sa, b.data.ptr, b.shape, sb, r.data.ptr, shape,
                                  so, dev, cupy.cuda.get_current_stream().ptr, 0 if ws is None else ws.data.ptr)
        if direct:
            return out
        if out is not None:
            if out.dtype == _np.bool_:
                cupy.copyto(out, r != 0, casting="unsafe")
            else:
                cupy.copyto(out, r, casting="unsafe")
            return out
        if rtype == _np.bool_:
            return r != 0
        return r if rtype == ctype else r.astype(rtype)

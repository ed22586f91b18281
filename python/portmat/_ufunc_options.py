"""np.matmul's other ufunc arguments, for portmat.matmul: axes, order, subok, signature, axis.

What and why: np.matmul is a generalized ufunc, and programs pass it the ufunc's keywords
beyond out / dtype / casting: `axes` (which axes of each operand and of the result hold the
matrices), `order` (the result's memory layout), `subok` (whether subclasses come back as
themselves), `signature` (the loop's dtypes, dtype='s longer form), and `axis` (which matmul,
with three distinct core dimensions, refuses). portmat.matmul takes them with NumPy's meaning
and NumPy's errors, and still computes with its own kernels: the operands' matrix axes are moved
last (views, no copy), the product runs as usual, and the result's axes are moved where `axes`
puts them, as NumPy itself lays out such a result. Only calls that pass one of these arguments
come here (matmul's fast path and its general path never see them).
"""

from __future__ import annotations

import operator as _operator

import numpy as _np

from . import _arrays

_ORDERS = ("K", "C", "F", "A")
# NumPy's AxisError: numpy.exceptions' from NumPy 1.25 on, the top level's before (the package
# takes NumPy 1.24 and later).
_AxisError = getattr(_np, "exceptions", _np).AxisError
# matmul's gufunc signature (n?,k),(k,m?)->(n?,m?): what NumPy says when given `axis`.
AXIS_MESSAGE = ("matmul: axis can only be used with a single shared core dimension, not with the 3 "
                 "distinct ones implied by signature (n?,k),(k,m?)->(n?,m?); use axes= to say where "
                 "the matrices' axes are")


def order_arg(order) -> str:
    """`order` as one of K, C, F, A (NumPy takes lower case too; None is K)."""
    if order is None:
        return "K"
    if not isinstance(order, str):
        raise TypeError(f"matmul: order must be one of 'C', 'F', 'A', or 'K', not {type(order).__name__}")
    if order.upper() not in _ORDERS:
        raise ValueError(f"matmul: order must be one of 'C', 'F', 'A', or 'K' (got {order!r})")
    return order.upper()


def _axis_index(axis: int, ndim: int) -> int:
    """axis (negative from the end) as an index below ndim, or NumPy's AxisError (its
    normalize_axis_index lives in numpy.lib.array_utils only from NumPy 2.0)."""
    if not -ndim <= axis < ndim:
        raise _AxisError(axis, ndim)
    return axis % ndim


def _entry_axes(entry, index: int, ndim: int, cores: int) -> tuple:
    """One entry of `axes` for operand `index` (2 is the result) of `ndim` dimensions, `cores`
    of them matrix (core) axes: the axes normalized, as NumPy checks them."""
    if isinstance(entry, tuple):
        items = entry
        if len(items) != cores:
            raise _AxisError(
                f"matmul: operand {index} has {cores} core dimensions, but {len(items)} dimensions "
                f"are specified by axes tuple.")
    elif isinstance(entry, (list, _np.ndarray)) or not hasattr(type(entry), "__index__"):
        raise TypeError(f"matmul: axes item {index} should be a tuple.")
    elif cores != 1:
        raise _AxisError(
            f"matmul: operand {index} has {cores} core dimensions, but the axes item is a single integer.")
    else:
        items = (entry,)
    normal = tuple(_axis_index(_operator.index(i), ndim) for i in items)
    if len(set(normal)) != len(normal):
        raise ValueError(f"matmul: axes item {index} has value {normal[0]} repeated")
    return normal


def core_axes(axes, a_ndim: int, b_ndim: int, out_ndim: int | None):
    """`axes` for operands of a_ndim and b_ndim dimensions (and an out of out_ndim, None for a
    fresh result): for a, b and the result, the axes holding the matrix (or vector) dimensions,
    normalized; the result's is () when both operands are vectors."""
    if not isinstance(axes, list):
        raise TypeError(f"matmul: axes should be a list (of one tuple of axes for a, b and the "
                        f"result), not {type(axes).__name__}")
    core_a, core_b = (1 if a_ndim == 1 else 2), (1 if b_ndim == 1 else 2)
    core_c = core_a + core_b - 2
    # The result's entry is needed even when both are vectors: matmul's result has core axes,
    # (n?,m?), however many the vectors remove (NumPy says so, and () is that entry).
    if len(axes) != 3:
        raise ValueError(f"matmul: axes should be a list with an entry for a, b and the result, not "
                         f"{len(axes)} entries")
    if out_ndim is None:
        out_ndim = max(a_ndim - core_a, b_ndim - core_b) + core_c
    got_a = _entry_axes(axes[0], 0, a_ndim, core_a)
    got_b = _entry_axes(axes[1], 1, b_ndim, core_b)
    return got_a, got_b, _entry_axes(axes[2], 2, out_ndim, core_c)


def _last(axes: tuple) -> list:
    return list(range(-len(axes), 0))


def matmul_with_options(matmul, numpy_matmul, host_operands, a, b, out, dtype, device, casting, precision,
                        order, subok, signature, axes):
    """a @ b as np.matmul(a, b, out=out, dtype=dtype, casting=casting, order=order, subok=subok,
    signature=signature, axes=axes) computes it. `matmul` is portmat's general matmul, called here
    with NumPy operands whose matrices lie in their last axes and none of these options;
    `numpy_matmul` what it calls for subclasses NumPy must treat (with `precision`, which it
    checks, and the options); `host_operands` its conversion of a, b and out to NumPy arrays."""
    for name, x in (("a", a), ("b", b), ("out", out)):
        if isinstance(x, _arrays.Array) or _arrays.is_foreign(x) or _arrays.dlpack_cuda_index(x) is not None \
                or _arrays.has_cuda_array_interface(x):
            raise TypeError(f"matmul: {name} is an array on a device ({type(x).__name__}); order=, subok=, "
                            f"signature= and axes= are taken with NumPy arrays (for a device's arrays, "
                            f"move the matrices' axes last and pass dtype=)")
    if not isinstance(subok, bool):
        raise TypeError(f"matmul: subok must be a boolean, not {type(subok).__name__}")
    order = order_arg(order)
    if signature is not None and dtype is not None:
        raise TypeError("matmul: cannot specify both 'signature' and 'dtype'")
    a, b, out = host_operands(a, b, out)
    if signature is not None:
        # NumPy's own resolution of the signature (its forms and its casting errors); the loop's
        # output dtype is what dtype= names.
        dtype = _np.matmul.resolve_dtypes((a.dtype, b.dtype, None if out is None else out.dtype),
                                          signature=signature, casting=casting)[2]
    plain = (_np.ndarray, _np.memmap)
    if not subok and (type(a) not in plain or type(b) not in plain):
        # NumPy's treatment of subclasses under subok=False: computed as the arrays they hold.
        # Those that take over ufuncs (__array_ufunc__) keep deciding for themselves.
        if getattr(type(a), "__array_ufunc__", None) is _np.ndarray.__array_ufunc__:
            a = _np.asarray(a)
        if getattr(type(b), "__array_ufunc__", None) is _np.ndarray.__array_ufunc__:
            b = _np.asarray(b)
    if type(a) not in plain or type(b) not in plain:
        extra = {} if axes is None else {"axes": axes}
        return numpy_matmul(a, b, out, dtype, casting, precision, order=order, subok=subok, **extra)
    result_axes = ()
    given = out
    # 'A': Fortran order when every operand is Fortran-contiguous as given (before axes moves).
    fortran = order == "F" or (order == "A" and a.flags.f_contiguous and b.flags.f_contiguous)
    if axes is not None:
        axes_a, axes_b, result_axes = core_axes(axes, a.ndim, b.ndim, None if out is None else out.ndim)
        a = _np.moveaxis(a, axes_a, _last(axes_a))
        b = _np.moveaxis(b, axes_b, _last(axes_b))
        if out is not None:
            out = _np.moveaxis(out, result_axes, _last(result_axes))
    if out is None and fortran and a.ndim == 2 and b.ndim == 2:
        # A matrix in Fortran order is the C-ordered transpose of b^T a^T: computed as that.
        c = matmul(b.T, a.T, None, dtype=dtype, device=device, casting=casting, precision=precision).T
    else:
        c = matmul(a, b, out, dtype=dtype, device=device, casting=casting, precision=precision)
        if out is None and fortran and isinstance(c, _np.ndarray) and c.ndim > 1:
            c = _np.asfortranarray(c)  # a stack: NumPy's layout, at the cost of a copy
    if given is not None:
        return given
    if result_axes and isinstance(c, _np.ndarray):
        c = _np.moveaxis(c, _last(result_axes), result_axes)
    return c

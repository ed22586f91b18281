"""portmat.dask: np.matmul of dask arrays, each block product computed by portmat (issue 20).

    import dask.array as da, portmat.dask
    z = portmat.dask.matmul(x, y)             # lazy, np.matmul's shapes and dtypes; z.compute()
    z = portmat.dask.matmul(x, y, device="cuda:0")
    client.register_plugin(portmat.dask.PinDevices())   # dask.distributed: one GPU per worker

The graph: x's row panels and y's column panels, each built once (a rechunk to one chunk along
the contraction axis k, which joins each row of x's blocks, and each column of y's, by a copy),
then one task per output block, `portmat.matmul(x_panel, y_panel)` (`da.blockwise` with k in the
inputs' indices and not in the output's). dask.array's own `x @ y` instead multiplies every pair
of blocks and sums the partial products in a second step (float32 additions for float32 arrays):
K/bk times more, smaller products, and a (bm x bn) partial result per pair made and moved between
workers. One product over the whole of K suits a GPU: fewer, larger products (8192 x 32768 by
32768 x 8192 rather than four 8192^3 pieces, each paying the link for its operands and its result;
bench/dask_matmul.py measures the whole on the H200 machine), its rounding is portmat's own bound
for one product, and nothing is summed outside the kernels. Panels
built once, rather than joined again by every task that reads them (`concatenate=True` on the
blocks themselves), copy x and y once instead of once per block column of y and row of x; the
tasks get the panels themselves (`concatenate=False`: dask would copy even a single block to
"join" it), so a panel's memory is the same array for every task that reads it, and portmat pins
it for the copy engines from its second use on. The
price is memory: a panel is bm x K (K x bn), so for a huge K choose smaller blocks along m and n;
x's and y's chunks along k need not agree. Batch axes broadcast as np.matmul's do and keep their
blocks (dask aligns differing ones); a batch axis of length 1 on one side is reused for every
block of the other, never copied.

Where each product runs: `device=` (an id such as "cuda:0", "gpu", "cpu", or a DeviceInfo, sent to
the workers as its id), else the worker process's default device (`portmat.set_default_device`,
as PinDevices sets it, else that process's $PORTMAT_DEVICE), else portmat's automatic choice there
(small products on the CPU, large ones on a GPU: docs/usage.md). Nothing about devices is looked
up when the graph is built: the client may have no GPU at all.

dtypes: the result's dtype is np.matmul's for the two dtypes (and `dtype=`), as portmat.matmul
gives it: the graph says so before anything is computed. 1-D operands are treated as np.matmul
treats them (a row or a column vector, the added axis removed from the result).

dask is optional: `import portmat` never imports it, and importing this module without it raises
ImportError saying how to install it. PinDevices needs dask.distributed and imports it only when
it is used.
"""

from __future__ import annotations

import math as _math

import numpy as _np

try:
    import dask.array as _da
    from dask.base import tokenize as _tokenize
except ImportError as _e:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError(
        f"portmat.dask needs dask ({_e}): pip install portmat[dask] "
        f"(or pip install 'dask[array,distributed]')") from _e

import portmat as _portmat

__all__ = ["matmul", "PinDevices"]


def _block_product(a_blocks, b_blocks, device=None, loop=None, precision=None):
    """One output block: x's row panel times y's column panel, on the worker's device.

    blockwise hands over the blocks along k as lists (concatenate=False): one block each, since
    the panels are one chunk along k. They are multiplied as they are: with concatenate=True dask
    joins even a single block by a copy, so every task copied both of its panels (16 tasks of 1 GiB
    panels at n = 32768: 32 GiB copied at the start of each round on the H200's host, 0.9 s before
    the first product ended) and portmat saw new operands every time, never pinning a panel reused
    by the next task."""
    a = a_blocks[0] if len(a_blocks) == 1 else _np.concatenate(a_blocks, axis=-1)
    b = b_blocks[0] if len(b_blocks) == 1 else _np.concatenate(b_blocks, axis=-2)
    return _portmat.matmul(a, b, dtype=loop, device=device, precision=precision)


def _operand(x, name):
    if not isinstance(x, _da.Array):
        try:
            x = _da.asarray(x)
        except (TypeError, ValueError) as e:
            raise (ValueError if isinstance(e, ValueError) else TypeError)(
                f"portmat.dask.matmul: {name} is not an array ({type(x).__name__}): {e}") from None
    if any(_math.isnan(s) for s in x.shape):
        raise ValueError(f"portmat.dask.matmul: {name} has unknown chunk sizes (shape {x.shape}); "
                         f"call {name}.compute_chunk_sizes() first")
    return x


def _device_id(device):
    if device is None or isinstance(device, str):
        return device
    if isinstance(device, _portmat.DeviceInfo):
        return device.id
    raise TypeError(f"portmat.dask.matmul: device must be None, a string such as 'cuda:0' or an entry "
                    f"of portmat.devices(), not {type(device).__name__}")


def matmul(x, y, *, device=None, dtype=None, precision=None):
    """x @ y for dask arrays (or array-likes, taken as one chunk), as np.matmul computes it, each
    output block computed by portmat.matmul on the worker that runs it. Returns a dask array.

    Shapes: matrices, stacks of them whose leading axes broadcast, and 1-D operands as np.matmul
    takes them. dtype: np.matmul's result dtype (`dtype=` as np.matmul's). device: where every
    block product runs (an id, e.g. "cuda:0"); None: each worker's default device (set by
    PinDevices, or its $PORTMAT_DEVICE), else portmat's automatic choice there. precision: as
    portmat.matmul's (None: each worker's setting, portmat.get_precision() there).
    """
    device = _device_id(device)
    _portmat._precision_arg(precision)  # a bad name raises here, not on a worker
    x = _operand(x, "x")
    y = _operand(y, "y")
    xs, ys = x.shape, y.shape
    if x.ndim == 0 or y.ndim == 0:
        raise ValueError(f"portmat.dask.matmul: x of shape {xs} and y of shape {ys}: matmul takes no "
                         f"scalars (0-d arrays); use x * y")
    # NumPy's loop dtype: its promotion, its casting checks and its exceptions (TypeError for
    # dtypes it has no matmul for), raised now rather than on a worker.
    extra = {} if dtype is None else {"signature": (None, None, _np.dtype(dtype))}
    loop = _np.matmul.resolve_dtypes((x.dtype, y.dtype, None), **extra)[2].newbyteorder("=")
    x_vector, y_vector = x.ndim == 1, y.ndim == 1
    if x_vector:
        x = x[None, :]
    if y_vector:
        y = y[:, None]
    if x.shape[-1] != y.shape[-2]:
        raise ValueError(
            f"portmat.dask.matmul: x of shape {xs} and y of shape {ys} do not match: the contraction "
            f"axis has length {x.shape[-1]} in x (its last axis) and {y.shape[-2]} in y (its "
            f"{'only' if y_vector else 'second-to-last'} axis)")
    try:
        batch = _np.broadcast_shapes(x.shape[:-2], y.shape[:-2])
    except ValueError:
        raise ValueError(f"portmat.dask.matmul: x of shape {xs} and y of shape {ys}: the stack axes "
                         f"{x.shape[:-2]} and {y.shape[:-2]} do not broadcast") from None
    # The panels: one chunk along k (no task where it already is one).
    x = x.rechunk({x.ndim - 1: -1})
    y = y.rechunk({y.ndim - 2: -1})
    nb = len(batch)
    out_ind = tuple(f"b{i}" for i in range(nb)) + ("m", "n")
    x_ind = out_ind[nb - (x.ndim - 2):nb] + ("m", "k")
    y_ind = out_ind[nb - (y.ndim - 2):nb] + ("k", "n")
    z = _da.blockwise(
        _block_product, out_ind, x, x_ind, y, y_ind,
        name="portmat-matmul-" + _tokenize(x, y, device, dtype, precision),
        dtype=loop, meta=_np.empty((0,) * len(out_ind), loop), concatenate=False,
        device=device, loop=None if dtype is None else loop, precision=precision)
    if x_vector:
        z = z[..., 0, :]
    if y_vector:
        z = z[..., 0]
    return z


def __getattr__(name):
    # PinDevices lives in its own module, which imports dask.distributed (heavy, and optional even
    # where dask.array is installed) only when it is asked for.
    if name == "PinDevices":
        from ._dask_plugin import PinDevices
        return PinDevices
    raise AttributeError(f"module 'portmat.dask' has no attribute {name!r}")

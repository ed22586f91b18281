"""np.matmul's other ufunc arguments (axes, order, subok, signature, axis) mean in portmat.matmul
what they mean in NumPy: the same result (dtype, shape, type, memory layout), computed by
portmat's kernels to within the float bound of a float64 reference (integers exactly), and the
same class of exception for what NumPy refuses."""

import warnings

import numpy as np
import pytest

import portmat
from conftest import DEVICE_IDS

pytestmark = pytest.mark.skipif(not DEVICE_IDS, reason="no device")


def _values(rng, shape, dtype):
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        return rng.integers(-50 if dtype.kind == "i" else 0, 50, size=shape).astype(dtype)
    x = rng.uniform(-1, 1, shape)
    if dtype.kind == "c":
        x = x + 1j * rng.uniform(-1, 1, shape)
    return x.astype(dtype)


def _layout(x):
    """Strides of the axes longer than 1 (a length-1 axis's stride is arbitrary) and the flags."""
    return ([s for d, s in zip(x.shape, x.strides) if d > 1], x.flags.c_contiguous, x.flags.f_contiguous)


def _check_as_numpy(device, a, b, make_out=None, **options):
    """portmat.matmul(a, b, **options) against np.matmul's: its class of exception, or its type,
    dtype, shape and layout, with values checked against a float64 (complex128) reference."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", np.exceptions.ComplexWarning)
        want_out = None if make_out is None else make_out()
        try:
            want = np.matmul(a, b, **options) if want_out is None else np.matmul(a, b, out=want_out, **options)
        except (TypeError, ValueError) as e:
            kind = ValueError if isinstance(e, ValueError) else TypeError
            if isinstance(e, np.exceptions.AxisError):
                kind = np.exceptions.AxisError
            with pytest.raises(kind):
                portmat.matmul(a, b, device=device, **options, **({} if make_out is None else {"out": make_out()}))
            return None
        out = None if make_out is None else make_out()
        got = portmat.matmul(a, b, device=device, **options) if out is None else \
            portmat.matmul(a, b, out=out, device=device, **options)
    if out is not None:
        assert got is out
    assert type(got) is type(want)
    g, w = np.asarray(got), np.asarray(want)
    assert (g.dtype, g.shape) == (w.dtype, w.shape)
    if isinstance(want, np.ndarray):
        assert _layout(got) == _layout(want), (got.strides, want.strides)
    loop = w.dtype if make_out is None else np.matmul.resolve_dtypes(
        (a.dtype, b.dtype, None), **({"signature": options["signature"]} if "signature" in options else {}),
        **({"casting": options["casting"]} if "casting" in options else {}))[2]
    if loop.kind in "biu" and w.dtype.kind in "biu":
        assert np.array_equal(g, w)
        return got
    wide = np.complex128 if loop.kind == "c" or w.dtype.kind == "c" else np.float64
    ax = {"axes": options["axes"]} if "axes" in options else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", np.exceptions.ComplexWarning)
        ref = np.asarray(np.matmul(np.asarray(a).astype(wide), np.asarray(b).astype(wide), **ax)).astype(w.dtype)
        mag = np.asarray(np.matmul(np.abs(np.asarray(a)).astype(np.float64), np.abs(np.asarray(b)).astype(np.float64), **ax))
    k = max(np.shape(a)[_k_axis(a, ax)], 1) if np.ndim(a) else 1
    eps = max(np.finfo(loop).eps if loop.kind in "fc" else 0, np.finfo(w.dtype).eps if w.dtype.kind in "fc" else 0)
    bound = 2 * k * eps * mag + 2 * eps * np.abs(ref) + np.finfo(np.float32).tiny
    assert np.all(np.abs(g.astype(np.complex128) - ref.astype(np.complex128)) <= bound)
    return got


def _k_axis(a, ax):
    """The axis of a that holds k (its last, unless axes moves it)."""
    if not ax:
        return -1
    entry = ax["axes"][0]
    return entry[-1] if isinstance(entry, tuple) else entry


@pytest.mark.parametrize("device", DEVICE_IDS)
def test_axes_put_the_matrices_where_numpy_does(device, rng):
    for _ in range(60):
        batch = tuple(int(x) for x in rng.integers(1, 4, size=rng.integers(0, 3)))
        vec_a, vec_b = rng.random() < 0.2, rng.random() < 0.2
        m, k, n = (int(x) for x in rng.integers(1, 7, size=3))
        a = _values(rng, (k,) if vec_a else batch + (m, k), np.float32)
        b = _values(rng, (k,) if vec_b else batch[int(rng.integers(0, len(batch) + 1)):] + (k, n), np.float32)
        core_c = (0 if vec_a else 1) + (0 if vec_b else 1)
        c_ndim = np.ndim(np.matmul(a, b))

        def stored_permuted(x, core):
            """x's values stored with its matrix axes (in either order) at random places among its
            batch axes, which keep their order (they broadcast); the axes the matrix went to."""
            where = tuple(int(i) for i in rng.permutation(x.ndim)[:core])
            perm = [None] * x.ndim
            for i, w in enumerate(where):
                perm[w] = x.ndim - core + i
            batch_axes = iter(range(x.ndim - core))
            perm = [next(batch_axes) if p is None else p for p in perm]
            return np.ascontiguousarray(np.transpose(x, perm)), where

        pa, axes_a = stored_permuted(a, 1 if vec_a else 2)
        pb, axes_b = stored_permuted(b, 1 if vec_b else 2)
        axes_c = tuple(int(i) for i in rng.permutation(c_ndim)[:core_c])
        # ints for a vector's axis, negative axes, at random
        entry_a = axes_a[0] if vec_a and rng.random() < 0.5 else tuple(i - pa.ndim for i in axes_a) \
            if rng.random() < 0.3 else axes_a
        entry_b = axes_b[0] if vec_b and rng.random() < 0.5 else axes_b
        options = {"axes": [entry_a, entry_b, axes_c]}
        if rng.random() < 0.3:
            options["order"] = str(rng.choice(["C", "F", "A"]))
        make_out = None
        if core_c and rng.random() < 0.3:
            shape = np.moveaxis(np.empty(np.shape(np.matmul(a, b))), list(range(-core_c, 0)), list(axes_c)).shape
            make_out = lambda shape=shape: np.zeros(shape, np.float64)  # noqa: E731
        got = _check_as_numpy(device, pa, pb, make_out, **options)
        assert got is not None, f"NumPy refused axes {options} for {pa.shape} @ {pb.shape}"
        if make_out is None:  # the same numbers as the plain product, its axes moved
            np.testing.assert_allclose(np.moveaxis(np.asarray(got), list(axes_c), list(range(-core_c, 0)))
                                       if core_c else got, np.matmul(a, b), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("device", DEVICE_IDS)
def test_axes_numpy_refuses_raise_its_exception(device):
    a, b, v = np.ones((2, 3, 4), np.float32), np.ones((2, 4, 5), np.float32), np.ones(4, np.float32)
    for axes in [3, None, ((-2, -1), (-2, -1), (-2, -1)), [(-2, -1), (-2, -1)], [(-2, -1)] * 4,
                 [1, (-2, -1), (-2, -1)], [(0, 1, 2), (-2, -1), (-2, -1)], [(0, 3), (-2, -1), (-2, -1)],
                 [(1, 1), (-2, -1), (-2, -1)], [(1.0, 2), (-2, -1), (-2, -1)], [[0, 1], [0, 1], [0, 1]],
                 [(0, 1), (0, 1), (0, 5)]]:
        if axes is None:
            continue  # None means "not given" to portmat (NumPy refuses an explicit None)
        _check_as_numpy(device, a, b, axes=axes)
    for axes in [[0, (-2, -1), -1], [(0, 1), (-2, -1), -1], [0, (-2, -1), (-2, -1)]]:
        _check_as_numpy(device, v, b, axes=axes)
    for axes in [[0, 0], [0, 0, ()], [0, 0, 0], [-1, -1, ()]]:
        _check_as_numpy(device, v, v, axes=axes)


@pytest.mark.parametrize("device", DEVICE_IDS)
@pytest.mark.parametrize("shapes", [((5, 7), (7, 3)), ((2, 5, 7), (7, 3)), ((2, 5, 7), (2, 7, 3)),
                                    ((7,), (7, 3)), ((5, 7), (7,)), ((7,), (7,)), ((1, 7), (7, 1))])
def test_order_lays_the_result_out_as_numpy(device, shapes, rng):
    for dtype in (np.float32, np.float64, np.int32, np.complex64):
        a, b = _values(rng, shapes[0], dtype), _values(rng, shapes[1], dtype)
        for fa in (False, True):
            for fb in (False, True):
                x, y = (np.asfortranarray(a) if fa else a), (np.asfortranarray(b) if fb else b)
                for order in ("K", "C", "F", "A", "f", "a", None, "X", 3):
                    _check_as_numpy(device, x, y, order=order)


@pytest.mark.parametrize("device", DEVICE_IDS)
def test_signature_is_dtypes_longer_form(device, rng):
    a, b = _values(rng, (2, 5, 7), np.float64), _values(rng, (7, 3), np.float64)
    for signature in ["ff->f", "dd->d", ("f", "f", None), (None, None, "d"), (np.float32, np.float32, np.float32),
                      "ii->i", ("f", "d", None), np.float32, "FF->F"]:
        for casting in ("same_kind", "unsafe"):
            got = _check_as_numpy(device, a, b, signature=signature, casting=casting)
            if got is not None and signature == "ff->f":
                assert got.dtype == np.float32
    with pytest.raises(TypeError, match="signature.*dtype"):
        portmat.matmul(a, b, signature="ff->f", dtype=np.float32, device=device)
    _check_as_numpy(device, a, b, lambda: np.zeros((2, 5, 3), np.float64), signature="ff->f")


@pytest.mark.parametrize("device", DEVICE_IDS)
@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")  # np.matrix's own warning
def test_subok_and_axis(device, rng):
    m = np.matrix(_values(rng, (3, 3), np.float64))
    for subok in (True, False):
        assert type(_check_as_numpy(device, m, m, subok=subok)) is (np.matrix if subok else np.ndarray)
        _check_as_numpy(device, m, np.ones((3, 2)), subok=subok)
        _check_as_numpy(device, m, m, subok=subok, order="F")
    _check_as_numpy(device, m, m, subok="yes")
    a = _values(rng, (4, 4), np.float32)
    assert type(_check_as_numpy(device, a, a, subok=False)) is np.ndarray
    with pytest.raises(TypeError, match="axis"):
        portmat.matmul(a, a, axis=0, device=device)


@pytest.mark.parametrize("device", DEVICE_IDS)
def test_options_with_arrays_on_a_device_name_what_is_taken(device):
    x = portmat.asarray(np.ones((2, 3), np.float32), device=device)
    y = portmat.asarray(np.ones((3, 2), np.float32), device=device)
    with pytest.raises(TypeError, match="NumPy arrays"):
        portmat.matmul(x, y, axes=[(0, 1), (0, 1), (0, 1)])
    with pytest.raises(TypeError, match="NumPy arrays"):
        portmat.matmul(x, y, order="F")
    assert (portmat.matmul(x, y).numpy() == 3).all()

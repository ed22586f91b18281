"""portmat.matmul is np.matmul: a differential suite driven by hypothesis, on every device.

Shapes come from np.matmul's own gufunc signature, (m?,n),(n,p?)->(m?,p?), with 0-3 broadcast
batch axes and empty dimensions; dtypes from every pair of the dtypes portmat has kernels for (and
a few it leaves to NumPy); operands as views (transposed, strided, reversed, broadcast); `out` as
NumPy allows it (another dtype, strided, overlapping an operand). Integer and boolean results must
equal NumPy's exactly, wrap-around included; float and complex results must be within
K * eps * (|a| @ |b|) of a float64 (complex128) reference, entry by entry; the result's dtype,
shape and type must be NumPy's.
"""

import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import portmat
from conftest import DEVICE_IDS

pytestmark = pytest.mark.skipif(not DEVICE_IDS, reason="no device")

KERNEL_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                 "float16", "float32", "float64", "complex64", "complex128"]
SETTINGS = settings(max_examples=60, deadline=None, derandomize=False,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def random_values(rng, shape, dtype):
    """Values that exercise the dtype: integers over their whole range (so products wrap), floats
    and complex numbers in [-1, 1], booleans at random."""
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    x = rng.uniform(-1, 1, shape)
    if dtype.kind == "c":
        x = x + 1j * rng.uniform(-1, 1, shape)
    return x.astype(dtype)


def as_view(rng, arr, kind):
    """arr's values as a view of the given kind (the values are what matters)."""
    if arr.ndim < 2 or kind == "contiguous":
        return arr
    if kind == "transposed":  # the matrix axes stored the other way round
        return np.swapaxes(np.ascontiguousarray(np.swapaxes(arr, -1, -2)), -1, -2)
    if kind == "strided":  # every other element of a bigger array
        big = np.empty(arr.shape[:-1] + (2 * arr.shape[-1],), arr.dtype)
        big[..., ::2] = arr
        return big[..., ::2]
    if kind == "reversed":
        return np.flip(np.flip(arr, -1).copy(), -1)
    raise AssertionError(kind)


def check_same_as_numpy(got, a, b, want_dtype=None):
    with np.errstate(all="ignore"):
        want = np.matmul(a, b) if want_dtype is None else np.matmul(a, b, dtype=want_dtype)
    assert type(got) is type(want), (type(got), type(want))
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype, got.shape, want.shape)
    if want.dtype.kind in "biu":
        assert np.array_equal(got, want), f"integer results differ from NumPy's:\n{got}\n{want}"
        return
    # Float / complex: against the exact product (float64 / complex128), with the bound.
    wide = np.complex128 if want.dtype.kind == "c" else np.float64
    a64 = np.asarray(a).astype(wide)
    b64 = np.asarray(b).astype(wide)
    ref = np.matmul(a64, b64)
    mag = np.matmul(np.abs(a64), np.abs(b64))
    k = np.asarray(a).shape[-1]
    # float16 accumulates in float32 and is rounded once at the end.
    eps = np.finfo(want.dtype).eps
    bound = max(k, 1) * eps * 2 * mag + np.finfo(want.dtype).tiny
    err = np.abs(got.astype(wide) - ref)
    assert np.all(err <= bound), f"error {np.max(err - bound)} over the bound"


@pytest.mark.parametrize("device", DEVICE_IDS)
@SETTINGS
@given(data=st.data(),
       shapes=hnp.mutually_broadcastable_shapes(signature="(m?,n),(n,p?)->(m?,p?)", max_dims=3,
                                                min_side=0, max_side=6),
       dtype_a=st.sampled_from(KERNEL_DTYPES), dtype_b=st.sampled_from(KERNEL_DTYPES),
       views=st.tuples(*[st.sampled_from(["contiguous", "transposed", "strided", "reversed"])] * 2),
       seed=st.integers(0, 2**32 - 1))
def test_every_shape_dtype_and_view_as_numpy(device, data, shapes, dtype_a, dtype_b, views, seed):
    rng = np.random.default_rng(seed)
    (sa, sb), _ = shapes
    a = as_view(rng, random_values(rng, sa, dtype_a), views[0])
    b = as_view(rng, random_values(rng, sb, dtype_b), views[1])
    check_same_as_numpy(portmat.matmul(a, b, device=device), a, b)


def close_enough(got, want, a, b, loop):
    """got and want are the same product in `loop` (each within the bound of the exact one), each
    then cast to out's dtype."""
    out = np.dtype(got.dtype)
    if loop.kind in "biu":
        return np.array_equal(got, want)
    if out.kind == "b":
        return True  # nonzero tests of two close floats: no stable comparison
    wide = np.complex128 if loop.kind == "c" else np.float64
    exact = np.matmul(a.astype(wide), b.astype(wide))
    mag = np.matmul(np.abs(a.astype(wide)), np.abs(b.astype(wide)))
    if exact.ndim == 0:
        exact, mag = exact[()], mag[()]
    g, w = np.asarray(got).astype(np.complex128), np.asarray(want).astype(np.complex128)
    if out.kind in "iu":  # a float rounded to an integer may land on either side of a boundary
        return bool(np.all(np.abs(g - w) <= 1))
    slack = 4 * max(a.shape[-1], 1) * np.finfo(loop).eps * mag + 2 * np.finfo(out).eps * np.abs(exact)
    return bool(np.all(np.abs(g - w) <= slack + np.finfo(out).tiny))


@pytest.mark.parametrize("device", DEVICE_IDS)
@SETTINGS
@given(shapes=hnp.mutually_broadcastable_shapes(signature="(m?,n),(n,p?)->(m?,p?)", max_dims=3,
                                                min_side=1, max_side=5),
       dtype=st.sampled_from(KERNEL_DTYPES), out_dtype=st.sampled_from(KERNEL_DTYPES),
       out_kind=st.sampled_from(["contiguous", "strided", "fortran"]),
       casting=st.sampled_from(["same_kind", "unsafe", "safe", "no"]), seed=st.integers(0, 2**32 - 1))
def test_out_as_numpy(device, shapes, dtype, out_dtype, out_kind, casting, seed):
    rng = np.random.default_rng(seed)
    (sa, sb), result = shapes
    a, b = random_values(rng, sa, dtype), random_values(rng, sb, dtype)
    want = np.empty(result, out_dtype)
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", np.exceptions.ComplexWarning)
            np.matmul(a, b, out=want, casting=casting)
    except TypeError as e:  # NumPy refuses the cast: so must portmat, with NumPy's exception
        with pytest.raises(type(e)):
            portmat.matmul(a, b, out=np.empty(result, out_dtype), casting=casting, device=device)
        return
    if out_kind == "strided":
        out = np.empty(result + (2,), out_dtype)[..., 0]
    elif out_kind == "fortran":
        out = np.empty(result, out_dtype, order="F")
    else:
        out = np.empty(result, out_dtype)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", np.exceptions.ComplexWarning)
        got = portmat.matmul(a, b, out=out, casting=casting, device=device)
    assert got is out
    loop = np.matmul.resolve_dtypes((a.dtype, b.dtype, np.dtype(out_dtype)), casting=casting)[2]
    assert close_enough(out, want, a, b, loop)


@pytest.mark.parametrize("device", DEVICE_IDS)
@pytest.mark.parametrize("dtype", ["float32", "int32", "complex64", "bool"])
def test_out_overlapping_an_operand_gives_numpys_answer(device, dtype):
    # NumPy computes as if out did not overlap the operands.
    rng = np.random.default_rng()
    b = random_values(rng, (6, 6), dtype)
    for view in (lambda x: x, lambda x: x[::-1], lambda x: x.transpose(0, 2, 1)):
        a = random_values(rng, (3, 6, 6), dtype)
        with np.errstate(all="ignore"):
            want = np.matmul(a.copy(), b)
        out = view(a)
        got = portmat.matmul(a, b, out=out, device=device)
        assert got is out
        if np.dtype(dtype).kind in "biu":
            assert np.array_equal(out, want)
        else:  # 6 terms of magnitude <= 1 (complex: <= 2 each)
            assert np.allclose(out, want, rtol=0, atol=6 * 4 * np.finfo(dtype).eps)


@pytest.mark.parametrize("device", DEVICE_IDS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_out_of_small_plain_products_written_in_place_or_as_numpy(device, dtype):
    # The small-product fast path (_ext.matmul_small) writes a plain out directly; any out that
    # shares memory with a or b, or is not C-contiguous, must still give NumPy's answer.
    rng = np.random.default_rng()
    eps = np.finfo(dtype).eps
    buf = random_values(rng, (9, 7), dtype)
    cases = [  # (a, b, out): vector and matrix results, out apart, equal to, inside or reversed
        (lambda: (buf[:7, :7].copy(), buf[2:9].copy(), np.empty((7, 7), dtype))),
        (lambda: (buf[:7, :7], buf[:7, :7].copy(), buf[:7, :7])),            # out is a
        (lambda: (buf[1:8, :7].copy(), buf[:7, :7], buf[:7, :7])),            # out is b
        (lambda: (buf[:7, :7], buf[1:8, :7].copy(), buf[2:9, :7])),           # out overlaps a's rows
        (lambda: (buf[:7, :7], buf[:7, :7].copy(), buf[6::-1, :7])),          # reversed rows of a
        (lambda: (buf[:7, :7].copy(), buf[:7, 0].copy(), buf[:7, 3])),        # strided vector out
        (lambda: (buf[:7, 0], buf[:7, :7].copy(), buf[0, :7])),               # vector out over a's start
        (lambda: (buf[:7, :7].copy(), buf[:7, :7].copy(), np.empty((7, 7), dtype, order="F"))),
        (lambda: (buf[:4, :7].copy(), buf[:7, :3].copy(), np.empty((4, 3), dtype)[:, ::-1])),
    ]
    for make in cases:
        a, b, out = make()
        want = np.matmul(a.copy(), b.copy())
        mag = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
        got = portmat.matmul(a, b, out=out, device=device)
        assert got is out
        assert np.all(np.abs(out - want) <= 4 * a.shape[-1] * eps * mag)
    # The wrong dtype, shape or a read-only out: NumPy's casting and errors (the general path).
    a, b = random_values(rng, (3, 4), dtype), random_values(rng, (4, 5), dtype)
    wide = np.empty((3, 5), np.complex128)
    assert portmat.matmul(a, b, out=wide, device=device) is wide
    a64, b64 = a.astype(np.float64), b.astype(np.float64)  # computed in dtype, then cast: bound it
    assert np.all(wide.imag == 0)
    assert np.all(np.abs(wide.real - a64 @ b64) <= 4 * a.shape[-1] * eps * (np.abs(a64) @ np.abs(b64)))
    with pytest.raises(ValueError):
        portmat.matmul(a, b, out=np.empty((5, 3), dtype), device=device)
    frozen = np.empty((3, 5), dtype)
    frozen.flags.writeable = False
    with pytest.raises(ValueError):
        portmat.matmul(a, b, out=frozen, device=device)


@pytest.mark.parametrize("device", DEVICE_IDS)
def test_single_rows_and_columns_with_gaps(device):
    """A one-row a or b (and a one-column one) whose elements are not adjacent: every other
    element of a wider array, or a column of a matrix. Such a view is a column-major matrix whose
    rows are not contiguous; the small CPU path once read it as if they were."""
    rng = np.random.default_rng()
    for m, k, n in [(2, 1, 2), (5, 1, 7), (1, 3, 4), (1, 9, 1), (6, 1, 16), (1, 40, 33), (3, 1, 200)]:
        for dtype in (np.float32, np.float64, np.complex64):
            a0 = random_values(rng, (m, k), dtype)
            b0 = random_values(rng, (k, n), dtype)
            for a in (a0, as_view(rng, a0, "strided"), as_view(rng, a0, "transposed")):
                for b in (b0, as_view(rng, b0, "strided"), as_view(rng, b0, "transposed")):
                    check_same_as_numpy(portmat.matmul(a, b, device=device), a, b)


def unaligned_copy(arr):
    """arr's values in memory one byte off its element alignment."""
    raw = np.empty(arr.nbytes + 1, np.uint8)
    out = np.frombuffer(raw.data, arr.dtype, arr.size, offset=1).reshape(arr.shape)
    out[...] = arr
    return out


@pytest.mark.parametrize("device", DEVICE_IDS)
def test_small_plain_arrays_in_every_form(device):
    """Small products of 1-D and 2-D arrays, the one-call path (_ext.matmul_small: float32,
    float64, int32, int64, complex64, complex128) and what it hands to the general one: every
    view, read-only, big-endian, unaligned, broadcast, empty and K = 0, subclasses; the result is
    what NumPy returns, a fresh array of the right type."""
    rng = np.random.default_rng()
    shapes = [((5, 7), (7, 3)), ((7,), (7, 4)), ((4, 7), (7,)), ((1, 1), (1, 1)), ((0, 3), (3, 2)),
              ((3, 0), (0, 2)), ((6, 16), (16, 17)), ((33,), (33, 1)), ((9, 300), (300, 5))]
    forms = [lambda x: x, lambda x: as_view(rng, x, "transposed"), lambda x: as_view(rng, x, "strided"),
             lambda x: as_view(rng, x, "reversed"), lambda x: x.astype(x.dtype.newbyteorder(">")),
             unaligned_copy, lambda x: np.lib.stride_tricks.as_strided(x, writeable=False),
             lambda x: np.broadcast_to(x[..., :1], x.shape) if x.size else x,
             lambda x: x.view(np.memmap) if x.ndim == 2 else x,
             lambda x: np.repeat(x, 3, axis=-1)[..., 1::3],  # gaps along the last axis, 1-D too
             lambda x: np.flip(np.flip(x, -1).copy(), -1)]
    for dtype in (np.float32, np.float64, np.int32, np.int64, np.complex64, np.complex128):
        for sa, sb in shapes:
            for fa in forms:
                for fb in forms[:4] + forms[-4:]:
                    a = fa(random_values(rng, sa, dtype))
                    b = fb(random_values(rng, sb, dtype))
                    got = portmat.matmul(a, b, device=device)
                    check_same_as_numpy(got, a, b)
                    assert not np.shares_memory(got, a) and not np.shares_memory(got, b)
    with pytest.raises(ValueError, match=r"\(3, 4\).*\(5, 2\)"):
        portmat.matmul(np.ones((3, 4), np.float32), np.ones((5, 2), np.float32), device=device)
    with pytest.raises(ValueError):
        portmat.matmul(np.ones(3), np.ones(4), device=device)


@pytest.mark.parametrize("device", DEVICE_IDS)
def test_small_stacks_in_every_form(device):
    """Small stacks through the one-call path (_ext.matmul_small takes plain float32, float64,
    int32, int64, complex64 and complex128 operands of up to 64 dimensions) and what it hands to the general one: broadcast stacks,
    vectors against stacks, empty stacks and K = 0, every view; NumPy's result, a fresh array."""
    from portmat import _ext
    rng = np.random.default_rng()
    shapes = [((10, 8, 8), (10, 8, 8)), ((3, 1, 5, 7), (4, 7, 2)), ((7,), (5, 7, 3)), ((2, 4, 7), (7,)),
              ((2, 16, 16), (16, 16)), ((5, 6), (3, 6, 2)), ((0, 3, 4), (4, 5)), ((2, 3, 0), (2, 0, 4)),
              ((2, 1, 1, 1, 3, 4), (4, 2)), ((1, 2, 33, 9), (2, 9, 17))]
    forms = [lambda x: x, lambda x: as_view(rng, x, "transposed"), lambda x: as_view(rng, x, "strided"),
             lambda x: as_view(rng, x, "reversed"), lambda x: x.astype(x.dtype.newbyteorder(">")),
             unaligned_copy, lambda x: np.broadcast_to(x[..., :1], x.shape) if x.size else x,
             lambda x: np.moveaxis(np.ascontiguousarray(np.moveaxis(x, 0, -1)), -1, 0) if x.ndim > 2 else x]
    for dtype in (np.float32, np.float64, np.int32, np.int64, np.complex64, np.complex128):
        for sa, sb in shapes:
            for fa in forms:
                for fb in forms:
                    a = fa(random_values(rng, sa, dtype))
                    b = fb(random_values(rng, sb, dtype))
                    got = portmat.matmul(a, b, device=device)
                    check_same_as_numpy(got, a, b)
                    assert not np.shares_memory(got, a) and not np.shares_memory(got, b)
        # The one-call path takes plain native stacks itself (not handing them on).
        a, b = random_values(rng, (10, 8, 8), dtype), random_values(rng, (8, 3), dtype)
        assert _ext.matmul_small(a, b, device, None, "") is not None
        other = b.astype(np.float32 if dtype == np.float64 else np.float64) if b.dtype.kind != "c" else b.astype(
            np.complex128 if dtype == np.complex64 else np.complex64)
        assert _ext.matmul_small(a, other, device, None, "") is None  # promotion: general path
        assert _ext.matmul_small(a, b, device, np.empty((10, 8, 3), dtype), "") is None  # out=: general path
    with pytest.raises(ValueError, match=r"\(2, 3, 4\).*\(3, 5, 2\)"):
        portmat.matmul(np.ones((2, 3, 4), np.float32), np.ones((3, 5, 2), np.float32), device=device)
    with pytest.raises(ValueError, match=r"broadcast"):
        portmat.matmul(np.ones((2, 3, 4), np.float32), np.ones((3, 4, 2), np.float32), device=device)


@pytest.mark.parametrize("device", DEVICE_IDS)
def test_integer_products_wrap_around_exactly(device):
    rng = np.random.default_rng()
    for dtype in ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"):
        info = np.iinfo(dtype)
        a = rng.integers(info.min, info.max, (37, 131), dtype=dtype, endpoint=True)
        b = rng.integers(info.min, info.max, (131, 29), dtype=dtype, endpoint=True)
        assert np.array_equal(portmat.matmul(a, b, device=device), np.matmul(a, b)), dtype
        # Small values, negative ones too: exact in float64 on any device, and the narrow
        # 64-bit kernels' operands (sign-extended 32-bit values) on AVX2 CPUs.
        small = ((a.astype(np.int64) % 201 - 100).astype(dtype), (b.astype(np.int64) % 7 - 3).astype(dtype))
        assert np.array_equal(portmat.matmul(*small, device=device), np.matmul(*small)), dtype


def every_layout(rng, x, big):
    """x's values in six layouts: contiguous, a slice of `big` (a leading dimension and an offset),
    column-major, strided, reversed, and column-major reversed."""
    r, c = x.shape
    big[3:r + 3, 5:c + 5] = x
    return (x, big[3:r + 3, 5:c + 5], as_view(rng, x, "transposed"), as_view(rng, x, "strided"),
            as_view(rng, x, "reversed"), x[::-1].copy()[::-1])


@pytest.mark.parametrize("device", DEVICE_IDS)
def test_integer_products_with_few_rows_or_columns_in_every_layout(device):
    """Integer products of few rows or few columns (on the CPU: the skinny kernels, the long
    operand read where it is; 8/16-bit ones converted in their own layout first) equal NumPy's,
    wrap-around included, for every pair of layouts, vectors, long dot products (split over
    threads) and stacks."""
    rng = np.random.default_rng()
    for dtype in ("int8", "uint16", "int32", "uint32", "int64", "uint64"):
        for m, k, n in ((1, 257, 97), (2, 300, 200), (4, 1024, 260), (8, 130, 90), (13, 70, 300),
                        (97, 257, 1), (200, 300, 2), (260, 1024, 4), (90, 130, 7), (300, 70, 13)):
            a, b = random_values(rng, (m, k), dtype), random_values(rng, (k, n), dtype)
            big_a, big_b = random_values(rng, (m + 7, k + 9), dtype), random_values(rng, (k + 7, n + 9), dtype)
            for av in every_layout(rng, a, big_a):
                for bv in every_layout(rng, b, big_b):
                    check_same_as_numpy(portmat.matmul(av, bv, device=device), av, bv)
            for av, bv in ((a[0], b), (a, b[:, 0]), (random_values(rng, (3, m, k), dtype), b)):
                check_same_as_numpy(portmat.matmul(av, bv, device=device), av, bv)
        x, y = random_values(rng, 400_000, dtype), random_values(rng, (400_000, 1), dtype)
        check_same_as_numpy(portmat.matmul(x, y, device=device), x, y)
        check_same_as_numpy(portmat.matmul(y.T, y, device=device), y.T, y)


@pytest.mark.parametrize("device", DEVICE_IDS)
def test_tiny_narrow_integer_stacks_in_every_layout(device):
    """Stacks of tiny 8- and 16-bit integer products (on the CPU: computed in place in their own
    dtype, the sums wrapping as NumPy's do) equal NumPy's: whole-range values, every matrix layout,
    stacks that broadcast, negative steps between matrices, out=, up to the largest such product
    (512 multiply-adds) and just past it, and stacks long enough to be shared between threads."""
    rng = np.random.default_rng()
    for dtype in ("int8", "uint8", "int16", "uint16"):
        for m, k, n in ((4, 4, 4), (1, 1, 1), (3, 5, 2), (8, 8, 8), (1, 512, 1), (2, 16, 16), (9, 8, 8)):
            a, b = random_values(rng, (5, m, k), dtype), random_values(rng, (5, k, n), dtype)
            for kind_a in ("contiguous", "transposed", "strided", "reversed"):
                for kind_b in ("contiguous", "transposed", "strided", "reversed"):
                    av, bv = as_view(rng, a, kind_a), as_view(rng, b, kind_b)
                    check_same_as_numpy(portmat.matmul(av, bv, device=device), av, bv)
            for av, bv in ((a, b[0]), (a[0], b), (a[::-1], b[::-1]), (a[::-2], b[::2]), (a[::-1], b[:1])):
                check_same_as_numpy(portmat.matmul(av, bv, device=device), av, bv)
            out = np.empty((5, m, n), dtype)
            got = portmat.matmul(a, b, out=out, device=device)
            assert got is out
            check_same_as_numpy(out, a, b)
        x, y = random_values(rng, (70_000, 4, 4), dtype), random_values(rng, (70_000, 4, 4), dtype)
        check_same_as_numpy(portmat.matmul(x, y, device=device), x, y)


@pytest.mark.parametrize("device", DEVICE_IDS)
def test_boolean_products_in_every_layout_and_density(device):
    """Boolean products are NumPy's logic (an OR of ANDs), whichever way they stop early: all
    false, sparse, half and all true operands, in every pair of layouts, on shapes that reach each
    kernel (rows OR-ed on c or on c^T, dots of rows and columns, a short operand copied first),
    outputs wider than a thread's part, bytes other than 0 and 1 (true, as in NumPy), stacks."""
    rng = np.random.default_rng()
    shapes = ((1, 300, 200), (3, 100, 70), (200, 300, 1), (70, 100, 5), (130, 257, 97), (64, 64, 64),
              (5, 1000, 3), (1, 1, 1), (2, 5000, 300), (40, 70, 4100), (4100, 70, 40), (3, 0, 4))
    for m, k, n in shapes:
        for density_a, density_b in ((0.0, 0.5), (0.5, 0.0), (0.002, 0.01), (0.5, 0.5), (1.0, 0.02), (0.03, 1.0)):
            a, b = rng.random((m, k)) < density_a, rng.random((k, n)) < density_b
            big_a, big_b = np.zeros((m + 7, k + 9), bool), np.zeros((k + 7, n + 9), bool)
            pairs = [(av, bv) for av in every_layout(rng, a, big_a) for bv in every_layout(rng, b, big_b)]
            if m * k * n > 1_000_000:
                pairs = pairs[::5]
            for av, bv in pairs:
                check_same_as_numpy(portmat.matmul(av, bv, device=device), av, bv)
        if k:
            a8 = (rng.random((m, k)) < 0.1) * rng.integers(1, 256, (m, k)).astype(np.uint8)
            b8 = (rng.random((k, n)) < 0.1) * rng.integers(1, 256, (k, n)).astype(np.uint8)
            av, bv = a8.view(bool), b8.view(bool)
            check_same_as_numpy(portmat.matmul(av, bv, device=device), av, bv)
            check_same_as_numpy(portmat.matmul(av.T.copy().T, bv.T.copy().T, device=device), av, bv)
    sa, sb = rng.random((4, 30, 50)) < 0.05, rng.random((4, 50, 20)) < 0.05
    for x, y in ((sa, sb), (sa, sb[0]), (sa[0], sb), (np.swapaxes(sa, 1, 2).copy().swapaxes(1, 2), sb)):
        check_same_as_numpy(portmat.matmul(x, y, device=device), x, y)
    out = np.ones((4, 30, 20), bool)
    assert portmat.matmul(sa, sb, out=out, device=device) is out
    check_same_as_numpy(out, sa, sb)


@pytest.mark.parametrize("device", DEVICE_IDS)
def test_large_complex_products_in_every_layout(device):
    """Complex products big enough for the packed GEMMs (on the CPU, b's real form is packed
    straight from b), and smaller ones that the CPU gives its complex kernels: b contiguous,
    transposed, a slice with a leading dimension and an offset, strided and reversed; a transposed
    too; odd sizes, so panels end inside a complex column."""
    rng = np.random.default_rng()
    for dtype in (np.complex64, np.complex128):
        for m, k, n in ((131, 257, 97), (64, 300, 200), (48, 48, 48), (33, 200, 17), (100, 37, 61)):
            a = random_values(rng, (m, k), dtype)
            big = random_values(rng, (k + 7, n + 5), dtype)
            for b in (big[:k, :n].copy(), big[3:k + 3, 5:n + 5], as_view(rng, big[:k, :n], "transposed"),
                      as_view(rng, big[:k, :n], "strided"), as_view(rng, big[:k, :n], "reversed")):
                check_same_as_numpy(portmat.matmul(a, b, device=device), a, b)
            at = as_view(rng, a, "transposed")
            check_same_as_numpy(portmat.matmul(at, big[:k, :n], device=device), at, big[:k, :n])


@pytest.mark.parametrize("device", DEVICE_IDS)
def test_complex_products_with_few_rows_or_columns_in_every_layout(device):
    """Complex products of at most a few rows of a or columns of b (vectors among them): few rows
    multiply a's real and imaginary parts stacked by b read as reals where b's rows are contiguous,
    column-major operands go through the transposed product, the rest through b's real form.
    Every pair of layouts (contiguous, a slice with a leading dimension, column-major, strided,
    reversed) against the exact product, and stacks, a broadcast operand and out=."""
    rng = np.random.default_rng()
    for dtype in (np.complex64, np.complex128):
        for m, k, n in ((1, 257, 97), (2, 300, 200), (3, 64, 5), (4, 1024, 260), (5, 33, 70), (1, 1, 1),
                        (97, 257, 1), (200, 300, 2), (260, 1024, 4), (70, 33, 5), (8, 130, 90), (90, 130, 7)):
            a = random_values(rng, (m, k), dtype)
            b = random_values(rng, (k, n), dtype)
            big_a = random_values(rng, (m + 7, k + 9), dtype)
            big_b = random_values(rng, (k + 7, n + 9), dtype)
            for av in every_layout(rng, a, big_a):
                for bv in every_layout(rng, b, big_b):
                    check_same_as_numpy(portmat.matmul(av, bv, device=device), av, bv)
            for av, bv in ((a[0], b), (a, b[:, 0]), (a[0], b[:, 0])):
                check_same_as_numpy(portmat.matmul(av, bv, device=device), av, bv)
            stack_a = random_values(rng, (3, m, k), dtype)
            stack_b = random_values(rng, (3, k, n), dtype)
            for sa, sb in ((stack_a, b), (a, stack_b), (stack_a, stack_b),
                           (np.swapaxes(np.swapaxes(stack_a, 1, 2).copy(), 1, 2), as_view(rng, b, "transposed")),
                           (as_view(rng, a, "transposed"), np.swapaxes(np.swapaxes(stack_b, 1, 2).copy(), 1, 2))):
                check_same_as_numpy(portmat.matmul(sa, sb, device=device), sa, sb)
            for out in (np.full((m, n), np.nan, dtype), np.full((n, m), np.nan, dtype).T):
                at, bt = as_view(rng, a, "transposed"), as_view(rng, b, "transposed")
                assert portmat.matmul(at, bt, out=out, device=device) is out
                check_same_as_numpy(out, at, bt)


@pytest.mark.parametrize("device", DEVICE_IDS)
def test_dtype_argument_as_numpy(device):
    rng = np.random.default_rng()
    a, b = random_values(rng, (5, 8), "int16"), random_values(rng, (8, 3), "int16")
    for dtype in ("float32", "float64", "int64", "complex64"):
        check_same_as_numpy(portmat.matmul(a, b, dtype=dtype, device=device), a, b, want_dtype=dtype)
    x = random_values(rng, (5, 8), "float64")
    with pytest.raises(TypeError):
        np.matmul(x, x.T, dtype="int32")
    with pytest.raises(TypeError):
        portmat.matmul(x, x.T, dtype="int32", device=device)


def test_what_numpy_computes_itself_is_numpys():
    rng = np.random.default_rng()
    a = rng.uniform(-1, 1, (4, 5))
    b = rng.uniform(-1, 1, (5, 3))
    obj = portmat.matmul(a.astype(object), b.astype(object))
    assert obj.dtype == object and np.allclose(obj.astype(float), a @ b)
    ld = portmat.matmul(a.astype(np.longdouble), b.astype(np.longdouble))
    assert ld.dtype == np.longdouble and np.allclose(ld, a @ b)
    with warnings.catch_warnings():  # np.matrix is pending deprecation; people still use it
        warnings.simplefilter("ignore", PendingDeprecationWarning)
        m, mb = np.matrix(a), np.matrix(b)
    got = portmat.matmul(m, mb)
    assert type(got) is np.matrix and np.allclose(got, a @ b)


@pytest.mark.parametrize("device", DEVICE_IDS)
def test_array_likes_and_empty_stacks(device):
    got = portmat.matmul([[1, 2], [3, 4]], [[5], [6]], device=device)
    assert got.dtype == np.array([1]).dtype and np.array_equal(got, [[17], [39]])
    for sa, sb in (((0, 3, 4), (4, 2)), ((2, 0, 4), (2, 4, 5)), ((3, 4), (0, 4, 5)), ((2, 3, 0), (0, 5))):
        a, b = np.ones(sa, np.float32), np.ones(sb, np.float32)
        got = portmat.matmul(a, b, device=device)
        want = np.matmul(a, b)
        assert got.shape == want.shape and np.array_equal(got, want)


@pytest.mark.parametrize("device", DEVICE_IDS)
def test_broadcast_stacks_are_not_copied(device):
    # A (1000, 64, 64) stack that broadcasts one matrix: read in place, not materialised.
    rng = np.random.default_rng()
    w = random_values(rng, (64, 64), "float32")
    x = random_values(rng, (1000, 1, 64), "float32")
    wb = np.broadcast_to(w, (1000, 64, 64))
    check_same_as_numpy(portmat.matmul(x, wb, device=device), x, wb)
    check_same_as_numpy(portmat.matmul(wb, x.transpose(0, 2, 1), device=device), wb, x.transpose(0, 2, 1))


@pytest.mark.parametrize("device", DEVICE_IDS)
def test_stacks_across_the_kernels_edges(device):
    """Stacks at the sizes where a GPU's batched kernels change: 32x32 tiles of the small kernel
    (up to 64), the batched tiles past it, k slabs of 32; a broadcast b, transposed stacks, a
    strided `out`, complex stacks, and stacks of several 16 MiB chunks (the NumPy-in/out pipeline's
    ring of staging slots), each against the float64 reference on fresh random values."""
    rng = np.random.default_rng()
    cases = [(3, 1, 1, 1), (7, 31, 33, 17), (5, 32, 32, 32), (4, 33, 64, 65), (3, 65, 70, 40),
             (2, 130, 300, 260), (300, 48, 64, 40)]
    for count, m, k, n in cases:
        for dtype in (np.float32, np.float64, np.complex64):
            a = random_values(rng, (count, m, k), dtype)
            b = random_values(rng, (count, k, n), dtype)
            check_same_as_numpy(portmat.matmul(a, b, device=device), a, b)
            check_same_as_numpy(portmat.matmul(a, b[0], device=device), a, b[0])  # broadcast b
            at, bt = as_view(rng, a, "transposed"), as_view(rng, b, "transposed")
            check_same_as_numpy(portmat.matmul(at, bt, device=device), at, bt)
            big = np.full((count, m, 2 * n), np.nan, dtype)
            out = big[..., ::2]
            got = portmat.matmul(a, b, out=out, device=device)
            assert got is out
            check_same_as_numpy(out, a, b)
            assert np.isnan(big[..., 1::2]).all(), "wrote between the columns of out"
    a = random_values(rng, (2000, 64, 64), np.float32)  # ~32 MiB a side: 4 chunks
    b = random_values(rng, (2000, 64, 64), np.float32)
    check_same_as_numpy(portmat.matmul(a, b, device=device), a, b)

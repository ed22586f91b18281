"""portmat.matmul against a float64 NumPy reference: awkward shapes, views, dtypes."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import portmat
from conftest import check_matmul, random_matrix

# 1, primes, one off every tile size in use (64, 128, 16), and a few larger non-multiples.
AWKWARD = [1, 2, 3, 5, 7, 13, 17, 31, 63, 65, 127, 129, 257]


@pytest.mark.parametrize("m", [1, 7, 65, 129])
@pytest.mark.parametrize("k", [1, 13, 63, 257])
@pytest.mark.parametrize("n", [1, 5, 127, 130])
def test_awkward_shapes_float32(device, rng, m, k, n):
    a, b = random_matrix(rng, (m, k)), random_matrix(rng, (k, n))
    check_matmul(portmat.matmul(a, b, device=device), a, b)


@pytest.mark.parametrize("n", [64, 128, 256])
def test_tile_multiples(device, rng, n):
    a, b = random_matrix(rng, (n, n)), random_matrix(rng, (n, n))
    check_matmul(portmat.matmul(a, b, device=device), a, b)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_every_column_count_of_small_products(device, rng, dtype):
    # The CPU's small path cuts c's columns into strips of two vectors, one-vector strips read in
    # place and a zero-padded copy of the last few columns: every n up to five vectors, for rows
    # that fill and do not fill its 6-row tiles, with b a view whose rows are longer than n.
    if dtype == np.float64 and not portmat._ext.find_device(device).supports_float64:
        pytest.skip("device has no float64")
    for m in (1, 2, 7, 13):
        for k in (3, 24):
            wide = random_matrix(rng, (k, 48), dtype)
            for n in range(1, 41):
                a, b = random_matrix(rng, (m, k), dtype), wide[:, :n]
                check_matmul(portmat.matmul(a, b, device=device), a, b)


@pytest.mark.parametrize("m,k,n,dtype", [(5, 16, 40000, np.float32), (64, 16, 3001, np.float32), (13, 7, 50001, np.float32),
                                         (9, 8, 30000, np.float64), (64, 3, 2049, np.float64)])
def test_short_k_wide_products(device, rng, m, k, n, dtype):
    # A short k and few rows against a wide b (the CPU's small path past its size limit), b a view.
    if dtype == np.float64 and not portmat._ext.find_device(device).supports_float64:
        pytest.skip("device has no float64")
    a, b = random_matrix(rng, (m, k), dtype), random_matrix(rng, (k, n + 3), dtype)[:, 1:n + 1]
    check_matmul(portmat.matmul(a, b, device=device), a, b)


def laid_out(rng, shape, layout, dtype):
    """A random operand of `shape`: C- or F-ordered, or ("view") a strided slice of a larger matrix,
    its rows longer than the operand and its first element at an odd offset."""
    if layout == "view":
        return random_matrix(rng, (shape[0] + 2, shape[1] + 5), dtype)[1:shape[0] + 1, 3:shape[1] + 3]
    return np.asarray(random_matrix(rng, shape, dtype), order=layout)


@pytest.mark.parametrize("m,k,n,dtype", [(16, 1300, 901, np.float32), (5, 1027, 333, np.float32),
                                         (17, 700, 1100, np.float32), (8, 1100, 500, np.float64)])
@pytest.mark.parametrize("a_layout,b_layout", [("C", "C"), ("F", "C"), ("C", "F"), ("view", "view")])
def test_few_rows_many_k_blocks(device, rng, m, k, n, dtype, a_layout, b_layout):
    # Few rows of c against several kc blocks of a wide b: on the CPU one step per B block, which
    # the packed GEMM double-buffers with one thread packing ahead (gemm_driver.cpp, Plan::pipeline).
    if dtype == np.float64 and not portmat._ext.find_device(device).supports_float64:
        pytest.skip("device has no float64")
    a, b = laid_out(rng, (m, k), a_layout, dtype), laid_out(rng, (k, n), b_layout, dtype)
    check_matmul(portmat.matmul(a, b, device=device), a, b)


@pytest.mark.parametrize("m,k,n,dtype", [(5, 1000, 4099, np.float32), (9, 777, 300, np.float32),
                                         (12, 2048, 33, np.float32), (16, 1500, 1000, np.float32),
                                         (13, 900, 2500, np.float64), (8, 4096, 517, np.float64),
                                         (16, 600, 2063, np.float64), (16, 40, 3001, np.float32),
                                         (7, 24, 5003, np.float64), (11, 100, 271, np.float32)])
@pytest.mark.parametrize("a_layout,b_layout", [("C", "C"), ("F", "C"), ("view", "view"), ("C", "F")])
def test_few_rows_wide_b(device, rng, m, k, n, dtype, a_layout, b_layout):
    # 5-16 rows of a against a wide row-major b: on the CPU skinny.cpp's rows_tiles (register
    # tiles of 4 rows over chunks of b's rows, each thread a block of c's columns over all of K);
    # b column-major goes elsewhere and is checked alike.
    if dtype == np.float64 and not portmat._ext.find_device(device).supports_float64:
        pytest.skip("device has no float64")
    a, b = laid_out(rng, (m, k), a_layout, dtype), laid_out(rng, (k, n), b_layout, dtype)
    check_matmul(portmat.matmul(a, b, device=device), a, b)


@pytest.mark.parametrize("m,k,n,dtype", [(64, 64, 16384, np.float32), (30, 200, 9001, np.float32),
                                         (64, 100, 8191, np.float64)])
@pytest.mark.parametrize("a_layout,b_layout", [("C", "C"), ("F", "F"), ("view", "view")])
def test_few_rows_short_k_very_wide_b(device, rng, m, k, n, dtype, a_layout, b_layout):
    # Few rows, a K under one kc block and a very wide b: on the CPU each thread takes chunks of
    # c's columns with B blocks in its own L2 (gemm_driver.cpp, split_n).
    if dtype == np.float64 and not portmat._ext.find_device(device).supports_float64:
        pytest.skip("device has no float64")
    a, b = laid_out(rng, (m, k), a_layout, dtype), laid_out(rng, (k, n), b_layout, dtype)
    check_matmul(portmat.matmul(a, b, device=device), a, b)


@pytest.mark.parametrize("m,k,n", [(2048, 1, 2047), (700, 8, 3001), (40000, 16, 16), (16, 16, 40001), (513, 32, 129)])
@pytest.mark.parametrize("a_layout,b_layout", [("C", "C"), ("F", "F"), ("view", "view")])
def test_short_k_large_results(device, rng, m, k, n, a_layout, b_layout):
    # A k of 1-32 and a large c (rank-k updates, outer products, tall a against a small b, small a
    # against a wide b): on CUDA the short-k kernel, which writes c straight from registers.
    a, b = laid_out(rng, (m, k), a_layout, np.float32), laid_out(rng, (k, n), b_layout, np.float32)
    check_matmul(portmat.matmul(a, b, device=device), a, b)


@pytest.mark.parametrize("m,k,n", [(20000, 64, 64), (64, 64, 20001), (5001, 48, 40), (33, 61, 9000)])
@pytest.mark.parametrize("a_layout,b_layout", [("C", "C"), ("F", "C"), ("C", "F"), ("view", "view")])
def test_short_k_and_few_columns_large_results(device, rng, m, k, n, a_layout, b_layout):
    # k and a side of c up to 64, the other side long: on CUDA the resident kernels, the short
    # operand in shared memory and the long one streamed.
    a, b = laid_out(rng, (m, k), a_layout, np.float32), laid_out(rng, (k, n), b_layout, np.float32)
    check_matmul(portmat.matmul(a, b, device=device), a, b)


def test_large_k(device, rng):
    a, b = random_matrix(rng, (33, 4099)), random_matrix(rng, (4099, 35))
    check_matmul(portmat.matmul(a, b, device=device), a, b)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(m=st.integers(1, 200), k=st.integers(1, 200), n=st.integers(1, 200),
       dtype=st.sampled_from([np.float32, np.float64]), seed=st.integers(0, 2**32 - 1))
def test_random_shapes(device, m, k, n, dtype, seed):
    if dtype == np.float64 and not portmat._ext.find_device(device).supports_float64:
        pytest.skip("device has no float64")
    r = np.random.default_rng(seed)
    a, b = random_matrix(r, (m, k), dtype), random_matrix(r, (k, n), dtype)
    check_matmul(portmat.matmul(a, b, device=device), a, b)


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (3, 7, 5), (65, 129, 63), (200, 150, 170)])
def test_float64_is_computed_in_float64(device, rng, m, k, n):
    if not portmat._ext.find_device(device).supports_float64:
        pytest.skip("device has no float64")
    a, b = random_matrix(rng, (m, k), np.float64), random_matrix(rng, (k, n), np.float64)
    c = portmat.matmul(a, b, device=device)
    check_matmul(c, a, b)  # the bound uses float64's eps: a float32 kernel could not meet it


def test_mixed_dtypes_promote_like_numpy(device, rng):
    if not portmat._ext.find_device(device).supports_float64:
        pytest.skip("device has no float64")
    a32, b64 = random_matrix(rng, (20, 30)), random_matrix(rng, (30, 10), np.float64)
    c = portmat.matmul(a32, b64, device=device)
    assert c.dtype == np.matmul(a32, b64).dtype == np.float64
    check_matmul(c, a32, b64)
    c = portmat.matmul(b64.T, a32.T, device=device)
    assert c.dtype == np.float64


def _views(rng, dtype):
    """(name, view) pairs of a 40x50 operand laid out every way a NumPy user can make one."""
    base = random_matrix(rng, (120, 150), dtype)
    return [
        ("contiguous", np.ascontiguousarray(base[:40, :50])),
        ("fortran", np.asfortranarray(base[:40, :50])),
        ("transposed", np.ascontiguousarray(base[:50, :40]).T),
        ("row slice", base[3:43, :50]),
        ("column slice", base[:40, 7:57]),
        ("both sliced", base[11:51, 13:63]),
        ("strided rows", base[::3, :50][:40]),
        ("strided both", base[::2, ::3][:40, :50]),
        ("negative rows", base[::-1, :50][:40]),
        ("negative columns", base[:40, ::-1][:, :50]),
        ("negative both", base[::-2, ::-3][:40, :50]),
        ("transposed slice", base[20:70, 30:70].T),
        ("broadcast", np.broadcast_to(base[0, :50], (40, 50))),
    ]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_views(device, rng, dtype):
    if dtype == np.float64 and not portmat._ext.find_device(device).supports_float64:
        pytest.skip("device has no float64")
    views = _views(rng, dtype)
    bs = [(name, v.T) for name, v in views]  # 50x40 operands, same layouts transposed
    for name_a, a in views:
        for name_b, b in bs:
            assert a.shape == (40, 50) and b.shape == (50, 40)
            c = portmat.matmul(a, b, device=device)
            try:
                check_matmul(c, a, b)
            except AssertionError as e:
                raise AssertionError(f"a {name_a}, b {name_b}: {e}") from None


def test_inputs_are_not_modified(device, rng):
    a, b = random_matrix(rng, (30, 40)), random_matrix(rng, (40, 20))
    a0, b0 = a.copy(), b.copy()
    portmat.matmul(a, b, device=device)
    assert np.array_equal(a, a0) and np.array_equal(b, b0)


def test_read_only_inputs(device, rng):
    a, b = random_matrix(rng, (30, 40)), random_matrix(rng, (40, 20))
    a.flags.writeable = False
    b.flags.writeable = False
    check_matmul(portmat.matmul(a, b, device=device), a, b)


def test_same_array_twice(device, rng):
    a = random_matrix(rng, (70, 70))
    check_matmul(portmat.matmul(a, a, device=device), a, a)
    check_matmul(portmat.matmul(a, a.T, device=device), a, a.T)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_k_zero_gives_zeros(device, dtype):
    a, b = np.empty((4, 0), dtype), np.empty((0, 3), dtype)
    c = portmat.matmul(a, b, device=device)
    assert c.shape == (4, 3) and c.dtype == dtype
    assert np.array_equal(c, np.zeros((4, 3), dtype))


@pytest.mark.parametrize("m,k,n", [(0, 5, 3), (4, 5, 0), (0, 0, 0), (0, 3, 0)])
def test_empty_results(device, rng, m, k, n):
    a, b = random_matrix(rng, (m, k)), random_matrix(rng, (k, n))
    c = portmat.matmul(a, b, device=device)
    assert c.shape == (m, n) and c.dtype == np.float32


def test_array_likes_follow_numpy(device):
    a = [[1.5, 2.0], [3.0, -4.0]]
    b = [[2.0], [0.25]]
    if not portmat._ext.find_device(device).supports_float64:
        pytest.skip("device has no float64")
    c = portmat.matmul(a, b, device=device)
    assert c.dtype == np.float64
    check_matmul(c, np.array(a), np.array(b))


def test_large_values_do_not_overflow_indices(device, rng):
    # 3 x 70000 @ 70000 x 2: long K runs, results of scale sqrt(K).
    a, b = random_matrix(rng, (3, 70000)), random_matrix(rng, (70000, 2))
    check_matmul(portmat.matmul(a, b, device=device), a, b)


def test_result_is_fresh_each_call(device, rng):
    a, b = random_matrix(rng, (16, 16)), random_matrix(rng, (16, 16))
    c1 = portmat.matmul(a, b, device=device)
    c2 = portmat.matmul(a * 2, b, device=device)
    assert c1 is not c2
    check_matmul(c1, a, b)
    check_matmul(c2, a * 2, b)


@pytest.mark.parametrize("offset", [0, 1, 3, 4])
@pytest.mark.parametrize("transpose_a,transpose_b", [(False, False), (True, False), (False, True), (True, True)])
def test_tile_multiple_views_at_any_alignment(device, rng, offset, transpose_a, transpose_b):
    # Sizes with no edge tiles take the vector-load path; views starting `offset` elements into
    # their buffer must still be read correctly (vector loads only where rows are aligned).
    n = 128
    base_a = random_matrix(rng, (n, n + 8))
    base_b = random_matrix(rng, (n, n + 8))
    a = base_a[:, offset:offset + n]
    b = base_b[:, offset:offset + n]
    a = a.T if transpose_a else a
    b = b.T if transpose_b else b
    check_matmul(portmat.matmul(a, b, device=device), a, b)


ISA_SCRIPT = r"""
import numpy as np, portmat
rng = np.random.default_rng()
for m, k, n in ((1, 300, 200), (200, 300, 1), (3, 1000, 70), (70, 1000, 3), (130, 257, 97), (5, 100, 4100)):
    for p in (0.0, 0.01, 0.5):
        a, b = rng.random((m, k)) < p, rng.random((k, n)) < 0.5
        for x, y in ((a, b), (a.T.copy().T, b), (a, b.T.copy().T), (a.T.copy().T, b.T.copy().T)):
            assert np.array_equal(portmat.matmul(x, y, device="cpu:0"), x @ y), (m, k, n, p)
    for dtype in (np.int32, np.uint64, np.int8):
        info = np.iinfo(dtype)
        a = rng.integers(info.min, info.max, (m, k), dtype=dtype, endpoint=True)
        b = rng.integers(info.min, info.max, (k, n), dtype=dtype, endpoint=True)
        for x, y in ((a, b), (a.T.copy().T, b), (a, b.T.copy().T)):
            assert np.array_equal(portmat.matmul(x, y, device="cpu:0"), x @ y), (m, k, n, dtype)
print("ok")
"""


@pytest.mark.parametrize("isa", ["avx2", "scalar"])
def test_boolean_and_integer_skinny_products_on_every_isa(isa):
    """The boolean kernels and the integer skinny kernels are compiled once per ISA (AVX-512,
    AVX2, the baseline) and the CPU's best runs in-process: the others run here, chosen by
    PORTMAT_CPU_ISA in a fresh process (on a CPU without that ISA, its best runs again)."""
    from conftest import run_python

    if "cpu:0" not in [d.id for d in portmat.devices()]:
        pytest.skip("no cpu:0")
    r = run_python("-c", ISA_SCRIPT, env={"PORTMAT_CPU_ISA": isa}, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr


LINE_OFFSET_SCRIPT = r"""
import numpy as np, portmat, sys
device = sys.argv[1]
rng = np.random.default_rng()

def at_offset(shape, dtype, offset):
    # An array of random values and of `shape` whose data starts `offset` elements past a 64-byte line.
    dtype = np.dtype(dtype)
    size = int(np.prod(shape))
    flat = np.empty(size + 128 // dtype.itemsize, dtype)
    skip = (-flat.ctypes.data % 64) // dtype.itemsize + offset
    a = flat[skip:skip + size].reshape(shape)
    assert a.ctypes.data % 64 == offset * dtype.itemsize
    a[...] = random(shape, dtype)
    return a

def random(shape, dtype):
    if np.dtype(dtype).kind == "i":
        return rng.integers(-50, 50, shape).astype(dtype)
    if np.dtype(dtype).kind == "c":
        return (rng.uniform(-1, 1, shape) + 1j * rng.uniform(-1, 1, shape)).astype(dtype)
    return rng.uniform(-1, 1, shape).astype(dtype)

m = 37
for dtype in (np.float32, np.float64, np.complex64, np.int32):
    lanes = 64 // np.dtype(dtype).itemsize
    for offset in range(lanes):
        for k in (64, 160, 200, 1024):  # multiples of the lanes (every row at one offset) and not
            L = at_offset((m, k), dtype, offset)
            for b in (random(k, dtype), random((k, 2), dtype), random((k, 4), dtype)):
                for x, y in ((L, b), (b.T, L.T), (L.T.T, b)):
                    got = portmat.matmul(x, y, device=device)
                    if dtype == np.int32:
                        assert np.array_equal(got, np.matmul(x, y)), (dtype, offset, k)
                        continue
                    want = np.matmul(x.astype(np.complex128 if dtype == np.complex64 else np.float64), y)
                    tol = 1e-5 if dtype in (np.float32, np.complex64) else 1e-12
                    assert np.allclose(got, want, rtol=tol, atol=tol * k), (dtype, offset, k, x.shape, y.shape)
            if dtype == np.float32:
                # Infinities and NaN in the elements before and after the vector boundaries: the
                # products the kernels drop must not turn into NaN, the ones they keep must stay.
                L2 = at_offset((m, k), dtype, offset)
                L2[...] = 1.0
                for r in range(16):  # an infinity at every lane of the first and the last vector
                    L2[r, r + 1], L2[16 + r, k - 2 - r] = np.inf, -np.inf
                L2[32, 0], L2[33, k - 1], L2[34, 2] = np.inf, -np.inf, np.nan
                v = np.ones(k, np.float32)
                assert np.array_equal(portmat.matmul(L2, v, device=device), L2 @ v, equal_nan=True), (offset, k)
                w = np.ones(m, np.float32)
                assert np.array_equal(portmat.matmul(w, L2, device=device), w @ L2, equal_nan=True), (offset, k)
print("ok")
"""


@pytest.mark.parametrize("isa", [None, "avx2", "scalar"])
def test_streamed_operand_at_every_line_offset(device, isa):
    """Matrix-vector and vector-matrix products (and 2 or 4 columns or rows) with the long operand
    starting at every element offset from a 64-byte line: the skinny kernels align their vector
    loops to the lines and take the elements before and after with vectors whose other lanes they
    drop (skinny.cpp, dots and axpy). float32, float64, complex64, int32; infinities and NaN next to
    the boundaries give NumPy's infinities and NaN, not NaN from a dropped lane. The skinny kernels
    are compiled per ISA: `isa` runs them in a fresh process under PORTMAT_CPU_ISA."""
    from conftest import run_python

    if isa is not None and device != "cpu:0":
        pytest.skip("the ISA clones are the CPU backend's")
    r = run_python("-c", LINE_OFFSET_SCRIPT, device, env={"PORTMAT_CPU_ISA": isa}, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr

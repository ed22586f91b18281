"""The CPU backend's complex kernels (src/cpu/kernels/gemm_complex_*.cpp) through portmat.matmul:
products large enough for the packed GEMM (where the kernel set has complex kernels, the complex
product runs on them; elsewhere as the real product with b's real form), with every remainder of
the complex tile in M (3 rows) and N (8 complex64 / 4 complex128 columns), K across several cache
blocks, both layouts of b, views of a and b (transposed, strided, reversed, sliced with slack,
offsets), stacks; entry by entry against a complex128 reference with the bound of
test_numpy_contract.py (K * eps * 2 * (|a| @ |b|))."""

import numpy as np
import pytest

import portmat

DTYPES = [np.complex64, np.complex128]


def random_complex(rng, shape, dtype):
    return (rng.uniform(-1, 1, shape) + 1j * rng.uniform(-1, 1, shape)).astype(dtype)


def check(got, a, b):
    want_dtype = np.result_type(a.dtype, b.dtype)
    assert got.dtype == want_dtype
    a64, b64 = a.astype(np.complex128), b.astype(np.complex128)
    ref = np.matmul(a64, b64)
    assert got.shape == ref.shape
    mag = np.matmul(np.abs(a64), np.abs(b64))
    k = a.shape[-1]
    bound = k * np.finfo(want_dtype).eps * 2 * mag + np.finfo(want_dtype).tiny
    err = np.abs(got.astype(np.complex128) - ref)
    worst = np.unravel_index(np.argmax(err - bound), err.shape)
    assert np.all(err <= bound), f"entry {worst}: error {err[worst]:.3e} > bound {bound[worst]:.3e}"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m", [201, 202, 203])  # every remainder of 3 rows
def test_every_tile_remainder(rng, dtype, m):
    for n in range(136, 144):  # every remainder of 8 (and 4) columns
        for k, b_fortran in ((150, False), (300, True), (257, n % 2 == 0)):
            a = random_complex(rng, (m, k), dtype)
            b = random_complex(rng, (k, n), dtype)
            if b_fortran:
                b = np.asfortranarray(b)
            check(portmat.matmul(a, b, device="cpu"), a, b)


@pytest.mark.parametrize("dtype", DTYPES)
def test_views(rng, dtype):
    m, k, n = 190, 230, 170
    big_a = random_complex(rng, (2 * m + 3, 2 * k + 5), dtype)
    big_b = random_complex(rng, (2 * k + 3, 2 * n + 7), dtype)
    a_views = {
        "contiguous": big_a[:m, :k].copy(),
        "sliced": big_a[3 : m + 3, 5 : k + 5],  # slack and an offset
        "transposed": np.ascontiguousarray(big_a[:k, :m]).T,
        "strided": big_a[: 2 * m : 2, : 2 * k : 2],
        "reversed": big_a[m - 1 :: -1, k - 1 :: -1],
    }
    b_views = {
        "contiguous": big_b[:k, :n].copy(),
        "sliced": big_b[1 : k + 1, 7 : n + 7],
        "transposed": np.ascontiguousarray(big_b[:n, :k]).T,
        "transposed sliced": big_b[2 : n + 2, 3 : k + 3].T,
        "strided": big_b[: 2 * k : 2, 1 : 2 * n + 1 : 2],
        "reversed": big_b[k - 1 :: -1, ::-1][:, :n],
    }
    for an, a in a_views.items():
        for bn, b in b_views.items():
            assert a.shape == (m, k) and b.shape == (k, n), (an, bn)
            got = portmat.matmul(a, b, device="cpu")
            check(got, a, b)


@pytest.mark.parametrize("dtype", DTYPES)
def test_stacks(rng, dtype):
    a = random_complex(rng, (3, 150, 160), dtype)
    w = random_complex(rng, (160, 140), dtype)
    check(portmat.matmul(a, w, device="cpu"), a, w)  # rows stacked: one product
    b = random_complex(rng, (3, 160, 140), dtype)
    check(portmat.matmul(a, b, device="cpu"), a, b)  # a product per matrix
    check(portmat.matmul(a, np.swapaxes(b, 1, 2).copy().swapaxes(1, 2), device="cpu"), a, b)
    # Stacks of small products, one a thread at a time (on the complex kernels from 16^3, else
    # through b's real form), an odd count so that the threads' runs end unevenly; a column-major
    # a's products are declined by the complex kernels and go through b's real form.
    for (s, m, k, n) in ((41, 16, 20, 24), (37, 33, 40, 17), (23, 8, 12, 10), (50, 64, 64, 64)):
        a = random_complex(rng, (s, m, k), dtype)
        b = random_complex(rng, (s, k, n), dtype)
        check(portmat.matmul(a, b, device="cpu"), a, b)
        at = np.swapaxes(np.swapaxes(a, 1, 2).copy(), 1, 2)
        check(portmat.matmul(at, b, device="cpu"), at, b)
        check(portmat.matmul(a, b[0].T.copy().T, device="cpu"), a, b[0])


@pytest.mark.parametrize("dtype", DTYPES)
def test_large_on_threads(rng, dtype):
    # The table's own blocks: several A and B blocks, K over several kc blocks, both threads.
    a = random_complex(rng, (520, 700), dtype)
    b = random_complex(rng, (700, 1100), dtype)
    check(portmat.matmul(a, b, device="cpu"), a, b)
    check(portmat.matmul(a, np.asfortranarray(b), device="cpu"), a, b)


@pytest.mark.parametrize("dtype", DTYPES)
def test_special_values(rng, dtype):
    # inf and nan propagate as NumPy's do where they are alone in their sums; zeros stay exact.
    a = random_complex(rng, (200, 150), dtype)
    b = random_complex(rng, (150, 140), dtype)
    a[5, :] = 0
    b[:, 7] = 0
    got = portmat.matmul(a, b, device="cpu")
    assert np.all(got[5, :] == 0) and np.all(got[:, 7] == 0)
    a[9, 3] = np.nan
    got = portmat.matmul(a, b, device="cpu")
    assert np.all(np.isnan(got[9, :][np.arange(140) != 7]))
    assert not np.any(np.isnan(np.delete(got, 9, axis=0)))

"""portmat.matmul's entry (src/python/module.cpp, matmul_entry): a C function that does plain small
float32 / float64 products itself and hands every other call, with the same arguments, to the
general path in Python. Whichever way a call goes, the result, the errors and the signature must be
np.matmul's: these tests make both ways run the same products and compare them with a float64
reference, and check that the arguments the entry does not take reach the general path intact."""

import inspect
import pickle

import numpy as np
import pytest

import portmat

from conftest import check_matmul, random_matrix


def test_signature_doc_and_pickle():
    sig = inspect.signature(portmat.matmul)
    assert list(sig.parameters) == ["a", "b", "out", "dtype", "device", "casting", "precision",
                                    "order", "subok", "signature", "axes", "axis"]
    # The C entry's documented signature is its general path's (which takes every argument).
    assert str(sig) == str(inspect.signature(portmat._matmul))
    assert sig.parameters["a"].kind is inspect.Parameter.POSITIONAL_ONLY
    assert sig.parameters["out"].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    assert sig.parameters["device"].kind is inspect.Parameter.KEYWORD_ONLY
    assert sig.parameters["casting"].default == "same_kind"
    assert "np.matmul" in portmat.matmul.__doc__
    assert pickle.loads(pickle.dumps(portmat.matmul)) is portmat.matmul


def test_array_heads_read_directly():
    # The layout check at import passed on this NumPy: the fast path reads operands' heads (the
    # buffer protocol otherwise; still correct, only slower). A NumPy that changed its array
    # struct would fail here first.
    assert portmat._ext.fast_operands()


def _operands(rng, dtype):
    """(a, b) pairs the fast path takes and a few it leaves: views with negative and odd strides,
    vectors on either side, empty and byte-swapped operands, and awkward sizes."""
    big = random_matrix(rng, (40, 50), dtype)
    pairs = [
        (random_matrix(rng, (7, 13), dtype), random_matrix(rng, (13, 9), dtype)),
        (big[1:18:2, 3:40:3], big[::-3, 5:12][:13]),      # strided, negative strides
        (big[2:9, 1:14].T.copy().T, np.asfortranarray(random_matrix(rng, (13, 5), dtype))),
        (random_matrix(rng, (31,), dtype), random_matrix(rng, (31, 17), dtype)),  # vector @ matrix
        (random_matrix(rng, (17, 31), dtype), big[0, :31]),  # matrix @ strided vector
        (random_matrix(rng, (0, 4), dtype), random_matrix(rng, (4, 3), dtype)),
        (random_matrix(rng, (3, 0), dtype), random_matrix(rng, (0, 6), dtype)),
        (random_matrix(rng, (6, 11), dtype).astype(np.dtype(dtype).newbyteorder()),  # not native
         random_matrix(rng, (11, 4), dtype)),
    ]
    return pairs


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fast_and_general_paths_agree(device, rng, dtype):
    if dtype == np.float64 and not portmat._ext.find_device(device).supports_float64:
        pytest.skip("device has no float64")
    for a, b in _operands(rng, dtype):
        want = np.matmul(a.astype(np.float64), b.astype(np.float64))
        for c in (portmat.matmul(a, b, device=device),                      # the C entry
                  portmat._matmul(a, b, device=device),                     # the general path
                  portmat.matmul(a, b, device=device, precision="float32"),  # handed on
                  portmat.matmul(a, b, device=device, casting="same_kind", dtype=None)):
            assert c.shape == want.shape and c.dtype == np.result_type(a, b)
            if a.ndim == 2 and b.ndim == 2:
                check_matmul(c, a, b)
            else:
                bound = max(a.shape[-1], 1) * np.finfo(dtype).eps * (np.abs(a.astype(np.float64)) @
                                                                     np.abs(b.astype(np.float64)))
                assert np.all(np.abs(c - want) <= bound)


@pytest.mark.parametrize("dtype", ["bool", "int8", "int16", "uint8", "uint16", "uint32", "uint64", "float16"])
def test_fast_and_general_paths_agree_on_every_dtype(device, rng, dtype):
    """The fast path takes every same-dtype product NumPy keeps in its dtype: the C entry and the
    general path give NumPy's integers and booleans exactly (wrapping), float16 within float32's
    accumulation bound, for the shapes and views above; out= of these dtypes goes to the general
    path and is written all the same."""
    dtype = np.dtype(dtype)

    def values(shape):
        if dtype.kind == "b":
            return rng.random(shape) < 0.3
        if dtype.kind in "iu":
            info = np.iinfo(dtype)
            return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
        return rng.uniform(-1, 1, shape).astype(dtype)

    big = values((40, 50))
    pairs = [(values((7, 13)), values((13, 9))), (big[1:18:2, 3:40:3], big[::-3, 5:12][:13]),
             (values((31,)), values((31, 17))), (values((17, 31)), big[0, :31]),
             (values((0, 4)), values((4, 3))), (values((5, 13)).astype(dtype.newbyteorder()), values((13, 2)))]
    for a, b in pairs:
        want = np.matmul(a, b)
        for c in (portmat.matmul(a, b, device=device), portmat._matmul(a, b, device=device)):
            assert c.dtype == want.dtype and c.shape == want.shape
            if dtype.kind in "biu":
                assert np.array_equal(c, want)
            else:
                ref = a.astype(np.float64) @ b.astype(np.float64)
                bound = (max(a.shape[-1], 1) * np.finfo(np.float32).eps * (np.abs(a.astype(np.float64)) @
                         np.abs(b.astype(np.float64))) + np.abs(ref) * np.finfo(np.float16).eps)
                assert np.all(np.abs(c.astype(np.float64) - ref) <= bound)
    a, b = pairs[0]
    out = np.empty((7, 9), dtype)
    assert portmat.matmul(a, b, out=out, device=device) is out
    assert np.array_equal(out, np.matmul(a, b)) if dtype.kind in "biu" else np.allclose(out, np.matmul(a, b), atol=0.05)


def test_large_operands_with_a_small_result(device, rng):
    """Operands of 4 MiB and more whose result is under 1 MiB: the C entry takes them where the
    device shares host memory (large_operands_in_place), the general path everywhere else (a
    discrete GPU pins them, a device list splits them). Either way np.matmul's result: vectors on
    both sides, a strided view, out= plain and overlapping an operand, a list of devices, stacks."""
    long = random_matrix(rng, (300, 4100))                    # 4.9 MB
    x, y = random_matrix(rng, (300,)), random_matrix(rng, (4100,))
    pairs = [(x, long), (long, y), (random_matrix(rng, (3, 300)), long),
             (long[:, ::2].T, random_matrix(rng, (300, 5))),  # a strided view of it
             (long.T, x)]
    for a, b in pairs:
        want = np.matmul(a.astype(np.float64), b.astype(np.float64))
        bound = a.shape[-1] * np.finfo(np.float32).eps * (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)))
        for c in (portmat.matmul(a, b, device=device), portmat._matmul(a, b, device=device)):
            assert c.shape == want.shape and c.dtype == np.float32
            assert np.all(np.abs(c - want) <= bound)
    out = np.full(4100, np.nan, np.float32)
    assert portmat.matmul(x, long, out=out, device=device) is out
    want = x.astype(np.float64) @ long.astype(np.float64)
    assert np.allclose(out, want, rtol=1e-5, atol=1e-4)
    # out overlapping b: NumPy's result as if it did not (the general path computes aside)
    b, v = random_matrix(rng, (1100, 1000)), random_matrix(rng, (1100,))  # b: 4.4 MB
    want = v.astype(np.float64) @ b.astype(np.float64)
    assert portmat.matmul(v, b, out=b[7], device=device) is not None
    assert np.allclose(b[7], want, rtol=1e-5, atol=1e-4)
    several = portmat.matmul(x, long, device=[device])  # a list (of one)
    assert np.allclose(several, x.astype(np.float64) @ long.astype(np.float64), rtol=1e-5, atol=1e-4)
    # stacks of large operands (stack_product): a vector on either side, a few columns, a strided
    # view, a stack broadcast against one matrix
    stack = random_matrix(rng, (4, 300, 1001))  # 4.8 MB
    for a, b in [(stack, random_matrix(rng, (1001,))), (random_matrix(rng, (300,)), stack),
                 (stack, random_matrix(rng, (4, 1001, 3))), (stack[:, ::3, ::2], random_matrix(rng, (501, 2))),
                 (random_matrix(rng, (2, 1, 5, 300)), stack)]:
        want = np.matmul(a.astype(np.float64), b.astype(np.float64))
        bound = a.shape[-1] * np.finfo(np.float32).eps * np.matmul(np.abs(a.astype(np.float64)), np.abs(b.astype(np.float64)))
        for c in (portmat.matmul(a, b, device=device), portmat._matmul(a, b, device=device)):
            assert c.shape == want.shape and c.dtype == np.float32
            assert np.all(np.abs(c - want) <= bound)


def test_out_positional_and_keyword(device, rng):
    a, b = random_matrix(rng, (9, 14)), random_matrix(rng, (14, 6))
    for call in (lambda o: portmat.matmul(a, b, o, device=device),
                 lambda o: portmat.matmul(a, b, out=o, device=device)):
        out = np.full((9, 6), np.nan, np.float32)
        assert call(out) is out
        check_matmul(out, a, b)
    # out the fast path cannot write (strided, another dtype, overlapping a): the general path
    wide = np.full((9, 12), np.nan, np.float32)
    assert portmat.matmul(a, b, out=wide[:, ::2], device=device) is not None
    check_matmul(np.ascontiguousarray(wide[:, ::2]), a, b)
    assert np.isnan(wide[:, 1::2]).all()
    out64 = np.zeros((9, 6), np.float64)
    portmat.matmul(a, b, out=out64, device=device)
    check_matmul(out64.astype(np.float32), a, b)
    sq = random_matrix(rng, (8, 8))
    want = sq.astype(np.float64) @ sq.astype(np.float64)
    portmat.matmul(sq, sq, out=sq, device=device)  # overlaps both operands
    assert np.allclose(sq, want, rtol=1e-5, atol=1e-5)


def test_arguments_reach_the_general_path(rng):
    a, b = random_matrix(rng, (5, 4)), random_matrix(rng, (4, 3))
    out = np.zeros((5, 3), np.float32)
    with pytest.raises(TypeError):
        portmat.matmul(a, b, out, out=out)  # out twice
    with pytest.raises(TypeError):
        portmat.matmul(a, b, colour="red")
    with pytest.raises(TypeError):
        portmat.matmul(a=a, b=b)  # positional only
    with pytest.raises(TypeError):
        portmat.matmul(a)
    with pytest.raises(ValueError, match="precision"):
        portmat.matmul(a, b, precision="fast")
    with pytest.raises(ValueError):
        portmat.matmul(a, random_matrix(rng, (5, 3)))  # shapes
    with pytest.raises(ValueError, match="read-only"):
        ro = np.zeros((5, 3), np.float32)
        ro.flags.writeable = False
        portmat.matmul(a, b, out=ro)
    with pytest.raises(ValueError):
        portmat.matmul(a, b, device="nosuch:7")
    with pytest.raises(TypeError):
        portmat.matmul(a.astype(np.float64), b, out=out, casting="no")
    # dtype= and casting= other than the defaults give NumPy's answers
    c = portmat.matmul(a, b, dtype=np.float64)
    assert c.dtype == np.float64
    check_matmul(c.astype(np.float32), a, b)
    c = portmat.matmul(a, b.astype(np.float64), casting="unsafe")
    assert c.dtype == np.float64
    with pytest.warns(PendingDeprecationWarning):  # np.matrix
        m = portmat.matmul(np.asmatrix(a), b)  # a subclass: NumPy's treatment
    assert isinstance(m, np.matrix)
    assert np.allclose(m, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-6)
    assert portmat.matmul([[1.0, 2.0]], [[3.0], [4.0]]).tolist() == [[11.0]]


def test_fast_path_under_many_threads(rng):
    # The entry holds the GIL for tiny products and releases it for larger ones: both from many
    # threads at once, every result checked.
    from concurrent.futures import ThreadPoolExecutor

    pairs = [(random_matrix(rng, (n, n + 1)), random_matrix(rng, (n + 1, n + 2))) for n in (3, 8, 30, 90)]

    def work(i):
        a, b = pairs[i % len(pairs)]
        for _ in range(50):
            check_matmul(portmat.matmul(a, b), a, b)
        return True

    with ThreadPoolExecutor(8) as ex:
        assert all(ex.map(work, range(32)))


def test_hostile_empty_shapes_raise_as_numpy():
    # M x N of empty operands can overflow a 64-bit size: NumPy's error, not a crash or a wrong size.
    for m, n in ((2**40, 2**30), (2**31, 2**33)):
        a, b = np.empty((m, 0), np.float32), np.empty((0, n), np.float32)
        with pytest.raises(ValueError) as ours:
            portmat.matmul(a, b)
        with pytest.raises(ValueError) as theirs:
            np.matmul(a, b)
        assert type(ours.value) is type(theirs.value)
    c = portmat.matmul(np.empty((5, 0), np.float64), np.empty((0, 7), np.float64))
    assert c.shape == (5, 7) and c.dtype == np.float64 and not c.any()

"""Arrays that stay on a device (issue 17).

portmat.Array on every device this machine has (CI: the CPU backend and PoCL's OpenCL device):
products against a float64 reference, integers exact, np.matmul's shapes, chains, out=, DLPack
export, and the errors. Then CuPy arrays and torch tensors on a CUDA GPU, multiplied where they
are: every dtype, views, out=, the caller's stream order, and the errors; those tests skip, saying
why, on machines without a CUDA device or without the library.
"""

import sys
import textwrap

import numpy as np
import pytest

import portmat
from conftest import DEVICES, run_python

EPS = {np.dtype(np.float32): np.finfo(np.float32).eps, np.dtype(np.float64): np.finfo(np.float64).eps,
       np.dtype(np.float16): np.finfo(np.float16).eps}


def info(device):
    return next(d for d in DEVICES if d.id == device)


def assert_close(c, a, b, eps, rel=0.0):
    """Entrywise |c - ref| <= K * eps * (|a| @ |b|) (+ rel * |ref|: a result rounded to a narrower
    dtype), ref in float64 / complex128."""
    wide = np.complex128 if np.iscomplexobj(a) or np.iscomplexobj(b) else np.float64
    a64, b64 = np.asarray(a).astype(wide), np.asarray(b).astype(wide)
    ref = np.matmul(a64, b64)
    k = a64.shape[-1]
    bound = (k + 2) * eps * np.matmul(np.abs(a64), np.abs(b64)) + rel * np.abs(ref) + 1e-300
    err = np.abs(np.asarray(c).astype(wide) - ref)
    assert c.shape == ref.shape
    assert np.all(err <= bound), f"max error / bound {np.max(err / bound):.3g}"


SHAPES = [((17, 33), (33, 5)), ((1, 65), (65, 1)), ((3, 5, 7), (7, 4)), ((2, 1, 5, 7), (3, 7, 4)),
          ((7,), (7, 4)), ((3, 5, 7), (7,)), ((33,), (33,)), ((4, 1, 6), (1, 6, 2)), ((6, 64, 48), (6, 48, 40))]


# ---- portmat.Array on every device --------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_array_products_match_numpy(device, rng, dtype, shapes):
    if dtype == np.float64 and not info(device).supports_float64:
        pytest.skip(f"{device} has no float64")
    a = rng.uniform(-1, 1, shapes[0]).astype(dtype)
    b = rng.uniform(-1, 1, shapes[1]).astype(dtype)
    x, y = portmat.asarray(a, device=device), portmat.asarray(b, device=device)
    assert isinstance(x, portmat.Array) and x.device.id == device and x.shape == a.shape and x.dtype == dtype
    z = x @ y
    assert isinstance(z, portmat.Array) and z.device.id == device and z.dtype == dtype
    assert_close(z.numpy(), a, b, EPS[np.dtype(dtype)])
    assert np.array_equal(np.asarray(portmat.matmul(x, y)), z.numpy())


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint32, np.uint64])
def test_integer_arrays_are_exact_and_wrap(device, rng, dtype):
    info_ = np.iinfo(dtype)
    a = rng.integers(info_.min // 2, info_.max // 2, (3, 9, 21), dtype=dtype, endpoint=True)
    b = rng.integers(info_.min // 2, info_.max // 2, (21, 5), dtype=dtype, endpoint=True)
    z = portmat.asarray(a, device=device) @ portmat.asarray(b, device=device)
    with np.errstate(over="ignore"):
        assert np.array_equal(z.numpy(), np.matmul(a, b))


def test_chain_stays_on_device(device, rng):
    n = 48
    a = (rng.uniform(-1, 1, (n, n)) / np.sqrt(n)).astype(np.float32)
    x = portmat.asarray(a, device=device)
    y = x
    ref = a.astype(np.float64)
    for _ in range(4):
        y = x @ y
        ref = a.astype(np.float64) @ ref
    assert isinstance(y, portmat.Array)
    # Each step's rounding is bounded; four steps of n-term sums of |entries| <= 1/sqrt(n) stay small.
    assert np.max(np.abs(y.numpy() - ref)) <= 8 * n * EPS[np.dtype(np.float32)]


def test_views_in_and_out(device, rng):
    a = rng.uniform(-1, 1, (40, 30)).astype(np.float32)
    for view in (a.T, a[::2], a[:, 3:17], a[::-3, ::2]):
        x = portmat.asarray(view, device=device)
        assert x.shape == view.shape
        assert np.array_equal(x.numpy(), view)
        assert np.array_equal(np.asarray(x), view)
    # A transposed view multiplies as the matrix it shows.
    b = rng.uniform(-1, 1, (40, 6)).astype(np.float32)
    assert_close((portmat.asarray(a.T, device=device) @ portmat.asarray(b, device=device)).numpy(), a.T, b,
                 EPS[np.dtype(np.float32)])


def test_empty_and_empty_sums(device):
    z = portmat.asarray(np.ones((3, 0), np.float32), device=device) @ portmat.asarray(np.ones((0, 4), np.float32),
                                                                                      device=device)
    assert np.array_equal(z.numpy(), np.zeros((3, 4), np.float32))
    z = portmat.asarray(np.ones((0, 5, 2), np.float32), device=device) @ portmat.asarray(np.ones((2, 3), np.float32),
                                                                                         device=device)
    assert z.shape == (0, 5, 3)


def test_out(device, rng):
    a = rng.uniform(-1, 1, (2, 9, 11)).astype(np.float32)
    b = rng.uniform(-1, 1, (11, 7)).astype(np.float32)
    x, y = portmat.asarray(a, device=device), portmat.asarray(b, device=device)
    o = portmat.asarray(np.full((2, 9, 7), np.nan, np.float32), device=device)
    assert portmat.matmul(x, y, out=o) is o
    assert_close(o.numpy(), a, b, EPS[np.dtype(np.float32)])
    # out that is an operand: the answer NumPy gives (the product of the values before).
    s = rng.uniform(-1, 1, (9, 9)).astype(np.float32)
    xs = portmat.asarray(s, device=device)
    assert portmat.matmul(xs, xs, out=xs) is xs
    assert_close(xs.numpy(), s, s, EPS[np.dtype(np.float32)])
    with pytest.raises(ValueError, match=r"out has shape \(9, 7\), expected \(2, 9, 7\)"):
        portmat.matmul(x, y, out=portmat.asarray(np.zeros((9, 7), np.float32), device=device))
    if info(device).supports_float64:
        with pytest.raises(TypeError, match="out is float64"):
            portmat.matmul(x, y, out=portmat.asarray(np.zeros((2, 9, 7)), device=device))
    with pytest.raises(TypeError, match="out must be a portmat.Array"):
        portmat.matmul(x, y, out=np.zeros((2, 9, 7), np.float32))


def test_errors_name_what_is_wrong(device):
    x = portmat.asarray(np.ones((4, 5), np.float32), device=device)
    with pytest.raises(ValueError, match=r"a has shape \(4, 5\), b has shape \(4, 5\)"):
        x @ x
    with pytest.raises(TypeError, match="numpy.ndarray"):
        x @ np.ones((5, 2), np.float32)
    with pytest.raises(TypeError, match="numpy.ndarray"):
        np.ones((3, 4), np.float32) @ x
    with pytest.raises(TypeError, match="datetime64"):
        portmat.asarray(np.ones((2, 2), "datetime64[s]"), device=device)
    with pytest.raises(TypeError, match="object"):
        portmat.asarray(np.ones((2, 2), object), device=device)
    with pytest.raises(TypeError, match="portmat arrays hold"):
        x.astype(object)
    with pytest.raises(TypeError, match="not defined"):
        bool(x)
    others = [d.id for d in DEVICES if d.id != device]
    if others:
        with pytest.raises(ValueError, match=f"a is on {device} and b on {others[0]}"):
            x @ portmat.asarray(np.ones((5, 2), np.float32), device=others[0])
        with pytest.raises(ValueError, match=f"device={others[0]}"):
            portmat.matmul(x, portmat.asarray(np.ones((5, 2), np.float32), device=device), device=others[0])


def test_asarray_keeps_or_moves(device):
    x = portmat.asarray(np.arange(6, dtype=np.float32).reshape(2, 3), device=device)
    assert portmat.asarray(x, device=device) is x
    assert portmat.asarray(x) is x or portmat.default_device().id != device
    moved = portmat.asarray(x, device="cpu")
    assert moved.device.id == portmat.asarray(np.ones(1, np.float32), device="cpu").device.id
    assert np.array_equal(moved.numpy(), x.numpy())
    widened = portmat.asarray(x, device=device, dtype=np.int32)
    assert widened.dtype == np.int32 and np.array_equal(widened.numpy(), np.arange(6).reshape(2, 3))
    assert "shape=(2, 3)" in repr(x) and device in repr(x)
    with pytest.raises(TypeError, match="made by portmat.asarray"):
        portmat.Array(np.ones(3))


def test_dlpack_export(device, rng):
    a = rng.uniform(-1, 1, (3, 4, 5)).astype(np.float32)
    x = portmat.asarray(a, device=device)
    if info(device).backend == "cpu":
        v = np.from_dlpack(x)
        assert np.array_equal(v, a)
        assert x.__dlpack_device__() == (1, 0)
    elif info(device).backend == "opencl":
        with pytest.raises(BufferError, match="numpy()"):
            np.from_dlpack(x)


def test_arrays_in_a_forked_child(device):
    """A child forked after the device started: a product of the parent's arrays either works (the
    CPU backend) or raises DeviceError naming fork (GPU drivers); never a crash or a hang."""
    script = textwrap.dedent(f"""
        import os, sys, numpy as np, portmat
        x = portmat.asarray(np.eye(8, dtype=np.float32) * 2, device={device!r})
        y = (x @ x).numpy()
        pid = os.fork()
        if pid == 0:
            try:
                z = (x @ x).numpy()
                os._exit(0 if np.array_equal(z, y) else 3)
            except portmat.DeviceError as e:
                os._exit(0 if "fork" in str(e) else 4)
            except BaseException:
                os._exit(5)
        _, status = os.waitpid(pid, 0)
        print("child", os.waitstatus_to_exitcode(status))
        sys.exit(os.waitstatus_to_exitcode(status))
    """)
    r = run_python("-c", script, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def test_arrays_from_many_threads_and_small_stacks(device, rng):
    """Arrays shared by threads, some with a small stack: every product right, no crash."""
    import threading

    a = rng.uniform(-1, 1, (3, 40, 50)).astype(np.float32)
    b = rng.uniform(-1, 1, (50, 30)).astype(np.float32)
    x, y = portmat.asarray(a, device=device), portmat.asarray(b, device=device)
    results, errors = [], []

    def work():
        try:
            for _ in range(3):
                results.append((x @ y).numpy())
        except BaseException as e:  # reported below, not lost in the thread
            errors.append(e)

    old = threading.stack_size()
    threading.stack_size(256 * 1024)
    try:
        threads = [threading.Thread(target=work) for _ in range(4)]
    finally:
        threading.stack_size(old)
    threads += [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(results) == 18
    for r in results:
        assert_close(r, a, b, EPS[np.dtype(np.float32)])


def test_arrays_alive_at_exit(device):
    """Arrays still held at interpreter exit (globals, a daemon thread multiplying them): the
    process ends cleanly."""
    script = textwrap.dedent(f"""
        import threading, numpy as np, portmat
        x = portmat.asarray(np.ones((300, 300), np.float32), device={device!r})
        keep = [x @ x for _ in range(3)]
        def loop():
            while True:
                y = x @ x
        threading.Thread(target=loop, daemon=True).start()
        print("ok", (keep[0].numpy() == 300).all())
    """)
    r = run_python("-c", script, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ok True" in r.stdout


def test_impossible_sizes_raise(device):
    with pytest.raises(MemoryError):  # OutOfDeviceMemory is a MemoryError too
        portmat._ext.DeviceArray.empty(device, "float32", [2**40, 2**40])
    with pytest.raises(ValueError, match="negative"):
        portmat._ext.DeviceArray.empty(device, "float32", [-1, 3])
    huge = portmat.asarray(np.ones((2, 1, 1), np.float32), device=device)
    # A broadcast result of 2 x 2**62 elements is refused before any memory is touched.
    with pytest.raises((MemoryError, ValueError)):
        portmat._ext.DeviceArray.empty(device, "float32", [2, 2**62])
    assert huge.shape == (2, 1, 1)


# ---- every dtype on every device (float16, bfloat16, complex, bool, narrow integers, mixed) -------
ALL_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
              "float32", "float64", "complex64", "complex128", "bfloat16"]


def _bf16():
    return portmat._arrays.bfloat16_dtype()


def _needs(device, name):
    if name in ("float64", "complex128") and not info(device).supports_float64:
        pytest.skip(f"{device} has no float64")
    if name == "bfloat16" and _bf16() is None:
        pytest.skip("ml_dtypes is not installed (test_bfloat16_without_ml_dtypes covers that case)")


def _random(rng, shape, name):
    """Random operands: integers over their whole range (products wrap), floats in [-1, 1]."""
    if name == "bool":
        return rng.integers(0, 2, shape).astype(bool)
    if name.startswith(("int", "uint")):
        i = np.iinfo(np.dtype(name))
        return rng.integers(i.min, i.max, shape, dtype=name, endpoint=True)
    if name.startswith("complex"):
        return (rng.uniform(-1, 1, shape) + 1j * rng.uniform(-1, 1, shape)).astype(name)
    return rng.uniform(-1, 1, shape).astype(_bf16() if name == "bfloat16" else name)


def _wide(x):
    """x in float64 / complex128 exactly (bfloat16 and float16 widen exactly)."""
    x = np.asarray(x)
    if np.iscomplexobj(x):
        return x.astype(np.complex128)
    return x.astype(np.float32).astype(np.float64) if x.dtype.itemsize == 2 and x.dtype.kind not in "iu" else \
        x.astype(np.float64)


# The bound of a result computed in `compute` and rounded to `result`: K * eps(compute) of
# |a| @ |b|, and one rounding to the result's precision.
_EPS = {"float16": 2.0 ** -23, "bfloat16": 2.0 ** -23, "float32": 2.0 ** -23, "complex64": 2.0 ** -23,
        "float64": 2.0 ** -52, "complex128": 2.0 ** -52}
_REL = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}


def check_product(c, a, b, rname):
    """c (a NumPy array) is a @ b of dtype rname: integers and bool equal NumPy's, floating
    types within the bound of a float64 / complex128 reference."""
    got = c.dtype.name if c.dtype != _bf16() or _bf16() is None else "bfloat16"
    assert got == rname, (got, rname)
    if rname == "bool" or rname.startswith(("int", "uint")):
        with np.errstate(over="ignore"):
            want = np.matmul(a.astype(rname), b.astype(rname))
        assert np.array_equal(c, want), rname
        return
    wa, wb, wc = _wide(a), _wide(b), _wide(c)
    if wa.dtype.kind == "f" and rname.startswith("complex"):
        wa = wa.astype(np.complex128)
    assert_close(wc, wa, wb, _EPS[rname], _REL.get(rname, 0.0))


@pytest.mark.parametrize("name", ALL_DTYPES)
def test_every_dtype(device, rng, name):
    _needs(device, name)
    for sa, sb in [((17, 33), (33, 5)), ((2, 1, 5, 7), (3, 7, 4)), ((7,), (7, 4)), ((3, 5, 7), (7,)),
                   ((33,), (33,)), ((4, 64, 48), (48, 40))]:
        a, b = _random(rng, sa, name), _random(rng, sb, name)
        x, y = portmat.asarray(a, device=device), portmat.asarray(b, device=device)
        assert x.dtype == a.dtype and x.nbytes == a.nbytes
        assert np.array_equal(x.numpy(), a)
        z = x @ y
        assert isinstance(z, portmat.Array) and z.device.id == device and z.dtype == a.dtype
        check_product(z.numpy(), a, b, name)
    # The empty sum: zeros of the dtype.
    e = portmat.asarray(np.zeros((3, 0), a.dtype), device=device) @ portmat.asarray(np.zeros((0, 2), a.dtype), device=device)
    assert e.dtype == a.dtype and np.array_equal(e.numpy(), np.zeros((3, 2), a.dtype))


MIXED = [("int8", "float32"), ("uint8", "int8"), ("bool", "int16"), ("float16", "float32"), ("float16", "int8"),
         ("float32", "complex64"), ("float64", "complex64"), ("int32", "float32"), ("uint16", "int64"),
         ("bool", "float16"), ("uint64", "int64"), ("int16", "complex128"), ("bfloat16", "float16"),
         ("bfloat16", "int8"), ("bfloat16", "float32"), ("uint8", "bfloat16")]


@pytest.mark.parametrize("pair", MIXED, ids=str)
def test_mixed_dtypes_promote_as_numpy(device, rng, pair):
    ta, tb = pair
    rname = portmat._arrays.result_name(ta, tb)
    for t in (ta, tb, rname):
        _needs(device, t)
    if "bfloat16" not in pair:
        assert rname == np.result_type(np.dtype(ta), np.dtype(tb)).name
    a, b = _random(rng, (2, 1, 9, 13), ta), _random(rng, (3, 13, 6), tb)
    z = portmat.asarray(a, device=device) @ portmat.asarray(b, device=device)
    assert z.shape == (2, 3, 9, 6)
    check_product(z.numpy(), a, b, rname)
    # dtype= names the result (and compute) dtype, as np.matmul's.
    if rname not in ("float64", "complex128") or info(device).supports_float64:
        w = portmat.matmul(portmat.asarray(a, device=device), portmat.asarray(b, device=device), dtype=rname
                           if rname != "bfloat16" else _bf16())
        assert np.array_equal(w.numpy(), z.numpy())


@pytest.mark.parametrize("name", ["float16", "int8", "bool", "complex64", "uint16", "bfloat16"])
def test_out_of_every_dtype(device, rng, name):
    _needs(device, name)
    a, b = _random(rng, (2, 9, 11), name), _random(rng, (11, 7), name)
    x, y = portmat.asarray(a, device=device), portmat.asarray(b, device=device)
    o = portmat.asarray(np.zeros((2, 9, 7), a.dtype), device=device)
    assert portmat.matmul(x, y, out=o) is o
    check_product(o.numpy(), a, b, name)
    s = _random(rng, (9, 9), name)
    xs = portmat.asarray(s, device=device)
    assert portmat.matmul(xs, xs, out=xs) is xs  # out that is an operand: the product of the values before
    check_product(xs.numpy(), s, s, name)
    with pytest.raises(TypeError, match="out is float32, the product"):
        portmat.matmul(x, y, out=portmat.asarray(np.zeros((2, 9, 7), np.float32), device=device))


CASTS = [("int32", "int8"), ("int8", "int32"), ("uint8", "int16"), ("int64", "uint16"), ("int16", "bool"),
         ("float32", "float16"), ("float16", "float32"), ("float32", "bfloat16"), ("bfloat16", "float32"),
         ("uint8", "float32"), ("int64", "float64"), ("uint64", "float64"), ("float32", "complex64"),
         ("complex64", "complex128"), ("complex128", "complex64"), ("bool", "complex64"), ("int8", "float16"),
         ("float64", "float32"), ("complex64", "bool"), ("float32", "bool")]


@pytest.mark.parametrize("pair", CASTS, ids=str)
def test_astype_on_the_device_is_numpys(device, rng, pair):
    src, dst = pair
    for t in pair:
        _needs(device, t)
    a = _random(rng, (5, 37), src)
    if src.startswith("float") or src == "bfloat16":
        a[0, :4] = [0.0, -0.0, 1e-30, 65519.0 if src != "float16" else 65504.0]  # signed zero, tiny, rounding edges
        a[1, :3] = [np.inf, -np.inf, 3.0]
    if src.startswith("complex"):
        a[0, 0] = 0j
    x = portmat.asarray(a, device=device)
    want = a.astype(_bf16() if dst == "bfloat16" else dst)
    got = x.astype(dst).numpy()
    assert got.dtype == want.dtype
    assert np.array_equal(got.view(np.uint8), want.view(np.uint8)) or np.array_equal(got, want)
    assert x.astype(src) is x
    y = portmat.asarray(x, device=device, dtype=_bf16() if dst == "bfloat16" else dst)  # the same cast
    assert np.array_equal(y.numpy(), got)


def test_float16_products_round_once(device):
    """float16 is accumulated in float32 and rounded once: 2048 + 1 + 1 - 2048 in float16 steps
    would lose both ones; NumPy's float16 matmul (float32 accumulation) gives 2."""
    a = np.array([[2048.0, 1.0, 1.0, -2048.0]], np.float16)
    b = np.ones((4, 1), np.float16)
    z = portmat.asarray(a, device=device) @ portmat.asarray(b, device=device)
    assert z.dtype == np.float16 and z.numpy()[0, 0] == 2.0
    # bool is the logical product: any (a & b) along k, not a count that could wrap to False.
    t = np.ones((1, 256), bool)
    w = portmat.asarray(t, device=device) @ portmat.asarray(t.T.copy(), device=device)
    assert w.dtype == bool and w.numpy()[0, 0]


def test_dlpack_export_of_every_dtype(device, rng):
    if info(device).backend != "cpu":
        pytest.skip("DLPack export on the CPU device here (CUDA: tested on a GPU machine; OpenCL has none)")
    for name in ["float16", "complex64", "complex128", "int8", "uint16", "bool", "float64"]:
        a = _random(rng, (3, 4), name)
        x = portmat.asarray(a, device=device)
        try:
            v = np.from_dlpack(x)
        except (BufferError, TypeError) as e:  # an older NumPy without kDLBool
            assert name == "bool", e
            continue
        assert v.dtype == a.dtype and np.array_equal(v, a)
    if _bf16() is not None:
        x = portmat.asarray(_random(rng, (3, 4), "bfloat16"), device=device)
        assert type(x.__dlpack__()).__name__ == "PyCapsule"  # kDLBfloat (NumPy itself takes none)


def test_bfloat16_without_ml_dtypes(device):
    """Without ml_dtypes: bfloat16 Arrays still work; their dtype is the string 'bfloat16', and
    numpy() asks for ml_dtypes or astype('float32')."""
    script = textwrap.dedent(f"""
        import sys
        sys.modules["ml_dtypes"] = None  # import ml_dtypes now raises ImportError
        import numpy as np, portmat
        a = np.array([[1.0, 2.0, 3.00390625], [0.5, -1.0, 256.0]], np.float32)
        x = portmat.asarray(a, device={device!r}, dtype="bfloat16")
        assert x.dtype == "bfloat16" and x.nbytes == 12 and "bfloat16" in repr(x), (x.dtype, repr(x))
        try:
            x.numpy()
            raise SystemExit("numpy() of bfloat16 without ml_dtypes did not raise")
        except TypeError as e:
            assert "ml_dtypes" in str(e)
        w = x.astype("float32").numpy()
        assert w.tolist() == [[1.0, 2.0, 3.0], [0.5, -1.0, 256.0]], w  # 3.00390625 rounds to even: 3
        y = portmat.asarray(np.eye(3, dtype=np.float32), device={device!r}, dtype="bfloat16")
        z = portmat.matmul(x, y)
        assert z.dtype == "bfloat16" and z.astype("float32").numpy().tolist() == w.tolist()
        f = x @ portmat.asarray(np.eye(3, dtype=np.float16), device={device!r})
        assert f.dtype == np.float32 and f.numpy().tolist() == w.tolist()
        print("ok")
    """)
    r = run_python("-c", script, timeout=120)
    assert r.returncode == 0 and "ok" in r.stdout, r.stdout + r.stderr


# ---- other libraries' GPU arrays ----------------------------------------------------------------
CUDA = [d.id for d in DEVICES if d.backend == "cuda"]


def _library(name):
    if not CUDA:
        pytest.skip("no CUDA device here: CuPy / torch GPU arrays are tested on a machine with one")
    mod = pytest.importorskip(name, reason=f"{name} is not installed")
    if name == "torch" and not mod.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    return mod


@pytest.fixture
def torch():
    t = _library("torch")
    t.backends.cuda.matmul.allow_tf32 = False
    return t


@pytest.fixture
def cupy():
    return _library("cupy")


TORCH_DTYPES = ["float32", "float64", "float16", "bfloat16", "complex64", "complex128", "int8", "int16", "int32",
                "int64", "uint8", "bool"]


def _torch_random(torch, rng, shape, name):
    if name == "bool":
        return torch.from_numpy(rng.integers(0, 2, shape).astype(bool)).cuda()
    if name.startswith(("int", "uint")):
        info_ = np.iinfo(np.dtype(name))
        return torch.from_numpy(rng.integers(info_.min, info_.max, shape, endpoint=True).astype(name)).cuda()
    if name.startswith("complex"):
        re, im = rng.uniform(-1, 1, shape), rng.uniform(-1, 1, shape)
        return torch.from_numpy((re + 1j * im).astype(name)).cuda()
    t = torch.from_numpy(rng.uniform(-1, 1, shape)).cuda()
    return t.to(getattr(torch, name))


def _torch_host(t):
    """A NumPy copy (bfloat16 widened to float32, exactly)."""
    import torch as _t
    if t.dtype == _t.bfloat16:
        t = t.float()
    return t.cpu().numpy()


def _check_torch_result(torch, c, a, b):
    want = torch.promote_types(a.dtype, b.dtype)
    assert isinstance(c, torch.Tensor) and c.is_cuda and c.device == a.device and c.dtype == want
    ha, hb, hc = _torch_host(a), _torch_host(b), _torch_host(c)
    name = str(want).removeprefix("torch.")
    if name == "bool" or name.startswith(("int", "uint")):
        with np.errstate(over="ignore"):
            assert np.array_equal(hc, np.matmul(ha, hb)), name
        return
    eps = {"float32": EPS[np.dtype(np.float32)], "complex64": EPS[np.dtype(np.float32)],
           "float16": EPS[np.dtype(np.float32)], "bfloat16": EPS[np.dtype(np.float32)]}.get(name, EPS[np.dtype(np.float64)])
    rel = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}.get(name, 0.0)  # the result's own rounding
    assert_close(hc, ha, hb, eps, rel)


@pytest.mark.parametrize("name", TORCH_DTYPES)
def test_torch_every_dtype(torch, rng, name):
    for sa, sb in [((33, 65), (65, 17)), ((3, 5, 7), (7, 4)), ((2, 1, 5, 7), (3, 7, 4)), ((9,), (9, 4)),
                   ((3, 5, 7), (7,)), ((64, 48), (48, 40))]:
        a, b = _torch_random(torch, rng, sa, name), _torch_random(torch, rng, sb, name)
        _check_torch_result(torch, portmat.matmul(a, b), a, b)


def test_torch_views_mixed_dtypes_and_empties(torch, rng):
    a = _torch_random(torch, rng, (40, 30), "float32")
    b = _torch_random(torch, rng, (40, 12), "float32")
    for x in (a.T, a.T[:, ::2], a.T[3:20]):
        y = b[: x.shape[1]]
        _check_torch_result(torch, portmat.matmul(x, y), x, y)
    e = _torch_random(torch, rng, (5, 7), "float32").expand(4, 5, 7)  # stride 0 across the stack
    _check_torch_result(torch, portmat.matmul(e, b[:7]), e, b[:7])
    z = _torch_random(torch, rng, (6, 5), "complex64")
    w = _torch_random(torch, rng, (5, 3), "complex64")
    _check_torch_result(torch, portmat.matmul(z.conj(), w), z.conj().resolve_conj(), w)
    m = _torch_random(torch, rng, (6, 5), "float64")
    _check_torch_result(torch, portmat.matmul(m, b[:5]), m, b[:5])  # float64 @ float32 -> float64
    k0 = portmat.matmul(torch.ones(3, 0, device="cuda"), torch.ones(0, 4, device="cuda"))
    assert torch.equal(k0, torch.zeros(3, 4, device="cuda"))
    assert portmat.matmul(torch.ones(0, 3, 5, device="cuda"), torch.ones(5, 2, device="cuda")).shape == (0, 3, 2)


def test_torch_out(torch, rng):
    a = _torch_random(torch, rng, (2, 9, 11), "float32")
    b = _torch_random(torch, rng, (11, 7), "float32")
    o = torch.full((2, 9, 7), float("nan"), device="cuda")
    assert portmat.matmul(a, b, out=o) is o
    _check_torch_result(torch, o, a, b)
    big = torch.full((2, 9, 14), float("nan"), device="cuda")
    strided = big[:, :, ::2]  # not row-major: computed aside, then copied in
    portmat.matmul(a, b, out=strided)
    _check_torch_result(torch, strided.contiguous(), a, b)
    assert torch.isnan(big[:, :, 1::2]).all()
    s = _torch_random(torch, rng, (9, 9), "float32")
    before = s.clone()
    portmat.matmul(s, s, out=s)  # out is an operand: NumPy's answer, the product of the values before
    _check_torch_result(torch, s, before, before)
    wide = torch.zeros(2, 9, 7, dtype=torch.float64, device="cuda")
    portmat.matmul(a, b, out=wide)
    _check_torch_result(torch, wide.float(), a, b)


def test_torch_waits_for_the_callers_stream(torch, rng):
    """A product queued behind a producer's kernel on the caller's stream must see its result."""
    s = torch.cuda.Stream()
    n = 512
    b = torch.eye(n, device="cuda")
    with torch.cuda.stream(s):
        a = torch.zeros(n, n, device="cuda")
        torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU time before the fill below runs
        a.fill_(3.0)
        c = portmat.matmul(a, b)
    s.synchronize()
    assert torch.equal(c, torch.full((n, n), 3.0, device="cuda"))


# (M, K, N) of products that read the slow product's result x (2048 x 2048) through views: a square
# on the tiles, split-K, thin (a side of 1 and of 8), short k, the short operand resident, a dot.
_DEPENDENT_SHAPES = [(256, 256, 256), (128, 2048, 128), (2048, 2048, 8), (1, 2048, 2048), (2048, 16, 2048),
                     (2048, 64, 64), (1, 2048, 1), (640, 640, 640)]


@pytest.mark.parametrize("variant", ["float32", "resident", "tf32"])
def test_products_queued_back_to_back_see_each_other(torch, rng, monkeypatch, variant):
    """On sm_90 every kernel is a programmatic dependent launch (docs/cuda.md, "Launches that
    overlap"): it may be resident while the kernel ahead of it on the stream still runs, and must wait
    before reading what that kernel writes or writing what it reads. A slow product is queued, then
    products of every kernel family that read its result, and one that overwrites the slow product's
    operand; nothing is synchronized between them. tf32 runs the tensor-core kernels and their
    pre-pass."""
    if variant == "resident":
        monkeypatch.setenv("PORTMAT_CUDA_RESIDENT", "1")
    eps = 2.0 ** -10 if variant == "tf32" else EPS[np.dtype(np.float32)]  # tf32 rounds operands to 11 bits
    n = 2048
    a = _torch_random(torch, rng, (n, n), "float32")
    b = _torch_random(torch, rng, (n, n), "float32")
    a_before = _torch_host(a)
    ws = [_torch_random(torch, rng, (k, nn), "float32") for (_, k, nn) in _DEPENDENT_SHAPES]
    s = _torch_random(torch, rng, (256, 256), "float32")
    portmat.set_precision("tf32" if variant == "tf32" else None)
    try:
        x = portmat.matmul(a, b)  # about 0.3 ms of work ahead of what follows
        outs = [(x[:m, :k], w, portmat.matmul(x[:m, :k], w)) for (m, k, _), w in zip(_DEPENDENT_SHAPES, ws)]
        portmat.matmul(s, s, out=a[:256, :256])  # the first product read a
        torch.cuda.synchronize()
    finally:
        portmat.set_precision(None)
    hx = _torch_host(x)
    assert_close(hx, a_before, _torch_host(b), eps)
    for left, w, c in outs:
        assert_close(_torch_host(c), _torch_host(left), _torch_host(w), eps)
    assert_close(_torch_host(a[:256, :256]), _torch_host(s), _torch_host(s), eps)


def test_torch_errors(torch):
    g = torch.ones(4, 4, device="cuda")
    with pytest.raises(TypeError, match="numpy.ndarray"):
        portmat.matmul(g, np.ones((4, 4), np.float32))
    with pytest.raises(TypeError, match="both operands must be arrays of one GPU library"):
        portmat.matmul(g, torch.ones(4, 4))  # a host tensor
    p = torch.ones(4, 4, device="cuda", requires_grad=True)
    with pytest.raises(ValueError, match="autograd"):
        portmat.matmul(p, g)
    with torch.no_grad():
        assert torch.equal(portmat.matmul(p, g), torch.full((4, 4), 4.0, device="cuda"))
    with pytest.raises(ValueError, match=r"a has shape \(4, 4\), b has shape \(3, 4\)"):
        portmat.matmul(g, torch.ones(3, 4, device="cuda"))


def test_cupy_dtypes_views_and_out(cupy, rng):
    for name in ["float32", "float64", "float16", "complex64", "complex128", "int8", "int32", "int64", "bool"]:
        a_h = rng.uniform(-1, 1, (3, 21, 17)).astype(name) if not name.startswith(("int", "bool")) else \
            rng.integers(-100, 100, (3, 21, 17)).astype(name)
        b_h = rng.uniform(-1, 1, (17, 6)).astype(name) if not name.startswith(("int", "bool")) else \
            rng.integers(-100, 100, (17, 6)).astype(name)
        if name.startswith("complex"):
            a_h = a_h + 1j * rng.uniform(-1, 1, a_h.shape).astype(name)
        c = portmat.matmul(cupy.asarray(a_h), cupy.asarray(b_h))
        assert isinstance(c, cupy.ndarray) and c.dtype == np.matmul(a_h[:1, :1, :1], b_h[:1, :1]).dtype
        if name.startswith(("int", "bool")):
            with np.errstate(over="ignore"):
                assert np.array_equal(cupy.asnumpy(c), np.matmul(a_h, b_h)), name
        else:
            eps = EPS[np.dtype(np.float64)] if name in ("float64", "complex128") else EPS[np.dtype(np.float32)]
            assert_close(cupy.asnumpy(c), a_h, b_h, eps, 2.0 ** -11 if name == "float16" else 0.0)
    a_h = rng.uniform(-1, 1, (30, 40)).astype(np.float32)
    a = cupy.asarray(a_h)
    for view, host in ((a.T, a_h.T), (a[::-1], a_h[::-1]), (a[:, ::3], a_h[:, ::3])):
        y_h = rng.uniform(-1, 1, (host.shape[1], 5)).astype(np.float32)
        assert_close(cupy.asnumpy(portmat.matmul(view, cupy.asarray(y_h))), host, y_h, EPS[np.dtype(np.float32)])
    o = cupy.full((30, 30), np.nan, np.float32)
    assert portmat.matmul(a, a.T, out=o) is o
    assert_close(cupy.asnumpy(o), a_h, a_h.T, EPS[np.dtype(np.float32)])
    with pytest.raises(TypeError, match="numpy.ndarray"):
        portmat.matmul(a, a_h.T)


def test_cupy_waits_for_the_callers_stream(cupy):
    n = 512
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        a = cupy.zeros((n, n), cupy.float32)
        x = cupy.ones((4096, 4096), cupy.float32)
        for _ in range(20):  # keep the stream busy before a's fill
            x = x @ x * 0.0 + 1.0
        a += x[:n, :n] * 3.0
        c = portmat.matmul(a, cupy.eye(n, dtype=cupy.float32))
    s.synchronize()
    assert bool((c == 3.0).all())


class DLPackOnly:
    """An array that shows itself only through DLPack, as a JAX array does (wrapping a torch tensor)."""

    def __init__(self, t):
        self.t = t

    def __dlpack__(self, **kw):
        return self.t.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()


def test_any_dlpack_exporter_in_host_memory(rng):
    a = rng.uniform(-1, 1, (5, 6)).astype(np.float32)
    b = rng.uniform(-1, 1, (6, 3)).astype(np.float32)
    c = portmat.matmul(DLPackOnly(a), DLPackOnly(b))
    assert isinstance(c, np.ndarray)
    assert_close(c, a, b, EPS[np.dtype(np.float32)])


def test_any_dlpack_exporter_on_the_gpu(torch, rng):
    import types

    class WithNamespace(DLPackOnly):
        def __array_namespace__(self):
            return types.SimpleNamespace(from_dlpack=torch.from_dlpack)

    for sa, sb in [((33, 65), (65, 17)), ((3, 5, 7), (7, 4)), ((9,), (9, 4))]:
        a, b = _torch_random(torch, rng, sa, "float32"), _torch_random(torch, rng, sb, "float32")
        c = portmat.matmul(DLPackOnly(a), DLPackOnly(b))
        assert isinstance(c, portmat.Array) and c.device.id == f"cuda:{a.device.index}"
        assert_close(c.numpy(), a.cpu().numpy(), b.cpu().numpy(), EPS[np.dtype(np.float32)])
        t = portmat.matmul(WithNamespace(a), WithNamespace(b))  # the operands' library gets the result
        assert isinstance(t, torch.Tensor) and t.is_cuda
        assert_close(t.cpu().numpy(), a.cpu().numpy(), b.cpu().numpy(), EPS[np.dtype(np.float32)])
    # The producer's stream order holds: its work on its current stream (the one DLPack's
    # stream argument is about) comes before the product.
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        a = torch.zeros(512, 512, device="cuda")
        e = torch.eye(512, device="cuda")
        torch.cuda._sleep(200_000_000)
        a.fill_(3.0)
        c = portmat.matmul(DLPackOnly(a), DLPackOnly(e))
    assert np.array_equal(c.numpy(), np.full((512, 512), 3.0, np.float32))
    g = torch.ones(4, 4, device="cuda")
    with pytest.raises(TypeError):
        portmat.matmul(DLPackOnly(g), g)
    with pytest.raises(TypeError, match="row- nor column-major"):
        portmat.matmul(DLPackOnly(g[::2, ::2]), DLPackOnly(g[:2, :2]))


class CAIOnly:
    """An array that shows itself only through __cuda_array_interface__, as Numba's device arrays
    do (wrapping another object's interface, with the stream of version 3 where one is given)."""

    def __init__(self, x, stream=None, **extra):
        self.x, self.stream, self.extra = x, stream, extra

    @property
    def __cuda_array_interface__(self):
        cai = dict(self.x.__cuda_array_interface__)
        if self.stream is not None:
            cai.update(version=3, stream=self.stream)
        cai.update(self.extra)
        return cai


class HostCAI:
    """A (wrong) __cuda_array_interface__ naming host memory."""

    def __init__(self, a, **extra):
        self.a, self.extra = a, extra

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.a.shape, "typestr": self.a.dtype.str, "data": (self.a.ctypes.data, False),
                "strides": None, "version": 2, **self.extra}


def test_cuda_array_interface_errors_are_clear():
    a = np.ones((4, 4), np.float32)
    with pytest.raises(TypeError, match="not on a CUDA device portmat has"):
        portmat.matmul(HostCAI(a), HostCAI(a))
    with pytest.raises(TypeError, match="both operands"):
        portmat.matmul(HostCAI(a), a)
    with pytest.raises(TypeError, match="stream 0"):
        portmat.matmul(HostCAI(a, version=3, stream=0), HostCAI(a))
    with pytest.raises(TypeError, match="mask"):
        portmat.matmul(HostCAI(a, mask=object()), HostCAI(a))


def test_cuda_array_interface_objects_on_the_gpu(torch, rng):
    for sa, sb, name in [((33, 65), (65, 17), "float32"), ((3, 5, 7), (7, 4), "float64"), ((9,), (9, 4), "float32"),
                         ((6, 8), (8, 5), "int32")]:
        a, b = _torch_random(torch, rng, sa, name), _torch_random(torch, rng, sb, name)
        c = portmat.matmul(CAIOnly(a), CAIOnly(b))
        assert isinstance(c, portmat.Array) and c.device.id == f"cuda:{a.device.index}"
        if name == "int32":
            assert np.array_equal(c.numpy(), np.matmul(a.cpu().numpy(), b.cpu().numpy()))
        else:
            assert_close(c.numpy(), a.cpu().numpy(), b.cpu().numpy(), EPS[np.dtype(name)])
    # A column-major view is read in place, and out= takes a portmat Array.
    a = _torch_random(torch, rng, (20, 30), "float32")
    b = _torch_random(torch, rng, (20, 11), "float32")
    out = portmat.asarray(np.zeros((30, 11), np.float32), device=f"cuda:{a.device.index}")
    assert portmat.matmul(CAIOnly(a.t()), CAIOnly(b), out=out) is out
    assert_close(out.numpy(), a.cpu().numpy().T, b.cpu().numpy(), EPS[np.dtype(np.float32)])
    # Version 3's stream: the product is queued behind the producer's work on it.
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        x = torch.zeros(512, 512, device="cuda")
        e = torch.eye(512, device="cuda")
        torch.cuda._sleep(200_000_000)
        x.fill_(2.0)
    c = portmat.matmul(CAIOnly(x, stream=s.cuda_stream), CAIOnly(e, stream=s.cuda_stream))
    assert np.array_equal(c.numpy(), np.full((512, 512), 2.0, np.float32))
    g = torch.ones(4, 4, device="cuda")
    with pytest.raises(TypeError, match="row- nor column-major"):
        portmat.matmul(CAIOnly(g[::2, ::2]), CAIOnly(g[:2, :2]))
    # portmat's own Array goes out through the same interface.
    assert np.array_equal(portmat.matmul(CAIOnly(c), CAIOnly(portmat.asarray(np.eye(512, dtype=np.float32),
                                                                             device=c.device.id))).numpy(), c.numpy())


def test_portmat_arrays_go_to_torch_and_cupy_without_copies(rng):
    if not CUDA:
        pytest.skip("no CUDA device here")
    a = rng.uniform(-1, 1, (3, 8, 5)).astype(np.float32)
    x = portmat.asarray(a, device=CUDA[0])
    assert x.__dlpack_device__()[0] == 2  # kDLCUDA
    for name in ("torch", "cupy"):
        try:
            mod = __import__(name)
        except ImportError:
            continue
        t = mod.from_dlpack(x)
        got = t.cpu().numpy() if name == "torch" else mod.asnumpy(t)
        assert np.array_equal(got, a)
        ptr = t.data_ptr() if name == "torch" else t.data.ptr
        assert ptr == x._x.address  # the same memory


# ---- generic DLPack / __cuda_array_interface__ producers of every dtype (GPU machine) ------------
# torch tensors wrapped so that portmat sees only the protocol (as it sees JAX or Numba arrays):
# the generic paths (matmul_dlpack, matmul_cai) cast on the device and return portmat Arrays.
def _as_numpy(t):
    """A torch tensor's values in NumPy (bfloat16 as ml_dtypes' where installed, else float32:
    exact either way)."""
    import torch as _t
    if t.dtype == _t.bfloat16:
        f = t.float().cpu().numpy()
        return f.astype(_bf16()) if _bf16() is not None else f
    return t.cpu().numpy()


def _array_values(c, rname):
    """A portmat Array's values in NumPy (bfloat16 through a float32 cast on the device, exact,
    where ml_dtypes is missing)."""
    if rname == "bfloat16" and _bf16() is None:
        return c.astype("float32").numpy()
    return c.numpy()


def _check_generic(c, a, b, rname, dev):
    assert isinstance(c, portmat.Array) and c.device.id == dev and c._x.dtype == rname
    ha, hb, hc = _as_numpy(a), _as_numpy(b), _array_values(c, rname)
    if rname == "bfloat16" and _bf16() is None:  # compare in float32 bits widened: same bound
        assert_close(hc.astype(np.float64), ha.astype(np.float64), hb.astype(np.float64), _EPS[rname], _REL[rname])
        return
    check_product(hc, ha, hb, rname)


@pytest.mark.parametrize("name", TORCH_DTYPES)
def test_dlpack_exporter_every_dtype_on_the_gpu(torch, rng, name):
    for sa, sb in [((33, 65), (65, 17)), ((2, 1, 5, 7), (3, 7, 4)), ((9,), (9, 4)), ((3, 5, 7), (7,))]:
        a, b = _torch_random(torch, rng, sa, name), _torch_random(torch, rng, sb, name)
        dev = f"cuda:{a.device.index}"
        c = portmat.matmul(DLPackOnly(a), DLPackOnly(b))
        _check_generic(c, a, b, name, dev)
        # A column-major (transposed) view of a real a is read in place after the cast.
        if not name.startswith("complex") and len(sa) == 2:
            at = a.t().contiguous().t()  # column-major storage, same values
            _check_generic(portmat.matmul(DLPackOnly(at), DLPackOnly(b)), a, b, name, dev)


@pytest.mark.parametrize("pair", [("int8", "float32"), ("uint8", "int8"), ("bool", "int16"), ("float16", "float32"),
                                  ("float16", "int8"), ("float32", "complex64"), ("bfloat16", "float32"),
                                  ("bfloat16", "float16"), ("int32", "float32"), ("bool", "bool")], ids=str)
def test_dlpack_exporter_mixed_dtypes_and_out_on_the_gpu(torch, rng, pair):
    ta, tb = pair
    rname = portmat._arrays.result_name(ta, tb)
    a, b = _torch_random(torch, rng, (2, 1, 9, 13), ta), _torch_random(torch, rng, (3, 13, 6), tb)
    dev = f"cuda:{a.device.index}"
    c = portmat.matmul(DLPackOnly(a), DLPackOnly(b))
    assert c.shape == (2, 3, 9, 6)
    _check_generic(c, a, b, rname, dev)
    out = portmat._arrays.Array(portmat._ext.DeviceArray.empty(dev, rname, [2, 3, 9, 6]))
    assert portmat.matmul(DLPackOnly(a), DLPackOnly(b), out=out) is out
    _check_generic(out, a, b, rname, dev)
    wrong = portmat.asarray(np.zeros((2, 3, 9, 6), np.float64 if rname != "float64" else np.float32), device=dev)
    with pytest.raises(TypeError, match="out for"):
        portmat.matmul(DLPackOnly(a), DLPackOnly(b), out=wrong)


def test_dlpack_exporter_results_go_back_to_their_library(torch, rng):
    import types

    class WithNamespace(DLPackOnly):
        def __array_namespace__(self):
            return types.SimpleNamespace(from_dlpack=torch.from_dlpack)

    for name in ["float16", "bfloat16", "bool", "int8", "complex64"]:
        a, b = _torch_random(torch, rng, (17, 9), name), _torch_random(torch, rng, (9, 5), name)
        t = portmat.matmul(WithNamespace(a), WithNamespace(b))
        assert isinstance(t, torch.Tensor) and t.is_cuda and t.dtype == a.dtype, (name, t.dtype)
        _check_torch_result(torch, t, a, b)


@pytest.mark.parametrize("name", ["float16", "int8", "int16", "uint8", "bool", "complex64", "complex128"])
def test_cuda_array_interface_every_dtype_on_the_gpu(torch, rng, name):
    for sa, sb in [((33, 65), (65, 17)), ((3, 5, 7), (7, 4)), ((9,), (9, 4))]:
        a, b = _torch_random(torch, rng, sa, name), _torch_random(torch, rng, sb, name)
        c = portmat.matmul(CAIOnly(a), CAIOnly(b))
        _check_generic(c, a, b, name, f"cuda:{a.device.index}")
    a, b = _torch_random(torch, rng, (6, 8), "float16"), _torch_random(torch, rng, (8, 5), "int8")
    _check_generic(portmat.matmul(CAIOnly(a), CAIOnly(b)), a, b, "float16", f"cuda:{a.device.index}")


def test_cuda_arrays_of_every_dtype_export_through_dlpack(torch, rng):
    dev = CUDA[0]
    for name in ["float16", "bool", "int8", "complex64", "uint16"]:
        a = _random(rng, (3, 8, 5), name)
        x = portmat.asarray(a, device=dev)
        t = torch.from_dlpack(x)
        assert t.data_ptr() == x._x.address and str(t.dtype) == f"torch.{name}"
        assert np.array_equal(t.cpu().numpy(), a)
    x = portmat.asarray(np.array([[1.0, 3.00390625]], np.float32), device=dev).astype("bfloat16")
    t = torch.from_dlpack(x)  # kDLBfloat
    assert t.dtype == torch.bfloat16 and t.float().cpu().tolist() == [[1.0, 3.0]]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))

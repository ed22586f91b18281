"""Input as a careless or hostile user passes it: masked arrays, broadcast views, sparse views of
huge memory maps, odd byte strides, foreign byte order, unaligned and read-only memory, IEEE
special values, absurd sizes, and bad settings. Each gets NumPy's answer or a clear Python
exception naming what is wrong; none crashes, hangs or answers wrongly in silence. Cases that
could crash run in a child process."""

import os
import sys

import numpy as np
import pytest

import portmat
from conftest import DEVICE_IDS, DEVICES, check_matmul, random_matrix, run_python

pytestmark = pytest.mark.skipif(not DEVICES, reason="no device")
DTYPES = [np.float32, np.float64]


def _supports(device, dtype):
    return dtype != np.float64 or portmat._ext.find_device(device).supports_float64


# ---- arrays NumPy would take ----------------------------------------------------------------------

def test_masked_arrays_are_refused_not_unmasked(device):
    a = np.ma.array(np.ones((3, 3), np.float32), mask=np.eye(3, dtype=bool))
    b = np.ones((3, 2), np.float32)
    with pytest.raises(TypeError, match="masked array.*numpy.ma.dot"):
        portmat.matmul(a, b, device=device)
    with pytest.raises(TypeError, match="b is a masked array"):
        portmat.matmul(b.T, np.ma.array(b), device=device)


# Each case: (a, b) with zero strides in every position.
def _broadcast_cases(rng, m, k, n, dtype):
    r = lambda *s: rng.uniform(-1, 1, s).astype(dtype)
    return {
        "a-rows-repeat": (np.broadcast_to(r(1, k), (m, k)), r(k, n)),
        "a-columns-repeat": (np.broadcast_to(r(m, 1), (m, k)), r(k, n)),
        "a-one-value": (np.broadcast_to(r(1, 1), (m, k)), r(k, n)),
        "b-rows-repeat": (r(m, k), np.broadcast_to(r(1, n), (k, n))),
        "b-columns-repeat": (r(m, k), np.broadcast_to(r(k, 1), (k, n))),
        "b-one-value": (r(m, k), np.broadcast_to(r(1, 1), (k, n))),
        "both": (np.broadcast_to(r(m, 1), (m, k)), np.broadcast_to(r(1, n), (k, n))),
        "transposed-repeat": (np.broadcast_to(r(k, 1), (k, m)).T, np.broadcast_to(r(n, 1), (n, k)).T),
    }


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(37, 53, 29), (1, 70, 5), (64, 1, 33), (130, 257, 3)])
def test_broadcast_operands(device, dtype, shape, rng):
    if not _supports(device, dtype):
        pytest.skip("no float64")
    for name, (a, b) in _broadcast_cases(rng, *shape, dtype).items():
        assert 0 in a.strides + b.strides or 1 in shape, name
        check_matmul(portmat.matmul(a, b, device=device), a, b)


@pytest.mark.parametrize("dtype", DTYPES)
def test_broadcast_operands_keep_numpys_nan_and_inf(device, dtype, rng):
    # A repeated value times a run of terms: inf * 0 is NaN, +inf and -inf terms make NaN, as in
    # NumPy's sum of products, whichever way portmat reduces the product.
    if not _supports(device, dtype):
        pytest.skip("no float64")
    specials = np.array([np.inf, -np.inf, np.nan, 0.0, 1.0, -2.0], dtype)
    m, k, n = 6, 4, 6
    for x in specials:
        for y in specials:
            runs = np.array([[1.0, 2.0, 3.0, 0.5], [1.0, 0.0, 2.0, 1.0], [1.0, -1.0, 2.0, 1.0],
                             [y, 1.0, 2.0, 1.0], [y, -y, 1.0, 1.0], [y, y, y, y]], dtype)
            for a, b in [
                (np.broadcast_to(np.array([[x]], dtype), (m, k)), runs.T.copy()),
                (runs.copy(), np.broadcast_to(np.array([[x]], dtype), (k, n))),
                (np.broadcast_to(np.array([x, 1, -1, 0, 2, x], dtype)[:, None], (m, k)), runs.T.copy()),
                (runs.copy(), np.broadcast_to(np.array([x, 1, -1, 0, 2, x], dtype)[None, :], (k, n))),
            ]:
                with np.errstate(all="ignore"):
                    want = np.matmul(a, b)
                got = portmat.matmul(a, b, device=device)
                _same_specials(got, want)


def _same_specials(got, want):
    for what, f in [("NaN", np.isnan), ("+inf", np.isposinf), ("-inf", np.isneginf)]:
        bad = f(got) != f(want)
        assert not bad.any(), f"{what} placed differently at {np.argwhere(bad)[:5].tolist()}: got {got}, NumPy {want}"


@pytest.mark.parametrize("device_id", DEVICE_IDS)
def test_broadcast_view_of_one_value_needs_no_copy(device_id):
    # A (70000, 70000) view of one value is 19.6 GB when packed; NumPy needs no copy, nor may we.
    code = f"""
import resource, numpy as np, portmat
rng = np.random.default_rng()
b = rng.uniform(-1, 1, (70000, 3)).astype(np.float32)
a = np.broadcast_to(np.float32(0.5), (70000, 70000))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
c = portmat.matmul(a, b, device="{device_id}")
c2 = portmat.matmul(b.T, a, device="{device_id}")
grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
want = 0.5 * b.astype(np.float64).sum(axis=0)
bound = 70000 * np.finfo(np.float32).eps * 0.5 * np.abs(b.astype(np.float64)).sum(axis=0)
assert c.shape == (70000, 3) and np.all(np.abs(c - want) <= bound)
assert c2.shape == (3, 70000) and np.all(np.abs(c2 - want[:, None]) <= bound[:, None])
print("grown MiB", grown_mib)
assert grown_mib < 200, grown_mib
"""
    r = run_python("-c", code, timeout=300)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("operand", ["a", "b"])
def test_sparse_view_of_a_huge_memory_map(device, tmp_path, rng, operand):
    # 16 rows of an 8 GiB memory map, 512 MiB apart: a device that maps memory in place must not
    # map the whole 8 GiB range (over its allocation limit), and nothing may read the gaps.
    path = tmp_path / "huge.f32"
    with open(path, "wb") as f:
        f.truncate(8 << 30)  # sparse: only the pages written below take disk space
    mm = np.memmap(path, dtype=np.float32, mode="r+", shape=(16, (8 << 30) // 4 // 16))
    view = mm[:, 1000:1064]
    view[:] = random_matrix(rng, view.shape)
    other = random_matrix(rng, (64, 9))
    if operand == "a":
        a, b = view, other
    else:
        a, b = other.T.copy(), view.T  # (9, 64) @ (64, 16): b's columns 512 MiB apart
    check_matmul(portmat.matmul(a, b, device=device), a, b)
    del view, mm


@pytest.mark.parametrize("dtype", DTYPES)
def test_fields_of_packed_structured_arrays(device, dtype, rng):
    # Byte strides that are not a multiple of the item size (5 or 9 bytes here).
    if not _supports(device, dtype):
        pytest.skip("no float64")
    rec = np.zeros((23, 31), dtype=[("tag", "u1"), ("x", dtype)])
    rec["x"] = rng.uniform(-1, 1, rec.shape)
    a = rec["x"]
    assert a.strides[1] % a.itemsize != 0
    b = random_matrix(rng, (31, 17), dtype)
    check_matmul(portmat.matmul(a, b, device=device), a, b)
    check_matmul(portmat.matmul(b.T, a.T, device=device), b.T, a.T)


@pytest.mark.parametrize("order_a,order_b", [(">f4", ">f4"), (">f8", "<f8"), (">f4", "<f8"), ("<f4", ">f4")])
def test_non_native_byte_order(device, rng, order_a, order_b):
    want = np.result_type(np.dtype(order_a), np.dtype(order_b)).newbyteorder("=")
    if not _supports(device, want.type):
        pytest.skip("no float64")
    a = rng.uniform(-1, 1, (29, 41)).astype(order_a)
    b = rng.uniform(-1, 1, (41, 13)).astype(order_b)
    c = portmat.matmul(a, b, device=device)
    assert c.dtype == want and c.dtype.isnative
    check_matmul(c, a.astype(want), b.astype(want))


def test_unaligned_read_only_and_huge_strides(device, rng):
    raw = b"\0" + random_matrix(rng, (40, 50)).tobytes()  # bytes: read-only memory
    a = np.frombuffer(raw, dtype=np.float32, offset=1).reshape(40, 50)
    assert not a.flags.aligned and not a.flags.writeable
    b = random_matrix(rng, (50, 7))
    b.setflags(write=False)
    check_matmul(portmat.matmul(a, b, device=device), a, b)
    big = random_matrix(rng, (970, 890))
    a2, b2 = big[::97, ::89], big[5:895:89, ::-97]  # (10, 10) views with strides of many KiB
    check_matmul(portmat.matmul(a2, b2, device=device), a2, b2)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(37, 53, 29), (130, 257, 70), (1, 300, 1), (64, 64, 64)])
def test_nan_and_inf_land_where_numpy_puts_them(device, dtype, shape, rng):
    if not _supports(device, dtype):
        pytest.skip("no float64")
    m, k, n = shape
    a, b = random_matrix(rng, (m, k), dtype), random_matrix(rng, (k, n), dtype)
    for x, density in ((np.nan, 0.003), (np.inf, 0.003), (-np.inf, 0.003), (0.0, 0.05)):
        a[rng.random(a.shape) < density] = x
        b[rng.random(b.shape) < density] = x
    a[0, 0], b[-1, -1] = np.inf, -np.inf  # at least one of each
    with np.errstate(all="ignore"):
        want = np.matmul(a, b)
    got = portmat.matmul(a, b, device=device)
    _same_specials(got, want)
    finite = np.isfinite(want)
    a64, b64 = np.nan_to_num(a.astype(np.float64), posinf=0, neginf=0), np.nan_to_num(b.astype(np.float64), posinf=0, neginf=0)
    bound = k * np.finfo(dtype).eps * (np.abs(a64) @ np.abs(b64))
    with np.errstate(invalid="ignore"):  # inf - inf where both placed an inf
        err = np.abs(got - want)
    assert np.all(err[finite] <= 2 * bound[finite] + np.finfo(dtype).tiny)


def test_empty_and_broadcast_results_with_k_above_2_31(device):
    k = 2**31 + 5
    a = np.empty((0, k), np.float32)
    b = np.broadcast_to(np.float32(1), (k, 3))
    c = portmat.matmul(a, b, device=device)
    assert c.shape == (0, 3) and c.dtype == np.float32
    a = np.broadcast_to(np.float32(1), (2, k))
    b = np.broadcast_to(np.float32(2), (k, 2))
    c = portmat.matmul(a, b, device=device)
    assert c.shape == (2, 2) and np.all(np.abs(c - 2.0 * k) <= 2.0 * k * 1e-6)


class _FailsWith:
    def __init__(self, error):
        self.error = error

    def __array__(self, dtype=None, copy=None):
        raise self.error


def test_errors_from_array_likes_keep_their_type():
    with pytest.raises(MemoryError):
        portmat.matmul(_FailsWith(MemoryError("no room")), np.ones((2, 2), np.float32))
    with pytest.raises(KeyboardInterrupt):
        portmat.matmul(np.ones((2, 2), np.float32), _FailsWith(KeyboardInterrupt()))


# ---- settings -------------------------------------------------------------------------------------

def _cpus():
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def test_thread_count_is_clamped_by_setter_and_variable_alike():
    if not hasattr(portmat._ext, "set_num_threads"):
        pytest.skip("no native CPU backend")
    try:
        portmat.set_num_threads(100000)
        assert portmat.num_threads() == _cpus()
    finally:
        portmat.set_num_threads(0)
    code = "import portmat; print(portmat.num_threads())"
    for value, want in (("100000", _cpus()), ("1", 1), ("abc", _cpus()), ("-3", _cpus()), ("0", _cpus())):
        r = run_python("-c", code, env={"PORTMAT_NUM_THREADS": value})
        assert r.returncode == 0, r.stderr
        assert int(r.stdout) == want, (value, r.stdout)


def test_device_variable_that_is_not_utf8_is_named():
    code = "import numpy as np, portmat\na = np.ones((2, 2), np.float32)\nportmat.matmul(a, a)"
    env = {k.encode(): v.encode() for k, v in os.environ.items()}
    env[b"PORTMAT_DEVICE"] = b"\xffopencl\xfe:0"
    import subprocess

    r = subprocess.run([sys.executable, "-c", code], capture_output=True, env=env, timeout=120)
    err = r.stderr.decode("utf-8", "replace")
    assert r.returncode == 1, err
    assert "ValueError" in err and "PORTMAT_DEVICE" in err and "\\xffopencl\\xfe:0" in err, err


def test_devices_command_with_a_bad_device_variable():
    r = run_python("-m", "portmat", "devices", env={"PORTMAT_DEVICE": "nosuch:3"})
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    assert "no default device" in r.stdout and "nosuch:3" in r.stdout
    for d in DEVICES:
        assert d.id in r.stdout


BAD_SETTINGS = [
    ("PORTMAT_GPU_MIN_FLOP", "lots"), ("PORTMAT_GPU_MIN_FLOP", "-1"), ("PORTMAT_CPU_BLOCKS", "1,2"),
    ("PORTMAT_CPU_BLOCKS", "0,0,0"), ("PORTMAT_CPU_BLOCKS", "f64:-5,3,x"), ("PORTMAT_CPU_BLOCKS", "144,256,4096,2"),
    ("PORTMAT_CPU_BLOCKS", "30,64,48,1"), ("PORTMAT_CPU_BLOCKS", "f64:30,64,48,0"), ("PORTMAT_CPU_ISA", "bogus"),
    ("PORTMAT_CPU_RESULT_POOL", "maybe"), ("PORTMAT_NUM_THREADS", "99999999999999999999"),
    ("PORTMAT_OPENCL_PARAMS", "MDIMC=0"), ("PORTMAT_OPENCL_PARAMS", "KWG=4096,MWG=4096,NWG=4096"),
    ("PORTMAT_OPENCL_PARAMS", "VWM=3"), ("PORTMAT_OPENCL_PARAMS", "=,=="), ("PORTMAT_CACHE_DIR", "\x01"),
    ("PORTMAT_CUDA_TILE", "bogus"), ("PORTMAT_CUDA_SK_UNITS", "0"), ("PORTMAT_CUDA_SK_UNITS", "-7"),
    ("PORTMAT_CUDA_EARLY_ROWS", "-1"), ("PORTMAT_CUDA_CHUNK_MB", "0"), ("PORTMAT_CUDA_THREADS", "-2"),
    ("PORTMAT_CUDA_GROUP_M", "0"), ("PORTMAT_CUDA_SK_ALL", "5"),
    # Bytes that are not UTF-8 (surrogate escapes here, raw bytes in the child's environment): the
    # messages quoting them must still be ValueErrors, not UnicodeDecodeErrors.
    ("PORTMAT_OPENCL_PARAMS", "\udcff=1"), ("PORTMAT_CPU_BLOCKS", "\udce9,2,3"), ("PORTMAT_CUDA_TILE", "\udcff"),
    ("PORTMAT_CACHE_DIR", "caf\udce9"),
]


@pytest.mark.parametrize("name,value", BAD_SETTINGS)
def test_bad_settings_give_right_answers_or_clear_errors(tmp_path, name, value):
    # Every device, small and large products: the right answer, or a Python exception that names
    # the setting; never a crash.
    code = f"""
import numpy as np, portmat
rng = np.random.default_rng()
for device in {DEVICE_IDS!r}:
    for m, k, n in ((37, 41, 29), (600, 300, 700)):
        a, b = rng.uniform(-1, 1, (m, k)).astype(np.float32), rng.uniform(-1, 1, (k, n)).astype(np.float32)
        try:
            c = portmat.matmul(a, b, device=device)
        except (ValueError, portmat.Error) as e:
            assert "{name}" in str(e) or "kernel parameter" in str(e) or "parameters" in str(e), str(e)
            print(device, "clear error:", e)
            continue
        ref = a.astype(np.float64) @ b
        assert np.all(np.abs(c - ref) <= k * 1.2e-7 * (np.abs(a).astype(np.float64) @ np.abs(b))), device
print("done")
"""
    r = run_python("-c", code, env={name: value}, timeout=300, cwd=tmp_path)  # relative paths land there
    assert r.returncode == 0, r.stderr
    assert "done" in r.stdout

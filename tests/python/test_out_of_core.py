"""Issue 20: portmat's device memory cap, out-of-core NumPy products, and one product split across
several devices.

Out-of-core runs on the OpenCL devices CI has (PoCL, Intel's CPU runtime) made to take a discrete
GPU's path (PORTMAT_OPENCL_DISCRETE=1, read at every call) under a cap of a few hundred KiB, with
products several times the cap: every answer is held to NumPy's (integers exactly, floats and
complex numbers within the float64 reference's bound), and portmat.device_usage() shows that the
product ran in blocks and that the device never held more than the cap. The CUDA tests (for the
H200) skip, saying why, without a CUDA device.
"""

import numpy as np
import pytest

import portmat
from conftest import DEVICES, run_python
from test_numpy_contract import as_view, check_same_as_numpy, random_values

OPENCL = [d.id for d in DEVICES if d.id.startswith("opencl:")]
CUDA = [d.id for d in DEVICES if d.id.startswith("cuda:")]
HAS_CPU = any(d.id == "cpu:0" for d in DEVICES)
CAP = 512 << 10  # 512 KiB


@pytest.fixture(params=OPENCL or [pytest.param(None, marks=pytest.mark.skip("no OpenCL device"))])
def capped(request, monkeypatch):
    """An OpenCL device run as a discrete GPU under a 512 KiB cap, its usage counters zeroed."""
    monkeypatch.setenv("PORTMAT_OPENCL_DISCRETE", "1")
    portmat.set_device_memory_limit(CAP)
    portmat.reset_device_usage(request.param)
    yield request.param
    portmat.set_device_memory_limit(None)


def assert_tiled(device, cap=CAP):
    u = portmat.device_usage(device)
    assert u["tiled_products"] >= 1, u
    assert u["host_calls"] > 1, u
    assert 0 < u["peak_bytes"] <= cap, u


# ---- the cap ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["8X", "0", "-1", "1.5G", "G", "lots", "99999999999999999999999"])
def test_bad_environment_values_raise_naming_the_variable(value):
    code = ("import numpy as np, portmat\n"
            "try:\n"
            "    portmat.matmul(np.ones((3, 3)), np.ones((3, 3)), device='cpu')\n"
            "except ValueError as e:\n"
            "    print('ValueError', e)\n"
            "try:\n"
            "    portmat.device_memory_limit()\n"
            "except ValueError as e:\n"
            "    print('ValueError', e)\n")
    r = run_python("-c", code, env={"PORTMAT_DEVICE_MEMORY": value})
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 2, r.stdout
    for line in lines:
        assert line.startswith("ValueError") and "PORTMAT_DEVICE_MEMORY" in line, line


def test_environment_value_is_the_limit_and_the_setting_wins():
    code = ("import portmat\n"
            "print(portmat.device_memory_limit())\n"
            "portmat.set_device_memory_limit('1G'); print(portmat.device_memory_limit())\n"
            "portmat.set_device_memory_limit(None); print(portmat.device_memory_limit())\n")
    r = run_python("-c", code, env={"PORTMAT_DEVICE_MEMORY": "3M"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [str(3 << 20), str(1 << 30), str(3 << 20)]
    r = run_python("-c", "import portmat; print(portmat.device_memory_limit())", env={"PORTMAT_DEVICE_MEMORY": None})
    assert r.stdout.split() == ["None"], r.stderr


def test_bad_settings_raise():
    for bad in (0, -5, "0", "abc", "1.5G", ""):
        with pytest.raises(ValueError):
            portmat.set_device_memory_limit(bad)
    for bad in (True, 1.5, [1]):
        with pytest.raises(TypeError):
            portmat.set_device_memory_limit(bad)
    portmat.set_device_memory_limit(np.int64(1 << 30))
    assert portmat.device_memory_limit() == 1 << 30
    portmat.set_device_memory_limit("256m")
    assert portmat.device_memory_limit() == 256 << 20
    portmat.set_device_memory_limit(None)


def test_an_allocation_past_the_cap_is_out_of_device_memory(capped):
    with pytest.raises(portmat.OutOfDeviceMemory) as e:
        portmat.asarray(np.zeros((1000, 1000), np.float32), device=capped)
    assert isinstance(e.value, MemoryError) and "limit" in str(e.value)
    x = portmat.asarray(np.ones((100, 100), np.float32), device=capped)  # 40 KB: fits
    assert portmat.device_usage(capped)["bytes_in_use"] >= 40000
    with pytest.raises(portmat.OutOfDeviceMemory):  # what is held counts
        portmat.asarray(np.zeros((360, 360), np.float32), device=capped)  # 518 KB alone would fit
    del x


# ---- out-of-core -------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "complex64", "int64", "uint8", "float16"])
@pytest.mark.parametrize("views", [("contiguous", "contiguous"), ("transposed", "strided"), ("reversed", "transposed")])
def test_products_several_times_the_cap(capped, dtype, views):
    rng = np.random.default_rng()
    # Primes; a, b and c together 2.5-10x the cap in the computed dtype.
    a = as_view(rng, random_values(rng, (331, 211), dtype), views[0])
    b = as_view(rng, random_values(rng, (211, 307), dtype), views[1])
    check_same_as_numpy(portmat.matmul(a, b, device=capped), a, b)
    assert_tiled(capped)


def test_k_split_where_not_even_a_thin_block_holds_all_of_k(capped):
    rng = np.random.default_rng()
    for dtype in ["float32", "float64", "int32", "uint64"]:
        a = random_values(rng, (149, 6007), dtype)
        b = as_view(rng, random_values(rng, (6007, 131), dtype), "transposed")
        check_same_as_numpy(portmat.matmul(a, b, device=capped), a, b)
        assert_tiled(capped)


def test_out_and_stacks(capped):
    rng = np.random.default_rng()
    a = random_values(rng, (3, 257, 193), "float32")
    b = random_values(rng, (193, 263), "float32")
    check_same_as_numpy(portmat.matmul(a, b, device=capped), a, b)  # rows stacked: one product
    b3 = random_values(rng, (3, 193, 263), "float64")
    check_same_as_numpy(portmat.matmul(a.astype(np.float64), b3, device=capped), a.astype(np.float64), b3)
    big = random_values(rng, (257, 2 * 263), "float32")
    gaps = big[:, 1::2].copy()
    out = big[:, ::2]
    assert portmat.matmul(a[1], b, out=out, device=capped) is out
    check_same_as_numpy(out.copy(), a[1], b)
    assert np.array_equal(big[:, 1::2], gaps), "wrote into out's gaps"
    assert_tiled(capped)


def test_a_cap_too_small_for_one_block_is_a_clear_error(capped):
    portmat.set_device_memory_limit(4096)
    a = np.ones((200, 200), np.float32)
    with pytest.raises(portmat.OutOfDeviceMemory, match="block") as e:
        portmat.matmul(a, a, device=capped)
    assert capped in str(e.value)


# ---- several devices -----------------------------------------------------------------------------------
needs_cpu_and_opencl = pytest.mark.skipif(not (HAS_CPU and OPENCL), reason="needs the CPU backend and an OpenCL device")


def check_split(devices, dtype="float32", shape=((640, 448), (448, 512))):
    for d in devices:
        portmat.reset_device_usage(d)
    rng = np.random.default_rng()
    a = random_values(rng, shape[0], dtype)
    b = random_values(rng, shape[1], dtype)
    check_same_as_numpy(portmat.matmul(a, b, device=devices), a, b)
    for d in devices:
        assert portmat.device_usage(d)["host_calls"] >= 1, f"{d} took no block"


@needs_cpu_and_opencl
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "complex64"])
def test_cpu_and_opencl_each_take_a_block(dtype):
    check_split(["cpu", OPENCL[0]], dtype)
    cpu = next(d for d in portmat.devices() if d.id == "cpu:0")
    check_split((OPENCL[0], cpu), dtype)  # a tuple, DeviceInfo entries
    # wide rather than tall: the columns are split
    check_split(["cpu", OPENCL[0]], dtype, ((96, 700), (700, 1500)))


@needs_cpu_and_opencl
def test_stacks_and_out_on_several_devices():
    rng = np.random.default_rng()
    a = random_values(rng, (8, 200, 230), "float32")  # 1.5e8 flops: worth splitting
    b = random_values(rng, (8, 230, 210), "float32")
    portmat.reset_device_usage("cpu")
    portmat.reset_device_usage(OPENCL[0])
    out = np.empty((8, 200, 210), np.float32)
    assert portmat.matmul(a, b, out=out, device=["cpu", OPENCL[0]]) is out
    check_same_as_numpy(out, a, b)
    assert portmat.device_usage("cpu")["host_calls"] >= 1
    assert portmat.device_usage(OPENCL[0])["host_calls"] >= 1


@pytest.mark.skipif(len(OPENCL) < 2, reason="fewer than two OpenCL devices here (both CPU runtimes: make test-intel-opencl)")
def test_every_opencl_device_together():
    check_split(OPENCL)


@needs_cpu_and_opencl
def test_small_products_run_whole_on_one_device():
    portmat.reset_device_usage("cpu")
    portmat.reset_device_usage(OPENCL[0])
    a = np.ones((40, 40), np.float32)
    assert np.array_equal(portmat.matmul(a, a, device=["cpu", OPENCL[0]]), a @ a)
    calls = [portmat.device_usage(d)["host_calls"] for d in ("cpu", OPENCL[0])]
    assert sorted(calls) == [0, 1], calls


def test_lists_are_checked():
    a = np.ones((4, 4), np.float32)
    with pytest.raises(ValueError, match="empty"):
        portmat.matmul(a, a, device=[])
    with pytest.raises(ValueError, match="twice"):
        portmat.matmul(a, a, device=["cpu", "cpu:0"])
    with pytest.raises(ValueError, match="nosuch"):
        portmat.matmul(a, a, device=["cpu", "nosuch:3"])
    with pytest.raises(TypeError):
        portmat.matmul(a, a, device=["cpu", 3])
    with pytest.raises(ValueError):
        portmat.matmul(a, a, device=["cpu,cpu"])
    assert np.array_equal(portmat.matmul(a, a, device=["cpu"]), a @ a)  # a list of one


@needs_cpu_and_opencl
def test_a_device_failing_midway_is_the_calls_error(monkeypatch):
    monkeypatch.setenv("PORTMAT_OPENCL_DISCRETE", "1")
    portmat.set_device_memory_limit(4096)  # the CPU holds no device memory; OpenCL cannot hold a block
    try:
        portmat.reset_device_usage("cpu")
        a = np.ones((700, 700), np.float32)
        with pytest.raises(portmat.OutOfDeviceMemory, match=OPENCL[0]):
            portmat.matmul(a, a, device=["cpu", OPENCL[0]])
        assert portmat.device_usage("cpu")["host_calls"] >= 1  # the CPU's block ran to its end
    finally:
        portmat.set_device_memory_limit(None)
    assert np.array_equal(portmat.matmul(a, a, device=["cpu", OPENCL[0]]), a @ a)  # and all is well after


# ---- CUDA (the H200) ----------------------------------------------------------------------------------
needs_cuda = pytest.mark.skipif(not CUDA, reason="no CUDA device on this machine")


def sampled_check(c, a, b, rng, samples=300):
    i = rng.integers(0, a.shape[0], samples)
    j = rng.integers(0, b.shape[1], samples)
    a64, b64 = a[i].astype(np.float64), b[:, j].astype(np.float64).T
    ref = np.einsum("sk,sk->s", a64, b64)
    mag = np.einsum("sk,sk->s", np.abs(a64), np.abs(b64))
    bound = a.shape[1] * np.finfo(c.dtype).eps * mag
    assert np.all(np.abs(c[i, j] - ref) <= bound)


@needs_cuda
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_cuda_out_of_core_scaled_down(dtype):
    # The figure scaled down by 16 in memory: n = 8192 (256 MiB a float32 matrix) under
    # 512 MiB, as n = 32768 under 8 GiB.
    rng = np.random.default_rng()
    n = 8192
    a = rng.uniform(-1, 1, (n, n)).astype(dtype)
    b = rng.uniform(-1, 1, (n, n)).astype(dtype)
    cap = 512 << 20 if dtype == "float32" else 1 << 30
    portmat.set_device_memory_limit(cap)
    try:
        portmat.reset_device_usage(CUDA[0])
        c = portmat.matmul(a, b, device=CUDA[0])
        assert_tiled(CUDA[0], cap)
        sampled_check(c, a, b, rng)
        bt = b.T  # a column-major b, and a strided a
        c = portmat.matmul(a[:, ::2], bt[::2], device=CUDA[0])
        sampled_check(c, np.ascontiguousarray(a[:, ::2]), np.ascontiguousarray(bt[::2]), rng)
    finally:
        portmat.set_device_memory_limit(None)


@needs_cuda
def test_cuda_out_of_core_integers_and_complex():
    # 96 MiB: the CUDA backend's kernel scratch (64 MiB) and 32 MiB for blocks; each product's
    # buffers are 42-61 MB.
    rng = np.random.default_rng()
    cap = 96 << 20
    portmat.set_device_memory_limit(cap)
    try:
        for dtype, (m, k, n) in [("int32", (3001, 257, 3011)), ("complex64", (1500, 1300, 1400))]:
            a = random_values(rng, (m, k), dtype)
            b = as_view(rng, random_values(rng, (k, n), dtype), "transposed")
            portmat.reset_device_usage(CUDA[0])
            check_same_as_numpy(portmat.matmul(a, b, device=CUDA[0]), a, b)
            assert_tiled(CUDA[0], cap)
    finally:
        portmat.set_device_memory_limit(None)


@needs_cuda
@pytest.mark.skipif(not HAS_CPU, reason="no CPU backend")
def test_cuda_and_the_cpu_each_take_a_block():
    check_split([CUDA[0], "cpu"])
    check_split([CUDA[0], "cpu"], "float64")


@needs_cuda
def test_cuda_means_every_cuda_device():
    rng = np.random.default_rng()
    a = random_values(rng, (1500, 1300), "float32")
    b = random_values(rng, (1300, 1400), "float32")
    for d in CUDA:
        portmat.reset_device_usage(d)
    check_same_as_numpy(portmat.matmul(a, b, device="cuda"), a, b)
    for d in CUDA:
        assert portmat.device_usage(d)["host_calls"] >= 1, d


# ---- bench/out_of_core.py --------------------------------------------------------------------------
@needs_cpu_and_opencl
def test_bench_script_verifies_and_writes_its_records(tmp_path):
    import json
    import pathlib
    script = pathlib.Path(__file__).resolve().parents[2] / "bench" / "out_of_core.py"
    out = tmp_path / "ooc.json"
    r = run_python(str(script), "--n", "300", "--cap", "256K", "--device", OPENCL[0], "--rounds", "1",
                   "--devices", f"cpu,{OPENCL[0]}", "--json", str(out),
                   env={"PORTMAT_OPENCL_DISCRETE": "1", "PORTMAT_DEVICE_MEMORY": None}, timeout=300)
    assert r.returncode == 0, r.stderr
    records = json.loads(out.read_text())["records"]
    cap, devices = records
    assert cap["kind"] == "cap" and cap["cap_bytes"] == 256 << 10
    assert cap["capped_usage"]["tiled_products"] == 1 and 0 < cap["capped_usage"]["peak_bytes"] <= 256 << 10
    assert cap["capped_max_rel_error"] <= cap["error_bound"] and cap["full_max_rel_error"] <= cap["error_bound"]
    assert cap["capped_over_full_speed"] > 0
    assert set(devices["flop_share"]) == {"cpu", OPENCL[0]} and abs(sum(devices["flop_share"].values()) - 1) < 1e-9
    assert "capped/full speed" in r.stdout and "list/one speed" in r.stdout
    r = run_python(str(script), "--cap", "8X")
    assert r.returncode == 2 and "--cap" in r.stderr

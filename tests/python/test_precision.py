"""The precision modes of float32 products (issue 18). Here (CPU, PoCL): the API, the names, the
process-wide setting and $PORTMAT_PRECISION, and that every device without tensor-core kernels
raises naming the mode and the device. On a CUDA GPU (sm_80+): each mode against float64 within
its bound (first run on the H200 on 2026-12-02)."""
import os
import subprocess
import sys

import numpy as np
import pytest

import portmat

MODES = ("float32_tc", "tf32", "bfloat16")


def _devices_without_modes():
    return [d.id for d in portmat.devices() if d.backend != "cuda"]


def _cuda():
    return next((d.id for d in portmat.devices() if d.backend == "cuda"), None)


def test_names_and_setting():
    assert portmat.PRECISIONS == ("float32", "float32_tc", "tf32", "bfloat16")
    assert portmat.get_precision() == "float32"
    portmat.set_precision("tf32")
    try:
        assert portmat.get_precision() == "tf32"
    finally:
        portmat.set_precision(None)
    assert portmat.get_precision() == "float32"
    for bad in ("highest", "TF32", 3, ""):
        with pytest.raises(ValueError, match="precision must be one of"):
            portmat.set_precision(bad)
        with pytest.raises(ValueError, match="precision must be one of"):
            portmat.matmul(np.ones((2, 2), np.float32), np.ones((2, 2), np.float32), precision=bad)


def test_environment_variable():
    code = ("import portmat, numpy as np; print(portmat.get_precision()); "
            "portmat.matmul(np.ones((2, 2), np.float32), np.ones((2, 2), np.float32), device='cpu')")
    env = dict(os.environ, PORTMAT_PRECISION="bfloat16")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.stdout.splitlines()[0] == "bfloat16"
    assert r.returncode != 0 and "'bfloat16'" in r.stderr and "cpu:0" in r.stderr, r.stderr
    env["PORTMAT_PRECISION"] = "fast"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode != 0 and "PORTMAT_PRECISION" in r.stderr, r.stderr


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", ["float32", "complex64", "float16"])
def test_devices_without_tensor_cores_raise(mode, dtype):
    a = np.ones((3, 4), dtype)
    b = np.ones((4, 5), dtype)
    for dev in _devices_without_modes():
        out = np.full((3, 5), 7, dtype)
        with pytest.raises(portmat.DeviceError, match=f"'{mode}'.*{dev}"):
            portmat.matmul(a, b, out=out, device=dev, precision=mode)
        assert (out == 7).all()  # nothing written
        # tiny products (the one-call path) and empty ones answer the same
        with pytest.raises(portmat.DeviceError, match=f"'{mode}'"):
            portmat.matmul(a[:1, :1], b[:1, :1], device=dev, precision=mode)
        with pytest.raises(portmat.DeviceError, match=f"'{mode}'"):
            portmat.matmul(a[:0], b, device=dev, precision=mode)


def test_process_wide_setting_applies_and_call_wins():
    a = np.ones((3, 4), np.float32)
    portmat.set_precision("tf32")
    try:
        with pytest.raises(portmat.DeviceError, match="'tf32'"):
            portmat.matmul(a, a.T, device="cpu")
        np.testing.assert_array_equal(portmat.matmul(a, a.T, device="cpu", precision="float32"), a @ a.T)
        # Device arrays follow it too.
        x = portmat.asarray(a, device="cpu")
        with pytest.raises(portmat.DeviceError, match="'tf32'"):
            portmat.matmul(x, portmat.asarray(a.T.copy(), device="cpu"))
    finally:
        portmat.set_precision(None)


@pytest.mark.parametrize("dtype", ["float64", "complex128", "int32", "int64", "bool"])
def test_other_dtypes_ignore_the_mode(dtype):
    rng = np.random.default_rng(5)
    a = (rng.integers(-3, 4, (7, 9))).astype(dtype)
    b = (rng.integers(-3, 4, (9, 4))).astype(dtype)
    for dev in ["cpu"] + _devices_without_modes():
        c = portmat.matmul(a, b, device=dev, precision="tf32")
        np.testing.assert_array_equal(c, np.matmul(a, b))


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")  # np.matrix's own warning
def test_numpy_subclasses_do_not_fall_back_silently():
    m = np.matrix(np.ones((2, 2), np.float32))
    with pytest.raises(portmat.DeviceError, match="'tf32'"):
        portmat.matmul(m, m, precision="tf32")
    # A float64 product has no mode: NumPy's answer, as without one.
    d = np.matrix(np.arange(90000.0).reshape(300, 300) % 7)
    np.testing.assert_array_equal(portmat.matmul(d, d, precision="tf32"), np.matmul(d, d))


def test_bench_precision_on_a_cpu_raises_naming_the_mode():
    from portmat import bench

    with pytest.raises(portmat.DeviceError, match="'float32_tc'"):
        bench.run([16], 1, "cpu", precision="float32_tc", with_peers=False)
    with pytest.raises(ValueError, match="float32 products"):
        bench.run([16], 1, "cpu", dtype="float64", precision="tf32", with_peers=False)
    assert bench.mode_error_bound(64, "tf32") > 16 * bench.mode_error_bound(64, "float32_tc")


# ---- on a CUDA GPU ----------------------------------------------------------------------------

def _bound(mode, k):
    from portmat import bench

    return bench.mode_error_bound(k, mode)


def _rel_error(a, b, c):
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return float(np.max(np.abs(c - a64 @ b64) / (np.abs(a64) @ np.abs(b64) + 1e-300)))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (17, 19, 23), (127, 129, 64), (300, 260, 1000)])
@pytest.mark.parametrize("layout", ["rr", "rc", "cr", "cc"])
def test_cuda_modes_within_their_bound(mode, m, n, k, layout):
    dev = _cuda()
    if dev is None:
        pytest.skip("no CUDA device: the precision modes run only there")
    rng = np.random.default_rng(m * 1000 + k)
    a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
    a = np.asfortranarray(a) if layout[0] == "c" else a
    b = np.asfortranarray(b) if layout[1] == "c" else b
    c = portmat.matmul(a, b, device=dev, precision=mode)
    assert _rel_error(a, b, c) <= _bound(mode, k)


def test_cuda_float32_tc_close_to_float32_far_from_tf32():
    dev = _cuda()
    if dev is None:
        pytest.skip("no CUDA device: the precision modes run only there")
    rng = np.random.default_rng(7)
    a = rng.uniform(-1, 1, (300, 2048)).astype(np.float32)
    b = rng.uniform(-1, 1, (2048, 280)).astype(np.float32)
    e = {mode: _rel_error(a, b, portmat.matmul(a, b, device=dev, precision=mode))
         for mode in ("float32", "float32_tc", "tf32")}
    assert e["float32_tc"] <= 4 * e["float32"], e
    assert e["tf32"] >= 16 * e["float32_tc"], e

"""Bad input raises a clear exception naming what is wrong; nothing crashes, and later calls work."""

import re

import numpy as np
import pytest

import portmat
from conftest import check_matmul, random_matrix


def _ok(device):
    a, b = np.ones((3, 4), np.float32) * 0.5, np.full((4, 2), 3.0, np.float32)
    check_matmul(portmat.matmul(a, b, device=device), a, b)


@pytest.mark.parametrize("shape_a,shape_b,match", [
    ((), (2, 2), "at least 1 dimension"), ((3,), (), "at least 1 dimension"),
    ((2, 3), (2, 2), r"inner dimensions differ.*\(2, 3\).*\(2, 2\)"),
    ((4,), (3,), r"inner dimensions differ.*\(4,\).*\(3,\)"),
    ((2, 2, 3), (3, 3, 2), r"stacks do not broadcast.*\(2, 2, 3\).*\(3, 3, 2\)"),
])
def test_shapes_numpy_refuses_raise_its_exception_naming_both(device, shape_a, shape_b, match):
    a, b = np.ones(shape_a, np.float32), np.ones(shape_b, np.float32)
    with pytest.raises(ValueError):
        np.matmul(a, b)
    with pytest.raises(ValueError, match=match):
        portmat.matmul(a, b, device=device)
    _ok(device)


def test_inner_dimension_mismatch_shows_both_shapes(device):
    with pytest.raises(ValueError, match=r"inner dimensions differ.*\(3, 4\).*\(5, 6\)"):
        portmat.matmul(np.ones((3, 4), np.float32), np.ones((5, 6), np.float32), device=device)
    _ok(device)


@pytest.mark.parametrize("dtype", ["U3", "S3", "datetime64[s]", "timedelta64[s]"])
def test_dtypes_numpy_has_no_matmul_for_raise_its_type_error(device, dtype):
    a = np.array([["a", "b"], ["c", "d"]], dtype) if dtype[0] in "US" else np.ones((2, 2)).astype(dtype)
    b = np.ones((2, 2), np.float32)
    with pytest.raises(TypeError):
        np.matmul(a, a)
    with pytest.raises(TypeError):
        portmat.matmul(a, a, device=device)
    with pytest.raises(TypeError):
        portmat.matmul(b, a, device=device)
    _ok(device)


@pytest.mark.parametrize("bad", [None, "abc", object(), {"a": 1}, [[1.0, 2.0], [3.0]], 3.0])
@pytest.mark.parametrize("side", ["a", "b"])
def test_not_arrays_raise_numpys_kind_of_error(device, bad, side):
    # The class NumPy raises (None and a dict: ValueError, 0-d; a ragged list: ValueError; a
    # string: its TypeError), in the first and second place, from the fast path's binding too.
    m = np.ones((2, 2), np.float32)
    args = (bad, m) if side == "a" else (m, bad)
    with pytest.raises((TypeError, ValueError)) as np_info:
        np.matmul(*args)
    kind = ValueError if isinstance(np_info.value, ValueError) else TypeError
    with pytest.raises(kind) as info:
        portmat.matmul(*args, device=device)
    message = str(info.value)
    assert "incompatible function arguments" not in message
    assert "matmul" in message or "ufunc" in message
    _ok(device)


def test_bad_device_specs():
    a = np.ones((2, 2), np.float32)
    with pytest.raises(ValueError, match="no device matches 'nosuch:9'.*available"):
        portmat.matmul(a, a, device="nosuch:9")
    with pytest.raises(ValueError, match="no device matches"):
        portmat.matmul(a, a, device="opencl:999")
    with pytest.raises(TypeError, match="device must be"):
        portmat.matmul(a, a, device=3.5)
    with pytest.raises(ValueError, match="no device matches"):
        portmat.set_default_device("opencl:999")
    # A name that is not text (a lone surrogate, as os.fsdecode gives for undecodable bytes): a
    # ValueError naming it, wherever a device is taken, not the binding's signature mismatch.
    for call in (lambda: portmat.matmul(a, a, device="cpu\udc80"),
                 lambda: portmat.matmul(a, a, device=["cpu:0", "\udc80"]),
                 lambda: portmat.set_default_device("\udc80"),
                 lambda: portmat.asarray(a, device="\udc80")):
        with pytest.raises(ValueError, match="not a device name"):
            call()
    assert portmat.matmul(a, a).shape == (2, 2)  # nothing was left set


def test_bad_kernel_parameters_raise_and_recover(device, monkeypatch):
    if not device.startswith("opencl"):
        pytest.skip("OpenCL kernel parameters")
    monkeypatch.setenv("PORTMAT_OPENCL_PARAMS", "MWG=48")  # not a multiple of MDIMC*VWM
    a = random_matrix(np.random.default_rng(), (70, 70))
    with pytest.raises(ValueError, match="MWG"):  # gemm.cl's rule, or gemm_direct.cl's (Intel's runtime)
        portmat.matmul(a, a, device=device)
    monkeypatch.setenv("PORTMAT_OPENCL_PARAMS", "NOPE=1")
    with pytest.raises(ValueError, match="unknown kernel parameter 'NOPE'"):
        portmat.matmul(a, a, device=device)
    monkeypatch.delenv("PORTMAT_OPENCL_PARAMS")
    check_matmul(portmat.matmul(a, a, device=device), a, a)


def test_out_of_device_memory_is_an_exception(device):
    info = portmat._ext.find_device(device)
    with pytest.raises(portmat.OutOfDeviceMemory, match="bytes") as e:
        portmat._ext._try_alloc(device, info.memory_bytes * 4 + (1 << 40))
    assert isinstance(e.value, MemoryError) and isinstance(e.value, portmat.DeviceError)
    _ok(device)


def test_exception_hierarchy():
    assert issubclass(portmat.DeviceError, portmat.Error)
    assert issubclass(portmat.Error, RuntimeError)
    assert issubclass(portmat.OutOfDeviceMemory, MemoryError)

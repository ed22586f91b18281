"""Device listing and choice: devices(), device=, set_default_device(), $PORTMAT_DEVICE."""

import numpy as np
import pytest

import portmat
from conftest import DEVICES, check_matmul, random_matrix, run_python

pytestmark = pytest.mark.skipif(not DEVICES, reason="no device")


def test_device_entries_describe_the_device():
    ids = set()
    for d in portmat.devices():
        assert d.kind in ("gpu", "cpu", "other")
        assert d.id == f"{d.backend}:{d.index}"
        assert d.name and d.memory_bytes > 0 and d.compute_units > 0
        assert isinstance(d.host_unified, bool)
        assert d.id in repr(d)
        ids.add(d.id)
    assert len(ids) == len(portmat.devices())


def test_default_prefers_a_gpu():
    default = portmat.default_device()
    if any(d.kind == "gpu" for d in portmat.devices()):
        assert default.kind == "gpu"
    else:
        assert default.kind == "cpu"


def test_device_by_entry_and_by_string(rng):
    a, b = random_matrix(rng, (9, 11)), random_matrix(rng, (11, 4))
    for d in portmat.devices():
        check_matmul(portmat.matmul(a, b, device=d), a, b)
        check_matmul(portmat.matmul(a, b, device=d.id), a, b)
    for d in portmat.devices():
        # A bare backend name picks that backend's preferred device: a GPU when it has one.
        chosen = portmat._ext.find_device(d.backend)
        assert chosen.backend == d.backend
        if any(x.kind == "gpu" for x in portmat.devices() if x.backend == d.backend):
            assert chosen.kind == "gpu"
        assert portmat._ext.find_device(d.kind).kind == d.kind


def test_set_default_device():
    last = portmat.devices()[-1]
    try:
        portmat.set_default_device(last)
        assert portmat.default_device() == last
        portmat.set_default_device(last.id)
        assert portmat.default_device() == last
    finally:
        portmat.set_default_device(None)
    assert portmat.default_device() == portmat._ext.find_device("")


def _python(*args, **env):
    return run_python(*args, env=env, timeout=300)


def _run(code, **env):
    return _python("-c", code, **env)


def test_portmat_device_variable():
    last = portmat.devices()[-1]
    r = _run("import portmat; print(portmat.default_device().id)", PORTMAT_DEVICE=last.id)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == last.id


def test_portmat_device_variable_bad_value():
    code = "import numpy as np, portmat; a = np.ones((2, 2), np.float32); portmat.matmul(a, a)"
    r = _run(code, PORTMAT_DEVICE="nosuch:1")
    assert r.returncode == 1
    assert "PORTMAT_DEVICE" in r.stderr and "nosuch:1" in r.stderr and "ValueError" in r.stderr


def test_devices_command():
    r = _python("-m", "portmat", "devices")
    assert r.returncode == 0, r.stderr
    for d in portmat.devices():
        assert d.id in r.stdout and d.name in r.stdout, r.stdout


_CACHE_CHECK = (
    "import numpy as np, portmat\n"
    "rng = np.random.default_rng(0)\n"
    "a = rng.uniform(-1, 1, (37, 41)).astype(np.float32)\n"
    "b = rng.uniform(-1, 1, (41, 29)).astype(np.float32)\n"
    "c = portmat.matmul(a, b, device='opencl')\n"
    "ref = a.astype(np.float64) @ b\n"
    "assert np.all(np.abs(c - ref) <= 41 * 1.2e-7 * (np.abs(a).astype(np.float64) @ np.abs(b)))\n"
)


def test_compiled_kernels_are_cached_on_disk(tmp_path):
    # A fresh process compiles and stores the driver's binaries; the next one loads them and still
    # computes correctly.
    cache = tmp_path / "nested" / "cache"
    if not any(d.backend == "opencl" for d in portmat.devices()):
        pytest.skip("no OpenCL device")
    first = _run(_CACHE_CHECK, PORTMAT_CACHE_DIR=str(cache))
    assert first.returncode == 0, first.stderr
    files = list(cache.glob("opencl-v2-*.bin"))
    assert files, "no binary was cached"
    stamps = {f: f.stat().st_mtime_ns for f in files}
    second = _run(_CACHE_CHECK, PORTMAT_CACHE_DIR=str(cache))
    assert second.returncode == 0, second.stderr
    # Read, not rewritten; and no temporary files left beside the entries.
    assert {f: f.stat().st_mtime_ns for f in cache.glob("opencl-v2-*.bin")} == stamps
    assert sorted(p.name for p in cache.iterdir()) == sorted(f.name for f in files)


def test_small_problems_stay_on_the_host_only_when_the_choice_is_automatic():
    devs = portmat.devices()
    default = portmat.default_device()
    native_cpu = [d for d in devs if d.backend == "cpu"]
    small = portmat._ext.device_for("", 8, 8, 8)
    large = portmat._ext.device_for("", 4096, 4096, 4096)
    assert large == default
    if default.kind == "gpu" and native_cpu:
        assert small == native_cpu[0]
    else:
        assert small == default
    # Any explicit choice is obeyed whatever the size.
    for d in devs:
        assert portmat._ext.device_for(d.id, 8, 8, 8) == d
    try:
        portmat.set_default_device(default)
        assert portmat._ext.device_for("", 8, 8, 8) == default
    finally:
        portmat.set_default_device(None)

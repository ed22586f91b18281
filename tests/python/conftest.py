"""Shared fixtures: every test that takes `device` runs on every device portmat finds (PoCL's CPU
device on CI; NVIDIA's OpenCL GPU on the H200), and `check_matmul` holds a result to a real bound."""

import os
import subprocess
import sys

import numpy as np
import pytest

import portmat

DEVICES = portmat.devices()
DEVICE_IDS = [d.id for d in DEVICES]


def run_python(*args, env=None, timeout=120, cwd=None):
    """Runs `python *args` in a fresh process with `env` added to this one's environment (values
    of None remove a variable); a hang fails the test with TimeoutExpired instead of stalling."""
    full = dict(os.environ)
    for k, v in (env or {}).items():
        if v is None:
            full.pop(k, None)
        else:
            full[k] = v
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=full,
                          timeout=timeout, cwd=cwd)


def pytest_report_header(config):
    return "portmat devices: " + ", ".join(f"{d.id} ({d.name})" for d in DEVICES)


@pytest.fixture(params=[d.id for d in DEVICES] or [pytest.param(None, marks=pytest.mark.skip("no device"))])
def device(request):
    return request.param


@pytest.fixture
def rng(request):
    # Fresh inputs every run, reproducible from the printed seed when a test fails.
    seed = np.random.SeedSequence().entropy % 2**32
    print(f"rng seed {seed}")
    return np.random.default_rng(seed)


def random_matrix(rng, shape, dtype=np.float32):
    return rng.uniform(-1.0, 1.0, shape).astype(dtype)


def check_matmul(c, a, b):
    """c must be a @ b to within the classical float error bound, entry by entry:
    |c - ref| <= K * eps * (|a| @ |b|), with ref computed in float64."""
    a = np.asarray(a)
    b = np.asarray(b)
    dtype = np.result_type(a.dtype, b.dtype)
    assert isinstance(c, np.ndarray)
    assert c.dtype == dtype, f"result dtype {c.dtype}, expected {dtype}"
    assert c.shape == (a.shape[0], b.shape[1])
    assert c.flags.c_contiguous
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    ref = a64 @ b64
    bound = max(a.shape[1], 1) * np.finfo(dtype).eps * (np.abs(a64) @ np.abs(b64))
    err = np.abs(c.astype(np.float64) - ref)
    assert np.all(np.isfinite(c)), "result has NaN or inf"
    worst = np.unravel_index(np.argmax(err - bound), err.shape) if err.size else None
    assert np.all(err <= bound), (
        f"entry {worst}: got {c[worst]}, expected {ref[worst]} (error {err[worst]:.3e} > bound {bound[worst]:.3e})"
    )

"""`python -m portmat tune` (issue 19): the search verifies, stores per device and driver, and later
products in other processes use what it stored; a damaged or foreign tuning file, parameters the
kernels reject and the off switch all leave the shipped parameters in place; PORTMAT_OPENCL_PARAMS
still wins. The search itself runs on the first OpenCL device with a small size and two candidates
(PoCL compiles each candidate's programs: seconds)."""

import os

import numpy as np
import pytest

import portmat
from conftest import DEVICES, run_python
from portmat import _ext

OPENCL = [d.id for d in DEVICES if d.backend == "opencl"]
needs_opencl = pytest.mark.skipif(not OPENCL, reason="no OpenCL device here")
HEADER = "# portmat OpenCL tuning 1"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PORTMAT_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("PORTMAT_OPENCL_PARAMS", raising=False)
    monkeypatch.delenv("PORTMAT_OPENCL_TUNING", raising=False)
    return tmp_path


def _params_in_child(dev, env):
    code = f"from portmat import _ext; print(_ext.kernel_params({dev!r}, 'float32', 512, 512))"
    r = run_python("-c", code, env=env)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


@needs_opencl
def test_tune_stores_verified_parameters_that_later_processes_use(cache, rng):
    dev = OPENCL[0]
    r = run_python("-m", "portmat", "tune", "--device", dev, "--size", "128", "--repeat", "2",
                   "--max-candidates", "2", env={"PORTMAT_CACHE_DIR": str(cache)}, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "stored in" in r.stdout
    key, path = _ext.tuning_store(dev)
    assert path == str(cache / "opencl-tuning.txt")
    lines = (cache / "opencl-tuning.txt").read_text().splitlines()
    assert lines[0] == HEADER
    entry = [ln.split("\t") for ln in lines[1:] if ln.startswith(key + "\t")]
    assert len(entry) == 1 and entry[0][1] == "float32"
    # A fresh process runs with the stored parameters, and products there are right.
    assert _params_in_child(dev, {"PORTMAT_CACHE_DIR": str(cache)}) == entry[0][2]
    a, b = rng.uniform(-1, 1, (70, 90)).astype(np.float32), rng.uniform(-1, 1, (90, 33)).astype(np.float32)
    c = portmat.matmul(a, b, device=dev)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert np.all(np.abs(c - ref) <= 4 * 90 * np.finfo(np.float32).eps * (np.abs(a) @ np.abs(b)))
    show = run_python("-m", "portmat", "tune", "--show", env={"PORTMAT_CACHE_DIR": str(cache)})
    assert entry[0][2] in show.stdout
    forget = run_python("-m", "portmat", "tune", "--device", dev, "--forget", env={"PORTMAT_CACHE_DIR": str(cache)})
    assert "1 entries removed" in forget.stdout, forget.stdout + forget.stderr


@needs_opencl
def test_stored_parameters_apply_and_damage_is_ignored(cache):
    dev = OPENCL[0]
    key, path = _ext.tuning_store(dev)
    env = {"PORTMAT_CACHE_DIR": str(cache)}
    shipped = _params_in_child(dev, env)
    wanted = "MWG=32,NWG=32,KWG=16,MDIMC=8,NDIMC=8,VWM=4,VWN=4,PADA=4,PADB=0,GVW=4,DIRECT=0,DBF=1,MAXREGS=0,VECW=1,NVEC=1,PACK=1,ASYNC=0,GROUPM=1,TRANSA=0"
    assert wanted != shipped
    good = f"{key}\tfloat32\t{wanted}\t1.0\t128"
    (cache / "opencl-tuning.txt").write_text("\n".join([HEADER, good]) + "\n")
    assert _params_in_child(dev, env) == wanted
    # This process sees the change too (the file is read again when it changes).
    assert _ext.kernel_params(dev, "float32", 512, 512) == wanted
    # An entry stored before tunables existed (DBF, MAXREGS, VECW, NVEC, PACK, ASYNC, GROUPM, TRANSA) still applies,
    # with their defaults.
    older = wanted.replace(",DBF=1,MAXREGS=0,VECW=1,NVEC=1,PACK=1,ASYNC=0,GROUPM=1,TRANSA=0", "")
    (cache / "opencl-tuning.txt").write_text("\n".join([HEADER, f"{key}\tfloat32\t{older}\t1.0\t128"]) + "\n")
    assert _params_in_child(dev, env) == older + ",DBF=0,MAXREGS=0,VECW=1,NVEC=1,PACK=1,ASYNC=0,GROUPM=1,TRANSA=0"
    (cache / "opencl-tuning.txt").write_text("\n".join([HEADER, good]) + "\n")
    # The off switch and the override.
    assert _params_in_child(dev, {**env, "PORTMAT_OPENCL_TUNING": "off"}) == shipped
    assert "MWG=64" in _params_in_child(dev, {**env, "PORTMAT_OPENCL_PARAMS": "MWG=64,NWG=64"})
    # Damage of every kind leaves the shipped parameters.
    for text in ["garbage\x00\xff", "", HEADER + f"\n{key}\tfloat32\tMWG=7,NWG=32", HEADER + f"\n{key}\tfloat32\tNOPE=1",
                 HEADER + f"\n{key}\tfloat32\tMWG=99999999999", HEADER + f"\n{key}\tfloat32",
                 HEADER + f"\nother device\tfloat32\t{wanted}", "# portmat OpenCL tuning 2\n" + good,
                 HEADER + f"\n{key}\tfloat16\t{wanted}"]:
        (cache / "opencl-tuning.txt").write_bytes(text.encode("utf-8", "surrogateescape") if isinstance(text, str)
                                                  else text)
        assert _params_in_child(dev, env) == shipped, text
        c = portmat.matmul(np.ones((40, 50), np.float32), np.ones((50, 30), np.float32), device=dev)
        assert np.array_equal(c, np.full((40, 30), 50, np.float32))
    # A directory where the file should be, and no cache directory at all.
    os.remove(cache / "opencl-tuning.txt")
    os.mkdir(cache / "opencl-tuning.txt")
    assert _params_in_child(dev, env) == shipped
    assert _params_in_child(dev, {"PORTMAT_CACHE_DIR": "off"}) == shipped


@needs_opencl
def test_tune_float64_is_searched_and_stored_or_refused_by_name(cache):
    # `--dtype all` asks every dtype: float64 where the device has it (a device without is skipped).
    dev = OPENCL[0]
    r = run_python("-m", "portmat", "tune", "--device", dev, "--dtype", "all", "--size", "64", "--repeat", "1",
                   "--max-candidates", "1", env={"PORTMAT_CACHE_DIR": str(cache)}, timeout=600)
    assert r.returncode == 0, r.stderr
    key, _ = _ext.tuning_store(dev)
    dtypes = sorted(ln.split("\t")[1] for ln in (cache / "opencl-tuning.txt").read_text().splitlines()[1:]
                    if ln.startswith(key + "\t"))
    has_f64 = next(d for d in DEVICES if d.id == dev).supports_float64
    assert dtypes == (["float32", "float64"] if has_f64 else ["float32"])
    if not has_f64:
        r = run_python("-m", "portmat", "tune", "--device", dev, "--dtype", "float64", env={"PORTMAT_CACHE_DIR": str(cache)})
        assert r.returncode != 0 and "has no float64" in r.stderr


def test_tune_refuses_what_it_cannot_tune(cache):
    cpu = next((d.id for d in DEVICES if d.backend == "cpu"), None)
    if cpu is not None:
        r = run_python("-m", "portmat", "tune", "--device", cpu, env={"PORTMAT_CACHE_DIR": str(cache)})
        assert r.returncode != 0 and "only OpenCL devices are tuned" in r.stderr
    r = run_python("-m", "portmat", "tune", "--device", "nosuch:3", env={"PORTMAT_CACHE_DIR": str(cache)})
    assert r.returncode != 0 and "nosuch" in r.stderr
    r = run_python("-m", "portmat", "tune", "--size", "0", env={"PORTMAT_CACHE_DIR": str(cache)})
    assert r.returncode != 0 and "positive" in r.stderr
    if OPENCL:
        r = run_python("-m", "portmat", "tune", "--device", OPENCL[0], env={"PORTMAT_CACHE_DIR": "off"})
        assert r.returncode != 0 and "PORTMAT_CACHE_DIR" in r.stderr

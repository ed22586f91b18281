"""The benchmark command runs, verifies its results and writes the JSON it promises."""

import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from conftest import DEVICES


ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.skipif(not DEVICES, reason="no device")
def test_bench_json_and_the_tables_made_from_it(tmp_path):
    dev = DEVICES[0]
    label = f"{dev.backend}-{dev.kind}" if dev.backend == "opencl" else dev.backend
    out = tmp_path / "results" / f"testbox-{label}-float32.json"
    out.parent.mkdir()
    args = ["bench", "--device", dev.id, "--sizes", "64,100", "--repeat", "2", "--json", str(out)]
    r = subprocess.run([sys.executable, "-m", "portmat", *args], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    records = json.loads(out.read_text())
    assert [rec["size"] for rec in records] == [64, 100]
    for rec in records:
        for key in ("size", "device", "numpy_s", "portmat_s", "kernel_s", "max_rel_error"):
            assert key in rec
        assert rec["numpy_s"] > 0 and rec["portmat_s"] > 0 and rec["kernel_s"] > 0
        assert rec["max_rel_error"] < rec["size"] * 1.2e-7 and rec["verified"]
        assert rec["repeat"] >= 2
        assert rec["command"] == "python -m portmat " + " ".join(args)
    assert "ratio" in r.stdout and "64" in r.stdout

    # bench/results_tables.py: a row per size in the results README, the largest in the headline.
    readme = tmp_path / "README.md"
    readme.write_text("before\n<!-- figures:begin -->\nold\n<!-- figures:end -->\nafter\n")
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "results_tables.py"), "--results", str(out.parent),
                        "--readme", str(readme)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    table = (out.parent / "README.md").read_text()
    front = readme.read_text()
    assert front.startswith("before\n") and front.endswith("after\n") and "old" not in front
    for rec in records:
        speedup = f"{rec['numpy_s'] / rec['portmat_s']:.2f}x"
        assert f"| {rec['size']} | " in table and speedup in table
    assert f": {records[-1]['device_name']} | float32 | 100 |" in front and "| testbox |" in front
    assert records[0]["command"] in table


def test_bench_rejects_bad_arguments():
    r = subprocess.run([sys.executable, "-m", "portmat", "bench", "--repeat", "0"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "positive" in r.stderr


@pytest.mark.parametrize("repeat, t_call", [(10, 0.4), (10, 0.0075), (10, 1.5e-4), (3, 1e-7), (50, 0.01)])
def test_bench_plan_gives_small_products_more_runs(repeat, t_call):
    from portmat import bench

    runs, block = bench._plan(repeat, t_call)
    assert runs >= repeat and 1 <= block <= runs
    # at least _MIN_TIMED_S of calls unless that would pass _MAX_RUNS; blocks of _MIN_BLOCK_S
    assert runs * t_call >= bench._MIN_TIMED_S or runs >= bench._MAX_RUNS
    assert block >= min(runs, bench._BLOCK)
    assert block * t_call >= bench._MIN_BLOCK_S or block in (runs, bench._BLOCK)
    if t_call * repeat >= bench._MIN_TIMED_S:
        assert runs == repeat  # large products: exactly what was asked


# ---- Intel MKL as the CPU's peer ---------------------------------------------------------------

CPU = next((d for d in DEVICES if d.backend == "cpu"), None)


def _mkl_peer():
    from portmat import peers

    try:
        return peers.MKLPeer()
    except (ImportError, OSError, AttributeError) as e:  # no mkl wheel, or a libmkl_rt without cblas
        pytest.skip(f"MKL not loadable: {e}")


def test_mkl_peer_verifies():
    from portmat import bench

    mkl = _mkl_peer()
    assert mkl.name == "mkl" and "Math Kernel Library" in mkl.version and not hasattr(mkl, "resident")
    rng = np.random.default_rng(16)
    cases = [((33, 17), (17, 9)), ((17,), (17, 9)), ((33, 17), (17,)), ((17,), (17,)), ((1, 1), (1, 1)),
             ((4, 6, 5), (4, 5, 3)), ((4, 6, 5), (5, 3)), ((0, 5), (5, 3)), ((3, 0), (0, 2))]
    for dtype in ("float32", "float64", "complex64", "complex128"):
        for sa, sb in cases:
            a, b = bench.random_operand(rng, sa, dtype), bench.random_operand(rng, sb, dtype)
            c, ref = mkl.host(a, b), np.matmul(a, b)
            assert np.shape(c) == ref.shape and np.asarray(c).dtype == ref.dtype, (dtype, sa, sb)
            if ref.ndim == 3:
                assert bench.max_rel_error(a if a.ndim == 3 else np.broadcast_to(a, (4,) + a.shape), b if b.ndim == 3
                                           else np.broadcast_to(b, (4,) + b.shape), c, rng) <= bench.error_bound(5, dtype)
            elif ref.size:  # vectors as 1-row or 1-column matrices
                m, n = (a.shape[0] if a.ndim == 2 else 1), (b.shape[1] if b.ndim == 2 else 1)
                err = bench.max_rel_error(a.reshape(m, -1), b.reshape(-1, n), np.asarray(c).reshape(m, n), rng)
                assert err <= bench.error_bound(sa[-1], dtype), (dtype, sa, sb)
        # views: transposed (read in place with CblasTrans), strided and read-only (copied)
        a, b = bench.random_operand(rng, (20, 30), dtype), bench.random_operand(rng, (20, 12), dtype)
        b.flags.writeable = False
        for x, y in [(a.T, b), (a[:, ::2].T, b[::-1]), (a[::2, :12], b[:12].T.copy().T)]:
            assert bench.max_rel_error(x, y, mkl.host(x, y), rng) <= bench.error_bound(x.shape[1], dtype)
    for a, b in [(np.ones((2, 2), np.int32), np.ones((2, 2), np.int32)),
                 (np.ones((2, 2), np.float32), np.ones((2, 2)))]:
        with pytest.raises(TypeError):
            mkl.host(a, b)


@pytest.mark.skipif(CPU is None, reason="no CPU backend device")
def test_square_bench_times_mkl_beside_numpy():
    from portmat import bench, peers

    _mkl_peer()
    assert [p.name for p in peers.available(CPU)] == ["mkl"]
    records = bench.run([48], 2, CPU.id)
    p = records[0]["peers"]["mkl"]
    assert p["verified"] and p["host_s"] > 0 and "resident_s" not in p and "Math Kernel" in p["version"]
    text = bench.table(records)
    assert "vs mkl" in text and "mkl ms" in text and "kern GF/s" not in text
    # which BLAS NumPy calls: its own, not the peer's MKL loaded into the same process
    try:
        numpy_blas = str(np.show_config(mode="dicts")["Build Dependencies"]["blas"]).lower()
    except Exception:  # NumPy before 1.25
        numpy_blas = ""
    if "openblas" in numpy_blas:
        assert "openblas" in records[0]["blas"].lower()

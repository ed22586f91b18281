"""The benchmark command runs, verifies its results and writes the JSON it promises."""

import json
import pathlib
import subprocess
import sys

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

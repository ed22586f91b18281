"""The benchmark command runs, verifies its results and writes the JSON it promises."""

import json
import pathlib
import subprocess
import sys

import numpy as np
import portmat
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
    table, front = _render_tables(out.parent, tmp_path / "README.md",
                                  "before\n<!-- figures:begin -->\nold\n<!-- figures:end -->\nafter\n")
    assert front.startswith("before\n") and front.endswith("after\n") and "old" not in front
    for rec in records:
        speedup = f"{rec['numpy_s'] / rec['portmat_s']:.2f}x"
        assert f"| {rec['size']} | " in table and speedup in table
    assert f": {records[-1]['device_name']} | float32 | 100 |" in front and "| testbox |" in front
    assert f"| {records[-1]['date'][:10]} |" in front  # the day the headline row was measured
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


# ---- The benchmark over shapes (--shapes), the MKL peer, --plot --------------------------------

CPU = next((d for d in DEVICES if d.backend == "cpu"), None)
TINY_SHAPES = "# a comment, then a blank line\n\n5,7,-\n-,9,4   # a vector on the left\n6,1,3\n"


def _mkl_peer():
    from portmat import peers

    try:
        return peers.MKLPeer()
    except (ImportError, OSError, AttributeError) as e:  # no mkl wheel, or a libmkl_rt without cblas
        pytest.skip(f"MKL not loadable: {e}")


def _render_tables(results, readme, front_text):
    """bench/results_tables.py over the folder `results` with `readme` (written with front_text)
    as the front page: (the results README it wrote, the front page after)."""
    readme.write_text(front_text)
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "results_tables.py"), "--results", str(results),
                        "--readme", str(readme)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return (results / "README.md").read_text(), readme.read_text()


def _has_matplotlib():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture(scope="module")
def shapes_run(tmp_path_factory):
    """One `bench --shapes FILE` of three tiny shapes (a matrix-vector, a vector-matrix and a K = 1
    product) on the CPU backend, with --plot when matplotlib is here: (result, records, paths)."""
    if CPU is None:
        pytest.skip("no CPU backend device")
    d = tmp_path_factory.mktemp("shapes")
    shapes = d / "shapes.txt"
    shapes.write_text(TINY_SHAPES)
    out = d / "results" / "testbox-cpu-float32-shapes.json"
    out.parent.mkdir()
    png = d / "shapes.png"
    args = ["bench", "--device", CPU.id, "--shapes", str(shapes), "--repeat", "2", "--json", str(out)]
    if _has_matplotlib():
        args += ["--plot", str(png)]
    r = subprocess.run([sys.executable, "-m", "portmat", *args], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return r, json.loads(out.read_text()), {"json": out, "png": png, "args": args}


def test_bench_shapes_file_writes_verified_records(shapes_run):
    r, records, paths = shapes_run
    assert [(rec["a_shape"], rec["b_shape"]) for rec in records] == [([5, 7], [7]), ([9], [9, 4]), ([6, 1], [1, 3])]
    assert [(rec["M"], rec["K"], rec["N"]) for rec in records] == [(5, 7, 1), (1, 9, 4), (6, 1, 3)]
    for rec in records:
        assert rec["verified"] and rec["numpy_verified"] and rec["max_rel_error"] <= rec["K"] * 1.2e-7
        for name, p in rec["peers"].items():
            assert p["verified"] and p["host_s"] > 0, name
            assert rec[f"speedup_vs_{name}"] == pytest.approx(p["host_s"] / rec["portmat_s"])
        assert rec["numpy_s"] > 0 and rec["portmat_s"] > 0 and rec["repeat"] >= 2
        lo, hi = rec["portmat_spread_s"]
        assert lo <= rec["portmat_quartiles_s"][0] <= rec["portmat_s"] <= rec["portmat_quartiles_s"][1] <= hi
        assert -(-rec["repeat"] // rec["block"]) >= 3  # alternating blocks, even of tiny products
        assert rec["speedup_vs_numpy"] == pytest.approx(rec["numpy_s"] / rec["portmat_s"])
        assert rec["flop"] == 2 * rec["M"] * rec["K"] * rec["N"]
        assert rec["bytes"] == 4 * (rec["M"] * rec["K"] + rec["K"] * rec["N"] + rec["M"] * rec["N"])
        assert rec["gbps_portmat"] == pytest.approx(rec["bytes"] / rec["portmat_s"] / 1e9)
        assert rec["vector_product"]  # a side of 1, or K = 1
        assert rec["bandwidth_gbps"] > 0 and rec["bandwidth"]["start"]["gbps"] > 0
        assert rec["target_vs_numpy"] in (0.8, 1.0) and rec["command"] == "python -m portmat " + " ".join(paths["args"])
    assert "5x7 @ 7" in r.stdout and "9 @ 9x4" in r.stdout and "6x1 @ 1x3" in r.stdout
    assert "memory bandwidth" in r.stdout and "targets:" in r.stdout


def test_bench_shapes_plot(shapes_run):
    if not _has_matplotlib():
        pytest.skip("matplotlib is not installed")
    _, _, paths = shapes_run
    assert paths["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_plot_without_matplotlib_says_how_to_get_it(tmp_path):
    shapes = tmp_path / "shapes.txt"
    shapes.write_text("4,4,4\n")
    code = ("import sys; sys.modules['matplotlib'] = None; from portmat.cli import main; "
            f"sys.exit(main(['bench', '--shapes', {str(shapes)!r}, '--plot', {str(tmp_path / 'x.png')!r}]))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "pip install matplotlib" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "x.png").exists()


def test_results_tables_render_a_shapes_file(shapes_run, tmp_path):
    _, records, paths = shapes_run
    table, front = _render_tables(paths["json"].parent, tmp_path / "README.md",
                                  "<!-- figures:begin -->\n<!-- figures:end -->\n")
    assert "## testbox, native CPU, float32, shapes" in table
    for rec in records:
        assert f"| {rec['shape']} | {rec['repeat']} | " in table
    met = sum(rec["meets_target"] for rec in records if rec["target_vs_numpy"] == 0.8)
    under = sum(rec["target_vs_numpy"] == 0.8 for rec in records)
    assert f"{met} of {under} under 20 us at >= 0.8x" in table and "Shapes, testbox" in front


def test_results_tables_render_an_automatic_choice_shapes_file(tmp_path):
    # bench/every_device.py's <machine>-auto-float32-shapes.json: portmat's own choice of device
    # against NumPy and portmat on each single device (issue 16), their columns and the count.
    if CPU is None:
        pytest.skip("no CPU backend device")
    shapes = tmp_path / "shapes.txt"
    shapes.write_text("5,7,-\n8,8,8\n")
    out = tmp_path / "results" / "testbox-auto-float32-shapes.json"
    out.parent.mkdir()
    r = subprocess.run([sys.executable, "-m", "portmat", "bench", "--device", "auto", "--shapes", str(shapes),
                        "--repeat", "2", "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    records = json.loads(out.read_text())
    singles = sorted(records[0]["single_devices"])
    assert singles and all(rec["device"].startswith("auto:") for rec in records)
    for rec in records:
        assert all(v["verified"] and v["s"] > 0 for v in rec["single_devices"].values())
        best = min([rec["numpy_s"]] + [v["s"] for v in rec["single_devices"].values()])
        assert rec["speedup_vs_best_single"] == pytest.approx(best / rec["portmat_s"])
    table, _ = _render_tables(out.parent, tmp_path / "README.md", "<!-- figures:begin -->\n<!-- figures:end -->\n")
    assert "## testbox, automatic device choice, float32, shapes" in table
    assert all(f"on {d} us" in table for d in singles) and "| chose | vs best single |" in table
    at_best = sum(rec["speedup_vs_best_single"] >= 1.0 for rec in records)
    assert f"each single device: {at_best} of {len(records)} at >= 1.0x" in table
    for rec in records:
        assert f"| {rec['shape']} | {rec['repeat']} | " in table


@pytest.mark.parametrize("text, line", [("1,2,3\n4,5\n", 2), ("# c\n1,-,3\n", 2), ("0,2,3\n", 1),
                                        ("a,b,c\n", 1), ("1,2,3,4\n", 1), ("\n\n2.5,1,1\n", 3)])
def test_bench_shapes_file_errors_name_the_line(tmp_path, text, line):
    from portmat import bench

    with pytest.raises(ValueError, match=f"line {line}: .* is not M,K,N"):
        bench.parse_shapes(text, "f")
    f = tmp_path / "shapes.txt"
    f.write_text(text)
    r = subprocess.run([sys.executable, "-m", "portmat", "bench", "--shapes", str(f)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and f"line {line}:" in r.stderr and "Traceback" not in r.stderr


def test_bench_shapes_arguments():
    from portmat import bench

    assert bench.parse_shapes(" 3 , 4 ,- # x\n-,5,-\n") == [(3, 4, None), (None, 5, None)]
    assert 40 <= len(bench.SUITE) <= 70 and len(set(bench.SUITE)) == len(bench.SUITE)
    assert bench.load_shapes("suite") == bench.SUITE
    with pytest.raises(ValueError, match="no shapes"):
        bench.parse_shapes("# nothing\n")
    for args, message in [(["--shapes", "/nonexistent/shapes.txt"], "cannot read"),
                          (["--shapes", "suite", "--sizes", "64"], "leave out --sizes"),
                          (["--shapes", "suite", "--batch", "2"], "leave out --sizes")]:
        r = subprocess.run([sys.executable, "-m", "portmat", "bench", *args], capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and message in r.stderr, (args, r.stderr)


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
    assert "mkl" in [p.name for p in peers.available(CPU)]
    records = bench.run([48], 2, CPU.id)
    p = records[0]["peers"]["mkl"]
    assert p["verified"] and p["host_s"] > 0 and "resident_s" not in p and "Math Kernel" in p["version"]
    text = bench.table(records)
    assert "vs mkl" in text and "mkl ms" in text and "mkl kern GF/s" not in text
    # which BLAS NumPy calls: its own, not the peer's MKL loaded into the same process
    try:
        numpy_blas = str(np.show_config(mode="dicts")["Build Dependencies"]["blas"]).lower()
    except Exception:  # NumPy before 1.25
        numpy_blas = ""
    if "openblas" in numpy_blas:
        assert "openblas" in records[0]["blas"].lower()


def test_bench_shapes_auto_records_the_automatic_choice(tmp_path):
    """--device auto: portmat chooses per product, and each record names the device it chose."""
    if CPU is None:
        pytest.skip("no CPU backend device")
    shapes = tmp_path / "shapes.txt"
    shapes.write_text("3,4,5\n")
    out = tmp_path / "auto.json"
    r = subprocess.run([sys.executable, "-m", "portmat", "bench", "--device", "auto", "--shapes", str(shapes),
                        "--repeat", "2", "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    (rec,) = json.loads(out.read_text())
    assert rec["device"] == "auto:" + portmat._ext.device_for("", 3, 5, 4).id and rec["verified"]
    # portmat on each single device, timed in the same blocks, and the automatic choice against the
    # best of them and NumPy.
    assert CPU.id in rec["single_devices"] and all(d["verified"] for d in rec["single_devices"].values())
    best = min([rec["numpy_s"]] + [d["s"] for d in rec["single_devices"].values()])
    assert rec["best_single_s"] == best and rec["speedup_vs_best_single"] == best / rec["portmat_s"]
    assert "vs best" in r.stdout and "automatic choice" in r.stdout


class _FakeTorch:
    """Just enough of torch for TorchPeer.resident: events that report preset times (ms) per run,
    queued or replayed, and graph capture that works or raises. (The real thing runs on the H200.)"""

    def __init__(self, queued_ms, replay_ms, capture_fails=False):
        from types import SimpleNamespace as NS

        self.synced = 0
        self.mode = "queued"
        times = {"queued": list(queued_ms), "replay": list(replay_ms)}
        fake = self

        class Event:
            def __init__(self, enable_timing=False):
                pass

            def record(self):
                pass

            def synchronize(self):
                pass

            def elapsed_time(self, other):
                return times[fake.mode].pop(0)

        class Graph:
            def replay(self):
                fake.mode = "replay"

        class Context:
            def __init__(self, fails=False):
                self.fails = fails

            def __enter__(self):
                if self.fails:
                    raise RuntimeError("capture refused")

            def __exit__(self, *exc):
                return False

        def synchronize():
            fake.synced += 1

        stream = NS(wait_stream=lambda other: None)
        self.cuda = NS(Event=Event, CUDAGraph=Graph, is_available=lambda: True, Stream=lambda: stream,
                       current_stream=lambda: stream, stream=lambda s: Context(),
                       graph=lambda g: Context(capture_fails), synchronize=synchronize)
        self.backends = NS(cuda=NS(matmul=NS()), cudnn=NS())
        self.__version__ = "fake"

        class Array:
            def __init__(self, x):
                self.x = x

            def cuda(self):
                return self

            def __matmul__(self, other):
                return Array(self.x @ other.x)

        self.from_numpy = Array

    def matmul(self, a, b, out=None):
        pass


def test_torch_peer_takes_the_faster_of_queued_and_graph_timings(monkeypatch):
    from portmat import peers

    a, b = np.ones((4, 4), np.float32), np.ones((4, 4), np.float32)
    # Queued runs of 5 products at 100 us each (launch-bound), a graph replay of 5 at 40 us.
    fake = _FakeTorch(queued_ms=[0.5, 0.5, 0.5], replay_ms=[0.2, 0.2, 0.2])
    monkeypatch.setitem(sys.modules, "torch", fake)
    assert peers.TorchPeer().resident(a, b, repeat=3, launches=5) == pytest.approx([40e-6] * 3)
    # Slower as a graph: the queued times stand.
    fake = _FakeTorch(queued_ms=[0.1, 0.1, 0.1], replay_ms=[0.3, 0.3, 0.3])
    monkeypatch.setitem(sys.modules, "torch", fake)
    assert peers.TorchPeer().resident(a, b, repeat=3, launches=5) == pytest.approx([20e-6] * 3)
    # Capture refused: the queued times, after a synchronize.
    fake = _FakeTorch(queued_ms=[0.5, 0.5, 0.5], replay_ms=[], capture_fails=True)
    monkeypatch.setitem(sys.modules, "torch", fake)
    assert peers.TorchPeer().resident(a, b, repeat=3, launches=5) == pytest.approx([100e-6] * 3)
    assert fake.synced >= 1


# ---- The SYCL peer: Intel's dpnp on the CPU backend's device and OpenCL CPU devices -------------

def _fake_dpnp(monkeypatch, wrong=None, refuses=lambda x: False, resident_fails=False):
    """Fake dpnp and dpctl modules, just enough for DpnpPeer: arrays on a queue that multiply with
    NumPy; a log of what ran ("asarray", "wait", "host" or "resident" for a product: one right after
    its operands were made is NumPy in/out, one after a wait is of resident operands); a result off
    by 1 in its last entry where `wrong` ("host" or "resident") says; TypeError for operands that
    refuses(x) names. Returns the log. (The real dpnp: test_real_dpnp_peer below.)"""
    from types import ModuleType, SimpleNamespace as NS

    from portmat import peers

    log = []

    class Array:
        def __init__(self, x):
            self.x = np.array(x)

    def asarray(x, sycl_queue=None):
        assert isinstance(sycl_queue, Queue)
        if refuses(np.asarray(x)):
            raise TypeError(f"fake dpnp: no {np.asarray(x).dtype} of shape {np.shape(x)}")
        log.append("asarray")
        return Array(x)

    def matmul(a, b):
        kind = "host" if log[-1] == "asarray" else "resident"
        log.append(kind)
        c = Array(a.x @ b.x)
        if wrong == kind:
            c.x.flat[-1] += 1
        return c

    class Queue:
        def __init__(self, spec):
            if spec != "opencl:cpu":
                raise ValueError(f"fake dpctl: no SYCL device {spec!r}")
            self.sycl_device = NS(name="Fake SYCL CPU", backend="backend_type.opencl", driver_version="1.0",
                                  max_compute_units=2)

        def wait(self):
            log.append("wait")

    dpnp, dpctl = ModuleType("dpnp"), ModuleType("dpctl")
    dpnp.__version__, dpctl.__version__ = "0.0-fake", "0.0-fake"
    dpnp.matmul, dpnp.asarray, dpnp.asnumpy = matmul, asarray, lambda c: c.x.copy()
    dpctl.SyclQueue = Queue
    monkeypatch.setitem(sys.modules, "dpnp", dpnp)
    monkeypatch.setitem(sys.modules, "dpctl", dpctl)
    monkeypatch.setattr(peers, "_probe_dpnp", lambda spec: None)
    monkeypatch.delenv("PORTMAT_DPNP_DEVICE", raising=False)
    if resident_fails:
        def refuse(self, a, b):
            raise RuntimeError("fake dpnp: out of device memory")
        monkeypatch.setattr(peers.DpnpPeer, "resident_call", refuse)
    return log


@pytest.fixture
def quick_blocks(monkeypatch):
    """The benchmark's pauses and minimum times made tiny, and a log of which contender each timed
    call belonged to (the alternating blocks, in order)."""
    from portmat import bench

    monkeypatch.setattr(bench, "_PAUSE_S", 0.0)
    monkeypatch.setattr(bench, "_MIN_TIMED_S", 0.002)
    monkeypatch.setattr(bench, "_MIN_BLOCK_S", 0.0005)
    blocks = []
    real = bench._time_blocks

    def spy(contenders, repeat, say, block_size=bench._BLOCK, **kw):
        def wrap(name, fn):
            def timed():
                if not blocks or blocks[-1][0] != name:
                    blocks.append([name, 0])
                blocks[-1][1] += 1
                return fn()
            return timed
        blocks.clear()
        return real({name: wrap(name, fn) for name, fn in contenders.items()}, repeat, say, block_size, **kw)

    monkeypatch.setattr(bench, "_time_blocks", spy)
    return blocks


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6, 7])
def test_round_orders_let_each_contender_follow_every_other_equally_often(n):
    # A contender that runs right after another (NumPy's spinning threads, a GPU's clocks) is
    # disturbed by it; in a fixed order the same one always was. Over a design's rounds (n, or
    # 2n for an odd n) each round holds every contender once, and every ordered pair runs back
    # to back within a round equally often.
    from portmat import bench

    names = [f"c{i}" for i in range(n)]
    rounds = 2 * n if n % 2 else n
    follows = {}
    for r in range(rounds):
        order = bench._round_order(names, r)
        assert sorted(order) == names
        for before, after in zip(order, order[1:]):
            follows[(before, after)] = follows.get((before, after), 0) + 1
    counts = {follows.get((x, y), 0) for x in names for y in names if x != y}
    assert len(counts) == 1 and counts.pop() >= 1, follows


def test_blocks_follow_the_round_orders_and_time_every_call(monkeypatch):
    from portmat import bench

    monkeypatch.setattr(bench, "_PAUSE_S", 0.0)
    monkeypatch.setattr(bench, "_WARM_S", 0.0)
    calls = []
    names = ["numpy", "portmat", "on cpu:0", "on cuda:0"]
    contenders = {name: (lambda name=name: calls.append(name)) for name in names}
    times = bench._time_blocks(contenders, 3 * 5, lambda msg: None, block_size=3)
    assert all(len(times[name]) == 15 for name in names)
    # Each block: the warm-up's two calls, then its three timed ones.
    blocks = calls[::5]
    assert all(len(set(calls[i:i + 5])) == 1 for i in range(0, len(calls), 5))
    assert blocks == [name for r in range(5) for name in bench._round_order(names, r)]


def _dpnp_rounds(blocks, names):
    """The blocks' contenders must be `names` in each round's order (bench._round_order, tested
    above), each contender once a round. Returns the number of rounds."""
    from portmat import bench

    assert len(blocks) % len(names) == 0, blocks
    rounds = len(blocks) // len(names)
    want = [name for r in range(rounds) for name in bench._round_order(names, r)]
    assert [b[0] for b in blocks] == want, blocks
    return rounds


@pytest.mark.skipif(CPU is None, reason="no CPU backend device")
def test_dpnp_peer_is_timed_in_the_same_rounds_and_verified(monkeypatch, quick_blocks):
    from portmat import bench, peers

    log = _fake_dpnp(monkeypatch)
    names = [p.name for p in peers.available(CPU)]
    assert "dpnp" in names
    records = bench.run([24, 40], 12, CPU.id)
    # NumPy in/out and device-resident, each in its own block of every round, beside NumPy and portmat.
    rounds = _dpnp_rounds(quick_blocks, ["numpy", "portmat"] + names + ["dpnp resident"])
    assert rounds >= 2
    for rec in records:
        p = rec["peers"]["dpnp"]
        assert p["verified"] and p["host_verified"] and p["resident_verified"]
        assert p["host_s"] > 0 and p["resident_s"] > 0 and p["resident_clock"] == "host"
        assert p["max_rel_error"] <= bench.error_bound(rec["size"], "float32")
        assert p["gflops_resident"] == pytest.approx(2 * rec["size"] ** 3 / p["resident_s"] / 1e9)
        assert "Fake SYCL CPU" in p["version"] and "dpnp 0.0-fake" in p["version"]
        assert "dpnp" not in rec["peers_missing"]
    # Resident products ran on operands made once, each followed by a wait on the queue.
    assert log.count("resident") > 0 and log.count("host") > 0
    assert all(log[i + 1] == "wait" for i, what in enumerate(log) if what == "resident")
    text = bench.table(records)
    assert "dpnp ms" in text and "vs dpnp" in text and "dpnp kern GF/s" in text and "WRONG" not in text
    assert "dpnp: dpnp 0.0-fake, dpctl 0.0-fake, on Fake SYCL CPU" in text


@pytest.mark.skipif(CPU is None, reason="no CPU backend device")
@pytest.mark.parametrize("wrong", ["host", "resident"])
def test_dpnp_peer_wrong_result_is_reported(monkeypatch, quick_blocks, capsys, wrong):
    from portmat import bench, cli

    _fake_dpnp(monkeypatch, wrong=wrong)
    (rec,) = bench.run([24], 2, CPU.id)
    p = rec["peers"]["dpnp"]
    assert not p["verified"] and p[f"{wrong}_verified"] is False
    assert p["resident_verified" if wrong == "host" else "host_verified"] is True
    assert "(WRONG)" in bench.table([rec])
    assert cli.main(["bench", "--device", CPU.id, "--sizes", "24", "--repeat", "2"]) == 1
    err = capsys.readouterr().err
    assert "FAILED verification: dpnp at n = 24" in err


@pytest.mark.skipif(CPU is None, reason="no CPU backend device")
@pytest.mark.parametrize("dtype, batch, refuses", [("float64", None, lambda x: x.dtype == np.float64),
                                                   ("float32", 2, lambda x: x.ndim == 3),
                                                   ("int32", None, lambda x: x.dtype.kind == "i")])
def test_dpnp_peer_left_out_where_it_raises(monkeypatch, quick_blocks, dtype, batch, refuses):
    from portmat import bench

    _fake_dpnp(monkeypatch, refuses=refuses)
    (rec,) = bench.run([16], 2, CPU.id, dtype=dtype, batch=batch)
    assert "dpnp" not in rec["peers"] and rec["verified"]
    assert all(b[0] not in ("dpnp", "dpnp resident") for b in quick_blocks)


@pytest.mark.skipif(CPU is None, reason="no CPU backend device")
def test_dpnp_peer_without_resident_operands_keeps_its_numpy_time(monkeypatch, quick_blocks):
    from portmat import bench

    _fake_dpnp(monkeypatch, resident_fails=True)
    (rec,) = bench.run([16], 2, CPU.id)
    p = rec["peers"]["dpnp"]
    assert p["verified"] and p["host_s"] > 0 and "resident_s" not in p
    assert "dpnp resident" not in {b[0] for b in quick_blocks} and "dpnp" in {b[0] for b in quick_blocks}


def test_dpnp_peer_belongs_to_cpu_devices(monkeypatch):
    from types import SimpleNamespace as NS

    from portmat import peers

    _fake_dpnp(monkeypatch)
    dev = lambda kind, backend, vendor="", name="": NS(kind=kind, backend=backend, vendor=vendor, name=name, id="x")
    assert "dpnp" in [p.name for p in peers.available(dev("cpu", "cpu"))]
    assert [p.name for p in peers.available(dev("cpu", "opencl", "Intel(R) Corporation", "Intel CPU"))] == ["dpnp"]
    assert [p.name for p in peers.available(dev("cpu", "opencl", "PoCL", "cpu-haswell"))] == ["dpnp"]
    assert peers.available(dev("gpu", "opencl", "Advanced Micro Devices", "gfx1100")) == []
    # A SYCL device that dpctl does not have: no peer, and the reason.
    monkeypatch.setenv("PORTMAT_DPNP_DEVICE", "level_zero:gpu")
    missing = {}
    assert peers.available(dev("cpu", "opencl"), missing) == []
    assert "level_zero:gpu" in missing["dpnp"]


@pytest.mark.skipif(CPU is None, reason="no CPU backend device")
@pytest.mark.parametrize("broken, reason", [
    ("raise ImportError('libsycl.so.8: cannot open shared object file')", "libsycl.so.8"),
    ("import os; os.abort()", "killed by signal 6"),
    (None, "is not installed")])
def test_dpnp_that_cannot_load_is_no_peer_and_says_why(monkeypatch, quick_blocks, tmp_path, broken, reason):
    """A dpnp whose import fails, or aborts the process that loads it (a broken SYCL runtime), or
    none at all: the benchmark runs without it, and names it with the reason."""
    import importlib
    import os

    from portmat import bench, peers

    if broken is None:
        monkeypatch.setitem(sys.modules, "dpnp", None)
        monkeypatch.setitem(sys.modules, "dpctl", None)
    else:
        (tmp_path / "dpctl.py").write_text("__version__ = 'fake'\nclass SyclQueue:\n    def __init__(self, s): pass\n")
        (tmp_path / "dpnp.py").write_text(broken + "\n")
        monkeypatch.syspath_prepend(str(tmp_path))
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path)] + [p for p in sys.path if p]))
        for name in ("dpnp", "dpctl"):
            monkeypatch.delitem(sys.modules, name, raising=False)
        importlib.invalidate_caches()
    missing = {}
    assert "dpnp" not in [p.name for p in peers.available(CPU, missing)]
    assert reason in missing["dpnp"]
    (rec,) = bench.run([16], 2, CPU.id)
    assert "dpnp" not in rec["peers"] and reason in rec["peers_missing"]["dpnp"] and rec["verified"]
    assert "peers not run: " in bench.table([rec]) and reason in bench.table([rec])


def test_real_dpnp_peer():
    """The real dpnp, when it is installed and finds its SYCL device (Intel's OpenCL CPU runtime
    registered: bench/README.md): products against float64, NumPy in/out and resident."""
    from portmat import bench, peers

    try:
        dp = peers.DpnpPeer()
    except ImportError as e:
        pytest.skip(f"dpnp is not usable here: {e}")
    rng = np.random.default_rng(19)
    for dtype in ("float32", "float64"):
        for sa, sb in [((33, 17), (17, 9)), ((1, 1), (1, 1)), ((64, 200), (200, 48))]:
            a, b = bench.random_operand(rng, sa, dtype), bench.random_operand(rng, sb, dtype)
            for c in (dp.host(a, b), dp.fetch(dp.resident_call(a, b)())):
                assert c.shape == (sa[0], sb[1]) and c.dtype == np.dtype(dtype)
                assert bench.max_rel_error(a, b, c, rng) <= bench.error_bound(sa[1], dtype)
        a, b = bench.random_operand(rng, (40, 30), dtype), bench.random_operand(rng, (40, 20), dtype)
        assert bench.max_rel_error(a.T, b, dp.host(a.T, b), rng) <= bench.error_bound(40, dtype)
    if CPU is not None:
        (rec,) = bench.run([64], 2, CPU.id)
        p = rec["peers"]["dpnp"]
        assert p["verified"] and p["resident_verified"] and p["host_s"] > 0 and p["resident_s"] > 0


def test_every_device_registers_intel_opencl_for_dpnp_only_when_installed(tmp_path, monkeypatch):
    """bench/every_device.py gives the CPU backend's runs an OCL_ICD_VENDORS naming this
    environment's libintelocl.so when there is one, and leaves the environment alone otherwise."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("every_device", ROOT / "bench" / "every_device.py")
    every_device = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(every_device)
    monkeypatch.delenv("OCL_ICD_VENDORS", raising=False)
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "env"))
    assert every_device.intel_opencl_env(str(tmp_path / "scratch")) is None  # no Intel runtime
    lib = tmp_path / "env" / "lib" / "libintelocl.so"
    lib.parent.mkdir(parents=True)
    lib.write_bytes(b"")
    env = every_device.intel_opencl_env(str(tmp_path / "scratch"))
    (icd,) = pathlib.Path(env["OCL_ICD_VENDORS"]).iterdir()
    assert icd.suffix == ".icd" and icd.read_text().strip() == str(lib)
    monkeypatch.setenv("OCL_ICD_VENDORS", "/somewhere/else")  # the user's own registration stands
    assert every_device.intel_opencl_env(str(tmp_path / "scratch2")) is None


def test_bench_shapes_hands_out_the_records_so_far_after_each_shape(monkeypatch):
    """run_shapes(on_record=...) sees the records after every shape (the CLI writes --json then, so
    that a run cut short by a time limit still leaves what it measured)."""
    from portmat import bench

    if CPU is None:
        pytest.skip("no CPU backend device")
    monkeypatch.setattr(bench, "copy_bandwidth", lambda: {"gbps": 1.0, "bytes": 1, "threads": 1,
                                                           "gbps_1_thread": 1.0, "gbps_threads": 1.0})
    seen = []
    records = bench.run_shapes([(3, 4, 5), (2, 6, None)], 2, CPU.id, with_peers=False,
                               on_record=lambda recs: seen.append([r["shape"] for r in recs]))
    assert seen == [[records[0]["shape"]], [records[0]["shape"], records[1]["shape"]]]
    assert all(r["verified"] for r in records)


def test_bench_shapes_times_single_thread_products_in_many_short_blocks(monkeypatch):
    """Products NumPy runs on one thread (under OpenBLAS's threading threshold) are timed in at least
    _TINY_MIN_BLOCKS alternating blocks per contender after short pauses, so that a machine that
    flips between a fast and a slow state cannot give one library all its blocks in one state;
    larger products keep 3 to 6 blocks after the full pause (OpenBLAS's threads spin after them)."""
    from portmat import bench

    if CPU is None:
        pytest.skip("no CPU backend device")
    monkeypatch.setattr(bench, "copy_bandwidth", lambda: {"gbps": 1.0, "bytes": 1, "threads": 1,
                                                           "gbps_1_thread": 1.0, "gbps_threads": 1.0})
    monkeypatch.setattr(bench, "_PAUSE_S", 0.001)
    monkeypatch.setattr(bench, "_MIN_TIMED_S", 0.01)
    seen = []
    real = bench._time_blocks

    def spy(contenders, repeat, say, block_size=bench._BLOCK, pause_s=None):
        seen.append((-(-repeat // block_size), pause_s))
        return real(contenders, repeat, say, block_size, pause_s)

    monkeypatch.setattr(bench, "_time_blocks", spy)
    bench.run_shapes([(24, 24, 24), (96, 96, 96)], 2, CPU.id, with_peers=False)
    (tiny_blocks, tiny_pause), (big_blocks, big_pause) = seen
    assert 24 * 24 * 24 < bench._SINGLE_THREAD_MADDS <= 96 ** 3
    assert bench._TINY_MIN_BLOCKS <= tiny_blocks <= bench._TINY_MAX_BLOCKS, seen
    assert tiny_pause == min(bench._PAUSE_S, bench._TINY_PAUSE_S)
    assert bench._SHAPE_MIN_BLOCKS <= big_blocks <= bench._SHAPE_MAX_BLOCKS and big_pause == bench._PAUSE_S, seen

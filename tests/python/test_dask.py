"""portmat.dask.matmul against np.matmul on fresh random inputs: awkward chunkings, stacks that
broadcast, views, dtypes, errors; most on dask's synchronous scheduler (so a failure's traceback is
the task's), one on a LocalCluster of two worker processes with the PinDevices plugin."""

import os
import pickle

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
import dask  # noqa: E402

import portmat  # noqa: E402
import portmat.dask as pdask  # noqa: E402
from conftest import DEVICE_IDS, random_matrix  # noqa: E402

pytestmark = pytest.mark.skipif(not DEVICE_IDS, reason="no device")


@pytest.fixture(autouse=True)
def synchronous():
    with dask.config.set(scheduler="synchronous"):
        yield


def check_as_numpy(z, a, b, dtype=None, scheduler=None):
    """z (a dask array) computes to np.matmul(a, b): the same dtype and shape, integers equal,
    floats within K * eps * (|a| @ |b|) of a float64 (complex128) reference, entry by entry."""
    want = np.matmul(a, b, dtype=dtype)
    assert z.dtype == want.dtype, f"graph dtype {z.dtype}, np.matmul's {want.dtype}"
    assert z.shape == want.shape, f"graph shape {z.shape}, np.matmul's {want.shape}"
    got = np.asarray(z.compute(scheduler=scheduler))
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want)
        return
    wide = np.complex128 if want.dtype.kind == "c" else np.float64
    a64, b64 = np.asarray(a).astype(wide), np.asarray(b).astype(wide)
    ref = np.matmul(a64, b64)
    k = np.shape(a)[-1]
    bound = max(k, 1) * np.finfo(want.dtype).eps * 2 * np.matmul(np.abs(a64), np.abs(b64))
    err = np.abs(got.astype(wide) - ref)
    assert np.all(np.isfinite(got)), "result has NaN or inf"
    assert np.all(err <= bound), f"worst error over the bound by {np.max(err - bound):.3e}"


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m,k,n,cm,ck,cn", [
    (64, 64, 64, 64, 64, 64),         # one chunk
    (100, 130, 70, 32, 50, 30),       # uneven chunks, last ones short
    (129, 257, 65, 7, 100, 64),       # many thin row blocks
    (1, 300, 1, 1, 17, 1),            # a row times a column, K in 18 pieces
])
def test_matrices_in_chunks(rng, dtype, m, k, n, cm, ck, cn):
    a, b = random_matrix(rng, (m, k), dtype), random_matrix(rng, (k, n), dtype)
    z = pdask.matmul(da.from_array(a, chunks=(cm, ck)), da.from_array(b, chunks=(ck, cn)))
    check_as_numpy(z, a, b)


def test_contraction_chunks_that_differ(rng):
    # x's k chunks (40, 40, 40, 30) against y's (25, 60, 65): dask.array's own x @ y would need
    # them aligned; here each output block takes one product over the whole of k.
    a, b = random_matrix(rng, (90, 150)), random_matrix(rng, (150, 110))
    x = da.from_array(a, chunks=((45, 45), (40, 40, 40, 30)))
    y = da.from_array(b, chunks=((25, 60, 65), (50, 60)))
    z = pdask.matmul(x, y)
    assert z.chunks == ((45, 45), (50, 60))
    check_as_numpy(z, a, b)


def test_one_task_per_output_block(rng):
    # The graph's products: one portmat call per output block, each over the whole of k.
    a, b = random_matrix(rng, (60, 90)), random_matrix(rng, (90, 40))
    z = pdask.matmul(da.from_array(a, chunks=(20, 30)), da.from_array(b, chunks=(30, 20)))
    calls = []
    real = portmat.matmul

    def counting(x, y, **kw):
        calls.append((x.shape, y.shape))
        return real(x, y, **kw)

    portmat.matmul = counting
    try:
        got = z.compute()
    finally:
        portmat.matmul = real
    assert sorted(calls) == [((20, 90), (90, 20))] * 6
    check_as_numpy(da.from_array(got), a, b)


def test_tasks_read_the_panels_in_place(rng):
    # Persisted panels (one chunk along k) reach the products as the very arrays dask holds, never
    # copies (dask's concatenate=True copies even one block), so the memory portmat pins on a
    # panel's second use is the memory the next task reads.
    a, b = random_matrix(rng, (60, 90)), random_matrix(rng, (90, 40))
    xp = da.from_array(a, chunks=(20, 30)).rechunk({1: -1}).persist()
    yp = da.from_array(b, chunks=(30, 20)).rechunk({0: -1}).persist()
    panels = {v.ctypes.data for v in dict(xp.dask).values() if isinstance(v, np.ndarray)}
    panels |= {v.ctypes.data for v in dict(yp.dask).values() if isinstance(v, np.ndarray)}
    assert len(panels) == 5, "3 row panels of x, 2 column panels of y"
    seen = []
    real = portmat.matmul

    def recording(x, y, **kw):
        seen.append((x.ctypes.data, y.ctypes.data))
        return real(x, y, **kw)

    portmat.matmul = recording
    try:
        got = pdask.matmul(xp, yp).compute()
    finally:
        portmat.matmul = real
    assert len(seen) == 6
    assert all(x in panels and y in panels for x, y in seen), "a task got a copy of a panel"
    check_as_numpy(da.from_array(got), a, b)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_integers_exactly(rng, dtype):
    # Over the whole range, so products wrap around as NumPy's do.
    info = np.iinfo(dtype)
    a = rng.integers(info.min, info.max, (37, 53), dtype=dtype, endpoint=True)
    b = rng.integers(info.min, info.max, (53, 29), dtype=dtype, endpoint=True)
    z = pdask.matmul(da.from_array(a, chunks=(10, 20)), da.from_array(b, chunks=(15, 9)))
    check_as_numpy(z, a, b)


@pytest.mark.parametrize("da_, db_", [(np.float32, np.float64), (np.int32, np.float32), (np.int64, np.float32),
                                      (np.bool_, np.int8), (np.float16, np.float16), (np.complex64, np.float32)])
def test_mixed_dtypes_promote_as_numpy(rng, da_, db_):
    def values(shape, dtype):
        if np.dtype(dtype).kind == "b":
            return rng.random(shape) < 0.5
        if np.dtype(dtype).kind in "iu":
            return rng.integers(-5, 6, shape).astype(dtype)
        x = rng.uniform(-1, 1, shape)
        if np.dtype(dtype).kind == "c":
            x = x + 1j * rng.uniform(-1, 1, shape)
        return x.astype(dtype)
    a, b = values((23, 41), da_), values((41, 17), db_)
    z = pdask.matmul(da.from_array(a, chunks=(8, 15)), da.from_array(b, chunks=(20, 6)))
    check_as_numpy(z, a, b)


def test_dtype_argument_as_numpy(rng):
    a, b = random_matrix(rng, (30, 40)), random_matrix(rng, (40, 20))
    z = pdask.matmul(da.from_array(a, chunks=10), da.from_array(b, chunks=10), dtype=np.float64)
    check_as_numpy(z, a, b, dtype=np.float64)
    with pytest.raises(TypeError):  # NumPy's casting rule, raised when the graph is built
        pdask.matmul(da.from_array(a), da.from_array(b), dtype=np.int32)


@pytest.mark.parametrize("sa,sb,ca,cb", [
    ((3, 20, 30), (3, 30, 10), (1, 7, 11), (2, 11, 5)),          # stacks, chunked differently
    ((4, 1, 20, 30), (5, 30, 10), (2, 1, 10, 30), (3, 15, 10)),  # broadcast axes on both sides
    ((20, 30), (6, 30, 10), (20, 16), (4, 30, 4)),               # a matrix against a stack
    ((2, 3, 20, 30), (30, 10), (1, 2, 9, 30), (7, 7)),           # a stack against a matrix
    ((1, 20, 30), (4, 30, 10), (1, 10, 10), (2, 10, 10)),        # a length-1 axis reused
])
def test_stacks_that_broadcast(rng, sa, sb, ca, cb):
    a, b = random_matrix(rng, sa), random_matrix(rng, sb)
    check_as_numpy(pdask.matmul(da.from_array(a, chunks=ca), da.from_array(b, chunks=cb)), a, b)


@pytest.mark.parametrize("sa,sb", [((50,), (50, 30)), ((40, 50), (50,)), ((50,), (50,)),
                                   ((50,), (3, 50, 30)), ((3, 40, 50), (50,))])
def test_vectors_as_numpy(rng, sa, sb):
    a, b = random_matrix(rng, sa), random_matrix(rng, sb)
    z = pdask.matmul(da.from_array(a, chunks=17), da.from_array(b, chunks=17))
    check_as_numpy(z, a, b)


def test_views(rng):
    # Transposed, strided and reversed operands, in dask arrays made from the views and in dask
    # arrays that are themselves views (a transpose, a step) of other dask arrays.
    big = random_matrix(rng, (120, 90))
    a = big[::2, 1::3].T            # (30, 60), strided and transposed
    b = np.flip(big[:60, :50], 0)   # (60, 50), reversed rows
    check_as_numpy(pdask.matmul(da.from_array(a, chunks=(11, 13)), da.from_array(b, chunks=(17, 19))), a, b)
    x = da.from_array(big, chunks=(25, 20))
    check_as_numpy(pdask.matmul(x[::2, 1::3].T, x[:60, :50][::-1]), a, b)
    check_as_numpy(pdask.matmul(x.T, x), big.T, big)


def test_empty_and_zero_k(rng):
    a, b = np.zeros((5, 0), np.float32), np.zeros((0, 4), np.float32)
    z = pdask.matmul(da.from_array(a), da.from_array(b))
    np.testing.assert_array_equal(z.compute(), np.zeros((5, 4), np.float32))
    a, b = random_matrix(rng, (0, 7)), random_matrix(rng, (7, 3))
    assert pdask.matmul(da.from_array(a), da.from_array(b)).compute().shape == (0, 3)


def test_numpy_operands_and_array_likes(rng):
    a, b = random_matrix(rng, (20, 30)), random_matrix(rng, (30, 10))
    check_as_numpy(pdask.matmul(a, da.from_array(b, chunks=7)), a, b)
    check_as_numpy(pdask.matmul(a.tolist(), b), np.array(a.tolist()), b)  # a list: float64, as NumPy makes it


def test_mismatched_shapes_name_both():
    x, y = da.zeros((4, 5), chunks=2), da.zeros((6, 3), chunks=2)
    with pytest.raises(ValueError, match=r"\(4, 5\).*\(6, 3\)"):
        pdask.matmul(x, y)
    with pytest.raises(ValueError, match=r"\(2, 4, 5\).*\(3, 5, 3\)"):
        pdask.matmul(da.zeros((2, 4, 5)), da.zeros((3, 5, 3)))
    with pytest.raises(ValueError, match=r"\(5,\).*\(4,\)"):
        pdask.matmul(da.zeros(5), da.zeros(4))
    with pytest.raises(ValueError, match="scalar"):
        pdask.matmul(da.zeros(()), da.zeros((2, 2)))
    with pytest.raises(ValueError, match="compute_chunk_sizes"):
        v = da.zeros(10, chunks=5)
        pdask.matmul(v[v > 0][None, :], da.zeros((10, 2)))
    with pytest.raises(TypeError, match="device"):
        pdask.matmul(x, x.T, device=3)
    with pytest.raises(TypeError):  # NumPy has no matmul for strings
        pdask.matmul(da.from_array(np.array([["a"]])), da.from_array(np.array([["b"]])))


def test_device_argument_goes_to_every_task(rng):
    a, b = random_matrix(rng, (40, 50)), random_matrix(rng, (50, 30))
    for dev in DEVICE_IDS:
        z = pdask.matmul(da.from_array(a, chunks=20), da.from_array(b, chunks=20), device=dev)
        check_as_numpy(z, a, b)
    z = pdask.matmul(da.from_array(a, chunks=20), da.from_array(b, chunks=20), device=portmat.devices()[0])
    check_as_numpy(z, a, b)
    # A device no worker has: portmat's own error, naming it, when the tasks run.
    z = pdask.matmul(da.from_array(a, chunks=20), da.from_array(b, chunks=20), device="cuda:99")
    with pytest.raises(ValueError, match="cuda:99"):
        z.compute()


def test_precision_goes_to_every_task(rng):
    """precision= reaches each block's portmat.matmul: exact float32 everywhere; a tensor-core mode
    raises portmat's own error on a device without tensor cores (the CPU backend) when the tasks
    run, and a name that is no mode raises at once."""
    a, b = random_matrix(rng, (40, 50)), random_matrix(rng, (50, 30))
    x, y = da.from_array(a, chunks=20), da.from_array(b, chunks=20)
    check_as_numpy(pdask.matmul(x, y, precision="float32"), a, b)
    with pytest.raises(ValueError, match="precision"):
        pdask.matmul(x, y, precision="fp8")
    z = pdask.matmul(x, y, device="cpu:0", precision="tf32")
    with pytest.raises(portmat.DeviceError, match="tf32"):
        z.compute()


def test_threaded_scheduler(rng):
    a, b = random_matrix(rng, (200, 170)), random_matrix(rng, (170, 150))
    z = pdask.matmul(da.from_array(a, chunks=(50, 60)), da.from_array(b, chunks=(60, 40)))
    with dask.config.set(scheduler="threads", num_workers=4):
        check_as_numpy(z, a, b)


# PinDevices without a cluster: its setup and teardown in this process.

def test_pin_devices_hands_out_slots_in_turn():
    distributed = pytest.importorskip("distributed")
    before = portmat.default_device().id
    plugin = pdask.PinDevices(DEVICE_IDS)
    assert isinstance(plugin, distributed.WorkerPlugin)
    copies = [pickle.loads(pickle.dumps(plugin)) for _ in range(3)]  # as three workers get it
    try:
        for i, c in enumerate(copies):
            c.setup(None)
            assert c.slot == i
            assert c.device == portmat.devices()[i % len(DEVICE_IDS)].id
            assert portmat.default_device().id == c.device
        copies[1].teardown(None)  # a worker leaves: the next one takes its slot
        again = pickle.loads(pickle.dumps(plugin))
        again.setup(None)
        assert again.slot == 1
        again.teardown(None)
    finally:
        for c in copies:
            c.teardown(None)
    assert portmat.default_device().id == before
    others = [d for d in DEVICE_IDS if d != before]
    if others:  # teardown restores the automatic choice (PoCL's device against cpu:0 on CI)
        away = pdask.PinDevices(others[:1])
        away.setup(None)
        assert portmat.default_device().id == others[0]
        away.teardown(None)
        assert portmat.default_device().id == before
    other = pdask.PinDevices(DEVICE_IDS)  # another plugin's slots are its own
    try:
        other.setup(None)
        assert other.slot == 0
    finally:
        other.teardown(None)


def test_pin_devices_without_devices_of_the_kind_leaves_the_default():
    pytest.importorskip("distributed")
    before = portmat.default_device().id
    plugin = pdask.PinDevices()  # kind="gpu"
    gpus = [d for d in portmat.devices() if d.kind == "gpu"]
    try:
        plugin.setup(None)
        if gpus:  # the first GPU of the backend portmat prefers (CUDA before OpenCL)
            backend = portmat._ext.find_device("gpu").backend
            assert plugin.device == [d.id for d in gpus if d.backend == backend][0]
        else:
            assert plugin.device is None and plugin.slot is None
            assert portmat.default_device().id == before
    finally:
        plugin.teardown(None)
    assert portmat.default_device().id == before


def test_pin_devices_takes_one_backend_of_a_kind():
    # The CPU is cpu:0 and, through PoCL, an OpenCL device too: one device, so every worker of
    # kind="cpu" gets the native backend's, never the same cores again through OpenCL.
    pytest.importorskip("distributed")
    plugin = pdask.PinDevices(kind="cpu")
    cpus = [d.id for d in portmat.devices() if d.kind == "cpu" and d.backend == "cpu"]
    if not cpus:
        pytest.skip("portmat was built without its CPU backend")
    copies = [pickle.loads(pickle.dumps(plugin)) for _ in range(3)]
    try:
        for c in copies:
            c.setup(None)
        assert [c.slot for c in copies] == [0, 1, 2]
        assert [c.device for c in copies] == [cpus[i % len(cpus)] for i in range(3)]
    finally:
        for c in copies:
            c.teardown(None)


def test_pin_devices_errors():
    pytest.importorskip("distributed")
    with pytest.raises(ValueError, match="empty"):
        pdask.PinDevices([])
    with pytest.raises(ValueError, match="kind"):
        pdask.PinDevices(kind="tpu")
    with pytest.raises(ValueError, match="num_threads"):
        pdask.PinDevices(num_threads=0)
    plugin = pdask.PinDevices(["cuda:99"])
    with pytest.raises(ValueError, match="cuda:99"):
        plugin.setup(None)
    assert plugin.slot is None
    ok = pickle.loads(pickle.dumps(plugin))  # another worker of the same plugin
    ok.devices = DEVICE_IDS
    try:
        ok.setup(None)
        assert ok.slot == 0  # the failed setup gave its slot back
    finally:
        ok.teardown(None)
        plugin.teardown(None)


# A real cluster: two worker processes on this machine's CPU, each given its own device by the
# plugin, the product checked against NumPy.

def test_local_cluster_with_two_workers(rng):
    distributed = pytest.importorskip("distributed")
    a, b = random_matrix(rng, (300, 260)), random_matrix(rng, (260, 220))
    # Two different devices where there are two (the CPU backend and PoCL's OpenCL CPU device on
    # CI); on the H200 machine the GPU is one of them.
    devices = DEVICE_IDS[:2]
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        # The workers import the portmat this process imported (the installed one).
        files = client.run(lambda: __import__("portmat").__file__)
        assert set(files.values()) == {portmat.__file__}
        with pytest.raises(ValueError, match="cuda:99"):  # a worker's setup error, on the client
            client.register_plugin(pdask.PinDevices(["cuda:99"]))
        client.register_plugin(pdask.PinDevices(devices, kind="cpu", num_threads=1))
        assert set(client.run(lambda: __import__("portmat").num_threads()).values()) == {1}
        pinned = client.run(lambda: __import__("portmat").default_device().id)
        slots = client.run(lambda dask_worker: dask_worker.plugins["portmat-pin-devices"].slot)
        assert sorted(slots.values()) == [0, 1]
        for w, slot in slots.items():
            assert pinned[w] == portmat._ext.find_device(devices[slot % len(devices)]).id
        x = da.from_array(a, chunks=(70, 100))
        y = da.from_array(b, chunks=(90, 60))
        with distributed.get_task_stream(client) as stream:
            check_as_numpy(pdask.matmul(x, y), a, b, scheduler=client)
            # Stacks through the cluster too.
            s, t = random_matrix(rng, (3, 40, 50)), random_matrix(rng, (50, 30))
            check_as_numpy(pdask.matmul(da.from_array(s, chunks=(1, 20, 25)), da.from_array(t, chunks=15)),
                           s, t, scheduler=client)
        ran = [task for task in stream.data if task["key"][0].startswith("portmat-matmul")]
        assert len(ran) == 5 * 4 + 3 * 2 * 2  # one task per output block, each on a worker
        assert {task["worker"] for task in ran} <= set(slots)


def test_local_cluster_with_one_gpu_worker(rng):
    # Issue 20's H200 setup: one worker process, pinned by the plugin to the machine's GPU (the
    # backend portmat prefers: CUDA there), every block product run on it.
    distributed = pytest.importorskip("distributed")
    gpus = [d for d in portmat.devices() if d.kind == "gpu"]
    if not gpus:
        pytest.skip("no GPU: the GPU worker runs on the H200 machine")
    gpu = portmat._ext.find_device("gpu").id
    a, b = random_matrix(rng, (1500, 1300)), random_matrix(rng, (1300, 1100))
    with distributed.LocalCluster(n_workers=1, processes=True, threads_per_worker=2,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        client.register_plugin(pdask.PinDevices())
        assert list(client.run(lambda: __import__("portmat").default_device().id).values()) == [gpu]
        x, y = da.from_array(a, chunks=(512, 700)), da.from_array(b, chunks=(600, 512))
        check_as_numpy(pdask.matmul(x, y), a, b, scheduler=client)
        check_as_numpy(pdask.matmul(x, y, dtype=np.float64), a, b, dtype=np.float64, scheduler=client)


# bench/dask_matmul.py: a small run end to end, and its check catching a wrong result.

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "dask_matmul.py")


def test_bench_script_writes_verified_records(tmp_path):
    from conftest import run_python
    out = tmp_path / "dask.json"
    r = run_python(BENCH, "--sizes", "256", "--blocks", "100,512", "--rounds", "1", "--workers", "2",
                   "--threads", "1", "--device", DEVICE_IDS[0], "--json", str(out), timeout=180)
    assert r.returncode == 0, r.stderr
    import json
    data = json.loads(out.read_text())
    (rec,) = data["records"]  # the 512-blocks are larger than n and left out
    assert (rec["n"], rec["block"], rec["dtype"]) == (256, 100, "float32")
    for name in ("numpy", "portmat"):
        assert rec[f"{name}_max_rel_error"] <= rec["error_bound"]
        assert len(rec[f"{name}_s"]) == 1 and rec[f"{name}_median_s"] > 0
    assert set(data["setup"]["pinned_devices"].values()) == {portmat._ext.find_device(DEVICE_IDS[0]).id}
    assert "numpy/portmat" in r.stdout


def test_bench_check_catches_a_wrong_result(rng):
    import importlib.util
    spec = importlib.util.spec_from_file_location("dask_matmul_bench", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    a, b = random_matrix(rng, (300, 200)), random_matrix(rng, (200, 250))
    x, y = da.from_array(a, chunks=100), da.from_array(b, chunks=100)
    c = a @ b
    bound = bench.error_bound(200, np.float32)
    assert bench.verify(c, x, y, rng) <= bound
    c += 0.05  # |a| @ |b| <= 200 here: 0.05 is 2.5e-4 of it at least, ten times the bound
    assert bench.verify(c, x, y, rng) > bound
    assert bench.verify(np.full_like(c, np.nan), x, y, rng) == float("inf")

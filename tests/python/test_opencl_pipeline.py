"""The OpenCL backend's pipelined NumPy path (discrete GPUs: page-locked staging, chunks of rows on
several queues), run on the OpenCL devices CI has. Those share host memory (PoCL, Intel's CPU
runtime) and would use NumPy's memory in place; PORTMAT_OPENCL_DISCRETE=1 sends them down a
discrete GPU's path instead, and PORTMAT_OPENCL_CHUNKS=n cuts M (and b's lines) into n chunks
whatever the sizes, so that small products cross chunk and staging-slot boundaries. Every result
is held to NumPy's: integers exactly, floats and complex numbers within the float64 reference's
bound. The knobs are read on every call, so each test sets them for itself (monkeypatch).
"""

import numpy as np
import pytest

import portmat
from conftest import DEVICES
from test_numpy_contract import as_view, check_same_as_numpy, random_values

OPENCL = [d.id for d in DEVICES if d.id.startswith("opencl:")]
pytestmark = pytest.mark.skipif(not OPENCL, reason="no OpenCL device")

CHUNKS = ["0", "1", "2", "3", "7", "1000"]  # 0: the sizes decide (one chunk at these sizes)
SHAPES = [((1, 33), (33, 77)), ((37, 70), (70, 45)), ((129, 5), (5, 300)), ((300, 131), (131, 1)),
          ((2, 1), (1, 3)), ((257, 64), (64, 129))]


@pytest.fixture(params=OPENCL)
def discrete(request, monkeypatch):
    monkeypatch.setenv("PORTMAT_OPENCL_DISCRETE", "1")
    monkeypatch.delenv("PORTMAT_OPENCL_PIPELINE", raising=False)
    return request.param


@pytest.mark.parametrize("chunks", CHUNKS)
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "uint8", "complex64"])
def test_awkward_shapes_views_and_chunks(discrete, monkeypatch, chunks, dtype):
    monkeypatch.setenv("PORTMAT_OPENCL_CHUNKS", chunks)
    rng = np.random.default_rng()
    for sa, sb in SHAPES:
        for va, vb in [("contiguous", "contiguous"), ("transposed", "strided"), ("reversed", "transposed"),
                       ("strided", "reversed")]:
            a = as_view(rng, random_values(rng, sa, dtype), va)
            b = as_view(rng, random_values(rng, sb, dtype), vb)
            check_same_as_numpy(portmat.matmul(a, b, device=discrete), a, b)


@pytest.mark.parametrize("chunks", ["0", "3"])
def test_stacks_broadcasting_and_out(discrete, monkeypatch, chunks):
    monkeypatch.setenv("PORTMAT_OPENCL_CHUNKS", chunks)
    rng = np.random.default_rng()
    for dtype in ["float32", "int64", "complex128", "float16", "bool"]:
        a = random_values(rng, (4, 1, 19, 23), dtype)
        b = random_values(rng, (3, 23, 17), dtype)
        check_same_as_numpy(portmat.matmul(a, b, device=discrete), a, b)  # broadcast stacks
        bt = as_view(rng, random_values(rng, (5, 23, 17), dtype), "transposed")
        check_same_as_numpy(portmat.matmul(a[0], bt, device=discrete), a[0], bt)
        # out=: a strided view of a bigger array, whose gaps must stay as they were
        big = random_values(rng, (4, 3, 19, 2 * 17), dtype)
        gaps = big[..., 1::2].copy()
        out = big[..., ::2]
        got = portmat.matmul(a, b, out=out, device=discrete)
        assert got is out
        check_same_as_numpy(out, a, b)
        assert np.array_equal(big[..., 1::2], gaps), "out= wrote into the gaps of its view"
        # a vector on either side
        v = random_values(rng, (23,), dtype)
        check_same_as_numpy(portmat.matmul(v, b, device=discrete), v, b)
        check_same_as_numpy(portmat.matmul(a, v, device=discrete), a, v)


def test_chunks_by_size_and_large_stacks_one_by_one(discrete, monkeypatch):
    # Without a forced count the sizes decide: chunks of ~PORTMAT_OPENCL_CHUNK_MB (16 by default,
    # 1 here) of whole 128-row blocks once a product moves more than 8 MiB. A stack of products of
    # over 4e9 flops each goes product by product through the pipeline (1300^3: 4.4e9).
    monkeypatch.delenv("PORTMAT_OPENCL_CHUNKS", raising=False)
    monkeypatch.setenv("PORTMAT_OPENCL_CHUNK_MB", "1")
    rng = np.random.default_rng()
    a = random_values(rng, (1500, 900), "float32")
    b = as_view(rng, random_values(rng, (900, 1000), "float32"), "transposed")
    check_same_as_numpy(portmat.matmul(a, b, device=discrete), a, b)
    a = random_values(rng, (2, 1300, 1300), "float32")
    b = as_view(rng, random_values(rng, (1300, 1300), "float32"), "strided")
    check_same_as_numpy(portmat.matmul(a, b, device=discrete), a, b)


def test_pipeline_off_gives_the_same_products(discrete, monkeypatch):
    monkeypatch.setenv("PORTMAT_OPENCL_PIPELINE", "0")
    rng = np.random.default_rng()
    for sa, sb in SHAPES:
        a = random_values(rng, sa, "float32")
        b = as_view(rng, random_values(rng, sb, "float32"), "strided")
        check_same_as_numpy(portmat.matmul(a, b, device=discrete), a, b)


def test_threads_share_the_pipeline(discrete, monkeypatch):
    # One device, one staging ring: concurrent callers take turns (the device's lock) and each
    # gets its own product.
    import threading

    monkeypatch.setenv("PORTMAT_OPENCL_CHUNKS", "3")
    rng = np.random.default_rng()
    work = [(random_values(rng, (40 + i, 30), "float32"), random_values(rng, (30, 20 + i), "float32"))
            for i in range(8)]
    got = [None] * len(work)
    errors = []

    def run(i):
        try:
            got[i] = portmat.matmul(*work[i], device=discrete)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(work))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for (a, b), c in zip(work, got):
        check_same_as_numpy(c, a, b)


@pytest.mark.parametrize("chunks", ["0", "3"])
def test_pinned_results_and_operands_in_place(discrete, monkeypatch, chunks):
    # Results of 1 MiB and more come from the pool of page-locked blocks once a result of that
    # kind has died (python/portmat/_host_memory.py); the downloads then write them in place, and
    # such a result used as an operand is sent from where it is (dense a and b).
    from portmat import _ext

    monkeypatch.setenv("PORTMAT_OPENCL_CHUNKS", chunks)
    rng = np.random.default_rng()
    for dtype in ["float32", "float64"]:
        a = random_values(rng, (600, 300), dtype)
        b = random_values(rng, (300, 500), dtype)
        for _ in range(3):  # the first result dies, the later ones are pool blocks
            c = portmat.matmul(a, b, device=discrete)
            check_same_as_numpy(c, a, b)
        del c
        block = _ext.empty_result(discrete, 600, 500, dtype, True)
        assert block is not None, "no page-locked result block was kept for reuse"
        del block
        c = portmat.matmul(a, b, device=discrete)
        d = random_values(rng, (500, 200), dtype)
        check_same_as_numpy(portmat.matmul(c, d, device=discrete), c, d)  # c read in place as a
        e = random_values(rng, (40, 600), dtype)
        check_same_as_numpy(portmat.matmul(e, c, device=discrete), e, c)  # ... and as b
        check_same_as_numpy(portmat.matmul(c.T, e.T, device=discrete), c.T, e.T)  # column-major: staged
    monkeypatch.setenv("PORTMAT_OPENCL_PINNED_RESULTS", "0")
    assert _ext.empty_result(discrete, 600, 500, "float32", True) is None


def test_pinned_results_in_a_forked_child_and_at_exit(discrete):
    # A page-locked result alive across fork(): the child may read and drop it (no driver call
    # there), and the parent's process exits cleanly with results still alive.
    import textwrap

    from conftest import run_python

    code = textwrap.dedent(f"""
        import os, numpy as np, portmat
        a = np.ones((600, 300), np.float32); b = np.ones((300, 500), np.float32)
        for _ in range(3):
            c = portmat.matmul(a, b, device="{discrete}")
        pid = os.fork()
        if pid == 0:
            ok = bool(np.all(c == 300)); del c
            os._exit(0 if ok else 3)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, status
        assert np.all(portmat.matmul(a, b, device="{discrete}") == 300)
        keep = [portmat.matmul(a, b, device="{discrete}") for _ in range(3)]
        print("ok")
    """)
    r = run_python("-c", code, env={"PORTMAT_OPENCL_DISCRETE": "1"})
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


@pytest.mark.parametrize("chunks", ["0", "5"])
def test_stacks_into_pooled_results(discrete, monkeypatch, chunks):
    # A stack whose result (4 MiB) comes from the page-locked pool from the third call on: the
    # downloads write it in place, chunk by chunk; a broadcast b goes up once.
    monkeypatch.setenv("PORTMAT_OPENCL_CHUNKS", chunks)
    rng = np.random.default_rng()
    for dtype in ["float32", "float64"]:
        a = random_values(rng, (64, 128, 128), dtype)
        for b in (random_values(rng, (64, 128, 128), dtype), random_values(rng, (128, 128), dtype)):
            for _ in range(3):
                c = portmat.matmul(a, b, device=discrete)
                check_same_as_numpy(c, a, b)
            assert not c.flags.owndata, "the third result should be a pooled block"
            del c

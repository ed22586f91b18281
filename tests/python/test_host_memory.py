"""Host memory on the NumPy-in/NumPy-out path: results in recycled blocks (pinned memory on CUDA
GPUs, already faulted-in memory on the CPU), operands pinned in place on their second use and read
by the copy engines directly, and every case that must still be staged. The pinning tests run
where portmat finds a CUDA device; elsewhere only the checks that hold on every machine run."""

import os

import numpy as np
import pytest

import portmat
from portmat import _ext

from conftest import DEVICES, check_matmul, random_matrix

CUDA = [d.id for d in DEVICES if d.backend == "cuda"]
needs_cuda = pytest.mark.skipif(not CUDA, reason="no CUDA device on this machine")
# Devices whose results come from a pool of recycled blocks, and the switch that turns it off.
# OpenCL: discrete devices only (page-locked blocks); those sharing host memory write NumPy's,
# unless PORTMAT_OPENCL_DISCRETE=1 sends them down the discrete path (the whole suite may run so).
_OPENCL_DISCRETE = os.environ.get("PORTMAT_OPENCL_DISCRETE") == "1"
POOLED = [d.id for d in DEVICES
          if d.backend in ("cuda", "cpu") or (d.backend == "opencl" and (not d.host_unified or _OPENCL_DISCRETE))]
POOL_OFF = {"cuda": "PORTMAT_CUDA_PINNED_RESULTS", "cpu": "PORTMAT_CPU_RESULT_POOL",
            "opencl": "PORTMAT_OPENCL_PINNED_RESULTS"}


def test_devices_without_a_faster_memory_give_none():
    for d in DEVICES:
        if d.id not in POOLED:
            assert _ext.empty_result(d.id, 1024, 1024, "float32") is None


@pytest.mark.parametrize("dev", POOLED)
def test_small_results_stay_in_ordinary_memory(rng, dev):
    a, b = random_matrix(rng, (64, 40)), random_matrix(rng, (40, 48))
    c = portmat.matmul(a, b, device=dev)
    check_matmul(c, a, b)
    assert c.flags.owndata


def transient_results(dev, a, b, calls=2):
    """Calls whose results die at once: the pattern that makes the pool make a block."""
    for _ in range(calls):
        c = portmat.matmul(a, b, device=dev)
        check_matmul(c, a, b)
        del c


@pytest.mark.parametrize("dev", POOLED)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_transient_results_get_recycled_blocks(rng, dev, dtype):
    a, b = random_matrix(rng, (601, 703), dtype), random_matrix(rng, (703, 509), dtype)
    transient_results(dev, a, b)
    c1 = portmat.matmul(a, b, device=dev)
    check_matmul(c1, a, b)
    assert not c1.flags.owndata, "a transient result of >= 1 MiB should come from the pool"
    assert c1.flags.writeable and c1.flags.c_contiguous
    c1[0, 0] = 123.0  # an ordinary, writeable array
    first = c1.ctypes.data
    del c1
    c2 = portmat.matmul(a, b, device=dev)
    assert c2.ctypes.data == first, "the freed block should be handed out again"
    check_matmul(c2, a, b)  # every element written anew, the 123 included


@pytest.mark.parametrize("dev", POOLED)
def test_kept_results_stay_ordinary_arrays(rng, dev):
    a, b = random_matrix(rng, (1030, 300)), random_matrix(rng, (300, 1100))
    kept = [portmat.matmul(a, b, device=dev) for _ in range(3)]
    assert all(c.flags.owndata for c in kept), "nothing died: no reason to pool"
    for c in kept:
        check_matmul(c, a, b)


@pytest.mark.parametrize("dev", POOLED)
def test_live_results_never_share_a_block(rng, dev):
    a = random_matrix(rng, (512, 512))
    bs = [random_matrix(rng, (512, 520)) for _ in range(4)]
    transient_results(dev, a, bs[0])
    cs = [portmat.matmul(a, b, device=dev) for b in bs]
    assert sum(not c.flags.owndata for c in cs) >= 2
    assert len({c.ctypes.data for c in cs}) == len(cs)
    for c, b in zip(cs, bs):  # each still holds its own product
        check_matmul(c, a, b)


@pytest.mark.parametrize("dev", POOLED)
def test_pooled_results_can_be_turned_off(rng, monkeypatch, dev):
    monkeypatch.setenv(POOL_OFF[dev.split(":")[0]], "0")
    a, b = random_matrix(rng, (600, 300)), random_matrix(rng, (300, 601))
    transient_results(dev, a, b, calls=3)
    c = portmat.matmul(a, b, device=dev)
    check_matmul(c, a, b)
    assert c.flags.owndata


@needs_cuda
def test_operands_used_again_are_pinned_and_stay_correct(rng):
    dev = CUDA[0]
    a, b = random_matrix(rng, (1500, 1200)), random_matrix(rng, (1200, 1300))  # 7.2 / 6.2 MB
    for _ in range(3):  # sighting, pinning, pinned
        check_matmul(portmat.matmul(a, b, device=dev), a, b)
    a[:700] *= -2.0  # the device must read the memory as it is now, not a stale copy
    b[:, 5:9] = 0.25
    check_matmul(portmat.matmul(a, b, device=dev), a, b)
    check_matmul(portmat.matmul(a[100:1400], b, device=dev), a[100:1400], b)  # dense view inside
    check_matmul(portmat.matmul(b.T, a.T, device=dev), b.T, a.T)  # column-major views
    with pytest.raises(ValueError):  # NumPy will not move memory that has weakrefs (pinned)
        a.resize((1400, 1200), refcheck=False)
    del a, b  # unpinned before NumPy frees the memory
    x, y = random_matrix(rng, (1500, 1200)), random_matrix(rng, (1200, 1300))
    check_matmul(portmat.matmul(x, y, device=dev), x, y)


@needs_cuda
def test_pin_host_handles_unpin_when_deleted(rng):
    dev = CUDA[0]
    a = random_matrix(rng, (2048, 1024))
    h = _ext.pin_host(dev, a.ctypes.data, a.nbytes)
    assert h is not None
    assert _ext.pin_host(dev, a.ctypes.data, a.nbytes) is None, "the same pages cannot be pinned twice"
    del h
    h2 = _ext.pin_host(dev, a.ctypes.data, a.nbytes)
    assert h2 is not None, "deleting the handle must have unpinned the memory"
    del h2
    assert _ext.pin_host(dev, a.ctypes.data, 1024) is None, "small ranges are not worth pinning"


@needs_cuda
@pytest.mark.parametrize("repeat", [1, 3])
def test_operands_in_place_or_staged(rng, repeat):
    """Dense operands go to the device straight from their memory when it is pinned (a portmat
    result, or an operand pinned on its second use); views with gaps, transposes and operands
    that overlap are staged. Every combination, used once or repeatedly, must be correct."""
    dev = CUDA[0]
    x, y = random_matrix(rng, (700, 650)), random_matrix(rng, (650, 900))
    transient_results(dev, x, y)
    pinned = portmat.matmul(x, y, device=dev)  # (700, 900), in the pinned pool
    assert not pinned.flags.owndata
    transient_results(dev, x[:, :650], y[:, :700][:650])
    square = portmat.matmul(x[:, :650], y[:, :700][:650], device=dev)  # (700, 700), pinned
    big = random_matrix(rng, (900, 1300))
    flat = random_matrix(rng, (2_000_000,))
    cases = {
        "pinned a": (pinned, random_matrix(rng, (900, 333))),
        "pinned b": (random_matrix(rng, (257, 700)), pinned),
        "pinned row slice": (pinned[100:600], random_matrix(rng, (900, 129))),
        "pinned with gaps": (pinned[:, 1:800], random_matrix(rng, (799, 64))),
        "pinned a @ a": (square, square),
        "same pageable array twice": (big[:, :900].copy(),) * 2,
        "overlapping dense operands": (
            flat[: 900 * 1000].reshape(900, 1000),
            flat[500_000 : 500_000 + 1000 * 800].reshape(1000, 800),
        ),
        "column-major b": (big[:, :900], np.asfortranarray(big[:, 400:1300].T)),
        "transposed a": (big.T, big),
    }
    for name, (a, b) in cases.items():
        for _ in range(repeat):
            c = portmat.matmul(a, b, device=dev)
            try:
                check_matmul(c, a, b)
            except AssertionError as e:
                raise AssertionError(f"{name}: {e}") from None


@needs_cuda
@pytest.mark.parametrize("b_order", ["C", "F"])
def test_large_b_many_chunks_staged_then_pinned(rng, monkeypatch, b_order):
    """A 33.6 MB b of odd width with small chunks (many kernels and copies in flight), both
    layouts. Three calls: staged, pinned on the second use, then read in place."""
    monkeypatch.setenv("PORTMAT_CUDA_CHUNK_MB", "2")
    a = random_matrix(rng, (700, 2049))
    b = np.asarray(random_matrix(rng, (2049, 4099)), order=b_order)
    for _ in range(3):
        check_matmul(portmat.matmul(a, b, device=CUDA[0]), a, b)

"""gemm.cl and gemm_direct.cl under parameter sets the shipped tables do not give this machine's devices, among them
double-buffered fragments (DBF=1, where the next k step's local reads and the next slice's barrier
are reordered): `portmat tune` may choose any of them on another device, so each must be right at
edges (K not a multiple of the slice, K shorter than one slice), in both layouts, without edges
(the vector global loads), in float64, in the wrapping integer kernel and in a stack. Every device's
compiler sees them: PoCL and, under `make test-intel-opencl`, Intel's."""

import numpy as np
import pytest

import portmat
from conftest import DEVICES

OPENCL = [d.id for d in DEVICES if d.backend == "opencl"]
HAS_F64 = {d.id: d.supports_float64 for d in DEVICES}
NVIDIA = {d.id for d in DEVICES if d.backend == "opencl" and "NVIDIA" in d.vendor}

# GPU-shaped (the H200's shipped float32 set, fragments double-buffered) and a CPU-sized block with
# the padding and a two-step slice, where DBF's slice end comes after a single k step.
VARIANTS = [
    "DIRECT=0,MWG=128,NWG=128,KWG=8,MDIMC=16,NDIMC=16,VWM=4,VWN=4,PADA=0,PADB=0,GVW=4,DBF=1",
    "DIRECT=0,MWG=32,NWG=64,KWG=2,MDIMC=8,NDIMC=8,VWM=2,VWN=4,PADA=2,PADB=4,GVW=1,DBF=1",
    # gemm_direct.cl (CPU runtimes): its scalar form (the runtime vectorizes across work-items), and
    # its vector form with tiles and groups that leave edges everywhere, float32 and float64 widths.
    "DIRECT=1,VECW=1,NVEC=1,MWG=8,MDIMC=1,NDIMC=32",
    "DIRECT=1,VECW=4,NVEC=3,MWG=5,MDIMC=2,NDIMC=4",
    "DIRECT=1,VECW=16,NVEC=1,MWG=3,MDIMC=4,NDIMC=4",
    # and on operands packed into panels first (PACK=2: whatever the size), edges zero-filled.
    "DIRECT=1,VECW=4,NVEC=3,MWG=5,MDIMC=2,NDIMC=4,PACK=2",
    "DIRECT=1,VECW=8,NVEC=2,MWG=6,MDIMC=8,NDIMC=8,PACK=2",
    # NVIDIA's register cap (the kernel without reqd_work_group_size): NVIDIA's driver only.
    "DIRECT=0,MWG=128,NWG=128,KWG=8,MDIMC=16,NDIMC=16,VWM=4,VWN=4,PADA=0,PADB=0,GVW=4,MAXREGS=128",
    # cp.async rings (NVIDIA's driver only), each case's layouts mixing ring-copied and
    # register-staged operands, edges zero-filled: with and without double-buffered fragments,
    # rings of two, three and four, padded local rows, and a block whose slices are one k step (the
    # ring's wait and barrier at every step).
    # (Rings that fit 48 KiB of local memory in float64 too.)
    "DIRECT=0,MWG=128,NWG=128,KWG=8,MDIMC=16,NDIMC=16,VWM=4,VWN=4,PADA=0,PADB=0,GVW=4,ASYNC=3",
    "DIRECT=0,MWG=128,NWG=64,KWG=16,MDIMC=16,NDIMC=8,VWM=4,VWN=4,PADA=0,PADB=0,GVW=4,ASYNC=2,DBF=1,MAXREGS=128",
    "DIRECT=0,MWG=64,NWG=128,KWG=8,MDIMC=8,NDIMC=16,VWM=4,VWN=4,PADA=4,PADB=4,GVW=4,ASYNC=3,DBF=1",
    "DIRECT=0,MWG=32,NWG=64,KWG=2,MDIMC=8,NDIMC=8,VWM=2,VWN=4,PADA=2,PADB=4,GVW=1,ASYNC=2,DBF=1",
    "DIRECT=0,MWG=64,NWG=64,KWG=1,MDIMC=8,NDIMC=8,VWM=2,VWN=2,PADA=2,PADB=2,GVW=1,ASYNC=3",
    # Blocks launched in groups of block rows (GROUPM), a last group shorter than the others: 5 x 5
    # blocks of 32 in groups of 3 rows at 130 x 131.
    "DIRECT=0,MWG=32,NWG=32,KWG=8,MDIMC=8,NDIMC=8,VWM=2,VWN=2,PADA=2,PADB=2,GVW=1,GROUPM=3",
]


def _bound(a, b, dtype):
    a, b = a.astype(np.float64), b.astype(np.float64)
    return a @ b, 4 * a.shape[-1] * np.finfo(dtype).eps * (np.abs(a) @ np.abs(b)) + 1e-300


def _check_every_layout(dev, rng, shapes, dtypes, int_span):
    """Fresh (m x k) @ (k x n) on dev for each shape and dtype, a and b each row- and column-major:
    integers (drawn from +-int_span) equal to NumPy's, floats within _bound of the reference."""
    for m, k, n in shapes:
        for dt in dtypes:
            for a_col in (False, True):
                for b_col in (False, True):
                    if np.issubdtype(dt, np.integer):
                        a = rng.integers(-int_span, int_span, (m, k), dtype=dt)
                        b = rng.integers(-int_span, int_span, (k, n), dtype=dt)
                    else:
                        a, b = rng.uniform(-1, 1, (m, k)).astype(dt), rng.uniform(-1, 1, (k, n)).astype(dt)
                    a = np.asfortranarray(a) if a_col else a
                    b = np.asfortranarray(b) if b_col else b
                    c = portmat.matmul(a, b, device=dev)
                    if np.issubdtype(dt, np.integer):
                        np.testing.assert_array_equal(c, np.matmul(a, b))
                        continue
                    want, bound = _bound(a, b, dt)
                    assert np.all(np.abs(c - want) <= bound), (m, k, n, dt, a_col, b_col)


@pytest.mark.skipif(not OPENCL, reason="no OpenCL device here")
@pytest.mark.parametrize("dev", OPENCL)
@pytest.mark.parametrize("params", VARIANTS)
def test_kernel_variants_match_the_reference(dev, params, monkeypatch, rng):
    if ("MAXREGS" in params or "ASYNC" in params) and dev not in NVIDIA:
        pytest.skip("MAXREGS and ASYNC are NVIDIA's only (refused elsewhere: the test below)")
    monkeypatch.setenv("PORTMAT_OPENCL_PARAMS", params)
    monkeypatch.setenv("PORTMAT_OPENCL_TUNING", "off")
    f32 = np.float32
    cases = [
        # (a, b, what): edges in every direction, K not a multiple of KWG; K shorter than a slice.
        (rng.uniform(-1, 1, (67, 37)).astype(f32), rng.uniform(-1, 1, (37, 45)).astype(f32), "rr edges"),
        (np.asfortranarray(rng.uniform(-1, 1, (130, 9)).astype(f32)),
         np.asfortranarray(rng.uniform(-1, 1, (9, 131)).astype(f32)), "cc edges"),
        (rng.uniform(-1, 1, (5, 1)).astype(f32), rng.uniform(-1, 1, (1, 70)).astype(f32), "k = 1"),
        # Whole blocks of both variants, aligned rows: the vector global loads, no edge code.
        (rng.uniform(-1, 1, (256, 64)).astype(f32), rng.uniform(-1, 1, (64, 128)).astype(f32), "no edges"),
        # A column-major a and a row-major b: neither is transposed on the way to local memory (both
        # ring-copied under ASYNC), with and without edges.
        (np.asfortranarray(rng.uniform(-1, 1, (256, 64)).astype(f32)), rng.uniform(-1, 1, (64, 128)).astype(f32),
         "cr no edges"),
        (np.asfortranarray(rng.uniform(-1, 1, (75, 43)).astype(f32)), rng.uniform(-1, 1, (43, 66)).astype(f32),
         "cr edges"),
        # A sliced view (row stride, offset) as a row-major a.
        (rng.uniform(-1, 1, (90, 80)).astype(f32)[3::2, 5:66], rng.uniform(-1, 1, (61, 33)).astype(f32), "view"),
    ]
    if HAS_F64[dev]:
        cases.append((rng.uniform(-1, 1, (41, 29)), np.asfortranarray(rng.uniform(-1, 1, (29, 53))), "f64 rc"))
    for a, b, what in cases:
        c = portmat.matmul(a, b, device=dev)
        want, bound = _bound(a, b, a.dtype)
        assert c.dtype == a.dtype, what
        assert np.all(np.abs(c - want) <= bound), f"{what}: max error {np.max(np.abs(c - want))}"
    # A stack, one launch.
    a = rng.uniform(-1, 1, (3, 19, 23)).astype(f32)
    b = rng.uniform(-1, 1, (3, 23, 50)).astype(f32)
    want, bound = _bound(a, b, f32)
    assert np.all(np.abs(portmat.matmul(a, b, device=dev) - want) <= bound)
    # Integers wrap exactly as NumPy's.
    x = rng.integers(-2**31, 2**31, (33, 17), dtype=np.int32)
    y = np.asfortranarray(rng.integers(-2**31, 2**31, (17, 21), dtype=np.int32))
    np.testing.assert_array_equal(portmat.matmul(x, y, device=dev), np.matmul(x, y))


@pytest.mark.skipif(not set(OPENCL) - NVIDIA, reason="no OpenCL device here but NVIDIA's")
def test_nvidia_only_options_are_refused_by_name_elsewhere(monkeypatch):
    dev = sorted(set(OPENCL) - NVIDIA)[0]
    small = "DIRECT=0,MWG=64,NWG=64,MDIMC=8,NDIMC=8,"
    # The register cap is an option of NVIDIA's compiler, cp.async is PTX: both refused by name on
    # any other driver, before a build could fail; and values out of range everywhere.
    for params, message in [(small + "MAXREGS=128", "MAXREGS is an option of NVIDIA"), ("MAXREGS=7", "MAXREGS must be"),
                            (small + "ASYNC=3", "ASYNC .*needs NVIDIA's driver"), ("ASYNC=1", "ASYNC must be")]:
        monkeypatch.setenv("PORTMAT_OPENCL_PARAMS", params)
        with pytest.raises(ValueError, match=message):
            portmat.matmul(np.ones((8, 8), np.float32), np.ones((8, 8), np.float32), device=dev)


@pytest.mark.skipif(not OPENCL, reason="no OpenCL device here")
@pytest.mark.parametrize("dev", OPENCL)
def test_products_with_edges_on_padded_copies(dev, monkeypatch, rng):
    """PORTMAT_OPENCL_PAD=1 sends every single product with edges through copies padded to whole
    blocks (what a discrete GPU does for large ones): NumPy in and out (the pipeline, as on a
    discrete device), device arrays, both layouts, views, every dtype kind, equal to the reference."""
    monkeypatch.setenv("PORTMAT_OPENCL_PAD", "1")
    monkeypatch.setenv("PORTMAT_OPENCL_DISCRETE", "1")
    dtypes = [np.float32, np.int64] + ([np.float64] if HAS_F64[dev] else [])
    _check_every_layout(dev, rng, [(67, 37, 45), (130, 9, 131), (5, 1, 70), (1, 300, 1), (200, 8, 64)], dtypes,
                        2**40)
    # A view in place of a, and device arrays (the result's block copied back into a portmat array).
    a = rng.uniform(-1, 1, (90, 80)).astype(np.float32)[3::2, 5:66]
    b = rng.uniform(-1, 1, (61, 33)).astype(np.float32)
    for x, y in ((a, b), (portmat.asarray(np.ascontiguousarray(a), device=dev), portmat.asarray(b, device=dev))):
        c = np.asarray(portmat.matmul(x, y, device=dev) if isinstance(x, np.ndarray) else (x @ y).numpy())
        want, bound = _bound(a, b, np.float32)
        assert np.all(np.abs(c - want) <= bound)


@pytest.mark.skipif(not OPENCL, reason="no OpenCL device here")
@pytest.mark.parametrize("dev", OPENCL)
@pytest.mark.parametrize("discrete", ["0", "1"])
def test_split_k_slices_add_up_to_the_product(dev, discrete, monkeypatch, rng):
    """PORTMAT_OPENCL_SPLIT_K=2 cuts the k of every single product with k >= 128 into slices (a
    batched launch of the whole ones, a launch for a shorter last one, and sum_slices; what a GPU
    does for a small result over a long k): k a multiple of the slices or not, both layouts, views,
    every dtype kind (integers equal NumPy's), NumPy in and out in place and pipelined, vectors,
    device arrays; equal to the reference."""
    monkeypatch.setenv("PORTMAT_OPENCL_SPLIT_K", "2")
    monkeypatch.setenv("PORTMAT_OPENCL_DISCRETE", discrete)
    dtypes = [np.float32, np.int32, np.int64] + ([np.float64] if HAS_F64[dev] else [])
    _check_every_layout(dev, rng, [(1, 4097, 1), (7, 128, 5), (33, 200, 17), (64, 1000, 64), (3, 130, 70), (70, 513, 2)],
                        dtypes, 2**20)
    # Vectors (a dot product, a matrix times a vector), a view, device arrays; the same bits twice.
    x, y = rng.uniform(-1, 1, 5000).astype(np.float32), rng.uniform(-1, 1, 5000).astype(np.float32)
    d = portmat.matmul(x, y, device=dev)
    assert abs(float(d) - float(x.astype(np.float64) @ y)) <= 5000 * 2**-23 * float(np.abs(x) @ np.abs(y))
    assert portmat.matmul(x, y, device=dev) == d
    a = rng.uniform(-1, 1, (90, 3000)).astype(np.float32)[3::2, 5:2966]
    b = rng.uniform(-1, 1, (2961, 9)).astype(np.float32)
    want, bound = _bound(a, b, np.float32)
    assert np.all(np.abs(portmat.matmul(a, b, device=dev) - want) <= bound)
    v = b[:, 4].copy()
    assert np.all(np.abs(portmat.matmul(a, v, device=dev) - want[:, 4]) <= bound[:, 4])
    ad, bd = portmat.asarray(np.ascontiguousarray(a), device=dev), portmat.asarray(b, device=dev)
    assert np.all(np.abs((ad @ bd).numpy() - want) <= bound)


@pytest.mark.skipif(not OPENCL, reason="no OpenCL device here")
@pytest.mark.parametrize("dev", OPENCL)
@pytest.mark.parametrize("discrete", ["0", "1"])
def test_row_major_a_transposed_first(dev, discrete, monkeypatch, rng):
    """TRANSA=2 sends every single product with a row-major a and b through a column-major copy of
    a (padded to whole blocks in the same pass where the product has edges; what NVIDIA's GPUs do
    for large ones): gemm.cl's kernel (DIRECT=0 on CPU runtimes), sizes around the transpose's 32 x
    32 tiles and the blocks, views, every dtype kind, NumPy in and out in place and pipelined,
    device arrays; equal to the reference. Other layouts and stacks are left as they are."""
    monkeypatch.setenv("PORTMAT_OPENCL_PARAMS", "DIRECT=0,MWG=32,NWG=64,KWG=8,MDIMC=8,NDIMC=8,VWM=2,VWN=4,"
                                                "PADA=2,PADB=4,GVW=4,TRANSA=2")
    monkeypatch.setenv("PORTMAT_OPENCL_TUNING", "off")
    monkeypatch.setenv("PORTMAT_OPENCL_DISCRETE", discrete)
    dtypes = [np.float32, np.int32, np.int64] + ([np.float64] if HAS_F64[dev] else [])
    for m, k, n in [(64, 32, 64), (67, 37, 45), (33, 1, 70), (1, 300, 1), (96, 65, 128), (31, 33, 5)]:
        for dt in dtypes:
            if np.issubdtype(dt, np.integer):
                a = rng.integers(-2**20, 2**20, (m, k)).astype(dt)
                b = rng.integers(-2**20, 2**20, (k, n)).astype(dt)
                np.testing.assert_array_equal(portmat.matmul(a, b, device=dev), np.matmul(a, b))
                continue
            a, b = rng.uniform(-1, 1, (m, k)).astype(dt), rng.uniform(-1, 1, (k, n)).astype(dt)
            want, bound = _bound(a, b, dt)
            c = portmat.matmul(a, b, device=dev)
            assert np.all(np.abs(c - want) <= bound), (m, k, n, dt, np.max(np.abs(c - want)))
    # Views (row stride and offset) as a, a stack beside it, and device arrays.
    a = rng.uniform(-1, 1, (90, 80)).astype(np.float32)[3::2, 5:66]
    b = rng.uniform(-1, 1, (61, 33)).astype(np.float32)
    want, bound = _bound(a, b, np.float32)
    assert np.all(np.abs(portmat.matmul(a, b, device=dev) - want) <= bound)
    c = (portmat.asarray(np.ascontiguousarray(a), device=dev) @ portmat.asarray(b, device=dev)).numpy()
    assert np.all(np.abs(c - want) <= bound)
    s, t = rng.uniform(-1, 1, (3, 40, 36)).astype(np.float32), rng.uniform(-1, 1, (3, 36, 50)).astype(np.float32)
    want, bound = _bound(s, t, np.float32)
    assert np.all(np.abs(portmat.matmul(s, t, device=dev) - want) <= bound)


@pytest.mark.skipif(not NVIDIA, reason="no NVIDIA OpenCL device here")
@pytest.mark.parametrize("dev", sorted(NVIDIA))
def test_untransposed_operands_on_nvidias_ring(dev, monkeypatch, rng):
    """On NVIDIA's driver a column-major a with a row-major b (a.T @ b) takes the cp.async ring by
    default once 128 x 128 blocks fill the device: whole blocks and edges, the other layouts
    beside it, against float64."""
    monkeypatch.setenv("PORTMAT_OPENCL_TUNING", "off")
    monkeypatch.delenv("PORTMAT_OPENCL_PARAMS", raising=False)
    for n in (2304, 2300):
        x = rng.uniform(-1, 1, (n, n)).astype(np.float32)
        y = rng.uniform(-1, 1, (n, n)).astype(np.float32)
        for a, b in ((x.T, y), (x, y), (x.T, y.T)):
            want, bound = _bound(a, b, np.float32)
            assert np.all(np.abs(portmat.matmul(a, b, device=dev) - want) <= bound), (n, a.flags.f_contiguous)

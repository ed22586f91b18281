"""``python -m portmat tune``: the OpenCL kernels' parameters searched on the device in hand (issue 19).

OpenCL reaches GPUs and CPUs nobody here has measured. The shipped parameters are a small table
per vendor and kind (``src/opencl/gemm_params.cpp``); a device that is not in it gets generic
guesses. This command measures instead: starting from the parameters the device runs with now, it
changes one group of tunables at a time (the block tile, the work-group shape, the slice depth,
the vector widths, the padding, double-buffered fragments, NVIDIA's register cap and cp.async ring,
and on CPUs the direct kernel's tile, work-group, vector width and packing, in both its forms), keeps
what is faster, verifies every candidate against a float64 reference first, and stores the winner
for the device and its driver in ``opencl-tuning.txt`` in portmat's cache directory
(``src/opencl/tuning_store.hpp`` has the format). Every later product on that device, in any
process, C++ included, uses it. matmul itself never tunes: an untuned device runs the shipped
parameters at once.

Progress goes to stderr through tqdm when it is installed (``pip install portmat[tune]``), else one
line per candidate.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time

import numpy as np

from . import _ext

HEADER = "# portmat OpenCL tuning 1"
PARAMS = "PORTMAT_OPENCL_PARAMS"


def _parse(text: str) -> dict:
    return {k: int(v) for k, v in (item.split("=") for item in text.split(",") if item)}


def _text(p: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in p.items())


# gemm.cl's generic CPU parameters (gemm_params.cpp): where a device ships with the direct kernel,
# gemm.cl's search starts here.
GENERIC = dict(MWG=64, NWG=64, KWG=16, MDIMC=8, NDIMC=8, VWM=4, VWN=4, PADA=4, PADB=0, GVW=4, DIRECT=0,
               VECW=1, NVEC=1)
# gemm_direct.cl's two forms (CPU runtimes): its own vectors (VECW > 1; the width the device ships
# with, else 8) and the runtime vectorizing across work-items (VECW = 1).
VECTOR_FORM = dict(DIRECT=1, NVEC=2, MWG=6, MDIMC=8, NDIMC=8)
SCALAR_FORM = dict(DIRECT=1, VECW=1, NVEC=1, MWG=8, MDIMC=1, NDIMC=32)


def _searches(shipped: dict, cpu: bool, nvidia: bool = False) -> list[tuple[dict, list[list[dict]]]]:
    """The searches: (start, groups), each group the alternatives for one set of tunables, tried
    on top of the best parameters so far. gemm.cl's, and on CPUs the direct kernel's."""
    # Blocks and work-group shapes together first: the register tile per work-item (MWG / MDIMC by
    # NWG / NDIMC) is what they decide jointly, and a block tried with the wrong shape for it
    # (128 x 256 with 128 work-items: 256 accumulators each) would spill and be judged on that.
    # Then the shape alone, for the block the first group chose.
    gemm = [
        [dict(MWG=m, NWG=n, MDIMC=dm, NDIMC=dn) for m, n, dm, dn in (
            (32, 32, 8, 8), (64, 64, 8, 8), (64, 64, 16, 16), (64, 128, 8, 16), (128, 64, 16, 8),
            (128, 128, 16, 16), (128, 128, 8, 16), (128, 128, 16, 8), (128, 256, 16, 16), (256, 128, 16, 16))],
        [dict(MDIMC=m, NDIMC=n) for m, n in ((8, 8), (8, 16), (16, 8), (16, 16), (16, 32), (32, 16))],
        [dict(KWG=k) for k in (8, 16, 32)],
        [dict(VWM=v, VWN=w) for v, w in ((2, 2), (4, 4), (8, 8), (2, 4), (4, 2))],
        [dict(PADA=a, PADB=b) for a, b in ((0, 0), (4, 0), (0, 4), (8, 0))],
        [dict(GVW=g) for g in (1, 2, 4, 8)],
        [dict(DBF=d) for d in (0, 1)],
    ]
    if nvidia:  # NVIDIA's register cap (MAXREGS): 128 lets two 256-work-item groups share an SM
        gemm.append([dict(MAXREGS=r) for r in (0, 128)])
        # cp.async copies into a ring of slices (compute capability 8.0 or later; refused, so
        # skipped, on older GPUs), and the slice depth and fragments again on top of them.
        # (The ring with 16-deep slices, launched in groups of 8 block rows, is what a column-major
        # a gets by default: one alternative, since it wins only as a whole.)
        gemm.append([dict(ASYNC=a) for a in (0, 2, 3, 4)] + [dict(ASYNC=3, KWG=16, GROUPM=8)])
        gemm.append([dict(KWG=k, DBF=d) for k in (8, 16) for d in (0, 1)])
    # The launch order of the blocks: row by row, or in groups of block rows (L2 reuse).
    gemm.append([dict(GROUPM=g) for g in (1, 8)])
    if not cpu:  # a large product's row-major a copied column-major first (discrete devices only)
        gemm.append([dict(TRANSA=t) for t in (0, 1)])
    searches = [({**shipped, **GENERIC} if shipped.get("DIRECT") else dict(shipped), gemm)]
    if cpu:
        # The vector form: the register tile (rows x vectors: 12-16 accumulators fit AVX2's 16
        # registers), the work-group (its rows share B's columns in cache), the vector width.
        vector = [
            [dict(MWG=r, NVEC=v) for r, v in ((6, 2), (4, 2), (8, 2), (4, 3), (3, 4), (8, 1), (12, 1), (4, 4))],
            [dict(MDIMC=m, NDIMC=n) for m, n in ((8, 8), (4, 4), (16, 16), (8, 32), (32, 8), (4, 16))],
            [dict(VECW=w) for w in (4, 8, 16)],
            [dict(PACK=k) for k in (1, 0)],  # operands in panels first (by the size rule), or read in place
        ]
        width = shipped.get("VECW", 1) if shipped.get("DIRECT") and shipped.get("VECW", 1) > 1 else 8
        searches.append(({**shipped, **VECTOR_FORM, "VECW": width}, vector))
        scalar = [[dict(MWG=r) for r in (4, 6, 8, 10, 12, 16)], [dict(NDIMC=w) for w in (8, 16, 32, 64, 128)]]
        searches.append(({**shipped, **SCALAR_FORM}, scalar))
    return searches


def _verify(dev: str, dtype: str, rng) -> None:
    """Raises ValueError unless products match a float64 reference: one with edges in each layout
    (a row- or column-major a and b) and one of whole blocks (the timed kind), each a program of
    its own."""
    import portmat

    def check(x, y):
        c = portmat.matmul(x, y, device=dev)
        a, b = x.astype(np.float64), y.astype(np.float64)
        bound = 4 * a.shape[1] * np.finfo(dtype).eps * (np.abs(a) @ np.abs(b)) + 1e-30
        if not np.all(np.abs(c - a @ b) <= bound):
            raise ValueError(f"wrong results at {x.shape} @ {y.shape}")

    a = rng.uniform(-1, 1, (97, 131)).astype(dtype)
    b = rng.uniform(-1, 1, (131, 75)).astype(dtype)
    for x, y in ((a, b), (np.asfortranarray(a), b), (a, np.asfortranarray(b))):
        check(x, y)
    check(rng.uniform(-1, 1, (256, 256)).astype(dtype), rng.uniform(-1, 1, (256, 256)).astype(dtype))


def _time(dev: str, dtype: str, n: int, repeat: int) -> float:
    """GFLOP/s of the kernel alone at n (median of `repeat` runs)."""
    ts = [t for t in _ext.time_gemm(dev, n, n, n, dtype, repeat, 1) if t > 0]
    return 2.0 * n ** 3 / statistics.median(ts) / 1e9


def _progress(total: int, desc: str):
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc=desc, file=sys.stderr, leave=False)


def tune_device(dev: str, dtype: str = "float32", size: int | None = None, repeat: int = 5,
                max_candidates: int | None = None, out=sys.stderr) -> dict:
    """Searches, verifies and stores the kernel parameters of one OpenCL device; returns a record
    (device, key, dtype, size, the shipped and the tuned parameters and GFLOP/s, candidates)."""
    info = _ext.find_device(dev)
    if info.backend != "opencl":
        raise ValueError(f"portmat tune: {info.id} is a {info.backend} device; only OpenCL devices are tuned "
                         f"(the CUDA and CPU backends choose their kernels by a model)")
    if dtype == "float64" and not info.supports_float64:
        raise ValueError(f"portmat tune: {info.id} has no float64")
    key, path = _ext.tuning_store(info.id)
    if not path:
        raise ValueError("portmat tune: no cache directory to store results in (PORTMAT_CACHE_DIR=off, or no "
                         "HOME); set PORTMAT_CACHE_DIR")
    cpu = info.kind == "cpu"
    n = size or (1024 if cpu else 4096)
    rng = np.random.default_rng(0)
    saved = {v: os.environ.get(v) for v in (PARAMS, "PORTMAT_OPENCL_TUNING")}
    try:
        os.environ["PORTMAT_OPENCL_TUNING"] = "off"  # the shipped parameters, not an earlier run's
        os.environ.pop(PARAMS, None)
        shipped = _parse(_ext.kernel_params(info.id, dtype, n, n))
        shipped_gflops = _time(info.id, dtype, n, repeat)
        best, best_gflops = dict(shipped), shipped_gflops
        tried = {_text(shipped): shipped_gflops}
        # Coordinate descent: each group of tunables is tried on top of the best so far. On GPUs
        # (a candidate takes about 2 s) the groups are walked twice, since a later group's choice
        # can change which of an earlier group's alternatives is best; the second walk times only
        # what the first did not. On CPUs (half a minute a candidate) once. `total` counts every
        # alternative of every walk, so the bar may end short of it.
        passes = 1 if cpu else 2
        searches = _searches(shipped, cpu, "NVIDIA" in info.vendor) * passes
        total = sum(len(g) for _, groups in searches for g in groups)
        if max_candidates is not None:
            total = min(total, max_candidates)
        bar = _progress(total, f"tuning {info.id} {dtype}")
        done = 0
        start = time.perf_counter()
        for i, (first, groups) in enumerate(searches):
            if i >= len(searches) // passes:  # a later pass starts from the best of the one before
                first = best
            current, current_gflops = dict(first), tried.get(_text(first), 0.0)
            for group in groups:
                base = dict(current)
                for change in group:
                    if max_candidates is not None and done >= max_candidates:
                        break
                    cand = {**base, **change}
                    text = _text(cand)
                    if text in tried:
                        gflops = tried[text]
                    else:
                        done += 1
                        os.environ[PARAMS] = text
                        try:
                            _verify(info.id, dtype, rng)
                            gflops = _time(info.id, dtype, n, repeat)
                            note = f"{gflops:8.1f} GFLOP/s"
                        except (ValueError, RuntimeError) as e:  # invalid for the kernel or device, or wrong
                            gflops, note = 0.0, f"skipped ({str(e).splitlines()[0][:80]})"
                        tried[text] = gflops
                        if bar is not None:
                            bar.update(1)
                            bar.set_postfix_str(f"best {max(best_gflops, gflops):.1f} GFLOP/s")
                        else:
                            print(f"  [{done}/{total}] {text}: {note}", file=out, flush=True)
                    if gflops > current_gflops:
                        current, current_gflops = cand, gflops
                    if gflops > best_gflops:
                        best, best_gflops = cand, gflops
        if bar is not None:
            bar.close()
        # The winner against the shipped parameters once more, in alternating rounds (a search
        # step's single measurement can be an outlier: the first timing of a process ran at half
        # speed on the 2-core machine); the shipped ones stay unless the winner is faster.
        os.environ[PARAMS] = _text(best)
        _verify(info.id, dtype, rng)
        rounds = {"shipped": [], "tuned": []}
        for _ in range(3):
            for which, params in (("shipped", shipped), ("tuned", best)):
                os.environ[PARAMS] = _text(params)
                rounds[which].append(_time(info.id, dtype, n, repeat))
        shipped_gflops, best_gflops = statistics.median(rounds["shipped"]), statistics.median(rounds["tuned"])
        if best_gflops <= shipped_gflops:
            best, best_gflops = dict(shipped), shipped_gflops
    finally:
        for v, x in saved.items():
            if x is None:
                os.environ.pop(v, None)
            else:
                os.environ[v] = x
    _store(path, key, dtype, _text(best), best_gflops, n)
    return {"device": info.id, "name": info.name, "key": key, "dtype": dtype, "size": n,
            "shipped": _text(shipped), "shipped_gflops": shipped_gflops, "tuned": _text(best),
            "tuned_gflops": best_gflops, "candidates": len(tried) - 1, "seconds": time.perf_counter() - start,
            "file": path}


def _store(path: str, key: str, dtype: str, params: str, gflops: float, size: int) -> None:
    """Replaces (or adds) the line of (key, dtype) in the tuning file."""
    lines = [ln for ln in _read_lines(path) if ln.split("\t")[:2] != [key, dtype]]
    lines.append("\t".join([key, dtype, params, f"{gflops:.1f}", str(size)]))
    _write_lines(path, lines)


def _write_lines(path: str, lines: list[str]) -> None:
    """Writes the tuning file with these entries, atomically (a new file renamed over the old)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".opencl-tuning.", dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write("\n".join([HEADER] + lines) + "\n")
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _read_lines(path: str) -> list[str]:
    """The entries of a tuning file (without its header); none if it is missing or not ours."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read(1 << 20)
    except OSError:
        return []
    lines = text.splitlines()
    if not lines or lines[0] != HEADER:
        return []
    return [ln for ln in lines[1:] if ln and not ln.startswith("#") and ln.count("\t") >= 2]


def stored(device: str | None = None) -> list[dict]:
    """The stored entries (of one device's key, or all of the file)."""
    want = None if device is None else _ext.find_device(device).id
    stores = {d.id: _ext.tuning_store(d.id) for d in _ext.devices()
              if d.backend == "opencl" and (want is None or d.id == want)}
    keys = {key: dev for dev, (key, _) in stores.items()}
    out = []
    for path in sorted({path for _, path in stores.values()} - {""}):
        for ln in _read_lines(path):
            f = ln.split("\t")
            if want is None or f[0] in keys:
                out.append({"device": keys.get(f[0], "-"), "key": f[0], "dtype": f[1], "params": f[2],
                            "gflops": f[3] if len(f) > 3 else "", "size": f[4] if len(f) > 4 else "", "file": path})
    return out


def forget(device: str) -> int:
    """Removes a device's entries; returns how many."""
    key, path = _ext.tuning_store(_ext.find_device(device).id)
    lines = _read_lines(path)
    keep = [ln for ln in lines if ln.split("\t")[0] != key]
    if len(keep) != len(lines):
        _write_lines(path, keep)
    return len(lines) - len(keep)

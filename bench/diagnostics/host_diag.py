"""What the NumPy-in/NumPy-out path can reach on this host: the costs its design choices trade.

Measures, on the machine's first CUDA device (through CuPy's runtime bindings, so it needs no
portmat build): host memcpy rates from NumPy (pageable) memory into pinned memory with 1-16
threads, into a big buffer and into a small reused ring (cache-resident staging); the cost of
pinning memory (cudaHostAlloc, cudaHostRegister of an existing NumPy array, and unregistering);
and copy-engine rates from pinned, registered and pageable memory. Prints one line per figure and
saves them with --json.

    python3 bench/diagnostics/host_diag.py --mb 64 --json out.json
"""

import argparse
import ctypes
import json
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

import cupy as cp
from cupy.cuda import runtime as rt


def med(fn, repeat=7):
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def pinned_array(nbytes):
    ptr = rt.hostAlloc(nbytes, 0)
    buf = (ctypes.c_byte * nbytes).from_address(ptr)
    arr = np.frombuffer(buf, dtype=np.uint8)
    arr[:] = 1  # touched
    return ptr, arr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=64)
    ap.add_argument("--json")
    args = ap.parse_args()
    nbytes = args.mb << 20
    out = {}

    def report(key, value, unit):
        out[key] = value
        print(f"{key:48s} {value:10.3f} {unit}", flush=True)

    try:
        thp = open("/sys/kernel/mm/transparent_hugepage/enabled").read().strip()
    except OSError:
        thp = "?"
    print("transparent_hugepage:", thp)
    out["thp"] = thp
    cp.cuda.Device(0).use()
    cp.zeros(1).sum()  # context

    src = np.random.default_rng(0).integers(0, 255, nbytes, dtype=np.uint8)
    # pinning: cudaHostAlloc (fresh each time) and cudaHostRegister of an existing NumPy array
    t_alloc = []
    for _ in range(3):
        t0 = time.perf_counter()
        p = rt.hostAlloc(nbytes, 0)
        t_alloc.append(time.perf_counter() - t0)
        rt.freeHost(p)
    report(f"cudaHostAlloc {args.mb} MiB ms", statistics.median(t_alloc) * 1e3, "ms")
    t_reg, t_unreg = [], []
    for i in range(3):
        a = np.random.default_rng(i).random(nbytes // 8)  # a fresh, faulted-in NumPy array
        t0 = time.perf_counter()
        rt.hostRegister(a.ctypes.data, a.nbytes, 0)
        t1 = time.perf_counter()
        rt.hostUnregister(a.ctypes.data)
        t2 = time.perf_counter()
        t_reg.append(t1 - t0)
        t_unreg.append(t2 - t1)
    report(f"cudaHostRegister {args.mb} MiB NumPy array ms", statistics.median(t_reg) * 1e3, "ms")
    report(f"cudaHostUnregister {args.mb} MiB ms", statistics.median(t_unreg) * 1e3, "ms")
    try:
        rollup = open("/proc/self/smaps_rollup").read()
        anon_huge = [l for l in rollup.splitlines() if l.startswith("AnonHugePages")]
        print("process", anon_huge[0] if anon_huge else "AnonHugePages: ?")
    except OSError:
        pass

    # copy engines: pinned, registered, pageable
    dev = cp.empty(nbytes, dtype=cp.uint8)
    pptr, parr = pinned_array(nbytes)
    s = cp.cuda.Stream(non_blocking=True)

    def h2d(ptr):
        rt.memcpyAsync(dev.data.ptr, ptr, nbytes, rt.memcpyHostToDevice, s.ptr)
        s.synchronize()

    def d2h(ptr):
        rt.memcpyAsync(ptr, dev.data.ptr, nbytes, rt.memcpyDeviceToHost, s.ptr)
        s.synchronize()

    report("H2D from cudaHostAlloc memory GB/s", nbytes / med(lambda: h2d(pptr)) / 1e9, "GB/s")
    report("D2H into cudaHostAlloc memory GB/s", nbytes / med(lambda: d2h(pptr)) / 1e9, "GB/s")
    rt.hostRegister(src.ctypes.data, src.nbytes, 0)
    report("H2D from registered NumPy memory GB/s", nbytes / med(lambda: h2d(src.ctypes.data)) / 1e9, "GB/s")
    rt.hostUnregister(src.ctypes.data)
    report("H2D from pageable NumPy memory GB/s", nbytes / med(lambda: h2d(src.ctypes.data)) / 1e9, "GB/s")

    # host copies NumPy -> pinned with T threads (np.copyto releases the GIL)
    for threads in (1, 4, 8, 16):
        pool = ThreadPoolExecutor(threads)
        parts = np.array_split(np.arange(nbytes // 4096), threads)

        def copy_all(dst=parr):
            list(pool.map(lambda r: np.copyto(dst[r[0] * 4096:(r[-1] + 1) * 4096],
                                              src[r[0] * 4096:(r[-1] + 1) * 4096]), parts))

        report(f"host copy NumPy->pinned {threads:2d} threads GB/s", nbytes / med(copy_all) / 1e9, "GB/s")
        if threads == 16:
            ring_mb = 4
            rptr, rarr = pinned_array(ring_mb << 20)
            piece = (ring_mb << 20) // threads

            def copy_ring():
                for off in range(0, nbytes, ring_mb << 20):
                    list(pool.map(lambda t: np.copyto(rarr[t * piece:(t + 1) * piece],
                                                      src[off + t * piece:off + (t + 1) * piece]),
                                  range(threads)))

            report(f"host copy NumPy->4 MiB pinned ring 16 threads GB/s", nbytes / med(copy_ring) / 1e9, "GB/s")
            fresh = lambda: np.copyto(np.empty_like(src), src)  # noqa: E731
            report("host copy NumPy->fresh np.empty 1 thread GB/s", nbytes / med(fresh) / 1e9, "GB/s")
        pool.shutdown()

    # host copy while the copy engine reads pinned memory (do they share the bandwidth?)
    pptr2, _ = pinned_array(nbytes)
    for threads in (16, 8):
        pool = ThreadPoolExecutor(threads)
        parts = np.array_split(np.arange(nbytes // 4096), threads)

        def both():
            rt.memcpyAsync(dev.data.ptr, pptr2, nbytes, rt.memcpyHostToDevice, s.ptr)
            list(pool.map(lambda r: np.copyto(parr[r[0] * 4096:(r[-1] + 1) * 4096],
                                              src[r[0] * 4096:(r[-1] + 1) * 4096]), parts))
            s.synchronize()

        report(f"host copy {threads} thr + concurrent H2D, both done ms", med(both) * 1e3, "ms")
        pool.shutdown()

    # pinning an existing array in pieces from several threads at once (driver API through ctypes,
    # which releases the GIL): does cuMemHostRegister scale?
    cu = ctypes.CDLL("libcuda.so.1")
    ctx = ctypes.c_void_p()
    cu.cuCtxGetCurrent(ctypes.byref(ctx))
    cu.cuMemHostRegister_v2.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint]
    cu.cuMemHostUnregister.argtypes = [ctypes.c_void_p]

    def in_ctx(fn, *a):
        cu.cuCtxSetCurrent(ctx)
        return fn(*a)

    for pieces in (1, 2, 4, 8):
        t_r, t_u = [], []
        for i in range(3):
            arr = np.random.default_rng(10 + i).random(nbytes // 8)
            base = arr.ctypes.data
            step = nbytes // pieces // 4096 * 4096
            ranges = [(base + j * step, step if j < pieces - 1 else nbytes - j * step) for j in range(pieces)]
            with ThreadPoolExecutor(pieces) as ex:
                t0 = time.perf_counter()
                rc = list(ex.map(lambda r: in_ctx(cu.cuMemHostRegister_v2, r[0], r[1], 0), ranges))
                t1 = time.perf_counter()
                list(ex.map(lambda r: in_ctx(cu.cuMemHostUnregister, r[0]), ranges))
                t2 = time.perf_counter()
            if any(rc):
                print("register errors", rc)
            t_r.append(t1 - t0)
            t_u.append(t2 - t1)
        report(f"register {args.mb} MiB in {pieces} pieces, parallel ms", statistics.median(t_r) * 1e3, "ms")
        report(f"unregister {args.mb} MiB in {pieces} pieces, parallel ms", statistics.median(t_u) * 1e3, "ms")
    # read-only registration (CU_MEMHOSTREGISTER_READ_ONLY = 8), where the device supports it
    arr = np.random.default_rng(20).random(nbytes // 8)
    t0 = time.perf_counter()
    rc = cu.cuMemHostRegister_v2(arr.ctypes.data, nbytes, 8)
    t1 = time.perf_counter()
    if rc == 0:
        cu.cuMemHostUnregister(arr.ctypes.data)
        report("register read-only 64 MiB ms", (t1 - t0) * 1e3, "ms")
    else:
        print("read-only registration refused:", rc)
    # fresh huge-page memory, faulted in, then registered: a cheaper pinned allocation?
    import mmap
    t0 = time.perf_counter()
    mm = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if hasattr(mm, "madvise") and hasattr(mmap, "MADV_HUGEPAGE"):
        mm.madvise(mmap.MADV_HUGEPAGE)
    fresh = np.frombuffer(mm, dtype=np.uint8)
    fresh[::4096] = 1
    t1 = time.perf_counter()
    rc = cu.cuMemHostRegister_v2(fresh.ctypes.data, nbytes, 0)
    t2 = time.perf_counter()
    report("mmap+hugepage+touch 64 MiB ms", (t1 - t0) * 1e3, "ms")
    report("then register ms", (t2 - t1) * 1e3, "ms")
    if rc == 0:
        cu.cuMemHostUnregister(fresh.ctypes.data)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()

"""portmat against NumPy on the dtypes besides float32 / float64 (integers, booleans, float16,
complex) over vectors, few rows or columns, small squares and stacks, in every layout pair: where
`portmat bench` times one dtype on squares or the float32 suite, this finds the shapes a dtype has
no fast path for. Each product is checked against NumPy first (integers and booleans exactly);
then portmat's and NumPy's calls alternate in blocks (a block of calls each after a pause, several
rounds), and
the table gives the medians and NumPy time / portmat time (> 1: portmat faster).

  python bench/diagnostics/dtypes_vs_numpy.py                          # every dtype, every shape
  python bench/diagnostics/dtypes_vs_numpy.py --dtypes bool,int8 --layouts CC,CF
  python bench/diagnostics/dtypes_vs_numpy.py --shapes 1,2048,2048 2048,2048,4 --stacks 10000x32

Shapes are M,K,N (a side of 1 is a vector: (K,) @ (K x N) or (M x K) @ (K,)); layouts are two
letters, C (row-major) or F (column-major), for a and b; --stacks BxN adds stacks of B n^3 products.
Values: integers in [-50, 50) (so that int8 products wrap), booleans true one time in three at
--density, floats in [0, 1), complex with imaginary parts. docs/cpu.md, session 38, has figures.
"""

import argparse
import time

import numpy as np

import portmat

DTYPES = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float16",
          "complex64", "complex128"]
SHAPES = ["1,2048,2048", "2048,2048,1", "4,2048,2048", "2048,2048,4", "16,2048,2048", "2048,2048,16",
          "16,16,16", "64,64,64", "256,256,256"]
STACKS = ["10000x4", "10000x16", "10000x32", "1000x64"]


def values(rng, shape, dtype, density):
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < density
    if dtype.kind in "iu":
        return rng.integers(-50, 50, size=shape).astype(dtype)
    x = rng.random(shape)
    if dtype.kind == "c":
        x = x + 1j * rng.random(shape)
    return x.astype(dtype)


def layout(x, order):
    return np.asfortranarray(x) if order == "F" and x.ndim == 2 else x


def median_call(f, budget_s):
    """Seconds a call: the median over blocks of calls, each block about budget_s long, after a
    pause: OpenBLAS's threads spin ~0.1 s after NumPy's last call, and without it they took the
    CPUs from the portmat block that followed (a complex64 vector times 2048 x 2048 matrix read
    0.64x NumPy, 0.94x with the pause)."""
    time.sleep(0.3)
    f()
    n, t0 = 1, time.perf_counter()
    f()
    one = max(time.perf_counter() - t0, 1e-7)
    n = max(1, int(budget_s / one))
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(n):
            f()
        times.append((time.perf_counter() - t0) / n)
    return float(np.median(times))


def check(got, a, b):
    want = np.matmul(a, b)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype, got.shape, want.shape)
    if want.dtype.kind in "biu":
        assert np.array_equal(got, want), "integer or boolean results differ from NumPy's"
    else:
        ref = np.matmul(a.astype(np.complex128), b.astype(np.complex128))
        mag = np.matmul(np.abs(a).astype(np.float64), np.abs(b).astype(np.float64))
        eps = np.finfo(np.float32 if want.dtype == np.float16 else want.dtype).eps
        bound = max(a.shape[-1], 1) * eps * 2 * mag + (np.finfo(np.float16).eps * np.abs(ref) if want.dtype == np.float16 else 0)
        assert np.all(np.abs(got - ref) <= bound + np.finfo(want.dtype).tiny), "error over the bound"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dtypes", default=",".join(DTYPES))
    p.add_argument("--shapes", nargs="*", default=SHAPES, help="M,K,N products")
    p.add_argument("--layouts", default="CC,FF,CF,FC", help="layouts of a and b, comma-separated")
    p.add_argument("--stacks", nargs="*", default=STACKS, help="BxN: B products of n^3")
    p.add_argument("--device", default="cpu:0")
    p.add_argument("--density", type=float, default=1 / 3, help="booleans: the chance of true")
    p.add_argument("--rounds", type=int, default=3, help="blocks of portmat and NumPy, alternating")
    p.add_argument("--block", type=float, default=0.03, help="seconds a block of calls")
    args = p.parse_args()
    rng = np.random.default_rng(0)
    cases = []
    for dt in args.dtypes.split(","):
        for s in args.shapes:
            m, k, n = (int(x) for x in s.split(","))
            for lay in args.layouts.split(","):
                a = layout(values(rng, (m, k), dt, args.density), lay[0])
                b = layout(values(rng, (k, n), dt, args.density), lay[1])
                a = a.reshape(k) if m == 1 else a
                b = b.reshape(k) if n == 1 else b
                cases.append((f"{dt:10s} {m}x{k} @ {k}x{n} {lay}", a, b))
        for s in args.stacks:
            count, n = (int(x) for x in s.split("x"))
            a, b = values(rng, (count, n, n), dt, args.density), values(rng, (count, n, n), dt, args.density)
            cases.append((f"{dt:10s} {count} x {n}^3 stack", a, b))
    print(f"device {args.device}; NumPy {np.__version__}; us a call, medians of {args.rounds} rounds")
    below = 0
    for name, a, b in cases:
        check(portmat.matmul(a, b, device=args.device), a, b)
        tp, tn = [], []
        for _ in range(args.rounds):
            tp.append(median_call(lambda: portmat.matmul(a, b, device=args.device), args.block))
            tn.append(median_call(lambda: a @ b, args.block))
        p_s, n_s = float(np.median(tp)), float(np.median(tn))
        below += n_s < p_s
        print(f"{name:42s} portmat {p_s * 1e6:10.1f}  NumPy {n_s * 1e6:10.1f}  {n_s / p_s:6.2f}x"
              + ("  <" if n_s < p_s else ""), flush=True)
    print(f"{len(cases) - below} of {len(cases)} at or above NumPy")


if __name__ == "__main__":
    main()

"""Many Python threads calling matmul at once get correct results (the GIL is released while a
device works, and the device's queue, program cache and buffer pool are shared safely)."""

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

import portmat
from conftest import check_matmul, random_matrix


def test_concurrent_calls(device, rng):
    problems = []
    for i in range(24):
        m, k, n = rng.integers(1, 150, size=3)
        dtype = np.float32 if i % 3 or not portmat._ext.find_device(device).supports_float64 else np.float64
        problems.append((random_matrix(rng, (m, k), dtype), random_matrix(rng, (k, n), dtype)))
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda p: portmat.matmul(p[0], p[1], device=device), problems))
    for (a, b), c in zip(problems, results):
        check_matmul(c, a, b)


def test_gil_is_released(device, rng):
    # While one thread runs a long matmul, another Python thread keeps running.
    a, b = random_matrix(rng, (512, 512)), random_matrix(rng, (512, 512))
    portmat.matmul(a, b, device=device)  # compile outside the measurement
    ticks = 0
    done = threading.Event()

    def count():
        nonlocal ticks
        while not done.is_set():
            ticks += 1

    t = threading.Thread(target=count)
    t.start()
    try:
        for _ in range(3):
            portmat.matmul(a, b, device=device)
    finally:
        done.set()
        t.join()
    assert ticks > 1000


def test_num_threads_setting(rng):
    if not any(d.backend == "cpu" for d in portmat.devices()):
        import pytest

        pytest.skip("no native CPU backend")
    default = portmat.num_threads()
    assert default >= 1
    a, b = random_matrix(rng, (300, 200)), random_matrix(rng, (200, 250))
    try:
        for n in (1, 3):
            portmat.set_num_threads(n)
            assert portmat.num_threads() == min(n, default)  # clamped to the CPUs
            check_matmul(portmat.matmul(a, b, device="cpu:0"), a, b)
    finally:
        portmat.set_num_threads(0)
    assert portmat.num_threads() == default

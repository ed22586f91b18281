import os, sys, numpy as np, portmat
dev = next(d.id for d in portmat.devices() if d.backend == "cuda")
rng = np.random.default_rng(5)
for tile in sys.argv[1:]:
    os.environ["PORTMAT_CUDA_TILE"] = tile
    worst = 0.0
    for m, n, k in [(1000, 1300, 777), (4224, 4096, 4096), (257, 513, 129)]:
        a = rng.standard_normal((m, k), dtype=np.float32); b = rng.standard_normal((k, n), dtype=np.float32)
        c = portmat.matmul(a, b, device=dev)
        ref = a.astype(np.float64) @ b.astype(np.float64)
        err = np.abs(c - ref).max() / (np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)).max()
        worst = max(worst, err)
    print(f"verify {tile}: max scaled error {worst:.2e} {'OK' if worst < 1e-5 else 'FAIL'}", flush=True)

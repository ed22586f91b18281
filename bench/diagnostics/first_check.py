"""Quick first check on a new machine: a few products on each device, errors printed, not raised."""
import sys

import numpy as np

import portmat

rng = np.random.default_rng(0)
bad = 0
for d in portmat.devices():
    if len(sys.argv) > 1 and d.id not in sys.argv[1:]:
        continue
    for m, k, n in [(2, 3, 2), (64, 64, 64), (130, 70, 45), (256, 512, 256), (1024, 1024, 1024)]:
        a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
        b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
        try:
            c = portmat.matmul(a, b, device=d)
            err = np.max(np.abs(c - a.astype(np.float64) @ b) / (np.abs(a).astype(np.float64) @ np.abs(b)))
            print(f"{d.id} {m}x{k}x{n}: max rel err {err:.2e}", flush=True)
            bad += not err < k * 1.2e-7
        except Exception as e:
            print(f"{d.id} {m}x{k}x{n}: {type(e).__name__}: {e}", flush=True)
            bad += 1
sys.exit(1 if bad else 0)

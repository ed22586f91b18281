"""portmat in the processes and threads real programs make: forked children and process pools,
spawned workers, threads with small stacks, interpreter exit with work in flight, many threads at
once, and a damaged program cache.

Every case runs in a child process with a timeout, so that a hang fails the test instead of
stalling the suite, and a crash shows as the child's signal."""

import os
import sys
import textwrap

import pytest

import portmat
from conftest import DEVICE_IDS, run_python

pytestmark = pytest.mark.skipif(not DEVICE_IDS, reason="no device")

# Imported by every child: a product checked against float64 with the classical bound.
PRELUDE = """
import os, signal, sys, threading, time
import numpy as np
import portmat

rng = np.random.default_rng()

def rand(*shape, dtype=np.float32):
    return rng.uniform(-1, 1, shape).astype(dtype)

def check(c, a, b):
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    bound = max(a.shape[1], 1) * np.finfo(c.dtype).eps * (np.abs(a64) @ np.abs(b64))
    assert c.shape == (a.shape[0], b.shape[1]), c.shape
    assert np.all(np.abs(c - a64 @ b64) <= bound), "wrong product"

def product(device, m=67, k=45, n=38):
    a, b = rand(m, k), rand(k, n)
    c = portmat.matmul(a, b, device=device)
    check(c, a, b)
"""

# A forked child's verdict, as its exit code.
CHILD_OK, CHILD_CLEAR_ERROR = 0, 10
FORKED_CHILD = """
def in_child(device):
    signal.alarm(60)  # a hang ends as SIGALRM, never as a stalled suite
    try:
        product(device)
        product(device, 300, 257, 310)  # threaded on the CPU backend
    except portmat.DeviceError as e:
        msg = str(e)
        os._exit(10 if "fork" in msg and "spawn" in msg and device.split(":")[0] in msg else 11)
    except BaseException as e:
        print("child:", repr(e), file=sys.stderr)
        os._exit(12)
    os._exit(0)

def fork_and_wait(device):
    pid = os.fork()
    if pid == 0:
        in_child(device)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
"""


def run_child(code, timeout=120, env=None):
    r = run_python("-c", PRELUDE + textwrap.dedent(code), env=env, timeout=timeout)
    assert "terminate called" not in r.stderr and "Fatal Python error" not in r.stderr, r.stderr
    return r


def survives_fork(device):
    return device.startswith("cpu:")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork()")
@pytest.mark.parametrize("device", DEVICE_IDS)
@pytest.mark.parametrize("parent_did", ["devices", "matmul"])
def test_forked_child_works_or_says_why(device, parent_did):
    # After the parent listed the devices (every driver started) or multiplied on `device`, a
    # forked child either multiplies correctly (the CPU backend rebuilds its pool) or gets a
    # DeviceError naming fork() and the spawn start method; it never hangs or crashes.
    code = FORKED_CHILD + f"""
if "{parent_did}" == "devices":
    portmat.devices()
else:
    product("{device}", 300, 257, 310)
print("child exit", fork_and_wait("{device}"))
product("{device}", 300, 257, 310)  # the parent keeps working
"""
    r = run_child(code)
    assert r.returncode == 0, r.stderr
    expected = CHILD_OK if survives_fork(device) else CHILD_CLEAR_ERROR
    assert f"child exit {expected}" in r.stdout, r.stdout + r.stderr


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork()")
@pytest.mark.parametrize("device", [d for d in DEVICE_IDS if not d.startswith("cpu:")])
def test_forked_child_starts_a_driver_its_parent_never_started(device):
    # Probing is lazy: a parent that used only the native CPU backend never started this driver,
    # so a forked child can start it and use it.
    if not any(d.startswith("cpu:") for d in DEVICE_IDS):
        pytest.skip("no native CPU backend")
    code = FORKED_CHILD + f"""
product("cpu:0", 300, 257, 310)
print("child exit", fork_and_wait("{device}"))
"""
    r = run_child(code)
    assert r.returncode == 0, r.stderr
    assert f"child exit {CHILD_OK}" in r.stdout, r.stdout + r.stderr


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork()")
def test_fork_while_another_thread_is_inside_a_cpu_product():
    # The child inherits the CPU pool's lock held by the other thread; it must get a pool of its
    # own and finish its threaded products.
    if "cpu:0" not in DEVICE_IDS:
        pytest.skip("no native CPU backend")
    code = FORKED_CHILD + """
stop = False
# The operands are drawn before the thread starts: a thread inside NumPy's generator when fork()
# comes leaves the generator's lock held in the child, whose own draws then wait forever.
a, b = rand(400, 400), rand(400, 400)
def busy():
    while not stop:
        portmat.matmul(a, b, device="cpu:0")
t = threading.Thread(target=busy)
t.start()
codes = []
for _ in range(12):
    time.sleep(0.02)
    codes.append(fork_and_wait("cpu:0"))
stop = True
t.join()
print("codes", codes)
"""
    r = run_child(code, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "codes [" + ", ".join(["0"] * 12) + "]" in r.stdout, r.stdout + r.stderr


def test_probing_leaves_the_environment_as_it_was():
    # Drivers edit the environment while they start (PoCL: HWLOC_PLUGINS_PATH; an ICD loader:
    # OCL_ICD_FILENAMES); children inherit it, so a child started after a probe lost devices.
    # `env` in a child shows the C-level environment, which os.environ does not follow.
    code = f"""
import subprocess
def env():
    return subprocess.run(["env"], capture_output=True, text=True).stdout.splitlines()
before = env()
for device in {DEVICE_IDS!r}:
    product(device)
portmat._ext.backend_notes()
after = env()
print("added", sorted(set(after) - set(before)), "removed", sorted(set(before) - set(after)))
"""
    r = run_child(code)
    assert r.returncode == 0, r.stderr
    assert "added [] removed []" in r.stdout, r.stdout


POOL_SCRIPT = PRELUDE + """
import multiprocessing as mp

def work(device):
    product(device, 120, 77, 95)
    return [(d.id, d.name, d.kind) for d in portmat.devices()]

if __name__ == "__main__":
    method, device, parent_uses = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
    listed = [(d.id, d.name, d.kind) for d in portmat.devices()]
    if parent_uses:
        product(device)
    with mp.get_context(method).Pool(2) as pool:
        try:
            seen = pool.map(work, [device] * 4)
        except portmat.DeviceError as e:
            print("clear error" if "fork" in str(e) and "spawn" in str(e) else "unclear error", e)
            sys.exit(0)
    print("same devices" if all(s == listed for s in seen) else f"devices differ: {listed} {seen}")
"""


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
@pytest.mark.parametrize("device", DEVICE_IDS)
def test_process_pools(tmp_path, method, device):
    # Pool workers: with 'fork' after the parent used the device, the CPU backend works and other
    # backends raise a clear error in the parent; with 'spawn' and 'forkserver' every worker
    # computes correctly and sees the same devices under the same ids as the parent.
    import multiprocessing as mp

    if method not in mp.get_all_start_methods():
        pytest.skip(f"no {method} start method")
    script = tmp_path / "pool.py"
    script.write_text(POOL_SCRIPT)
    r = run_python(str(script), method, device, "1", timeout=300)
    assert r.returncode == 0, r.stderr
    if method == "fork" and not survives_fork(device):
        assert "clear error" in r.stdout, r.stdout
    else:
        assert "same devices" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("device", DEVICE_IDS + ["default"])
@pytest.mark.parametrize("first_call", ["matmul", "devices"])
def test_first_call_from_a_thread_with_a_small_stack(device, first_call):
    # Probing drivers and compiling kernels need deep stacks; portmat runs them on threads of its
    # own, so a thread started with threading.stack_size(64 KiB) can make the process's first
    # portmat call.
    # Only portmat runs on the small thread: NumPy's own OpenBLAS, which checks the result, does
    # not fit in 64 KiB.
    spec = None if device == "default" else device
    code = f"""
operands = [(rand(67, 45), rand(45, 38)), (rand(300, 257), rand(257, 310))]
threading.stack_size(64 * 1024)
results = []
def first():
    try:
        if "{first_call}" == "devices":
            portmat.devices()
        for a, b in operands:
            results.append(portmat.matmul(a, b, device={spec!r}))
    except BaseException as e:
        results.append(repr(e))
t = threading.Thread(target=first)
t.start()
t.join()
threading.stack_size(0)
assert len(results) == 2, results
for c, (a, b) in zip(results, operands):
    check(c, a, b)
print("ok")
"""
    r = run_child(code)
    assert r.returncode == 0, r.stderr
    assert "ok" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("device", DEVICE_IDS)
@pytest.mark.parametrize("delay", [0.0, 0.05, 0.4])
def test_interpreter_exit_with_daemon_threads_inside_matmul(device, delay):
    # The main thread returns while daemon threads are inside matmul (or still probing, with no
    # delay): the process exits with status 0, nothing aborts, nothing is reported as leaked.
    code = f"""
a = rand(300, 300)
def loop():
    while True:
        portmat.matmul(a, a, device="{device}")
for _ in range(4):
    threading.Thread(target=loop, daemon=True).start()
time.sleep({delay})
print("main done")
"""
    for _ in range(2):
        r = run_child(code)
        assert r.returncode == 0, r.stderr
        assert "main done" in r.stdout
        assert "leaked" not in r.stderr, r.stderr


def test_exit_hooks_may_still_multiply():
    # atexit functions registered before portmat was imported run after its own exit hook; the
    # thread running them is never parked.
    code = "import atexit\nhooks = []\natexit.register(lambda: hooks[0]())\n" + PRELUDE + """
def last():
    product(None)
    print("hook done", flush=True)
hooks.append(last)
product(None)
"""
    r = run_python("-c", code, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "hook done" in r.stdout


def test_many_threads_on_every_device_at_once():
    code = f"""
devices = {DEVICE_IDS!r}
errors = []
def worker(i):
    try:
        r = np.random.default_rng(i)
        for j in range(6):
            m, k, n = (int(x) for x in r.integers(1, 260, 3))
            product(devices[(i + j) % len(devices)], m, k, n)
    except BaseException as e:
        errors.append(repr(e))
ts = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
for t in ts: t.start()
for t in ts: t.join()
print("errors", errors)
"""
    r = run_child(code, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "errors []" in r.stdout, r.stdout


# ---- the OpenCL program cache ------------------------------------------------------------------

OPENCL_IDS = [d for d in DEVICE_IDS if d.startswith("opencl:")]
CACHE_CHILD = """
for device in {devices!r}:
    for shape in ((64, 64, 64), (37, 41, 29), (130, 70, 66)):  # aligned and edge kernels
        product(device, *shape)
    a, b = rand(37, 41), rand(41, 29)  # a transposed view: a program of its own on every kernel
    check(portmat.matmul(a.T.copy().T, b, device=device), a, b)
print("ok")
"""


def _damage(kind, files, data):
    import random

    rnd = random.Random(0)
    first = files[0]
    if kind == "truncate-empty":
        first.write_bytes(b"")
    elif kind == "truncate-half":
        first.write_bytes(data[first][: len(data[first]) // 2])
    elif kind == "truncate-one-byte":
        first.write_bytes(data[first][:-1])
    elif kind == "flip-a-byte":
        b = bytearray(data[first])
        b[len(b) // 2] ^= 0x5A
        first.write_bytes(bytes(b))
    elif kind == "garbage":
        first.write_bytes(bytes(rnd.getrandbits(8) for _ in range(len(data[first]))))
    elif kind == "swapped":
        second = files[1]
        first.write_bytes(data[second])
        second.write_bytes(data[first])
    elif kind == "a-directory":
        first.unlink()
        first.mkdir()
    elif kind == "all-swapped-in-a-ring":
        for f, g in zip(files, files[1:] + files[:1]):
            f.write_bytes(data[g])


@pytest.mark.skipif(not OPENCL_IDS, reason="no OpenCL device")
@pytest.mark.parametrize("kind", ["truncate-empty", "truncate-half", "truncate-one-byte", "flip-a-byte",
                                  "garbage", "swapped", "a-directory", "all-swapped-in-a-ring"])
def test_damaged_program_cache_is_rebuilt(tmp_path, kind):
    # Entries truncated by a full disk or a killed process, or mixed up between machines, must be
    # rebuilt, never handed to the driver.
    cache = tmp_path / "cache"
    code = CACHE_CHILD.format(devices=OPENCL_IDS)
    env = {"PORTMAT_CACHE_DIR": str(cache)}
    first = run_child(code, env=env, timeout=600)
    assert first.returncode == 0 and "ok" in first.stdout, first.stderr
    files = sorted(p for p in cache.rglob("*") if p.is_file())
    assert len(files) >= 2, files
    data = {f: f.read_bytes() for f in files}
    _damage(kind, files, data)
    damaged = {f: f.read_bytes() for f in files if f.is_file() and f.read_bytes() != data[f]}
    second = run_child(code, env=env, timeout=600)
    assert second.returncode == 0 and "ok" in second.stdout, second.stderr
    # Every damaged entry was rewritten. (Compared by content, not inode: with Intel's OpenCL
    # runtime beside PoCL a rewritten entry was seen to get its old inode number back.)
    assert all(f.is_file() and f.read_bytes() != bad for f, bad in damaged.items()), kind
    # ... and what was rebuilt serves the next process, read and not rewritten.
    stamps = {f: f.stat().st_mtime_ns for f in files if f.is_file()}
    third = run_child(code, env=env, timeout=600)
    assert third.returncode == 0 and "ok" in third.stdout, third.stderr
    assert {f: f.stat().st_mtime_ns for f in stamps} == stamps, kind
    assert not [p for p in cache.iterdir() if p.name.startswith(".") or "tmp" in p.name], "temporary files left"


@pytest.mark.skipif(not OPENCL_IDS, reason="no OpenCL device")
def test_unusable_cache_locations_mean_no_cache(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    code = CACHE_CHILD.format(devices=OPENCL_IDS)
    for where in (str(blocker), str(blocker / "below"), "/proc/portmat-cache", ""):
        r = run_child(code, env={"PORTMAT_CACHE_DIR": where}, timeout=600)
        assert r.returncode == 0 and "ok" in r.stdout, (where, r.stderr)

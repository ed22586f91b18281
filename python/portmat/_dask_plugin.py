"""portmat.dask.PinDevices: a dask.distributed worker plugin giving each worker process of a host
its own portmat device (issue 20), so that `client.register_plugin(PinDevices())` on a host with
4 GPUs and 4 workers puts one worker on each GPU.

How a worker finds its place among the workers of its host: each claims the lowest free slot
number by taking an exclusive flock on a file named by the plugin's token and the slot, in the
temp folder (portmat-dask-slots-<uid>/). A lock belongs to the worker process: it is dropped when
the process ends, however it ends, so a restarted worker takes the freed slot. The token is made
once, where the plugin is created, and travels with it to every worker: the slots count the
workers of this plugin (of this client's cluster), not those of other clusters on the same host. Worker names
cannot serve: LocalCluster numbers its workers, but `dask worker --nworkers` does not, and a
scheduler's list of workers changes while they start. The files are tiny and left behind when a
worker is killed; teardown removes its own.

Slot i gets devices[i % len(devices)]: the list given, else the devices of `kind` ("gpu" by
default) on that worker's host, by portmat.devices(), of the one backend portmat prefers for that
kind (CUDA before OpenCL): a GPU is listed once per backend that reaches it. Where there is none
(a CPU-only host), the worker's default is left as it was ($PORTMAT_DEVICE, else portmat's
automatic choice). The device is set with portmat.set_default_device in the worker process, which
every product there without a device= then uses (portmat.dask.matmul's tasks included); it
overrides the worker's $PORTMAT_DEVICE.
"""

from __future__ import annotations

import os
import tempfile
import uuid

try:
    from distributed import WorkerPlugin
except ImportError as e:  # dask.array without dask.distributed
    raise ImportError(f"portmat.dask.PinDevices needs dask.distributed ({e}): pip install portmat[dask] "
                      f"(or pip install 'dask[distributed]')") from e

import portmat

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None

_MAX_SLOTS = 4096  # workers of one plugin on one host, far more than any host runs


def _devices_of_kind(kind: str) -> list[str]:
    """The ids of this host's devices of `kind`, of the backend portmat prefers for it (CUDA before
    OpenCL for "gpu", the native backend for "cpu"): one physical device shows up once per backend
    (an NVIDIA GPU is cuda:i and an OpenCL device; the CPU is cpu:0 and PoCL's OpenCL device), and
    two workers on one GPU through two backends is not one GPU each."""
    try:
        preferred = portmat._ext.find_device(kind)
    except ValueError:  # no device of that kind here
        return []
    return [d.id for d in portmat.devices() if d.kind == kind and d.backend == preferred.backend]


class PinDevices(WorkerPlugin):
    """Sets each worker process's default portmat device, one device per worker of a host:
    `client.register_plugin(portmat.dask.PinDevices())`.

    devices: the devices to hand out (ids such as "cuda:0", or entries of portmat.devices()), by
    the worker's slot on its host, round-robin; None: the devices of `kind` ("gpu" or "cpu") on the
    worker's host, of the one backend portmat prefers for that kind (CUDA before OpenCL); none
    there: the worker's default is left alone. num_threads: portmat.set_num_threads for each
    worker (the CPU backend's threads per product; by default each product uses every core, so
    workers sharing a host's cores may want cores // workers).
    After setup, the worker's plugin (worker.plugins[PinDevices.name]) has `.slot` and `.device`
    (the id set, or None).
    """

    name = "portmat-pin-devices"  # registering another instance replaces this one on each worker

    def __init__(self, devices=None, *, kind: str = "gpu", num_threads: int | None = None):
        if devices is not None:
            if isinstance(devices, (str, portmat.DeviceInfo)):
                devices = [devices]
            devices = [portmat._device_spec(d) for d in devices]
            if not devices:
                raise ValueError("PinDevices: devices is empty (None hands out every device of `kind`)")
        if kind not in ("gpu", "cpu"):
            raise ValueError(f"PinDevices: kind must be 'gpu' or 'cpu' (or give the devices), not {kind!r}")
        if num_threads is not None and (not isinstance(num_threads, int) or num_threads < 1):
            raise ValueError(f"PinDevices: num_threads must be a positive int or None, not {num_threads!r}")
        self.devices = devices
        self.kind = kind
        self.num_threads = num_threads
        self.token = uuid.uuid4().hex
        self.slot = None
        self.device = None
        self._lock_fd = None
        self._lock_path = None

    def __getstate__(self):
        state = dict(self.__dict__)
        state.update(slot=None, device=None, _lock_fd=None, _lock_path=None)  # per process
        return state

    def setup(self, worker=None):
        candidates = self.devices if self.devices is not None else _devices_of_kind(self.kind)
        if self.num_threads is not None:
            portmat.set_num_threads(self.num_threads)
        if not candidates:
            return  # nothing of that kind here: the worker keeps its default
        self.slot = self._claim_slot()
        device = candidates[self.slot % len(candidates)]
        try:
            portmat.set_default_device(device)  # ValueError naming the devices where it names none
        except BaseException:  # register_plugin raises it on the client; the slot is free again
            self._release_slot()
            raise
        self.device = portmat.default_device().id

    def teardown(self, worker=None):
        if self.device is not None:
            portmat.set_default_device(None)
            self.device = None
        if self.num_threads is not None:
            portmat.set_num_threads(0)
        self._release_slot()

    def _claim_slot(self) -> int:
        """The lowest slot no other live process of this plugin holds on this host, now held by
        this one until teardown or its end."""
        if fcntl is None:
            raise RuntimeError("PinDevices needs fcntl (POSIX) to count the workers of a host; "
                               "give each worker its device with $PORTMAT_DEVICE instead")
        # One folder per user: another user's would not be ours to write in.
        folder = os.path.join(tempfile.gettempdir(), f"portmat-dask-slots-{os.getuid()}")
        os.makedirs(folder, exist_ok=True)
        for slot in range(_MAX_SLOTS):
            path = os.path.join(folder, f"{self.token}-{slot}.lock")
            while True:
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    break  # held: the next slot
                # Held now, unless its holder removed the file between our open and our lock (its
                # teardown): then our lock is on a file no one else can see; open it anew.
                try:
                    same = os.stat(path).st_ino == os.fstat(fd).st_ino
                except FileNotFoundError:
                    same = False
                if same:
                    self._lock_fd, self._lock_path = fd, path
                    return slot
                os.close(fd)
        raise RuntimeError(f"PinDevices: {_MAX_SLOTS} workers of one plugin on this host hold every slot")

    def _release_slot(self):
        if self._lock_fd is None:
            return
        try:
            os.unlink(self._lock_path)  # while still locked, so no one claims the old file
        except OSError:
            pass
        os.close(self._lock_fd)
        self._lock_fd = self._lock_path = None
        self.slot = None

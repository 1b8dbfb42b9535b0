"""Backend plugins: what a backend declares, how it is found, and the engine it gives a communicator.

Modelled on NCCL's versioned plugin structs: a backend states the plugin API version it was written for, what
memory it takes and what it supports, answers `probe()` before use, and only then creates engines. Built-in
backends register by name here; third-party ones through the entry-point group ``pycoll.backends``, whose
objects are Backend subclasses (or instances).

The built-in backends live beside this file, each registered when imported:
tcp          host memory over sockets: pycoll's own algorithms in libpycoll (native/)
shm          host memory, one host: the same algorithms over shared-memory rings
cpu          the default for host memory: shm when every rank is on one host, else tcp
nccl, hccl   device memory through the vendor libraries, dlopen'ed at run time (nccl.py and hccl.py declare
             them; vendor.py is their one engine, over libpycoll's vendor family)
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import logging
import threading

from pycoll._bindings.abi import DTYPES, OPS
from pycoll.errors import BackendUnavailable

PLUGIN_API_VERSION = 1
ENTRY_POINT_GROUP = "pycoll.backends"
ALL_DTYPES = tuple(DTYPES)  # in id order, as the C ABI names them
ALL_OPS = tuple(OPS)

log = logging.getLogger("pycoll")


class Engine:
    """One communicator's state inside a backend. Buffers arrive as pycoll.buffers.Buffer, already checked
    for dtype, length and memory kind by the Communicator. Each method returns the algorithm it ran."""

    def fast_path(self, accepted):
        """Optional: an object whose all_reduce(x, op, out, algorithm, accuracy) and broadcast(x, root) run the
        common case without Buffers (see pycoll/_bindings/fast_path.pxi) and return None for any other; None
        when the engine has none. `accepted` maps each argument the communicator accepts to its id: "ops",
        "algorithms", "accuracies", "dtypes" (numpy dtype name -> id)."""
        return None

    def all_reduce(self, send, recv, op, algorithm, accuracy):
        raise NotImplementedError

    def reduce_scatter(self, send, recv, op, algorithm, accuracy):
        raise NotImplementedError

    def all_gather(self, send, recv):
        raise NotImplementedError

    def broadcast(self, buf, root):
        raise NotImplementedError

    def reduce(self, send, recv, op, root, accuracy):
        raise NotImplementedError

    def barrier(self):
        raise NotImplementedError

    def send(self, buf, peer, tag):
        raise NotImplementedError(f"send: backend {getattr(self, 'name', type(self).__name__)} has no "
                                  "point-to-point messages yet (the host-memory backends cpu, shm and tcp have)")

    def recv(self, buf, peer, tag):
        raise NotImplementedError(f"recv: backend {getattr(self, 'name', type(self).__name__)} has no "
                                  "point-to-point messages yet (the host-memory backends cpu, shm and tcp have)")

    def split(self, color, key):
        """The engine of a new communicator for the ranks that pass the same color >= 0 (-1: none for this rank,
        return None), over this engine's connections. Collective over this engine's ranks."""
        raise NotImplementedError(f"split: backend {getattr(self, 'name', type(self).__name__)} has no "
                                  "sub-communicators yet (the host-memory backends cpu, shm and tcp have)")

    # Issue #14's collectives; an engine without them refuses them (the Communicator has checked the
    # arguments). count: the elements of one all_to_all block; counts: a C-contiguous int64 NumPy array of
    # `size` entries.
    def all_to_all(self, send, recv, count):
        raise NotImplementedError(f"{type(self).__name__} has no all_to_all")

    def gather(self, send, recv, root):
        raise NotImplementedError(f"{type(self).__name__} has no gather")

    def scatter(self, send, recv, root):
        raise NotImplementedError(f"{type(self).__name__} has no scatter")

    def all_gather_v(self, send, recv, counts):
        raise NotImplementedError(f"{type(self).__name__} has no all_gather with counts")

    def reduce_scatter_v(self, send, recv, counts, op, accuracy):
        raise NotImplementedError(f"{type(self).__name__} has no reduce_scatter with counts")

    def start(self, collective, *args):
        """Start `collective` ("all_reduce", ..., "barrier"; the arguments of the method of that name) in the
        background, after every collective called before it, and return its handle for pycoll.Work:
        wait(timeout) -> bool, done(), error() (the exception it failed with, or None), algorithm. The default
        runs it now and returns a completed handle, so every engine takes async_op=True; engines with a
        progress thread (NativeEngine), or whose device runs it in the background (VendorEngine: enqueued on its
        stream, finished by the communicator's watchdog), override it."""
        from pycoll.work import CompletedHandle

        try:
            return CompletedHandle(algorithm=getattr(self, collective)(*args))
        except Exception as exc:  # noqa: BLE001 -- delivered by Work.wait, as a background failure would be
            return CompletedHandle(error=exc)

    def close(self):
        """Idempotent."""


class Backend:
    """A backend plugin. Subclasses set the class attributes and implement probe() and create()."""

    api_version = PLUGIN_API_VERSION
    name = ""
    memory = "host"  # "host", "cuda" or "npu": the memory the collectives take
    dtypes = ALL_DTYPES
    ops = ALL_OPS
    algorithms = ("auto",)
    accuracies = ("fast",)

    def probe(self):
        """None when usable here, else a sentence saying why not and what to install or set."""
        return None

    def create(self, *, rank, world_size, store, timeout, options):
        """An Engine for this rank. `store` is the job's rendezvous store (pycoll.rendezvous.store)."""
        raise NotImplementedError


@dataclasses.dataclass(frozen=True)
class BackendStatus:
    name: str
    usable: bool
    reason: str
    memory: str
    dtypes: tuple
    ops: tuple
    algorithms: tuple
    accuracies: tuple

    def __str__(self):
        return f"{self.name}: {'usable' if self.usable else 'unavailable: ' + self.reason}"


_registry: dict[str, Backend] = {}
_lock = threading.Lock()
_entry_points_loaded = False


def register(backend: Backend) -> None:
    """Register a backend instance under backend.name (a later registration replaces an earlier one)."""
    if not isinstance(backend, Backend):
        raise TypeError(f"backend must be a pycoll.plugins.Backend, got {type(backend).__name__}")
    if backend.api_version != PLUGIN_API_VERSION:
        raise ValueError(f"backend {backend.name!r} was written for plugin API {backend.api_version}; "
                         f"this pycoll speaks {PLUGIN_API_VERSION}")
    if not backend.name:
        raise ValueError("backend has no name")
    with _lock:
        _registry[backend.name] = backend


def _load_entry_points() -> None:
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            obj = ep.load()
            register(obj() if isinstance(obj, type) else obj)
        except Exception as exc:  # a broken third-party plugin must not break pycoll
            log.warning("pycoll: backend entry point %s could not be loaded: %s", ep.name, exc)


def _builtin() -> None:
    # Importing a built-in backend module registers it.
    import pycoll.plugins.cpu  # noqa: F401
    import pycoll.plugins.hccl  # noqa: F401
    import pycoll.plugins.nccl  # noqa: F401
    import pycoll.plugins.shm  # noqa: F401
    import pycoll.plugins.tcp  # noqa: F401


def get(name: str) -> Backend:
    """The usable backend called name, or BackendUnavailable saying why not."""
    _builtin()
    _load_entry_points()
    with _lock:
        backend = _registry.get(name)
        known = sorted(_registry)
    if backend is None:
        raise BackendUnavailable(f"unknown backend {name!r}; known: {', '.join(known)}")
    reason = backend.probe()
    if reason:
        raise BackendUnavailable(f"{name}: {reason}")
    return backend


def statuses() -> list[BackendStatus]:
    """Every registered backend, whether it is usable here and, if not, why."""
    _builtin()
    _load_entry_points()
    with _lock:
        backends = list(_registry.values())
    out = []
    for b in backends:
        try:
            reason = b.probe()
        except Exception as exc:
            reason = f"probe failed: {exc}"
        out.append(BackendStatus(b.name, not reason, reason or "", b.memory, tuple(b.dtypes), tuple(b.ops),
                                 tuple(b.algorithms), tuple(b.accuracies)))
    return out

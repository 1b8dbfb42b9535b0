"""Backend plugins: what a backend declares, how it is found, and the engine it gives a communicator.

Modelled on NCCL's versioned plugin structs: a backend states the plugin API version it was written for, what
memory it takes and what it supports, answers `probe()` before use, and only then creates engines. Built-in
backends register by name here; third-party ones through the entry-point group ``pycoll.backends``, whose
objects are Backend subclasses (or instances). The engine is one abstract class, Engine (engine.py), whose
run(call, async_op) every backend implements (docs/plugins.md).

The built-in backends live beside this file, each registered when imported:
tcp          host memory over sockets: pycoll's own algorithms in libpycoll (native/)
shm          host memory, one host: the same algorithms over shared-memory rings
cpu          the default for host memory: shm when every rank is on one host, else tcp
             (the three are siblings under HostBackend, host.py: the bootstrap and the engine they share)
nccl, hccl   device memory through the vendor libraries, dlopen'ed at run time (nccl.py and hccl.py declare
             them; vendor.py is their one engine, over libpycoll's vendor family)
auto         each rank its own memory kind: islands of one kind, collectives across them (pycoll/islands/)
"""

from __future__ import annotations

import dataclasses
import logging
import threading

from pycoll._bindings.abi import DTYPES, OPS
from pycoll.errors import BackendUnavailable
from pycoll.plugins.engine import Engine as Engine

# 2: one Engine shape, an abstract class with run(call, async_op) required (docs/plugins.md).
PLUGIN_API_VERSION = 2
ENTRY_POINT_GROUP = "pycoll.backends"
ALL_DTYPES = tuple(DTYPES)  # in id order, as the C ABI names them
ALL_OPS = tuple(OPS)

log = logging.getLogger("pycoll")


class Call:
    """One call as the Communicator checked it, for its engine: Python's side of the C ABI's call description
    (pycoll_call_t, native/include/pycoll/call.h), each field meaning the same for every collective.
    collective: its name (pycoll._bindings.abi.COLLECTIVES: "all_reduce", ..., "send/recv"); send / recv: the
    pycoll.buffers.Buffer this rank sends from / receives into, None where it uses none (a send has no recv,
    a receive no send, gather's recv and scatter's send off the root); op: the op id; algorithm and accuracy:
    names; root (rooted collectives), dest (the rank a send goes to) and source (the rank a receive comes
    from), else -1; tag: send/recv's; counts: the _v
    collectives' C-contiguous int64 NumPy array of `size` blocks, else None."""

    __slots__ = ("collective", "send", "recv", "op", "algorithm", "accuracy", "root", "dest", "source", "tag",
                 "counts")

    def __init__(self, collective, send=None, recv=None, *, op=0, algorithm="auto", accuracy="fast", root=-1,
                 dest=-1, source=-1, tag=0, counts=None):
        self.collective, self.send, self.recv = collective, send, recv
        self.op, self.algorithm, self.accuracy = op, algorithm, accuracy
        self.root, self.dest, self.source, self.tag, self.counts = root, dest, source, tag, counts

    def __repr__(self):
        return f"Call({', '.join(f'{k}={getattr(self, k)!r}' for k in self.__slots__)})"


class Backend:
    """A backend plugin. Subclasses set the class attributes and implement probe() and create()."""

    api_version = PLUGIN_API_VERSION
    name = ""
    memory = "host"  # "host", "cuda" or "npu": the memory the collectives take
    dtypes = ALL_DTYPES
    ops = ALL_OPS
    algorithms = ("auto",)
    accuracies = ("fast",)
    # True where create() finds the hosts itself (the C bootstrap: pycoll_comm_init_rank) and sets the engine's
    # `hosts`; False: init() exchanges them through the store first and passes options["hosts"].
    finds_hosts = False
    # The Communicator class init() makes for this backend's engines; None: pycoll.Communicator.
    communicator_class = None

    def probe(self):
        """None when usable here, else a sentence saying why not and what to install or set."""
        return None

    def create(self, *, rank, world_size, store, timeout, options):
        """An Engine (pycoll.plugins.Engine) for this rank. `store` is the job's rendezvous store
        (pycoll.rendezvous.store)."""
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
        raise BackendUnavailable(f"backend {backend.name!r} declares plugin API version {backend.api_version}; "
                                 f"this pycoll requires version {PLUGIN_API_VERSION} (docs/plugins.md says what "
                                 "changed)")
    if not backend.name:
        raise ValueError("backend has no name")
    with _lock:
        _registry[backend.name] = backend


def _load_entry_points() -> None:
    """Registers the backends of the entry-point group, once. An entry point adds a name; it never replaces a
    backend already registered (built in, or by the program through register()): installing a package must not
    change what backend="tcp" runs."""
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    # Imported here, not at the top: importlib.metadata brings email, zipfile and pathlib into every rank's
    # `import pycoll`, and get() of a registered name never needs it.
    import importlib.metadata

    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            obj = ep.load()
            backend = obj() if isinstance(obj, type) else obj
            with _lock:
                taken = getattr(backend, "name", None) in _registry
            if taken:
                log.warning("pycoll: backend entry point %s names backend %r, which is already registered; "
                            "it is not loaded", ep.name, backend.name)
                continue
            register(backend)
        except Exception as exc:  # a broken third-party plugin must not break pycoll
            log.warning("pycoll: backend entry point %s could not be loaded: %s", ep.name, exc)


def _builtin() -> None:
    # Importing a built-in backend module registers it.
    import pycoll.plugins.auto  # noqa: F401
    import pycoll.plugins.cpu  # noqa: F401
    import pycoll.plugins.hccl  # noqa: F401
    import pycoll.plugins.nccl  # noqa: F401
    import pycoll.plugins.shm  # noqa: F401
    import pycoll.plugins.tcp  # noqa: F401


def get(name: str) -> Backend:
    """The usable backend called name, or BackendUnavailable saying why not."""
    _builtin()
    with _lock:
        registered = name in _registry
    if not registered:  # a built-in or registered name is found without scanning every installed package
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

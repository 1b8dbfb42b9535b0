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
auto         each rank its own memory kind: islands of one kind, collectives across them (pycoll/islands/)
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


# How Engine.run maps a call onto the per-collective methods of engines written against them (VendorEngine):
# their arguments, in their order.
_METHOD_ARGS = {
    "all_reduce": lambda c: (c.send, c.recv, c.op, c.algorithm, c.accuracy),
    "reduce_scatter": lambda c: (c.send, c.recv, c.op, c.algorithm, c.accuracy),
    "all_gather": lambda c: (c.send, c.recv),
    "broadcast": lambda c: (c.recv, c.root),
    "reduce": lambda c: (c.send, c.recv, c.op, c.root, c.accuracy),
    "barrier": lambda c: (),
    "all_to_all": lambda c: (c.send, c.recv, c.counts),
    "gather": lambda c: (c.send, c.recv, c.root),
    "scatter": lambda c: (c.send, c.recv, c.root),
    "send": lambda c: (c.send, c.dest, c.tag),
    "recv": lambda c: (c.recv, c.source, c.tag),
}


# What an engine written per collective may lack: refused where called, not through a failed Work.
_OPTIONAL = ("all_to_all", "gather", "scatter", "send", "recv")


def _no_point_to_point(engine, what):
    return NotImplementedError(f"{what}: backend {getattr(engine, 'name', type(engine).__name__)} has no "
                               "point-to-point messages yet (the host-memory backends cpu, shm and tcp have)")


def _no_fault_tolerance(engine, what):
    return NotImplementedError(f"{what}: backend {getattr(engine, 'name', type(engine).__name__)} cannot survive a "
                               "lost rank yet (the host-memory backends cpu, shm and tcp can)")


class Engine:
    """One communicator's state inside a backend. The Communicator checks every argument (dtype, length and
    memory kind of each buffer included) and hands the engine one Call per collective (run). What every
    engine declares, set in its constructor:"""

    transport = None    # what the collectives run over ("shm", "tcp", "shm+tcp"), None: the backend's name
    hosts = None        # a pycoll.rendezvous.hosts.Hosts, where the backend finds the hosts (finds_hosts)
    close_linger = None  # the most seconds close() waits for the peers' goodbyes, None: it waits for none;
    #                      the Communicator shortens it to its own close deadline
    native = None       # the host engines' NativeComm (pycoll/_bindings/comm.pyx), None for the vendor ones

    def fast_path(self, accepted):
        """Optional: an object whose all_reduce(x, op, out, algorithm, accuracy) and broadcast(x, root) run the
        common case without Buffers (see pycoll/_bindings/fast_path.pxi) and return None for any other; None
        when the engine has none. `accepted` maps each argument the communicator accepts to its id: "ops",
        "algorithms", "accuracies", "dtypes" (numpy dtype name -> id)."""
        return None

    def request_abort(self, failed_rank, reason):
        """Optional, from any thread: a peer failure learnt of elsewhere (failed_rank -1 where unknown). Where an
        engine can, the call waiting on it, else the next, raises PeerFailure saying `reason`; by default its
        waits end at their deadline, as any wait on a departed peer does."""

    def run(self, call, async_op=False):
        """Run `call` (a Call). Blocking: return the algorithm that ran (None for send/recv and barrier
        is fine). async_op: start it in the background, after every call made before it, and return its
        handle for pycoll.Work: wait(timeout) -> bool, done(), error() (the exception it failed with, or
        None), algorithm. This default serves engines written per collective: it calls the method named after
        the collective (all_reduce(send, recv, op, algorithm, accuracy), reduce_scatter(same),
        all_gather(send, recv), broadcast(buf, root), reduce(send, recv, op, root, accuracy), barrier(),
        all_to_all(send, recv, counts), gather(send, recv, root), scatter(send, recv, root), send(buf, dest, tag),
        recv(buf, source, tag)), or ``start(name, *those arguments)``; engines with one path for every call
        (NativeEngine) override it."""
        name = call.collective
        if name == "send/recv":
            name = "send" if call.dest >= 0 else "recv"
        method_args = _METHOD_ARGS.get(name)
        if method_args is None:
            raise NotImplementedError(f"{type(self).__name__} has no {call.collective}")
        if getattr(type(self), name) is getattr(Engine, name) and name in _OPTIONAL:
            getattr(self, name)(*method_args(call))  # the default raises, at the call even when async
        if async_op:
            return self.start(name, *method_args(call))
        return getattr(self, name)(*method_args(call))

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

    def all_to_all(self, send, recv, counts):
        """counts: None (equal blocks), or the int64 array of every peer's send counts then receive counts
        (Communicator._all_to_all_v, for engines with uneven_all_to_all)."""
        raise NotImplementedError(f"all_to_all: backend {getattr(self, 'name', type(self).__name__)} has none")

    def gather(self, send, recv, root):
        raise NotImplementedError(f"gather: backend {getattr(self, 'name', type(self).__name__)} has none")

    def scatter(self, send, recv, root):
        raise NotImplementedError(f"scatter: backend {getattr(self, 'name', type(self).__name__)} has none")

    def send(self, buf, dest, tag):
        raise _no_point_to_point(self, "send")

    def recv(self, buf, source, tag):
        raise _no_point_to_point(self, "recv")

    uneven_all_to_all = False  # all_to_all takes per-peer counts (the torch backend's uneven all-to-all)

    def split(self, color, key):
        """The engine of a new communicator for the ranks that pass the same color >= 0 (-1: none for this rank,
        return None), over this engine's connections. Collective over this engine's ranks."""
        raise NotImplementedError(f"split: backend {getattr(self, 'name', type(self).__name__)} has no "
                                  "sub-communicators yet (the host-memory backends cpu, shm and tcp have)")

    def revoke(self):
        """Fault tolerance (docs/fault_tolerance.md): revoke(), agree(flag, timeout), shrink(exclude, timeout)
        -> a new engine, failed_ranks; only the host-memory engines have them so far."""
        raise _no_fault_tolerance(self, "revoke")

    def agree(self, flag, timeout):
        raise _no_fault_tolerance(self, "agree")

    def shrink(self, exclude, timeout):
        raise _no_fault_tolerance(self, "shrink")

    failed_ranks = ()

    def start(self, collective, *args):
        """For run(async_op=True) of engines written per collective: start `collective` with the arguments of
        its method in the background and return its handle. The default runs it now and returns a completed
        handle, so every engine takes async_op=True; engines whose device runs it in the background
        (VendorEngine: enqueued on its stream, finished by the communicator's watchdog) override it."""
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
    # True where create() finds the hosts itself (the C bootstrap: pycoll_comm_init_rank) and sets the engine's
    # `hosts`; False: init() exchanges them through the store first and passes options["hosts"].
    finds_hosts = False
    # The Communicator class init() makes for this backend's engines; None: pycoll.Communicator.
    communicator_class = None

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
    import pycoll.plugins.auto  # noqa: F401
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

"""pycoll as a `ray.util.collective` backend: Ray actors call Ray's collectives and they run over pycoll.

    import pycoll.ray                      # registers the backend "PYCOLL" with Ray (in every process)
    from ray.util import collective as col

    @ray.remote
    class Worker:
        def setup(self, world_size, rank):
            pycoll.ray.init_collective_group(world_size, rank, group_name="g")
        def step(self, x):
            col.allreduce(x, group_name="g")   # runs over pycoll: shared memory on one host, TCP across hosts
            return x

It plugs in through Ray's own backend registry (`ray.util.collective.register_collective_backend`), so
`ray.util.collective.init_collective_group(..., backend="PYCOLL")` and the driver-side
`create_collective_group(actors, ..., backend="PYCOLL")` work too. Each group is one pycoll Communicator (backend
"cpu" by default). The actors meet without a launcher: rank 0 starts a pycoll TCPStore on an ephemeral port and
publishes its address and a random per-group secret in Ray's internal key-value store; the other ranks read them
there (`_rendezvous`). Tensors: NumPy arrays and CPU torch tensors. See docs/ray.md.
"""

from __future__ import annotations

import json
import secrets
import threading
import time

import numpy as np

from pycoll.errors import BackendUnavailable, PycollError, Timeout

try:
    import ray
    import ray.experimental.internal_kv as _internal_kv
    from ray.util import collective as _collective
    from ray.util.collective import types as _types
    from ray.util.collective.collective_group.base_collective_group import BaseGroup
except ImportError as _exc:  # pragma: no cover -- depends on what is installed
    raise BackendUnavailable(
        f"pycoll.ray needs Ray ({type(_exc).__name__}: {_exc}); install it with: pip install 'pycoll-collectives[ray]' "
        "(or pip install ray)") from _exc

try:
    from ray.util.collective.backend_registry import _global_registry, register_collective_backend
except ImportError as _exc:  # pragma: no cover -- Ray without a collective backend registry
    raise BackendUnavailable(
        f"pycoll.ray needs a Ray whose ray.util.collective has register_collective_backend (verified with Ray "
        f"2.60.0); the installed Ray {getattr(ray, '__version__', '?')} has none: pip install -U 'ray>=2.60'"
    ) from _exc

BACKEND = "PYCOLL"  # the name Ray knows the backend by (ray.util.collective.types.Backend.PYCOLL)
DEFAULT_TIMEOUT = 300.0  # seconds: rendezvous and every collective (pycoll.init's default)
_KV_NAMESPACE = "pycoll"
_CONNECT_SLICE = 2.0  # seconds a rank tries one published address before re-reading it (it may be stale)

_OPS = {_types.ReduceOp.SUM: "sum", _types.ReduceOp.PRODUCT: "prod", _types.ReduceOp.MIN: "min",
        _types.ReduceOp.MAX: "max"}

# Options handed from init_collective_group() below to PycollGroup.__init__ (Ray constructs the group with
# world_size, rank and group_name only), by group name, for the duration of that call.
_pending_options: dict = {}
_pending_lock = threading.Lock()


def _kv_key(group_name):
    return f"pycoll/ray/rendezvous/{group_name}".encode()


def _check_timeout(timeout):
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    return float(timeout)


def _rendezvous(group_name, rank, world_size, *, timeout, master_addr=None):
    """The only place the ranks of a group find each other: returns (the connected store, the published record:
    addr, port, secret, job_id).

    Rank 0 hosts a pycoll TCPStore on an ephemeral port of `master_addr` (default: this Ray node's address)
    and publishes {address, port, secret, job id} under the group's key in Ray's internal KV; the others poll
    that key (until `timeout`) and connect. A record left by an earlier incarnation of the group whose rank 0
    died is stale: a rank that cannot reach the published store within a short slice re-reads the key. A store,
    rather than publishing a pycoll.get_unique_id() for pycoll.init_rank(), for that probe: a rank that
    registered with a unique id's root cannot back out and retry without failing the group."""
    from pycoll.rendezvous.store import TCPStore

    deadline = time.monotonic() + timeout
    key = _kv_key(group_name)
    if rank == 0:
        addr = master_addr or ray.util.get_node_ip_address()
        secret = secrets.token_hex(32)
        store = TCPStore(addr, 0, is_server=True, timeout=timeout, secret=secret.encode(), rank=0)
        record = {"addr": addr, "port": store.port, "secret": secret,
                  "job_id": f"ray-{group_name}-{secrets.token_hex(6)}"}
        try:
            _internal_kv._internal_kv_put(key, json.dumps(record).encode(), overwrite=True,
                                          namespace=_KV_NAMESPACE)
        except BaseException:
            store.close(linger=0)
            raise
        return store, record
    last_error = None
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise Timeout(f"pycoll.ray: rank {rank} of group {group_name!r} did not find rank 0's rendezvous "
                          f"within {timeout:g} s" + (f" (last error: {last_error})" if last_error else
                                                     " (rank 0 never published it: is it alive and in the "
                                                     "group?)"), rank=0)
        raw = _internal_kv._internal_kv_get(key, namespace=_KV_NAMESPACE)
        if raw is None:
            time.sleep(min(0.05, remaining))
            continue
        record = json.loads(raw)
        try:
            store = TCPStore(record["addr"], record["port"], is_server=False,
                             timeout=min(_CONNECT_SLICE, remaining), secret=record["secret"].encode(), rank=rank)
        except (PycollError, OSError) as exc:  # a stale record (dead port) or rank 0 not listening yet
            last_error = f"{type(exc).__name__}: {exc}"
            time.sleep(min(0.05, max(deadline - time.monotonic(), 0)))
            continue
        store.timeout = timeout  # the connection is up: from now on the group's timeout applies
        return store, record


def _unpublish(group_name):
    try:
        _internal_kv._internal_kv_del(_kv_key(group_name), namespace=_KV_NAMESPACE)
    except Exception:  # noqa: BLE001 -- the cluster may be shutting down; a stale record is re-read anyway
        pass


class PycollGroup(BaseGroup):
    """A Ray collective group over one pycoll Communicator (`.communicator`). Ray creates it through its backend
    registry; pass options (timeout, pycoll backend, address) with pycoll.ray.init_collective_group()."""

    def __init__(self, world_size, rank, group_name):
        super().__init__(world_size, rank, group_name)
        with _pending_lock:
            options = dict(_pending_options.get(group_name, {}))
        timeout = _check_timeout(options.get("timeout", DEFAULT_TIMEOUT))
        backend = options.get("backend", "cpu")
        import pycoll

        self._store = None
        self._comm = None
        store, record = _rendezvous(group_name, rank, world_size, timeout=timeout,
                                    master_addr=options.get("master_addr"))
        try:
            self._comm = pycoll.init(backend, rank=rank, world_size=world_size, master_addr=record["addr"],
                                     master_port=record["port"], timeout=timeout, store=store,
                                     secret=record["secret"], job_id=record["job_id"])
        except BaseException:
            store.close(linger=0)
            if rank == 0:
                _unpublish(group_name)
            raise
        self._store = store
        if rank == 0:  # init is collective: every rank has read the record by now
            _unpublish(group_name)

    @classmethod
    def backend(cls):
        return BACKEND

    @classmethod
    def check_backend_availability(cls) -> bool:
        return True  # pycoll's host backends need nothing beyond pycoll itself

    @property
    def communicator(self):
        """The pycoll Communicator this group runs over (raises CommunicatorClosed once destroyed)."""
        if self._comm is None:
            from pycoll.errors import CommunicatorClosed
            raise CommunicatorClosed(f"the pycoll Ray group {self.group_name!r} was destroyed")
        return self._comm

    @property
    def transport(self):
        """What the group's communicator runs on under backend "cpu": "shm" (one host), "tcp" or "shm+tcp"."""
        return self.communicator.transport

    def destroy_group(self):
        comm, self._comm = self._comm, None
        store, self._store = self._store, None
        failed = False
        try:
            if comm is not None:
                failed = comm._failed
                comm.close()
        finally:
            if store is not None:
                store.close(linger=0 if failed else min(store.timeout, 5.0))

    # -- the collectives Ray calls, each with a list of one tensor (Ray's multi-GPU variants pass more) -----
    def allreduce(self, tensors, allreduce_options=_types.AllReduceOptions()):
        t = _one(tensors, "tensor")
        self.communicator.all_reduce(_arg(t, "tensor"), op=_op(allreduce_options))

    def barrier(self, barrier_options=_types.BarrierOptions()):
        self.communicator.barrier()

    def reduce(self, tensors, reduce_options=_types.ReduceOptions()):
        t = _one(tensors, "tensor")
        self.communicator.reduce(_arg(t, "tensor"), root=reduce_options.root_rank, op=_op(reduce_options))

    def broadcast(self, tensors, broadcast_options=_types.BroadcastOptions()):
        t = _one(tensors, "tensor")
        self.communicator.broadcast(_arg(t, "tensor"), root=broadcast_options.root_rank)

    def allgather(self, tensor_lists, tensors, allgather_options=_types.AllGatherOptions()):
        outs = _one(tensor_lists, "tensor_list")
        x = _as_numpy(_one(tensors, "tensor"), "tensor")
        views = _block_views(outs, x, self.world_size, "tensor_list")
        gathered = np.empty((self.world_size,) + x.shape, dtype=x.dtype)
        self.communicator.all_gather(np.ascontiguousarray(x), gathered)
        for view, block in zip(views, gathered):
            np.copyto(view, block)

    def reducescatter(self, tensors, tensor_lists, reducescatter_options=_types.ReduceScatterOptions()):
        out_t = _one(tensors, "tensor")
        out = _as_numpy(out_t, "tensor")
        ins = _one(tensor_lists, "tensor_list")
        views = _block_views(ins, out, self.world_size, "tensor_list")
        x = np.stack(views) if views else np.empty((0,) + out.shape, out.dtype)
        target = out if out.flags.c_contiguous else np.empty_like(out, order="C")
        self.communicator.reduce_scatter(x, target, op=_op(reducescatter_options))
        if target is not out:
            np.copyto(out, target)

    def send(self, tensors, send_options):
        t = _arg(_one(tensors, "tensor"), "tensor")
        self.communicator.send(_first(t, send_options.n_elements), send_options.dst_rank)

    def recv(self, tensors, recv_options):
        t = _arg(_one(tensors, "tensor"), "tensor")
        self.communicator.recv(_first(t, recv_options.n_elements), recv_options.src_rank)


# -- tensors ---------------------------------------------------------------------------------------------------
def _one(items, name):
    if not isinstance(items, (list, tuple)) or len(items) != 1:
        raise ValueError(f"{name}: pycoll's Ray backend takes one tensor (list) per process, "
                         f"got {type(items).__name__} of {len(items) if isinstance(items, (list, tuple)) else '?'}")
    return items[0]


def _is_torch(t):
    return type(t).__module__.startswith("torch") and hasattr(t, "detach") and hasattr(t, "device")


def _arg(t, name):
    """t as pycoll takes it: NumPy arrays as they are, CPU torch tensors detached (no copy)."""
    if isinstance(t, np.ndarray):
        return t
    if _is_torch(t):
        if t.device.type != "cpu":
            raise TypeError(f"{name}: pycoll's Ray backend takes host memory, got a torch tensor on {t.device}")
        return t.detach()
    raise TypeError(f"{name}: pycoll's Ray backend takes numpy.ndarray or CPU torch.Tensor, got "
                    f"{type(t).__module__}.{type(t).__name__}")


def _as_numpy(t, name):
    """A NumPy view (no copy) of a NumPy array or CPU torch tensor, for the list-shaped collectives."""
    t = _arg(t, name)
    if isinstance(t, np.ndarray):
        return t
    try:
        return t.numpy()
    except (TypeError, RuntimeError) as exc:  # e.g. torch.bfloat16, which NumPy has no dtype for
        raise TypeError(f"{name}: pycoll's Ray backend runs allgather/reducescatter on tensors NumPy can view; "
                        f"{t.dtype}: {exc}") from None


def _block_views(tensors, like, world_size, name):
    if not isinstance(tensors, (list, tuple)) or len(tensors) != world_size:
        raise ValueError(f"{name} must be a list of world_size = {world_size} tensors")
    views = [_as_numpy(t, f"{name}[{i}]") for i, t in enumerate(tensors)]
    for i, v in enumerate(views):
        if v.shape != like.shape or v.dtype != like.dtype:
            raise ValueError(f"{name}[{i}] has shape {v.shape} and dtype {v.dtype}; the tensor has "
                             f"{like.shape} and {like.dtype}")
    return views


def _first(t, n_elements):
    """send/recv with n_elements > 0: the first n elements of t only."""
    if not n_elements:
        return t
    if n_elements < 0:
        raise ValueError(f"n_elements must be >= 0, got {n_elements}")
    return t.reshape(-1)[:n_elements]


def _op(options):
    op = getattr(options, "reduceOp", _types.ReduceOp.SUM)
    try:
        return _OPS[op]
    except (KeyError, TypeError):
        raise ValueError(f"op: pycoll's Ray backend takes ray.util.collective.types.ReduceOp "
                         f"(SUM, PRODUCT, MIN, MAX), got {op!r}") from None


# -- the API ---------------------------------------------------------------------------------------------------
def init_collective_group(world_size, rank, group_name="default", *, timeout=DEFAULT_TIMEOUT, backend="cpu",
                          master_addr=None):
    """Inside a Ray actor: join the collective group `group_name` over pycoll (collective: every rank calls it).

    Afterwards ray.util.collective's calls with this group_name run over pycoll, and get_communicator() returns
    the pycoll Communicator itself. timeout (seconds) bounds the rendezvous and every collective: a dead peer
    shows as pycoll.PeerFailure or pycoll.Timeout. backend: pycoll's ("cpu": shared memory on one host, TCP
    across hosts; "shm" or "tcp" to force one). master_addr: the address rank 0's rendezvous store listens on
    (default: this Ray node's IP)."""
    for arg, value in (("world_size", world_size), ("rank", rank)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{arg} must be an int, got {type(value).__name__}")
    world_size, rank = int(world_size), int(rank)
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, {world_size}), got {rank}")
    if not isinstance(group_name, str) or not group_name:
        raise TypeError(f"group_name must be a non-empty str, got {group_name!r}")
    if not isinstance(backend, str):
        raise TypeError(f"backend must be a str naming a pycoll backend, got {type(backend).__name__}")
    if master_addr is not None and (not isinstance(master_addr, str) or not master_addr):
        raise TypeError(f"master_addr must be a non-empty str or None, got {master_addr!r}")
    from pycoll import plugins
    plugins.get(backend)  # an unknown or unusable pycoll backend: BackendUnavailable here, before any rendezvous
    options = {"timeout": _check_timeout(timeout), "backend": backend, "master_addr": master_addr}
    with _pending_lock:
        _pending_options[group_name] = options
    try:
        _collective.init_collective_group(world_size, rank, backend=BACKEND, group_name=group_name)
    finally:
        with _pending_lock:
            _pending_options.pop(group_name, None)
    return get_group(group_name)


def get_group(group_name="default"):
    """This process's PycollGroup named group_name (ValueError naming it when this process has none)."""
    if not isinstance(group_name, str):
        raise TypeError(f"group_name must be a str, got {type(group_name).__name__}")
    if not _collective.is_group_initialized(group_name):
        raise ValueError(f"group_name: this process has no collective group {group_name!r} "
                         "(call pycoll.ray.init_collective_group first)")
    group = _collective.get_group_handle(group_name)
    if not isinstance(group, PycollGroup):
        raise ValueError(f"group_name: the collective group {group_name!r} runs on Ray backend "
                         f"{type(group).__name__}, not pycoll")
    return group


def get_communicator(group_name="default"):
    """The pycoll Communicator of this process's group group_name: every pycoll collective on the same ranks."""
    return get_group(group_name).communicator


def destroy_collective_group(group_name="default"):
    """Leave the group (collective: every rank calls it, together, as pycoll's close)."""
    get_group(group_name)
    _collective.destroy_collective_group(group_name)


def _register():
    if not _global_registry.is_registered(BACKEND):
        register_collective_backend(BACKEND, PycollGroup)


_register()

__all__ = ["BACKEND", "PycollGroup", "init_collective_group", "get_group", "get_communicator",
           "destroy_collective_group"]

"""The host-memory backends' common base (tcp, shm and cpu are its siblings): the engine over a libpycoll
communicator, and the bootstrap that makes one over the transport each backend chooses."""

from __future__ import annotations

from pycoll import plugins, settings
from pycoll._bindings.comm import FastPath, NativeComm
from pycoll.algorithms import ACCURACIES, ALGORITHMS
from pycoll.dtypes import dtype_id
from pycoll.rendezvous.hosts import Hosts

DTYPE_FLOAT64 = dtype_id("float64")
COST_MODEL_KEY = "pycoll/cost_model"  # rank 0's model in the rendezvous store (float64 values)
# How long close() waits for the other ranks' goodbyes (capped by the communicator's timeout). Ranks normally
# close within milliseconds of each other; one still busy after this is not waited for (it checks this rank's
# goodbye when it closes).
CLOSE_LINGER_S = 5.0


class NativeEngine(plugins.Engine):
    """Engine for backends whose collectives run in libpycoll (native/comm) over a pycoll_p2p_t: each Call
    becomes one pycoll_call_t (NativeComm.run), blocking or queued on the progress thread alike."""

    validates_calls = True  # NativeComm.run's C call checks each call itself

    def __init__(self, native: NativeComm, timeout: float, *, transport=None, hosts=None):
        self.native = native
        self.timeout = timeout
        self.close_linger = min(timeout, CLOSE_LINGER_S)
        self.transport = transport
        self.hosts = hosts

    def fast_path(self, accepted):
        return FastPath(self.native, accepted["ops"], accepted["algorithms"], accepted["accuracies"],
                        accepted["dtypes"], tuple(ALGORITHMS))

    def run(self, call, async_op=False):
        work = self.native.run(call, async_op)
        return work if async_op else self.native.last_algorithm

    def split(self, color, key):
        child = self.native.split(color, key)
        return None if child is None else NativeEngine(child, self.timeout, transport=self.transport)

    def revoke(self):
        self.native.revoke()

    def agree(self, flag, timeout):
        return self.native.agree(flag, timeout)

    def shrink(self, exclude, timeout):
        return NativeEngine(self.native.shrink(exclude, timeout), self.timeout, transport=self.transport)

    @property
    def failed_ranks(self):
        return self.native.failed_ranks

    @property
    def rank(self):
        return self.native.rank

    @property
    def parent_ranks(self):
        return self.native.parent_ranks

    def abort(self):
        self.native.close(0.0)

    def close(self):
        self.native.close(self.close_linger)


class HostBackend(plugins.Backend):
    """What the host-memory backends (tcp, shm, cpu) share: the C bootstrap makes a libpycoll communicator over
    the transport `transport_choice` names, rank 0's cost model for that transport is shared, and the engine is
    a NativeEngine. Each backend declares its name, algorithms, transport choice and cost model."""

    memory = "host"
    accuracies = tuple(ACCURACIES)
    # The C bootstrap finds the hosts itself (pycoll_comm_init_rank): init() does not exchange them first.
    finds_hosts = True
    transport_choice = "tcp"

    def create(self, *, rank, world_size, store, timeout, options):
        from pycoll.bootstrap import create_native, get_unique_id, share_unique_id

        ifname = options.get("ifname") or settings.get("PYCOLL_SOCKET_IFNAME")
        master_addr = options.get("master_addr") or "127.0.0.1"
        unique_id = options.get("unique_id")
        if unique_id is None:
            unique_id = (share_unique_id(store, rank, timeout, master_addr, ifname) if world_size > 1
                         else get_unique_id(ifname, toward=master_addr))
        native = create_native(unique_id, rank, world_size, timeout=timeout, transport=self.transport_choice,
                               ifname=ifname, watch=getattr(store, "watch", None))
        return self._engine(native, rank, world_size, timeout, store)

    def grow(self, engine, unique_id, world_size, *, timeout, ifname=None):
        """The engine of the job grown from engine's members to world_size ranks (pycoll_comm_grow): they keep
        their ranks; unique_id is rank 0's (None elsewhere)."""
        from pycoll.bootstrap import grow_native

        native = grow_native(engine.native, unique_id, world_size, timeout=timeout, transport=self.transport_choice,
                             ifname=ifname or settings.get("PYCOLL_SOCKET_IFNAME"))
        return self._engine(native, native.rank, world_size, timeout, None)

    def _engine(self, native, rank, world_size, timeout, store):
        """The engine over a communicator the bootstrap made, with rank 0's cost model."""
        engine = NativeEngine(native, timeout, transport=native.transport, hosts=Hosts(native.host_of, rank))
        try:
            _share_cost_model(native, rank, world_size, *self.cost_model_for(engine.transport), store=store,
                              timeout=timeout)
        except BaseException:
            native.close(0.0)
            raise
        return engine

    def cost_model_for(self, transport):
        """(backend whose `pycoll tune` model auto uses, the defaults without one) for this transport."""
        return self.name, None


def _share_cost_model(native, rank, world_size, backend, defaults=None, *, store=None, timeout=None):
    """Every rank takes rank 0's measured model for this backend (if any; else `defaults`, a CostModel, if
    given), so that "auto" picks the same algorithm everywhere even when hosts differ. A NaN first value means
    "keep the library's defaults".

    With a rendezvous store it travels through the store, never over the new connections: a rank that leaves
    init first may start its first collective at once, and a failure of that collective (an abort its peers
    send) must reach the slower ranks in that collective, not in a last exchange of init that they are still
    in. Without one (init_rank) it is an internal broadcast."""
    import numpy as np

    from pycoll._bindings.comm import COST_MODEL_LEN
    from pycoll.cost_model import load

    if rank == 0:
        model = load(backend) or defaults
        values = model.as_array() if model else np.full(COST_MODEL_LEN, np.nan)
    else:
        values = np.full(COST_MODEL_LEN, np.nan)
    if world_size > 1 and store is not None:
        if rank == 0:
            store.set(COST_MODEL_KEY, values.tobytes())
        else:
            values = np.frombuffer(store.get(COST_MODEL_KEY, timeout), dtype=np.float64).copy()
            if values.size != COST_MODEL_LEN:
                raise ValueError(f"rank 0 published a cost model of {values.size} values, this rank expects "
                                 f"{COST_MODEL_LEN} (ranks running different pycoll versions?)")
    elif world_size > 1:
        native.broadcast_internal(values.ctypes.data, COST_MODEL_LEN, DTYPE_FLOAT64, 0)
    if not np.isnan(values[0]):
        native.set_cost_model(values)


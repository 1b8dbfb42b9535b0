"""The default backend for host memory: the transport chosen per pair of ranks -- shared memory between the
ranks of one host, TCP between hosts (native/transport/routed_transport.c where a job has both)."""

from __future__ import annotations

from pycoll import plugins
from pycoll.algorithms import ALGORITHMS
from pycoll.plugins.shm import ShmBackend, create_native
from pycoll.plugins.tcp import NativeEngine, TcpBackend, _share_cost_model, connect_sockets

SHM, TCP, ROUTED = "shm", "tcp", "shm+tcp"


class CpuBackend(TcpBackend):
    """Declares what TcpBackend does; create() picks the transport."""

    name = "cpu"
    # "shm" too: it runs where the job is on one host (the shared-memory transport's own collectives); across
    # hosts the communicator refuses it naming the transport (native/comm/communicator.c).
    algorithms = tuple(ALGORITHMS)

    def __init__(self):
        self._shm, self._tcp = ShmBackend(), TcpBackend()

    def transport(self, hosts):
        """What this job runs on: "shm" on one host, "shm+tcp" across hosts where some host has several ranks,
        else (or where shared memory is unusable) "tcp"."""
        if self._shm.probe() is not None:
            return TCP
        if hosts.count == 1:
            return SHM
        return ROUTED if len(hosts.host_of) > hosts.count else TCP

    def create(self, *, rank, world_size, store, timeout, options):
        chosen = self.transport(options["hosts"])
        if chosen == ROUTED:
            engine = _create_routed(rank, world_size, store, timeout, options)
        else:
            backend = self._shm if chosen == SHM else self._tcp
            engine = backend.create(rank=rank, world_size=world_size, store=store, timeout=timeout, options=options)
        engine.transport = chosen
        return engine


def _create_routed(rank, world_size, store, timeout, options):
    """Sockets only to the other hosts' ranks, shared-memory segments only among this host's."""
    hosts = options["hosts"]
    local = hosts.local_ranks
    fds = connect_sockets(rank, world_size, store, timeout, options,
                          reach=[r for r in range(world_size) if r not in local])
    native = create_native(rank, world_size, store, timeout, local_ranks=local, tcp_fds=fds)
    native.set_hosts(hosts.host_of)
    # The model between hosts is TCP's: what `pycoll tune` measured for backend tcp, else the library's.
    _share_cost_model(native, rank, world_size, TCP)
    return NativeEngine(native, timeout)


plugins.register(CpuBackend())

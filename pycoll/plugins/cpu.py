"""The default backend for host memory: shared memory when every rank is on one host, TCP otherwise.

(Choosing per pair of ranks -- shared memory within a host, TCP between hosts -- is not done yet: a job that
spans hosts runs entirely over TCP.)"""

from __future__ import annotations

from pycoll import plugins
from pycoll.algorithms import ALGORITHMS
from pycoll.plugins.shm import ShmBackend
from pycoll.plugins.tcp import TcpBackend


class CpuBackend(TcpBackend):
    """Declares what TcpBackend does; create() picks the transport."""

    name = "cpu"
    # "shm" too: it runs where the job is on one host (the shared-memory transport's own collectives); across
    # hosts the communicator refuses it naming the transport (native/comm/communicator.c).
    algorithms = tuple(ALGORITHMS)

    def __init__(self):
        self._shm, self._tcp = ShmBackend(), TcpBackend()

    def transport(self, hosts):
        """The backend this job runs on: "shm" on one host (where usable), else "tcp"."""
        return "shm" if hosts.count == 1 and self._shm.probe() is None else "tcp"

    def create(self, *, rank, world_size, store, timeout, options):
        chosen = self._shm if self.transport(options["hosts"]) == "shm" else self._tcp
        engine = chosen.create(rank=rank, world_size=world_size, store=store, timeout=timeout, options=options)
        engine.transport = chosen.name
        return engine


plugins.register(CpuBackend())

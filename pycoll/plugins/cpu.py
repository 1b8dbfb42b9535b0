"""The default backend for host memory: the transport chosen per pair of ranks -- shared memory between the
ranks of one host, TCP between hosts (native/transport/routed_transport.c where a job has both). The C bootstrap
(pycoll_comm_init_rank, transport AUTO) finds the hosts and makes the choice, the same on every rank: "shm" on
one host, "shm+tcp" across hosts where some host has several ranks, else -- or where /dev/shm is unusable on
some rank -- "tcp"."""

from __future__ import annotations

from pycoll import plugins
from pycoll.algorithms import ALGORITHMS
from pycoll.plugins.host import HostBackend
from pycoll.plugins.shm import ShmBackend

SHM, TCP, ROUTED = "shm", "tcp", "shm+tcp"


class CpuBackend(HostBackend):
    """The host engine over the transport the bootstrap picks per pair of ranks (engine.transport says which)."""

    name = "cpu"
    # "shm_slots" too: it runs where the job is on one host (the shared-memory transport's own collectives);
    # across hosts the communicator refuses it naming the transport (native/comm/communicator.c).
    algorithms = tuple(ALGORITHMS)
    transport_choice = "auto"

    def cost_model_for(self, transport):
        # On one host, shared memory's model; between hosts TCP's: what `pycoll tune` measured for that backend,
        # else the library's.
        return ShmBackend().cost_model_for(transport) if transport == SHM else (TCP, None)


plugins.register(CpuBackend())

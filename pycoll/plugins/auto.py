"""backend="auto": one communicator across ranks of different memory kinds (host, CUDA, NPU). Each rank names
its kind (init(device=...) or PYCOLL_DEVICE); pycoll.islands forms the islands and runs the collectives across
them. This module only declares the backend."""

from __future__ import annotations

from pycoll import plugins
from pycoll.algorithms import ACCURACIES


class AutoBackend(plugins.Backend):
    name = "auto"
    memory = "host"  # what a rank takes without device= or PYCOLL_DEVICE; each rank's own, once created
    accuracies = tuple(ACCURACIES)
    finds_hosts = True  # its host communicator's bootstrap finds them

    @property
    def communicator_class(self):
        from pycoll.islands.communicator import IslandsCommunicator
        return IslandsCommunicator

    def create(self, *, rank, world_size, store, timeout, options):
        if "unique_id" in options:
            raise ValueError("init_rank creates host-memory communicators; backend 'auto' needs pycoll.init() "
                             "(its islands exchange their vendors' ids through the job's store)")
        from pycoll.islands.engine import IslandsEngine
        return IslandsEngine(rank=rank, world_size=world_size, store=store, timeout=timeout, options=options)

    def for_rank(self, engine):
        """The backend as this rank's communicator checks arguments against it: this rank's memory kind, and
        the dtypes and ops every island offers."""
        view = AutoBackend()
        view.memory, view.dtypes, view.ops = engine.memory, engine.dtypes, engine.ops
        return view


plugins.register(AutoBackend())

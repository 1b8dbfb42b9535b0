"""The Communicator of backend="auto": the usual one, checking each rank's arrays against its own memory kind
and the dtypes and ops every island offers, plus `islands`."""

from __future__ import annotations

from pycoll.comm import Communicator


class IslandsCommunicator(Communicator):
    """A Communicator across islands (pycoll.init(backend="auto")). `islands` (pycoll.islands.Islands) says
    which were formed, the same on every rank."""

    def __init__(self, engine, *, backend, **kwargs):
        super().__init__(engine, backend=backend.for_rank(engine), **kwargs)
        self._islands = engine.islands

    islands = property(lambda self: self._islands, doc="The islands formed (pycoll.islands.Islands): each "
                       "one's backend, memory kind, host and ranks, the same on every rank.")

    @property
    def island(self):
        """This rank's island (pycoll.islands.Island)."""
        return self._islands.of(self.rank)

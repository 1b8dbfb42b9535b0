"""Who is in which island: the ranks of one memory kind on one host. Every rank computes the same description
from the same gathered records (each rank's memory kind, its island's backend and its host), so `comm.islands`
is equal on every rank, and so is every decision taken from it (which collective, dtype and op runs, who leads)."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Island:
    """index: the island's number (islands numbered by their lowest rank); backend: what runs inside it ("cpu",
    "nccl", "hccl"); memory: its ranks' memory kind; host: their host's number (Communicator.hosts numbering);
    ranks: its members' ranks in the whole communicator, ascending; the first is its leader, which takes part in
    the step between islands."""

    index: int
    backend: str
    memory: str
    host: int
    ranks: tuple

    @property
    def leader(self):
        return self.ranks[0]

    @property
    def size(self):
        return len(self.ranks)

    def __str__(self):
        ranks = ",".join(map(str, self.ranks))
        return f"island {self.index}: {self.backend} ({self.memory} memory) on host {self.host}, ranks [{ranks}]"


@dataclasses.dataclass(frozen=True)
class Islands:
    """What backend="auto" formed: `islands` (Island, by index); `refused` maps (collective, dtype name, op name)
    to why some island's vendor refuses it -- refused across the whole job, before the call, on every rank."""

    islands: tuple
    refused: dict = dataclasses.field(default_factory=dict, compare=False)

    def __iter__(self):
        return iter(self.islands)

    def __len__(self):
        return len(self.islands)

    def __getitem__(self, index):
        return self.islands[index]

    def of(self, rank):
        """The island of `rank`."""
        return next(island for island in self.islands if rank in island.ranks)

    @property
    def leaders(self):
        """Each island's leader, by island index."""
        return tuple(island.leader for island in self.islands)

    def __str__(self):
        return "\n".join(map(str, self.islands))


def island_key(island):
    """What makes an island (its host, backend and memory kind): the same before and after a shrink."""
    return island.host, island.backend, island.memory


def form(records):
    """Islands from every rank's (memory kind, backend, host number), in rank order."""
    groups = {}
    for rank, (memory, backend, host) in enumerate(records):
        groups.setdefault((host, backend, memory), []).append(rank)
    ordered = sorted(groups.items(), key=lambda item: item[1][0])
    return Islands(tuple(Island(index, backend, memory, host, tuple(ranks))
                         for index, ((host, backend, memory), ranks) in enumerate(ordered)))

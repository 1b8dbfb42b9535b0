"""Which ranks share a host, found at rendezvous (never from launcher variables).

Two ranks share a host when they can share memory: the same kernel (boot id) and the same IPC and network
namespaces. So containers, and the network namespaces the tests use as hosts, count as separate hosts."""

from __future__ import annotations

import dataclasses

from pycoll.rendezvous.store_gather import gather

HOSTS_KEY = "pycoll/hosts"


def host_identity():
    """This process's host: "boot_id:ipc_ns_inode:net_ns_inode" (unreadable parts as "?"), as the C bootstrap
    computes it (pycoll_host_identity)."""
    from pycoll._bindings.comm import host_identity as native_host_identity

    return native_host_identity()


@dataclasses.dataclass(frozen=True)
class Hosts:
    """host_of[r]: rank r's host number (hosts numbered in order of their lowest rank)."""

    host_of: tuple
    rank: int

    @classmethod
    def from_identities(cls, identities, rank):
        numbers = {}
        return cls(tuple(numbers.setdefault(ident, len(numbers)) for ident in identities), rank)

    @property
    def count(self):
        return len(set(self.host_of))

    @property
    def local_ranks(self):
        """The ranks on this rank's host, in rank order."""
        return [r for r, h in enumerate(self.host_of) if h == self.host_of[self.rank]]

    @property
    def local_rank(self):
        return self.local_ranks.index(self.rank)

    @property
    def local_size(self):
        return len(self.local_ranks)


def exchange(store, rank, world_size, timeout):
    """Every rank's host, through the rendezvous store (store None: a single rank)."""
    ident = host_identity()
    if store is None or world_size == 1:
        return Hosts.from_identities([ident] * world_size, rank)
    values = gather(store, HOSTS_KEY, rank, world_size, ident.encode(), timeout)
    return Hosts.from_identities([v.decode() for v in values], rank)

"""Shrinking a backend="auto" communicator after a lost rank: the survivors' islands, rebuilt over the shrunk host
communicator, with no rendezvous (the job's store may have died with its host).

1. `world` shrinks (an agreement on who is gone, over the connections the survivors have): the survivors, in
   their old order.
2. The islands are formed again from the survivors' records (an island whose every rank died is gone, and its
   leader's place passes to its next rank); each island's host communicator and the leaders' are splits of the
   shrunk `world` (the shared-memory transport's own collectives belong to the original world).
3. A device island's vendor communicator is shrunk by the vendor where every rank of the island loaded a library
   that can (ncclCommShrink: no new id), else created afresh among the island's survivors (HCCL; NCCL before
   2.27), its unique id passed over the island's host communicator instead of the store.
4. Each device island watches its peers again (failures.py), with new sockets.
The crossing model keeps each island's probe, and the refusals stay those of the whole job at init.
"""

from __future__ import annotations

from pycoll.islands.failures import IslandWatch
from pycoll.islands.formation import form
from pycoll.islands.store import HostExchange
from pycoll.objects import all_gather_object


def shrink(old, exclude, timeout):
    """The IslandsEngine of `old`'s survivors (its ranks but the lost and `exclude`), numbered in their order;
    `parent_ranks`: their ranks in `old`. Collective over the survivors."""
    from pycoll.islands.engine import IslandsEngine, _HostCalls

    world = old.world.shrink(exclude, timeout)
    survivors = list(world.parent_ranks)
    rank, size = survivors.index(old.rank), len(survivors)
    formed = form([old.records[r] for r in survivors])
    island = formed.of(rank)
    island_rank = island.ranks.index(rank)
    island_host = world.split(island.index, island_rank)
    leaders = world.split(0 if island_rank == 0 else -1, island.index)
    if old._watch is not None:  # first: its goodbye tells the old peers this rank's exit is no failure
        old._watch.close()
        old._watch = None
    watched = old.memory != "host" and island.size > 1
    watch = IslandWatch(rank) if watched else None
    identities = all_gather_object(_HostCalls(world, size), watch.identity if watched else None)

    new = IslandsEngine.__new__(IslandsEngine)
    new.rank, new.size, new.timeout, new.parent_ranks = rank, size, old.timeout, survivors
    new.world, new.leaders, new._watch, new._broken = world, leaders, watch, False
    new.hosts, new.transport, new.close_linger = None, old.transport, old.close_linger
    new.island, new.island_rank, new.is_leader = island, island_rank, island_rank == 0
    new.memory, new.dtypes, new.ops, new._runtime = old.memory, old.dtypes, old.ops, old._runtime
    new.records, new.probes, new.forced = [old.records[r] for r in survivors], old.probes, old.forced
    new._scratch = new._host_scratch = None
    if old.memory == "host":
        new.inner, new._island_host = island_host, None
    else:
        calls = _HostCalls(island_host, island.size)
        by_vendor = all(all_gather_object(calls, old.inner.can_shrink()))
        lost = [i for i, r in enumerate(old.island.ranks) if r not in survivors]
        new.inner = old.inner.shrunk(lost, HostExchange(calls, island_rank), by_vendor=by_vendor)
        new._island_host = island_host
        new.shrunk_by_vendor = by_vendor
    new.assemble(formed, dict(old.islands.refused))
    if watched:
        watch.start([identities[r] for r in island.ranks if r != rank], new._peer_failed)
    return new

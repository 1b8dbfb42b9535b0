"""gather(): every rank publishes one value in a store and collects everyone's."""

import time

from pycoll.errors import Timeout
from pycoll.rendezvous.store_protocol import check_timeout


def gather(store, prefix, rank, world_size, value, timeout, ranks=None):
    """Every rank publishes ``value`` under ``prefix``; returns all ranks' values in rank order (only those of
    ``ranks``, when given: the ranks taking part, ``rank`` among them). A rank missing after ``timeout`` seconds
    raises Timeout naming it and those that joined."""
    timeout = check_timeout("timeout", timeout)
    ranks = range(world_size) if ranks is None else ranks
    store.set(f"{prefix}/{rank}", value)
    deadline = time.monotonic() + timeout
    values = []
    for r in ranks:
        try:
            values.append(store.get(f"{prefix}/{r}", timeout=max(deadline - time.monotonic(), 0.0)))
        except Timeout:
            joined = [q for q in ranks if store.check(f"{prefix}/{q}")]
            missing = [q for q in ranks if q not in joined]
            raise Timeout(missing_ranks_message(missing, joined, timeout),
                          rank=missing[0] if missing else None) from None
    return values


def missing_ranks_message(missing, present, timeout, failed="did not join", present_label="joined"):
    """ "rank 3 did not join within 60 s; joined: 0, 1, 2"."""
    subject = f"rank {missing[0]}" if len(missing) == 1 else "ranks " + ", ".join(map(str, missing))
    present_text = ", ".join(map(str, present)) if present else "none"
    return f"{subject} {failed} within {timeout:g} s; {present_label}: {present_text}"

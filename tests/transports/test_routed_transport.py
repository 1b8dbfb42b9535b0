"""The routed transport (native/transport/routed_transport.c) in one process: ranks as threads, each a
communicator of pycoll._bindings.testing.over_routed whose shared-memory child maps memfd segments of its "host"
and whose TCP child holds socketpairs to the other hosts' ranks -- no rendezvous, so any host shape, and wrong
wiring, can be built."""

import os
import socket
import threading

import numpy as np
import pytest

from pycoll._bindings import testing
from pycoll._bindings.comm import shm_segment_bytes
from pycoll.buffers import as_buffer
from pycoll.dtypes import OPS
from pycoll.errors import PycollError
from pycoll.plugins import Call

pytestmark = pytest.mark.timeout(60)

RING_BYTES = 4096  # the smallest ring: messages stream through it in many pieces


def _wiring(host_of):
    """Per rank: TCP socket fds to the other hosts' ranks, shared-memory segment fds of its own host's."""
    n = len(host_of)
    socks = [[None] * n for _ in range(n)]
    for a in range(n):
        for b in range(a + 1, n):
            if host_of[a] != host_of[b]:
                sa, sb = socket.socketpair()
                socks[a][b], socks[b][a] = sa.detach(), sb.detach()
    segments = []
    for r in range(n):
        segments.append(os.memfd_create(f"routed-test-{r}", os.MFD_CLOEXEC))
        os.ftruncate(segments[r], shm_segment_bytes(n, RING_BYTES))
    local = [[segments[p] if host_of[p] == host_of[r] else None for p in range(n)] for r in range(n)]
    return socks, local, segments


def _job(host_of, timeout=20.0):
    socks, local, segments = _wiring(host_of)
    try:
        n = len(host_of)
        comms = [testing.over_routed(r, n, socks[r], local[r], [0] * n, RING_BYTES, timeout)
                 for r in range(n)]
    finally:
        for fd in segments:
            os.close(fd)
    for comm in comms:
        testing.set_hosts(comm, list(host_of))
    return comms


def _on_threads(comms, body):
    """body(rank, comm) on one thread per rank; returns each rank's exception (or None)."""
    errors = [None] * len(comms)

    def run(rank):
        try:
            body(rank, comms[rank])
        except Exception as exc:  # noqa: BLE001 -- inspected by the test
            errors[rank] = exc

    threads = [threading.Thread(target=run, args=(r,)) for r in range(len(comms))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads), "a rank hung"
    return errors


@pytest.mark.parametrize("host_of", [(0, 0, 1, 1), (0, 1, 0, 1), (0, 0, 0, 1), (0, 0, 1)])
@pytest.mark.parametrize("algorithm", ["ring", "mesh", "hierarchical", "halving_doubling"])
def test_all_reduce_is_exact_over_any_host_shape(host_of, algorithm):
    comms = _job(host_of)
    n = len(host_of)
    count = 10007  # 80 KB: twenty times the ring
    results = [np.empty(count, np.int64) for _ in range(n)]

    def body(rank, comm):
        x = np.arange(count, dtype=np.int64) * (rank + 1)
        comm.run(Call("all_reduce", as_buffer(x), as_buffer(results[rank]), op=OPS["sum"], algorithm=algorithm))
        comm.close(1.0)

    assert _on_threads(comms, body) == [None] * n
    want = np.arange(count, dtype=np.int64) * (n * (n + 1) // 2)
    for r in range(n):
        assert np.array_equal(results[r], want), r


def test_a_rank_no_child_reaches_is_a_clear_error_not_a_hang():
    """Rank 1 wired to neither child of rank 0 (no socket, no segment): posting to it names it at once."""
    segment = os.memfd_create("routed-test", os.MFD_CLOEXEC)
    os.ftruncate(segment, shm_segment_bytes(2, RING_BYTES))
    try:
        comm = testing.over_routed(0, 2, [None, None], [segment, None], [0, 0], RING_BYTES, 5.0)
    finally:
        os.close(segment)
    x = np.ones(4, np.float32)
    with pytest.raises(ValueError, match="rank 1 is not reachable over the tcp transport of rank 0"):
        comm.run(Call("all_reduce", as_buffer(x), as_buffer(x), op=OPS["sum"], algorithm="ring"))


def test_sockets_are_closed_when_the_transport_cannot_be_made():
    """over_routed owns the sockets in every case: a bad ring size fails it, and closes them."""
    mine, theirs = socket.socketpair()
    segment = os.memfd_create("routed-test", os.MFD_CLOEXEC)
    fd = mine.detach()
    theirs.settimeout(5.0)  # an open socket would block the recv below: fail, never hang
    try:
        with pytest.raises(PycollError, match="ring size must be a power of two"):
            testing.over_routed(0, 2, [None, fd], [segment, None], [0, 0], 1000, 5.0)
        assert theirs.recv(1) == b""  # the other end sees the close
    finally:
        os.close(segment)
        theirs.close()


def test_auto_follows_a_new_cost_model_and_host_map_between_calls():
    # The communicator remembers its decisions (native/comm/decision_cache.c): a new cost model or host map must
    # change what the same call runs next, on every rank alike.
    from pycoll import cost_model

    comms = _job((0, 0, 1, 1))
    count = 4096
    latency_bound = cost_model.CostModel(1.0, 1e-15, 1e-15)  # messages dominate: the fewest steps win
    bandwidth_bound = cost_model.CostModel(1e-12, 1e-9, 1e-9)  # bytes dominate: the ring's share wins
    seen = [[] for _ in comms]

    def body(rank, comm):
        def all_reduce():
            x = np.full(count, rank + 1, np.int64)
            comm.run(Call("all_reduce", as_buffer(x), as_buffer(x), op=OPS["sum"]))
            assert (x == 10).all()
            seen[rank].append(comm.last_algorithm)

        comm.set_cost_model(latency_bound.as_array())
        all_reduce()
        all_reduce()
        comm.set_cost_model(bandwidth_bound.as_array())
        all_reduce()
        testing.set_hosts(comm, [0, 0, 0, 0])  # one host now: nothing for hierarchical to save
        all_reduce()
        comm.close(1.0)

    assert _on_threads(comms, body) == [None] * 4
    assert all(s == seen[0] for s in seen), seen
    assert seen[0] == ["recursive_doubling", "recursive_doubling", "hierarchical", "ring"]

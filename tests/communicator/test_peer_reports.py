"""What a rank reports to the others is its word, not theirs: a peer's own failure (its bad argument, memory,
OS call) is a PeerFailure naming it on every other rank, never their ValueError or MemoryError; an abort or
state frame naming a rank outside the job is refused as corrupt, blaming its sender. Real processes over TCP
and shared memory, forged shared-memory aborts (tests/scripts/shm_fault_worker.py), and forged TCP frames
written into a communicator's sockets."""

import socket
import struct

import pytest
from multiproc import Ranks

import pycoll
from pycoll._bindings import testing
from pycoll.plugins import Call

FRAME = struct.Struct("<IIqii40s40s")  # native/transport/frame.h: pycoll_frame_header_t
MAGIC, DATA, ABORT, STATE = 0x50434C31, 1, 2, 4
ERR_INVALID, ERR_SYSTEM, ERR_NOMEM = 1, 6, 8


@pytest.mark.timeout(60)
@pytest.mark.parametrize("backend", ["tcp", "shm"])
def test_a_rank_that_fails_with_a_bad_argument_is_a_peer_failure_elsewhere(backend):
    """Rank 1's pairwise all-to-all gets one buffer as both send and receive buffer: rank 1 raises its
    ValueError; ranks 0 and 2, in the same all-to-all, raise PeerFailure naming rank 1 and what it reported
    (they raised ValueError for rank 1's argument)."""
    with Ranks(3, "peer_report_worker.py", "bad_argument", env={"PYCOLL_BACKEND": backend}, timeout=10) as ranks:
        reports = ranks.reports()
    assert reports[1].get("error") == "ValueError" and "overlap" in reports[1]["message"], reports[1]
    for r in (0, 2):
        rep = reports[r]
        assert rep.get("error") == "PeerFailure" and rep["failed_rank"] == 1, (r, rep)
        assert "rank 1 failed: invalid argument there:" in rep["message"] and "overlap" in rep["message"], rep


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("status", "failed_rank", "says"), [
    (ERR_NOMEM, -1, "rank 1 failed: out of memory there: forged by rank 1"),
    (ERR_SYSTEM, 0, "rank 0 failed: system error there: forged by rank 1 (reported by rank 1)"),
    (99, -1, "rank 1 failed: aborted there: forged by rank 1"),
    (ERR_INVALID, 7, "rank 1 sent a corrupt abort naming rank 7"),
    (ERR_INVALID, -5, "rank 1 sent a corrupt abort naming rank -5"),
])
def test_forged_shared_memory_abort_is_a_peer_failure(status, failed_rank, says):
    """Rank 1 marks its rings aborted with a status and failed rank of its choosing: the others raise
    PeerFailure (never MemoryError or OSError for rank 1's claim), and a failed rank outside 0..2 is refused
    as corrupt, naming rank 1."""
    env = {"PYCOLL_BACKEND": "shm", "TEST_STATUS": str(status), "TEST_FAILED_RANK": str(failed_rank)}
    with Ranks(3, "shm_fault_worker.py", "forge", env=env, timeout=10) as ranks:
        reports = ranks.reports()
    for r in (0, 2):
        rep = reports[r]
        assert rep.get("error") == "PeerFailure", (r, rep)
        assert says in rep["message"], (r, rep)
        assert rep["failed_rank"] == (failed_rank if 0 <= failed_rank < 3 else 1), (r, rep)


def _rank0_with_impostors():
    """Rank 0 of a 3-rank TCP communicator whose peers are sockets this test holds."""
    pairs = [socket.socketpair() for _ in range(2)]
    comm = testing.over_tcp(0, 3, [None, pairs[0][0].detach(), pairs[1][0].detach()], 3.0)
    return comm, [b for _, b in pairs]


def _frame(kind, tag, nbytes, failed_rank):
    return FRAME.pack(MAGIC, tag, nbytes, kind, failed_rank, bytes(40), bytes(40))


@pytest.mark.timeout(30)
@pytest.mark.parametrize(("frame", "says", "blamed"), [
    (_frame(ABORT, ERR_INVALID, 5, -1) + b"bogus", "rank 1 failed: invalid argument there: bogus", 1),
    (_frame(ABORT, ERR_NOMEM, 5, 2) + b"bogus", "rank 2 failed: out of memory there: bogus (reported by rank 1)",
     2),
    (_frame(ABORT, ERR_INVALID, 5, 3) + b"bogus", "rank 1 sent a corrupt abort naming rank 3", 1),
    (_frame(ABORT, 4, 5, 1 << 30) + b"bogus", "rank 1 sent a corrupt abort naming rank 1073741824", 1),
    (_frame(STATE, 0, 0, 1000), "rank 1 sent a corrupt state frame naming rank 1000", 1),
    (_frame(STATE, 0, 0, -2), "rank 1 sent a corrupt state frame naming rank -2", 1),
])
def test_forged_tcp_frame_is_a_peer_failure_naming_its_sender(frame, says, blamed):
    """Rank 1's socket delivers an abort or state frame of its choosing while rank 0 is in a barrier: a status
    of rank 1's own becomes PeerFailure naming it; a rank outside 0..2 is refused as corrupt."""
    comm, impostors = _rank0_with_impostors()
    try:
        impostors[0].sendall(frame)
        with pytest.raises(pycoll.PeerFailure) as caught:
            comm.run(Call("barrier"))
        assert says in str(caught.value) and caught.value.rank == blamed, caught.value
    finally:
        comm.close()
        for s in impostors:
            s.close()

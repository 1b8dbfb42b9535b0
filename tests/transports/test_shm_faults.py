"""Faults only shared memory has, with real processes on one host: a peer that leaves quietly (closes its
communicator, exits, os._exit) while the others wait in a collective, and a peer that writes values into the
shared segments that no rank could have written (tests/scripts/shm_fault_worker.py finds the fields from
inside a rank through /proc/self/maps and native/transport/shm_layout.h). Every survivor must raise a typed
pycoll error naming the culprit, promptly: never crash, never wait out the deadline."""

import pytest
from multiproc import Ranks

DEADLINE_S = 10  # each collective's timeout: a detection must come long before it


def _ranks(n, scenario, env, timeout=DEADLINE_S):
    return Ranks(n, "shm_fault_worker.py", scenario, env=dict(env, PYCOLL_BACKEND="shm"), timeout=timeout)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("algorithm", ["shm_slots", "ring"])
@pytest.mark.parametrize("how", ["close", "exit", "os_exit"])
def test_peer_that_leaves_while_the_others_wait_is_named_within_a_second(how, algorithm):
    """Rank 2 of 3 leaves 0.3 s after the others entered an all-reduce: each survivor raises PeerFailure
    naming it. The latency (from just before it left to the survivor's error) is typically 10-20 ms here;
    under 1 s is asserted so that a loaded machine does not fail the test, and far from the 10 s deadline."""
    with _ranks(3, "leave", {"TEST_HOW": how, "TEST_ALGORITHM": algorithm}) as ranks:
        reports = ranks.reports()
    left_at = reports[2]["left_at"]
    for r in (0, 1):
        rep = reports[r]
        assert rep.get("error") == "PeerFailure", (r, rep)
        assert rep["failed_rank"] == 2 and "rank 2" in rep["message"], rep
        latency = rep["noticed_at"] - left_at
        assert 0 <= latency < 1.0, (latency, rep)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("algorithm", ["shm_slots", "ring"])
def test_collective_after_a_peer_closed_fails_at_once(algorithm):
    """The survivors enter the all-reduce 0.3 s after rank 2 closed: PeerFailure at once."""
    with _ranks(3, "leave", {"TEST_HOW": "close", "TEST_ALGORITHM": algorithm, "TEST_ORDER": "after"}) as ranks:
        reports = ranks.reports()
    for r in (0, 1):
        rep = reports[r]
        assert rep.get("error") == "PeerFailure" and rep["failed_rank"] == 2, (r, rep)
        assert rep["noticed_at"] - rep["called_at"] < 1.0, rep


@pytest.mark.timeout(60)
def test_ring_tail_far_past_the_head_is_a_peer_failure_not_a_crash():
    """Rank 1 publishes, for the ring rank 0 writes into, a tail 2^40 bytes past the head; rank 0 then sends it
    1 MiB through a 64 KiB ring. Trusting that tail, rank 0 copied the whole message past the ring's end."""
    env = {"TEST_FIELD": "ring_tail", "TEST_ALGORITHM": "ring", "TEST_COUNT": str(1 << 18),
           "PYCOLL_SHM_RING_BYTES": "65536"}
    with _ranks(2, "poke", env) as ranks:
        reports = ranks.reports()
    for r, rep in reports.items():
        assert rep.get("error") == "PeerFailure" and rep["failed_rank"] == 1, (r, rep)
        assert rep["elapsed"] < DEADLINE_S, rep
    assert "rank 1 wrote a corrupt ring index" in reports[0]["message"], reports[0]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("count", [16, 300_000])  # the one-round path and the two-phase rounds
def test_posted_flag_of_a_round_never_reached_is_a_peer_failure(count):
    """Rank 1's posted flags claim round 2^40 + 7 while it sleeps: the others must neither read its slot nor
    blame a disagreement (they took the stale descriptor beside the flag for rank 1's call: a MismatchError
    naming a collective it never made), but name rank 1."""
    env = {"TEST_FIELD": "posted", "TEST_ALGORITHM": "shm_slots", "TEST_COUNT": str(count)}
    with _ranks(3, "poke", env) as ranks:
        reports = ranks.reports()
    for r, rep in reports.items():
        assert rep.get("error") == "PeerFailure" and rep["failed_rank"] == 1, (r, rep)
    assert all("rank 1 wrote a corrupt round number" in reports[r]["message"] for r in (0, 2)), reports


def _fuzz(family, seed, fuzz_s):
    env = {"TEST_FIELDS": family, "TEST_SEED": str(seed), "TEST_FUZZ_S": str(fuzz_s),
           "PYCOLL_SHM_RING_BYTES": "65536"}
    deadline = 3.0
    with _ranks(3, "fuzz", env, timeout=deadline) as ranks:
        reports = ranks.reports(deadline_s=60)  # asserts every rank exited 0: no crash
    for r, rep in reports.items():
        # Start-up, the fuzzing time, at most one collective's deadline, then the error travelling.
        assert rep["elapsed"] < 10 + fuzz_s + deadline, (r, rep)
        assert rep.get("typed"), (r, rep)  # a pycoll error: PeerFailure, MismatchError or Timeout
    return reports


@pytest.mark.timeout(90)
@pytest.mark.parametrize("family", ["ring_index", "ring_closed", "coll_flags"])
def test_random_values_in_shared_fields_end_in_a_typed_error_on_every_rank(family):
    """Rank 1 writes random values (anything, near the current value, extremes) into every field of a family
    about every 0.5 ms while all ranks run native and ring collectives: every rank ends with a pycoll error."""
    reports = _fuzz(family, seed=1, fuzz_s=1.5)
    assert reports[1]["writes"] > 0, reports[1]


@pytest.mark.timeout(90)
def test_random_bytes_in_unread_frames_never_crash_or_hang():
    """Random bytes at the unread front of the rings (frame headers and payload) end in a pycoll error on every
    rank. (A payload byte changed is not detectable: ranks of one job trust each other's data.)"""
    reports = _fuzz("ring_data", seed=2, fuzz_s=1.5)
    assert reports[1]["writes"] > 0, reports[1]


@pytest.mark.stress
@pytest.mark.timeout(600)
@pytest.mark.parametrize("seed", range(3, 13))
@pytest.mark.parametrize("family", ["ring_index", "ring_closed", "coll_flags", "ring_data"])
def test_fuzz_shared_fields_many_seeds(family, seed):
    _fuzz(family, seed=seed, fuzz_s=3.0)

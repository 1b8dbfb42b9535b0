"""The TCP backend end to end: real processes on 127.0.0.1, correct results, faults with deadlines,
mismatches, and a communicator that refuses work after an error."""

import pytest
import transport_faults as faults
from multiproc import Ranks


@pytest.fixture(autouse=True)
def tcp_backend(monkeypatch):
    """These tests are about the TCP transport: backend="cpu", the default, would pick shared memory here.
    (test_comm_shm.py runs transport_faults.py's scenarios over shared memory with its own fixture.)"""
    monkeypatch.setenv("PYCOLL_BACKEND", "tcp")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_collectives_are_exact_across_processes(n):
    with Ranks(n, "comm_worker.py", "collectives") as ranks:
        reports = ranks.reports()
    for r, rep in reports.items():
        assert rep.get("ok"), rep


@pytest.mark.timeout(120)
def test_segment_size_from_the_environment_reaches_each_communicator():
    """PYCOLL_RING_SEGMENT_BYTES and PYCOLL_SPIN_US are read in Python when the communicator is created and
    handed to it as options; 64-byte segments over real sockets stay exact."""
    env = {"PYCOLL_RING_SEGMENT_BYTES": "64", "PYCOLL_SPIN_US": "50"}
    with Ranks(3, "comm_worker.py", "collectives", env=env) as ranks:
        reports = ranks.reports()
    for r, rep in reports.items():
        assert rep.get("ok"), rep
        assert rep["options"]["segment_bytes"] == 64 and rep["options"]["spin_ns"] == 50000, rep


ROOTS_THEN = [("0,1", "next"), ("0,1", "close"), ("0,0,1,1", "next"), ("0,0,1,1", "close"), ("0,2,0", "close")]


def _root_case(i, collective, roots, then, count):
    """Every disagreement of roots, both collectives, at 4 elements; with no message at all (0: only the
    history differs) and with a streamed one (300,000), each disagreement once, the collectives alternating. The
    rest of the cross product runs under -m stress."""
    case = (collective, roots, then, count)
    default = count == 4 or (collective == "broadcast") == (i % 2 == (count == 0))
    return case if default else pytest.param(*case, marks=pytest.mark.stress)


# The scenarios every transport runs alike (transport_faults.py), here over TCP.
test_mismatch_is_reported_on_every_rank, test_ranks_that_disagree_on_the_root_all_raise_mismatch = (
    faults.mismatch_tests(["count", "dtype", "op", "algorithm", "collective"],
                          [_root_case(i, collective, roots, then, count) for count in [0, 4, 300_000]
                           for i, (roots, then) in enumerate(ROOTS_THEN) for collective in ["broadcast", "reduce"]]))
(test_close_waits_for_a_slow_rank_at_most_the_linger, test_stopped_peer_makes_the_others_time_out_at_the_deadline,
 test_peer_that_closes_its_communicator_is_named_quickly, test_ctrl_c_interrupts_a_blocked_collective_promptly) = (
    faults.scenario_tests())


@pytest.mark.timeout(60)
@pytest.mark.parametrize("algorithm", ["ring", "mesh"])
def test_killed_peer_is_reported_by_every_rank_within_2s(algorithm):
    faults.check_killed_peer_is_reported_by_every_rank_within_2s(2, 4, env={"TEST_ALGORITHM": algorithm})


@pytest.mark.timeout(60)
def test_shared_secret_lets_the_job_run():
    with Ranks(3, "comm_worker.py", "collectives", env={"PYCOLL_SECRET": "s3cret"}) as ranks:
        reports = ranks.reports()
    assert all(rep.get("ok") for rep in reports.values()), reports


@pytest.mark.timeout(60)
@pytest.mark.parametrize("bad_secret", ["wrong", ""])
def test_rank_with_the_wrong_secret_is_refused_and_named(bad_secret):
    # Every rank learns it within 2 s (not at the 30 s deadline) as pycoll.AuthenticationError naming rank 2.
    with Ranks(3, "comm_worker.py", "collectives", timeout=30,
               rank_env=lambda r: {"PYCOLL_SECRET": bad_secret if r == 2 else "s3cret"}) as ranks:
        reports = ranks.reports()
    assert "authentication failed" in reports[2]["message"], reports[2]
    for r, rep in reports.items():
        assert rep["error"] == "AuthenticationError", (r, rep)
        assert "rank 2" in rep["message"], rep
        assert rep["elapsed"] < 2.0 + 3.0, rep  # includes the start of the other ranks

"""Per-pair transports end to end on one machine: real processes whose hosts are faked (comm_worker.py's
TEST_RANKS_PER_FAKE_HOST: consecutive ranks share a "host"), so the default backend runs shared memory within
each host and TCP between them in one job (native/transport/routed_transport.c) -- everything the production
path does except the network namespaces of test_multihost_netns.py. The fault and mismatch scenarios are
transport_faults.py's: across the two transports they must behave exactly as over one."""

import pytest
import transport_faults as faults
from multiproc import Ranks

RANKS_PER_HOST = 2


@pytest.fixture(autouse=True)
def routed_job(monkeypatch):
    monkeypatch.delenv("PYCOLL_BACKEND", raising=False)  # the default, cpu, chooses per pair of ranks
    monkeypatch.setenv("TEST_RANKS_PER_FAKE_HOST", str(RANKS_PER_HOST))


def _check_placement(reports, n):
    for r, rep in reports.items():
        assert rep.get("ok"), rep
        local_size = min(RANKS_PER_HOST, n - r // RANKS_PER_HOST * RANKS_PER_HOST)
        assert (rep["backend"], rep["transport"], rep["hosts"], rep["local_rank"], rep["local_size"]) == (
            "cpu", "shm+tcp", -(-n // RANKS_PER_HOST), r % RANKS_PER_HOST, local_size), rep


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [3, 4])
def test_every_collective_is_exact_over_shared_memory_and_tcp_at_once(n, no_segment_left):
    """3 ranks: hosts of two and one; 4: two of two. 64 KiB rings and a 800 KB message stream in pieces."""
    env = {"PYCOLL_SHM_RING_BYTES": "65536", "TEST_BIG_COUNT": "100003"}
    with Ranks(n, "comm_worker.py", "matrix", env=env, timeout=60) as ranks:
        reports = ranks.reports(deadline_s=100)
    _check_placement(reports, n)
    assert len({rep["digest"] for rep in reports.values()}) == 1, "float results differ between ranks"


@pytest.mark.timeout(120)
def test_the_hierarchical_pipeline_is_exact_over_shared_memory_and_tcp(no_segment_left):
    """4 KiB segments make the 800 KB message 48 chunks of the hierarchical all-reduce's pipeline (a chunk is a
    segment times the ranks): chunks cross TCP while others are reduced and gathered over shared memory, in and
    out of place."""
    env = {"PYCOLL_SHM_RING_BYTES": "65536", "TEST_BIG_COUNT": "100003", "PYCOLL_RING_SEGMENT_BYTES": "4096"}
    with Ranks(4, "comm_worker.py", "matrix", env=env, timeout=60) as ranks:
        reports = ranks.reports(deadline_s=100)
    _check_placement(reports, 4)
    assert len({rep["digest"] for rep in reports.values()}) == 1, "float results differ between ranks"

@pytest.mark.timeout(120)
def test_hierarchical_runs_its_host_phases_over_shared_memory(no_segment_left):
    """Rank values 2^24, 1, -2^24, 1 in fast float32 sum to 1 only when each host sums first (2^24 + 1 rounds
    to 2^24, -2^24 + 1 is exact, their sum 1); a ring over the four ranks gives 2 on some elements. So the
    host map reached the schedule, whose phases then ran over the two transports."""
    with Ranks(4, "comm_worker.py", "hierarchical", env={"TEST_ORDER_SUM": "1"}, timeout=60) as ranks:
        reports = ranks.reports(deadline_s=100)
    _check_placement(reports, 4)
    assert len({rep["digest"] for rep in reports.values()}) == 1, "float results differ between ranks"
    assert "hierarchical" in reports[0]["ran"], reports[0]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("algorithm", ["ring", "mesh", "hierarchical"])
def test_killed_peer_is_named_by_local_and_remote_ranks_within_2s(algorithm, no_segment_left):
    """Rank 2 is killed: rank 3 shares its host (shared memory, pidfd), ranks 0 and 1 reach it over TCP. The
    hierarchical all-reduce with 4 KiB segments runs its pipeline (16 chunks of the 256 KiB message)."""
    env = {"TEST_ALGORITHM": algorithm}
    if algorithm == "hierarchical":
        env["PYCOLL_RING_SEGMENT_BYTES"] = "4096"
    faults.check_killed_peer_is_reported_by_every_rank_within_2s(2, 4, env=env)


# Two hosts of two ranks: every root case spans both transports.
test_mismatch_is_reported_on_every_rank, test_ranks_that_disagree_on_the_root_all_raise_mismatch = (
    faults.mismatch_tests(["count", "collective"],
                          [("broadcast", "0,0,1,1", "next", 4), ("reduce", "0,0,1,1", "close", 0),
                           ("reduce", "0,2,0", "close", 300_000)]))


@pytest.mark.timeout(60)
def test_ctrl_c_interrupts_a_collective_blocked_on_both_transports():
    """Rank 0 waits for rank 1 (shared memory) and rank 2 (TCP), which join much later."""
    assert faults.interrupt_a_blocked_rank(3)["transport"] == "shm+tcp"


# The scenarios of 3 or 4 ranks that every transport runs alike (transport_faults.py), here over both at once
# (routed_job above applies to every test of this module).
(test_close_waits_for_a_slow_rank_at_most_the_linger, test_stopped_peer_makes_the_others_time_out_at_the_deadline,
 test_peer_that_closes_its_communicator_is_named_quickly, _) = faults.scenario_tests()  # its own Ctrl-C test above

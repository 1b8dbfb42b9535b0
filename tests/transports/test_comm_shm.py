"""The shared-memory transport end to end: real processes on one host over backend="shm" (and "cpu", the
default, which picks it there). The fault and mismatch scenarios are transport_faults.py's, run over shared
memory: they must behave exactly as over TCP. Plus what only shared memory has: rings smaller than a message,
and segments that never outlive the job in /dev/shm."""

import pytest
import transport_faults as faults
from multiproc import Ranks


@pytest.fixture(autouse=True)
def shm_backend(monkeypatch):
    monkeypatch.setenv("PYCOLL_BACKEND", "shm")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_every_collective_algorithm_and_accuracy_is_exact_and_identical_on_every_rank(n, no_segment_left):
    """64 KiB rings and a 800 KB message: every message larger than the ring streams through it in pieces."""
    env = {"PYCOLL_SHM_RING_BYTES": "65536", "TEST_BIG_COUNT": "100003"}
    with Ranks(n, "comm_worker.py", "matrix", env=env, timeout=60) as ranks:
        reports = ranks.reports()
    for r, rep in reports.items():
        assert rep.get("ok"), rep
        assert (rep["backend"], rep["hosts"], rep["local_rank"], rep["local_size"]) == ("shm", 1, r, n), rep
    assert len({rep["digest"] for rep in reports.values()}) == 1, reports


@pytest.mark.timeout(60)
def test_default_backend_is_cpu_and_runs_over_shared_memory_with_a_message_larger_than_the_ring(monkeypatch):
    monkeypatch.delenv("PYCOLL_BACKEND")
    with Ranks(2, "comm_worker.py", "auto", env={"TEST_COUNT": str(3 << 20)}) as ranks:  # 12 MiB, ring 4 MiB
        reports = ranks.reports()
    for rep in reports.values():
        assert rep.get("ok"), rep
        assert (rep["backend"], rep["transport"], rep["hosts"], rep["local_size"]) == ("cpu", "shm", 1, 2), rep


@pytest.mark.timeout(60)
def test_spin_option_reaches_the_transport():
    with Ranks(2, "comm_worker.py", "auto", env={"PYCOLL_SPIN_US": "50", "TEST_COUNT": "1000"}) as ranks:
        reports = ranks.reports()
    assert all(rep.get("ok") and rep["options"]["spin_ns"] == 50000 for rep in reports.values()), reports


# The scenarios every transport runs alike (transport_faults.py), here over shared memory (shm_backend above).
test_mismatch_is_reported_on_every_rank, test_ranks_that_disagree_on_the_root_all_raise_mismatch = (
    faults.mismatch_tests(["count", "collective"],
                          [("broadcast", "0,1", "next", 4), ("reduce", "0,0,1,1", "close", 0),
                           ("reduce", "0,2,0", "close", 300_000)]))
(test_close_waits_for_a_slow_rank_at_most_the_linger, test_stopped_peer_makes_the_others_time_out_at_the_deadline,
 test_peer_that_closes_its_communicator_is_named_quickly, test_ctrl_c_interrupts_a_blocked_collective_promptly) = (
    faults.scenario_tests())


@pytest.mark.timeout(60)
@pytest.mark.parametrize("algorithm", ["ring", "mesh"])
def test_killed_peer_is_reported_by_every_rank_within_2s_and_leaves_no_segment(algorithm, no_segment_left):
    faults.check_killed_peer_is_reported_by_every_rank_within_2s(2, 4, env={"TEST_ALGORITHM": algorithm})

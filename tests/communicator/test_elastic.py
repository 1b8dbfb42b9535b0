"""Surviving a lost rank (docs/fault_tolerance.md), with real processes over TCP and shared memory: a rank
killed (kill -9) mid all-reduce -- rank 0 (the store's host), a middle one, the last -- and the survivors
shrink and go on with the right sum; a revoke wakes the ranks waiting in a collective; agree with a dead rank;
exclude= leaves a healthy rank out. Times from the kill to the survivors' next result are printed (run with
-s to see them), not asserted."""


import pytest
from multiproc import Ranks, backend_fixture, kill_mid_loop, survivor_sum

backend = backend_fixture(["tcp", "shm"])
N = 4


@pytest.mark.timeout(60)
@pytest.mark.parametrize("victim", [0, 1, N - 1])
def test_killed_rank_the_survivors_shrink_and_all_reduce(backend, victim, no_segment_left):
    with Ranks(N, "elastic_worker.py", "kill", timeout=10) as job:
        killed_at, reports = kill_mid_loop(job, N, victim)
    survivors = [r for r in range(N) if r != victim]
    for r, rep in reports.items():
        assert rep.get("ok"), (r, rep)
        assert rep["failed_rank"] == victim, (r, rep)
        assert rep["sum"] == survivor_sum(N, {victim}), (r, rep)
        assert rep["ranks"] == survivors and rep["new_rank"] == survivors.index(r), (r, rep)
        assert rep["failed_ranks"] == [victim], (r, rep)
        assert "unusable" in rep.get("old", ""), (r, rep)  # the old communicator refuses collectives
    caught = max(rep["caught"] for rep in reports.values()) - killed_at
    recovered = max(rep["done"] for rep in reports.values()) - killed_at
    print(f"\n{backend}, rank {victim} killed: every survivor caught PeerFailure after {caught * 1e3:.1f} ms, had "
          f"shrunk and all-reduced after {recovered * 1e3:.1f} ms")


@pytest.mark.timeout(60)
def test_revoke_wakes_the_ranks_waiting_in_a_collective(backend, no_segment_left):
    with Ranks(N, "elastic_worker.py", "revoke", timeout=10) as job:
        reports = job.reports(deadline_s=40)
    revoked_at = reports[1]["revoked_at"]
    for r, rep in reports.items():
        assert rep.get("ok"), (r, rep)
        assert "revoked" in rep.get("revoked", ""), (r, rep)
        assert rep["sum"] == survivor_sum(N, set()) and rep["ranks"] == list(range(N)), (r, rep)
        assert rep["failed_ranks"] == [], (r, rep)
        assert rep["async_sum"] == survivor_sum(N, set()), (r, rep)
        assert rep["split_sum"] == sum(q + 1.0 for q in range(N) if q % 2 == r % 2), (r, rep)
    woke = max(rep["raised_at"] for r, rep in reports.items() if r != 1) - revoked_at
    print(f"\n{backend}: the ranks waiting in an all-reduce raised CommunicatorRevoked {woke * 1e3:.1f} ms after "
          "the revoke")


@pytest.mark.timeout(60)
def test_revoke_from_another_thread_wakes_its_own_rank_too(backend, no_segment_left):
    """A watchdog thread revokes while its rank's main thread waits in an all-reduce: that thread and the other
    ranks raise CommunicatorRevoked (the late rank as it enters), and all of them shrink."""
    with Ranks(N, "elastic_worker.py", "revoke_thread", timeout=10) as job:
        reports = job.reports(deadline_s=40)
    revoked_at = reports[1]["revoked_at"]
    for r, rep in reports.items():
        assert rep.get("ok") and "revoked" in rep.get("revoked", ""), (r, rep)
        assert rep["sum"] == survivor_sum(N, set()) and rep["ranks"] == list(range(N)), (r, rep)
    woke = max(reports[r]["raised_at"] for r in (0, 1, 2)) - revoked_at
    print(f"\n{backend}: revoked from a thread of a rank inside an all-reduce: the ranks in it raised "
          f"CommunicatorRevoked {woke * 1e3:.1f} ms after the revoke")


@pytest.mark.timeout(60)
def test_agree_leaves_the_dead_rank_out(backend, no_segment_left):
    with Ranks(N, "elastic_worker.py", "agree", timeout=10) as job:
        reports = job.reports([0, 1, 3], deadline_s=40)
    for r, rep in reports.items():
        assert rep.get("ok"), (r, rep)
        assert rep["healthy"] == 0 and rep["still"] == survivor_sum(N, set()), (r, rep)
        assert rep["flag"] == 0b1110, (r, rep)  # rank 0's flag AND the others' (rank 2's never counted)
        assert rep["failed_ranks"] == [2], (r, rep)
        assert rep["sum"] == survivor_sum(N, {2}) and rep["ranks"] == [0, 1, 3], (r, rep)


@pytest.mark.timeout(60)
def test_exclude_leaves_a_healthy_rank_out(backend, no_segment_left):
    with Ranks(N, "elastic_worker.py", "exclude", timeout=10) as job:
        reports = job.reports(deadline_s=40)
    assert reports[3].get("cut"), reports[3]  # rank 3 learns it was left out: PeerFailure, not a hang
    for r in range(3):
        rep = reports[r]
        assert rep.get("ok"), (r, rep)
        assert rep["sum"] == survivor_sum(N, {3}) and rep["ranks"] == [0, 1, 2], (r, rep)
        assert rep["failed_ranks"] == [3], (r, rep)
        assert "unusable" in rep.get("old", ""), (r, rep)


@pytest.mark.timeout(60)
def test_a_forged_epoch_in_shared_memory_is_a_peer_failure(no_segment_left):
    """Rank 1 claims, in the rings it writes, a new epoch starting 2^40 bytes ahead: the others neither skip
    past the ring nor wait, but raise PeerFailure naming rank 1."""
    with Ranks(3, "elastic_worker.py", "forge_epoch", env={"PYCOLL_BACKEND": "shm"}, timeout=10) as job:
        reports = job.reports(deadline_s=40)
    for r in (0, 2):
        rep = reports[r]
        assert rep.get("error") == "PeerFailure" and rep["failed_rank"] == 1, (r, rep)
        assert "rank 1 wrote a corrupt ring index" in rep["message"], (r, rep)


@pytest.mark.timeout(60)
def test_the_documented_training_loop_carries_on_with_equal_weights(backend, no_segment_left):
    """docs/fault_tolerance.md's loop, a rank killed in the middle: every survivor ends at the last step with
    the same weights (a survivor that had applied a step the others had not undoes it)."""
    # Rank 2 SIGKILLs itself at step 750: a kill from here after a fixed wait could come after a fast loop's end.
    with Ranks(N, "elastic_worker.py", "train", timeout=10, env={"TEST_DIE_AT_STEP": "750"}) as job:
        reports = job.reports([0, 1, 3], deadline_s=40)
    for r, rep in reports.items():
        assert rep.get("ok") and rep["step"] == 1500 and rep["size"] == N - 1, (r, rep)
        assert rep["shrinks"] == 1, (r, rep)  # the kill came during the loop
    assert len({rep["checksum"] for rep in reports.values()}) == 1, reports

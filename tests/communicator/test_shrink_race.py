"""Survivors agree on who is left when one of them goes on before another has finished the shrink
(tests/scripts/shrink_race_worker.py stalls a rank at a fixed point of the agreement): what the one that went on
does next -- an all-reduce that fails and aborts, the next shrink, a revoke -- must neither make the slower one
take it for dead (and cut it off for good) nor fail the slower one's shrink."""

import pytest
from multiproc import Ranks, backend_fixture

backend = backend_fixture(["shm", "tcp"])


@pytest.mark.timeout(60)
def test_a_survivor_that_failed_and_shrank_again_is_not_taken_for_dead(backend, no_segment_left):
    """Rank 0 dies inside the first shrink; rank 2 leaves it first, fails an all-reduce and shrinks again while
    rank 1 still has to read rank 2's round."""
    with Ranks(3, "shrink_race_worker.py", "abort", timeout=10) as job:
        reports = job.reports([1, 2], deadline_s=40)
    for r, rep in reports.items():
        assert rep.get("ok"), (r, rep)
        assert rep["shrinks"][-1] == [1, 2] and rep["sum"] == 5.0, reports


@pytest.mark.timeout(60)
def test_a_revoke_right_after_the_shrink_does_not_fail_a_slower_ranks_shrink(backend, no_segment_left):
    with Ranks(2, "shrink_race_worker.py", "revoke", timeout=10) as job:
        reports = job.reports(deadline_s=40)
    for r, rep in reports.items():
        assert rep.get("ok"), (r, rep)
        assert rep["shrinks"] == [[0, 1], [0, 1]] and rep["sum"] == 3.0, reports

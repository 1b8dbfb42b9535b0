"""A communicator used by a fork()ed child: the child gets pycoll.WrongProcess naming the parent's pid from every
use (collectives, Works, gradient buckets, the store, close), its exit tears down nothing of the parent's, and the
parent and the other ranks go on with exact results. Before, the child was silently taken as the rank: its data
mixed into the parent's and rank 1's results."""

import pytest
from multiproc import backend_fixture, scenario_reports

backend = backend_fixture(["shm", "tcp"])


@pytest.mark.timeout(120)
def test_a_forked_child_cannot_use_the_parents_communicator_and_the_job_goes_on(backend, no_segment_left):
    reports = scenario_reports(2, "fork_worker.py", "", timeout=15)
    parent = reports[0]
    child = parent["child"]
    assert child is not None and parent["child_exit"] == 0, parent
    for use in ("all_reduce", "async", "buckets", "store", "close"):
        seen = child[use]
        if seen is None:  # no store of its own on this path
            continue
        assert seen["error"] == "WrongProcess", (use, seen)
        assert seen["owner_pid"] == parent["pid"], (use, seen)
        assert f"process {parent['pid']}" in seen["message"] and str(child["child_pid"]) in seen["message"], seen
    assert parent["segments_after_child"] == parent["segments_before"], parent
    for rep in reports.values():
        assert rep["before"] == [3, 3, 3, 3], rep
        assert rep["after"] == [True] * 5 and rep.get("ok"), rep

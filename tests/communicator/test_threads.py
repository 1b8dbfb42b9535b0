"""Threads that take turns on one communicator. Each collective carries its calling thread's tag (a hash of the
thread's name): ranks whose threads take their turns in different orders get MismatchError naming the threads,
never another thread's data; the same order on every rank (and one thread) runs as before."""

import pytest
from multiproc import backend_fixture, scenario_reports

backend = backend_fixture(["shm", "tcp"])


@pytest.mark.timeout(90)
@pytest.mark.parametrize("mode", ["blocking", "async"])
def test_threads_taking_turns_in_opposite_orders_raise_mismatch_never_wrong_data(backend, mode):
    with_mode = f"opposite 20 {mode}"
    reports = scenario_reports(2, "threads_worker.py", with_mode, timeout=20)
    for rep in reports.values():
        assert rep["wrong"] == 0, rep
        assert rep["right"] == 0, rep  # the very first slot already pairs A with B
        # The first error breaks the communicator: the calls after it are refused.
        assert set(rep["errors"]) <= {"MismatchError", "PeerFailure", "CommunicatorClosed"}, rep
    messages = [rep["message"] for rep in reports.values() if "MismatchError" in rep["errors"]]
    assert messages, reports
    assert any("from thread #" in m and "took their turns in different orders" in m for m in messages), messages


@pytest.mark.timeout(90)
def test_threads_taking_turns_in_the_same_order_on_every_rank_get_their_own_results(backend):
    for rep in scenario_reports(2, "threads_worker.py", "same 20", timeout=20).values():
        assert rep == {**rep, "right": 40, "wrong": 0, "errors": {}, "main_ok": True}, rep


@pytest.mark.timeout(120)
def test_threads_with_default_names_calling_at_once_never_get_a_wrong_result(backend):
    """Two threads per rank with the default names, each 300 all-reduces of its own values, no schedule: a call
    that finds the other thread's running waits for it, never refused on one rank only (which left that rank a
    collective behind, and later calls paired with the wrong data). Every result is right, or every rank raised."""
    rounds = 300
    reports = scenario_reports(2, "threads_worker.py", f"free {rounds}", timeout=60)
    for rep in reports.values():
        assert rep["names"] == ["Thread-1 (run)", "Thread-2 (run)"], rep
        assert rep["wrong"] == 0, rep
        assert rep["right"] + sum(rep["errors"].values()) == 2 * rounds, rep
        assert set(rep["errors"]) <= {"MismatchError", "PeerFailure", "CommunicatorClosed"}, rep
    # A rank that raised broke the communicator on every rank: none carried on alone.
    failed = [bool(rep["errors"]) for rep in reports.values()]
    assert all(failed) or not any(failed), reports
    if any(failed):
        assert any("took their turns in different orders" in (rep["message"] or "") for rep in reports.values())
    print({r: (rep["right"], rep["errors"]) for r, rep in reports.items()})

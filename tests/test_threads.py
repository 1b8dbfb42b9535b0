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

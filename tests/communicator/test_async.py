"""Non-blocking collectives (async_op=True, pycoll.Work) across real processes: call order across ranks with
async and blocking calls mixed, errors and deadlines surfacing through Work, Work.wait(timeout), close with
work still queued. Both message transports: the progress thread (native/comm/progress.c) is above them."""

import os
import signal

import pytest
from multiproc import Ranks, backend_fixture

backend = backend_fixture(["tcp", "shm"])


@pytest.mark.timeout(90)
@pytest.mark.parametrize("n", [2, 3])
def test_async_and_blocking_calls_run_in_call_order_on_every_rank(backend, n):
    with Ranks(n, "async_worker.py", "order") as ranks:
        reports = ranks.reports()
    for rep in reports.values():
        assert rep.get("ok") and rep["works"] > 30, rep


@pytest.mark.timeout(60)
def test_done_callbacks_run_once_completion_is_seen_and_at_once_when_added_late(backend):
    with Ranks(2, "async_worker.py", "callbacks") as ranks:
        reports = ranks.reports()
    assert all(rep.get("ok") for rep in reports.values()), reports


@pytest.mark.timeout(60)
def test_wait_with_a_timeout_that_passes_raises_timeout_and_breaks_nothing(backend, tmp_path):
    with Ranks(2, "async_worker.py", "wait_timeout", env={"TEST_FLAG": str(tmp_path / "flag")}) as ranks:
        reports = ranks.reports()
    first = reports[0]
    assert first.get("ok") and all(rep.get("ok") for rep in reports.values()), reports
    # Rank 1 cannot have joined before the flag: the wait had to expire.
    assert first["first"] == "Timeout" and not first["completed_before"], first
    assert "still running" in first["first_message"], first


def _survivor_reports(scenario, victim, deadline, tmp_path):
    """The reports of the two ranks of three that are not `victim`, which async_worker.py's scenario kills or
    stops while they wait on their Works."""
    env = {"TEST_VICTIM": str(victim), "TEST_FLAG": str(tmp_path / "out")}
    with Ranks(3, "async_worker.py", scenario, env=env, timeout=deadline) as ranks:
        return list(ranks.reports([r for r in range(3) if r != victim]).values())


@pytest.mark.timeout(60)
def test_a_killed_rank_fails_the_waiting_work_and_every_later_one_with_peer_failure(backend, tmp_path):
    deadline = 30.0
    for rep in _survivor_reports("kill", 1, deadline, tmp_path):
        assert rep.get("ok"), rep
        assert rep["error"] == "PeerFailure" and rep["failed_rank"] == 1, rep
        # Noticed, not waited out: far from the deadline however loaded the machine (it takes milliseconds).
        assert rep["detect_s"] < deadline / 3, rep
        assert rep["later"] == "PeerFailure" and rep["after"] == "CommunicatorClosed", rep


@pytest.mark.timeout(60)
def test_a_stopped_rank_fails_the_waiting_work_with_timeout_at_the_deadline(backend, tmp_path):
    deadline = 3.0
    reports = _survivor_reports("stop", 2, deadline, tmp_path)
    for rep in reports:
        assert rep.get("ok"), rep
        assert rep["error"] in ("Timeout", "PeerFailure"), rep  # the rank that times out first tells the other
        assert deadline * 0.9 <= rep["detect_s"] < deadline + 5, rep
        # Issuing does not wait for the collective, which cannot end before the deadline: the bound is a third
        # of it, so that scheduling delays on a loaded machine do not fail the test while a blocking issue would.
        assert rep["issue_us"] < deadline / 3 * 1e6, rep
        assert rep["later"] == rep["error"] and rep["after"] == "CommunicatorClosed", rep
    assert "Timeout" in {rep["error"] for rep in reports}, reports


@pytest.mark.timeout(60)
def test_close_with_queued_work_fails_it_with_communicator_closed_and_returns(backend):
    with Ranks(2, "async_worker.py", "close_pending", timeout=30) as ranks:
        reports = ranks.reports()
    outcomes = []
    for rep in reports.values():
        assert rep.get("ok") and rep["completed"], rep
        # The 5 s linger for the collective in flight at most (and the work before it), never the 30 s deadline.
        assert rep["close_s"] < 20, rep
        assert set(rep["outcomes"]) <= {"ok", "CommunicatorClosed", "PeerFailure"}, rep
        assert rep["after"] == "CommunicatorClosed", rep
        outcomes += rep["outcomes"]
    assert "CommunicatorClosed" in outcomes, reports


@pytest.mark.timeout(60)
def test_ctrl_c_interrupts_the_waiting_thread_and_the_collective_still_completes(backend, tmp_path):
    with Ranks(2, "async_worker.py", "interrupt_wait", env={"TEST_FLAG": str(tmp_path / "flag")},
               interruptible=True) as ranks:
        ranks.wait_ready([0, 1])
        os.kill(ranks.procs[0].pid, signal.SIGINT)
        reports = ranks.reports()
    assert all(rep.get("ok") for rep in reports.values()), reports
    # Rank 1 joins only after rank 0's wait was interrupted: nothing else could have ended that wait.
    assert reports[0]["first"] == "KeyboardInterrupt" and not reports[0]["completed_before"], reports[0]

"""The shared-memory transport's native collectives (algorithm "shm": native/transport/shm_collectives.c) with
real processes: exact on integer data for every dtype, op and accuracy at sizes around every boundary of the
shared area, bitwise identical on every rank, disagreements as MismatchError, faults as over the rings, and
the refusal of algorithm="shm" where there is no shared memory."""

import os
import signal
import time

import pytest

from multiproc import Ranks

SHM_DIR = "/dev/shm"


def _segments():
    return {name for name in os.listdir(SHM_DIR) if name.startswith("pycoll-")}


@pytest.fixture
def no_segment_left():
    before = _segments()
    yield
    assert _segments() - before == set()


def _run(n, scenario, env=None, timeout=30, backend="shm"):
    with Ranks(n, "shm_coll_worker.py", scenario, env=dict(env or {}, PYCOLL_BACKEND=backend),
               timeout=timeout) as ranks:
        return ranks.reports()


@pytest.mark.timeout(240)
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_all_reduce_broadcast_and_barrier_are_exact_and_identical_on_every_rank(n, no_segment_left):
    """64 KiB rings make 64 KiB slots: messages of one, two and three rounds stay small."""
    env = {"PYCOLL_SHM_RING_BYTES": "65536", "TEST_ROUNDS": "3"}
    reports = _run(n, "matrix", env=env, timeout=120)
    for rep in reports.values():
        assert rep.get("ok"), rep
    assert len({rep["digest"] for rep in reports.values()}) == 1, reports


@pytest.mark.stress
@pytest.mark.timeout(600)
@pytest.mark.parametrize("n", [2, 3, 4])
def test_every_op_of_every_dtype_with_the_default_slots(n):
    reports = _run(n, "matrix", env={"TEST_OPS": "sum,prod,min,max,avg", "TEST_ROUNDS": "3"}, timeout=500)
    assert all(rep.get("ok") for rep in reports.values()), reports


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["count", "dtype", "op", "algorithm", "collective", "root"])
@pytest.mark.parametrize("count", [1000, 300_000])  # the one-round path and the two-phase rounds
def test_disagreement_is_a_mismatch_on_every_rank(kind, count):
    reports = _run(3, "mismatch", env={"TEST_MISMATCH": kind, "TEST_COUNT": str(count)}, timeout=20)
    for r, rep in reports.items():
        assert rep.get("error") == "MismatchError", (r, rep)
        assert rep["elapsed"] < 15, rep  # found at once, not at the 20 s deadline
    assert any("rank 1" in rep["message"] for rep in reports.values()), reports


@pytest.mark.timeout(60)
def test_explicit_shm_over_tcp_is_refused_naming_the_backend():
    reports = _run(2, "explicit_over_tcp", backend="tcp")
    for rep in reports.values():
        assert rep.get("ok") and rep.get("error") == "ValueError", rep
        assert "'tcp'" in rep["message"] and "'shm'" in rep["message"], rep


@pytest.mark.timeout(60)
@pytest.mark.parametrize("count", ["16", "1000000"])
def test_killed_peer_is_reported_by_every_rank_within_2s_and_leaves_no_segment(count, no_segment_left):
    victim = 2
    env = {"PYCOLL_BACKEND": "shm", "TEST_ALGORITHM": "shm", "TEST_COUNT": count}
    with Ranks(4, "comm_worker.py", "loop", env=env, timeout=60) as ranks:
        ranks.wait_ready(range(4))
        time.sleep(0.5)
        killed_at = time.monotonic()
        os.kill(ranks.procs[victim].pid, signal.SIGKILL)
        reports = ranks.reports([0, 1, 3], deadline_s=20)
        detected = time.monotonic() - killed_at
    for r, rep in reports.items():
        assert rep.get("error") == "PeerFailure", (r, rep)
        assert rep["failed_rank"] == victim and f"rank {victim}" in rep["message"], (r, rep)
    assert detected < 2.0 + 1.5, f"survivors took {detected:.2f} s to exit"  # 2 s budget + process exit


@pytest.mark.timeout(60)
def test_stopped_peer_makes_the_others_time_out_at_the_deadline():
    victim, deadline = 1, 3.0
    env = {"PYCOLL_BACKEND": "shm", "TEST_ALGORITHM": "shm"}
    with Ranks(3, "comm_worker.py", "loop", env=env, timeout=deadline) as ranks:
        ranks.wait_ready(range(3))
        os.kill(ranks.procs[victim].pid, signal.SIGSTOP)
        stopped_at = time.monotonic()
        reports = ranks.reports([0, 2], deadline_s=30)
        waited = time.monotonic() - stopped_at
    for r, rep in reports.items():
        assert rep.get("error") == "Timeout", (r, rep)
        assert rep["failed_rank"] == victim and f"rank {victim}" in rep["message"], (r, rep)
    assert waited < deadline + 3.0, waited

"""The fault and mismatch scenarios every message transport must pass alike: test_comm_tcp.py runs them over
TCP, test_comm_shm.py over shared memory, test_comm_routed.py over both at once (and test_shm_collectives.py,
test_shm_single_copy.py and test_multihost_netns.py some of them). Each function runs one scenario with real
processes and asserts on it; the transport is whatever PYCOLL_BACKEND and the caller's fixtures select."""

import os
import signal
import time

import pytest
from multiproc import Ranks


def check_mismatch_is_reported_on_every_rank(kind):
    with Ranks(3, "comm_worker.py", "mismatch", env={"TEST_MISMATCH": kind}, timeout=20) as ranks:
        reports = ranks.reports()
    for r, rep in reports.items():
        assert rep.get("error") == "MismatchError", (r, rep)
        assert rep["elapsed"] < 15, rep
        # A slow rank may hear of the failure while still inside init(): then it has no communicator.
        assert "rank" not in rep or rep["after"].startswith("CommunicatorClosed"), rep
    # The message names both sides.
    messages = " ".join(rep["message"] for rep in reports.values())
    assert "rank 1" in messages, messages


def check_ranks_that_disagree_on_the_root_all_raise_mismatch(collective, roots, then, count):
    """Disagreeing roots can let some ranks complete the call (their messages are never received, or nobody
    sends to them): every rank must still raise MismatchError naming both roots -- at the call, in the next
    collective, or at the latest in close() -- and never a Timeout or a silent success. (A rank that learns of
    the mismatch before it enters the call leaves it uncounted: a close() check against that rank then names
    the one root and that the rank "called no collective yet".)"""
    n = len(roots.split(","))
    with Ranks(n, "comm_worker.py", "roots", timeout=20,
               env={"TEST_ROOTS": roots, "TEST_THEN": then, "TEST_COLL": collective,
                    "TEST_COUNT": str(count)}) as ranks:
        reports = ranks.reports()
    for r, rep in reports.items():
        assert rep.get("error") == "MismatchError", (r, rep)
        assert f"{collective}(" in rep["message"] and "root=0" in rep["message"], rep
        assert ("root=1" in rep["message"] or "root=2" in rep["message"]
                or "called no collective yet" in rep["message"]), rep
        assert rep["elapsed"] < 10, rep  # not the 20 s deadline


def covering(cases, counts):
    """(case..., count) parameters: each case with one of `counts` by default, the counts taking turns so that
    every count meets some cases; the rest of the cross product under -m stress (the same checks again, on paths
    the default already takes)."""
    return [(*case, count) if j == i % len(counts) else pytest.param(*case, count, marks=pytest.mark.stress)
            for i, case in enumerate(cases) for j, count in enumerate(counts)]


def mismatch_tests(kinds, root_cases):
    """The two mismatch scenarios as tests for a module: a collective that differs in each of `kinds`, and the
    disagreeing roots of root_cases, (collective, roots, then, count) tuples the transport under test needs.
    The caller binds them under the same names in every module so that pytest collects them alike."""

    @pytest.mark.timeout(60)
    @pytest.mark.parametrize("kind", kinds)
    def mismatch(kind):
        check_mismatch_is_reported_on_every_rank(kind)

    @pytest.mark.timeout(60)
    @pytest.mark.parametrize("collective, roots, then, count", root_cases)
    def disagreeing_roots(collective, roots, then, count):
        check_ranks_that_disagree_on_the_root_all_raise_mismatch(collective, roots, then, count)

    return mismatch, disagreeing_roots


def check_close_waits_for_a_slow_rank_at_most_the_linger():
    """close() waits for the other ranks' goodbyes, but no longer than min(timeout, 5 s)."""
    with Ranks(3, "comm_worker.py", "slow_close", timeout=1.5, env={"TEST_VICTIM": "0"}) as ranks:
        reports = ranks.reports()
    for r, rep in reports.items():
        assert rep.get("ok"), rep
        if r != 0:
            assert 1.0 < rep["close_s"] < 2.5, rep  # the 1.5 s linger, not rank 0's 3 s
    assert reports[0]["close_s"] < 0.5, reports[0]  # the others' goodbyes were waiting


def check_killed_peer_is_reported_by_every_rank_within_2s(victim, world, **ranks_options):
    """Ranks run collectives in a loop; `victim` is killed with SIGKILL: every survivor raises PeerFailure
    naming it within 2 s. ranks_options: Ranks' (env, wrap, master_addr)."""
    with Ranks(world, "comm_worker.py", "loop", timeout=60, **ranks_options) as ranks:
        ranks.wait_ready(range(world))
        time.sleep(0.5)
        killed_at = time.monotonic()
        os.kill(ranks.procs[victim].pid, signal.SIGKILL)
        survivors = [r for r in range(world) if r != victim]
        reports = ranks.reports(survivors, deadline_s=20)
        detected = time.monotonic() - killed_at
    for r, rep in reports.items():
        assert rep.get("error") == "PeerFailure", (r, rep)
        assert rep["failed_rank"] == victim, (r, rep)
        assert f"rank {victim}" in rep["message"], rep
        assert rep["after"].startswith("CommunicatorClosed"), rep
    assert detected < 2.0 + 1.5, f"survivors took {detected:.2f} s to exit"  # 2 s budget + process exit


def check_stopped_peer_makes_the_others_time_out_at_the_deadline():
    victim = 1
    deadline = 3.0
    with Ranks(3, "comm_worker.py", "loop", timeout=deadline) as ranks:
        ranks.wait_ready(range(3))
        os.kill(ranks.procs[victim].pid, signal.SIGSTOP)
        stopped_at = time.monotonic()
        reports = ranks.reports([0, 2], deadline_s=30)
        waited = time.monotonic() - stopped_at
    for r, rep in reports.items():
        assert rep.get("error") == "Timeout", (r, rep)
        assert rep["after"].startswith("CommunicatorClosed"), rep
        # Rank 0 waits for rank 2, which waits for the stopped rank: the timeout names the end of the chain.
        assert rep["failed_rank"] == victim and f"rank {victim}" in rep["message"], (r, rep)
    assert waited < deadline + 3.0, waited


def check_peer_that_closes_its_communicator_is_named_quickly():
    with Ranks(4, "comm_worker.py", "closer", env={"TEST_VICTIM": "2"}, timeout=30) as ranks:
        reports = ranks.reports([0, 1, 3], deadline_s=20)
    for r, rep in reports.items():
        assert rep.get("error") == "PeerFailure", (r, rep)
        assert rep["failed_rank"] == 2 and "rank 2" in rep["message"], rep
        assert rep["elapsed"] < 2.0 + 1.0, rep  # includes start-up


def interrupt_a_blocked_rank(world):
    """Rank 0 blocks in a collective the others join much later; SIGINT reaches it there. Returns its report
    after checking it raised KeyboardInterrupt promptly."""
    with Ranks(world, "comm_worker.py", "interrupt", timeout=60, interruptible=True) as ranks:
        ranks.wait_ready([0])
        time.sleep(0.3)
        sent = time.monotonic()
        os.kill(ranks.procs[0].pid, signal.SIGINT)
        report = ranks.reports([0], deadline_s=20)[0]
        took = time.monotonic() - sent
    assert report.get("error") == "KeyboardInterrupt", report
    assert took < 2.0, took  # not the 60 s deadline
    return report


def scenario_tests():
    """The scenarios above that take no arguments, as tests for a module to bind under these names, in this order:
    test_close_waits_for_a_slow_rank_at_most_the_linger, test_stopped_peer_makes_the_others_time_out_at_the_deadline,
    test_peer_that_closes_its_communicator_is_named_quickly, test_ctrl_c_interrupts_a_blocked_collective_promptly."""
    @pytest.mark.timeout(60)
    def close_waits():
        check_close_waits_for_a_slow_rank_at_most_the_linger()

    @pytest.mark.timeout(60)
    def stopped_peer():
        check_stopped_peer_makes_the_others_time_out_at_the_deadline()

    @pytest.mark.timeout(60)
    def closing_peer():
        check_peer_that_closes_its_communicator_is_named_quickly()

    @pytest.mark.timeout(60)
    def ctrl_c():
        interrupt_a_blocked_rank(2)

    return close_waits, stopped_peer, closing_peer, ctrl_c

"""A rank kept waiting at init says so at intervals (PYCOLL_WAIT_REPORT_S), naming what it waits for and what
to check: ranks that never join the rendezvous, a rendezvous store nobody serves, peers of init_rank."""

import logging
import re

import pytest
from multiproc import Ranks, free_port

import pycoll
from pycoll.rendezvous.store import TCPStore

INTERVAL = 1.0  # PYCOLL_WAIT_REPORT_S for these tests: the first message after 1 s, then every 1 s
NEVER = "600"  # TEST_LATE_DELAY of a rank that must not arrive while the test runs (Ranks kills it)


def _late_job(n, late_rank, tmp_path, timeout):
    env = {"PYCOLL_WAIT_REPORT_S": str(INTERVAL), "TEST_LATE": str(late_rank), "TEST_LATE_DELAY": NEVER,
           "TEST_GO_FILE": str(tmp_path / "never")}
    return Ranks(n, "rdv_worker.py", "late", env=env, timeout=timeout)


def _waits(pattern, text):
    """The seconds waited that each message matching `pattern` (its group 1) reports."""
    return [int(m.group(1)) for m in re.finditer(pattern, text)]


@pytest.mark.timeout(90)
def test_ranks_waiting_for_one_that_never_starts_name_it_at_intervals(tmp_path):
    timeout = 5.0  # room for the three messages asserted below (1, 2, 3 s), and for a loaded machine
    with _late_job(3, 2, tmp_path, timeout) as job:
        reports = job.reports([0, 1], deadline_s=60)
    for rank in (0, 1):
        assert reports[rank]["error"] == "Timeout", reports[rank]
        pattern = (rf"rank {rank}: waiting (\d+) s for rank 2 of 3 to join the rendezvous at 127\.0\.0\.1:"
                   rf"{job.port}; check that it was started, with the same MASTER_ADDR and MASTER_PORT")
        waits = _waits(pattern, job.stderr[rank])
        # Reported from the first interval on, and again at each: not only once, not only at the deadline.
        assert len(waits) >= 3 and waits[0] <= 2 * INTERVAL and waits == sorted(waits), job.stderr[rank]
        assert max(waits) < timeout, job.stderr[rank]


@pytest.mark.timeout(90)
def test_a_rank_retrying_a_store_nobody_serves_names_the_address_at_intervals(tmp_path):
    timeout = 4.0
    with _late_job(2, 0, tmp_path, timeout) as job:  # rank 0, which hosts the store, never starts init
        report = job.reports([1], deadline_s=60)[1]
    assert report["error"] == "Timeout", report
    pattern = (rf"rank 1: cannot reach the rendezvous store at 127\.0\.0\.1:{job.port} for (\d+) s "
               r"\([^)]*refused[^)]*\); still trying until 4 s\. Check that rank 0, which hosts the store, has "
               r"started; that MASTER_ADDR \(127\.0\.0\.1\) names rank 0's host")
    waits = _waits(pattern, job.stderr[1])
    assert len(waits) >= 2 and waits[0] <= 2 * INTERVAL, job.stderr[1]


def test_the_interval_is_a_setting_and_zero_turns_the_messages_off(monkeypatch, caplog):
    port = free_port()  # nothing listens there
    for interval, expected in (("0.2", True), ("0", False)):
        monkeypatch.setenv("PYCOLL_WAIT_REPORT_S", interval)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="pycoll"), pytest.raises(pycoll.Timeout):
            TCPStore("127.0.0.1", port, is_server=False, timeout=1.0)
        said = [r.getMessage() for r in caplog.records if "cannot reach the rendezvous store" in r.getMessage()]
        assert bool(said) == expected, (interval, said)
    monkeypatch.setenv("PYCOLL_WAIT_REPORT_S", "soon")
    with pytest.raises(pycoll.SettingError, match="PYCOLL_WAIT_REPORT_S"):
        TCPStore("127.0.0.1", port, is_server=False, timeout=1.0)


@pytest.mark.timeout(30)
def test_init_rank_waiting_alone_says_what_to_check(monkeypatch, caplog):
    monkeypatch.setenv("PYCOLL_WAIT_REPORT_S", "0.3")
    with caplog.at_level(logging.WARNING, logger="pycoll"), pytest.raises(pycoll.Timeout):
        pycoll.init_rank(pycoll.get_unique_id(), 0, 2, timeout=1.5)  # rank 1 never comes
    said = [r.getMessage() for r in caplog.records]
    assert any(re.match(r"rank 0: pycoll.init_rank has waited \d+ s for the other ranks of 2; check that every "
                        r"rank calls init_rank with the same unique id and world_size 2", m) for m in said), said

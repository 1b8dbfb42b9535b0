"""Surviving a lost rank across real hosts: two network-namespace hosts of two ranks each (tests/netns_hosts.py),
the default backend (shared memory within a host, TCP between them). Rank 0 (the store's host) and then rank 3
are killed mid all-reduce; the survivors shrink and all-reduce the right sum. Needs root and iproute2.
bench/recovery.py --hosts 2 measures the same over many kills."""

import os
import signal
import time

import pytest
from multiproc import Ranks
from netns_hosts import SUBNET

pytestmark = [pytest.mark.netns, pytest.mark.timeout(120)]
PLACEMENT = (0, 0, 1, 1)


@pytest.mark.parametrize("hosts", [2], indirect=True)
def test_a_rank_killed_on_either_host_the_survivors_shrink(hosts, monkeypatch, no_segment_left):
    monkeypatch.delenv("PYCOLL_BACKEND", raising=False)
    n = len(PLACEMENT)
    for victim in (0, n - 1):
        with Ranks(n, "elastic_worker.py", "kill", timeout=10, master_addr=f"{SUBNET}.1",
                   wrap=lambda r: ["ip", "netns", "exec", hosts[PLACEMENT[r]]]) as job:
            job.wait_ready(range(n))
            time.sleep(0.3)  # inside the loop of all-reduces
            os.kill(job.procs[victim].pid, signal.SIGKILL)
            survivors = [r for r in range(n) if r != victim]
            reports = job.reports(survivors, deadline_s=40)
        want = float(sum(r + 1 for r in survivors))
        for r, rep in reports.items():
            assert rep.get("ok") and rep["transport"] == "shm+tcp", (victim, r, rep)
            assert rep["failed_ranks"] == [victim] and rep["ranks"] == survivors, (victim, r, rep)
            assert rep["sum"] == want and rep["hier_sums"] == [want], (victim, r, rep)

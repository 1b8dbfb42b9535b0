"""Surviving a lost rank where a job spans hosts: the default backend then runs over shared memory within each
host and TCP between them (the routed transport), and revoke, agree and shrink work there as over either alone.
Real processes on 127.0.0.1, two hosts faked by PYCOLL_HOSTID (ranks 0, 1 on one, 2, 3 on the other): a rank
of each host killed in turn (rank 0, the store's host, among them), a revoke crossing hosts, a rank dying
during an agreement; under the stress marker, many kills of a random rank at a random point. Across real
network-namespace hosts: test_elastic_netns.py and bench/recovery.py."""

import os
import random
import signal
import time

import pytest
from multiproc import Ranks, kill_mid_loop, survivor_sum

N = 4


def _host_env(r):
    return {"PYCOLL_HOSTID": f"fake-host-{r // 2}"}


@pytest.fixture(autouse=True)
def default_backend(monkeypatch):
    monkeypatch.delenv("PYCOLL_BACKEND", raising=False)  # the default backend chooses per pair of ranks


@pytest.mark.timeout(60)
@pytest.mark.parametrize("victim", [0, 3])
def test_killed_rank_on_either_host_the_survivors_shrink_and_all_reduce(victim, no_segment_left):
    with Ranks(N, "elastic_worker.py", "kill", timeout=10, rank_env=_host_env) as job:
        killed_at, reports = kill_mid_loop(job, N, victim)
    survivors = [r for r in range(N) if r != victim]
    want = survivor_sum(N, {victim})
    for r, rep in reports.items():
        assert rep.get("ok") and rep["transport"] == "shm+tcp", (r, rep)
        assert rep["failed_rank"] == victim and rep["failed_ranks"] == [victim], (r, rep)
        assert rep["sum"] == want, (r, rep)
        assert rep["ranks"] == survivors and rep["new_rank"] == survivors.index(r), (r, rep)
        # Hosts of 1 and 2 ranks now: the hierarchical algorithm runs on them and is right.
        assert rep["hier_ran"] == "hierarchical" and rep["hier_sums"] == [want], (r, rep)
        assert "unusable" in rep.get("old", ""), (r, rep)
    recovered = max(rep["done"] for rep in reports.values()) - killed_at
    print(f"\nshm+tcp, rank {victim} killed: every survivor had shrunk and all-reduced after "
          f"{recovered * 1e3:.1f} ms")


@pytest.mark.stress
@pytest.mark.timeout(900)
def test_many_kills_of_a_random_rank_at_a_random_point(no_segment_left):
    rng = random.Random(36)
    for _ in range(40):
        victim = rng.randrange(N)
        with Ranks(N, "elastic_worker.py", "kill", timeout=10, rank_env=_host_env) as job:
            job.wait_ready(range(N))
            time.sleep(rng.uniform(0.02, 0.3))
            os.kill(job.procs[victim].pid, signal.SIGKILL)
            reports = job.reports([r for r in range(N) if r != victim], deadline_s=40)
        for r, rep in reports.items():
            assert rep.get("ok") and rep["sum"] == survivor_sum(N, {victim}), (victim, r, rep)
            assert rep["hier_sums"] == [survivor_sum(N, {victim})] and rep["failed_ranks"] == [victim], (victim, r, rep)


@pytest.mark.timeout(60)
def test_revoke_reaches_the_ranks_of_the_other_host(no_segment_left):
    with Ranks(N, "elastic_worker.py", "revoke", timeout=10, rank_env=_host_env) as job:
        reports = job.reports(deadline_s=40)
    for r, rep in reports.items():
        assert rep.get("ok") and "revoked" in rep.get("revoked", ""), (r, rep)
        assert rep["sum"] == survivor_sum(N, set()) and rep["ranks"] == list(range(N)), (r, rep)
        assert rep["async_sum"] == survivor_sum(N, set()), (r, rep)
        assert rep["split_sum"] == sum(q + 1.0 for q in range(N) if q % 2 == r % 2), (r, rep)


@pytest.mark.timeout(60)
def test_agree_leaves_out_a_rank_that_dies_during_it(no_segment_left):
    with Ranks(N, "elastic_worker.py", "agree", timeout=10, rank_env=_host_env) as job:
        reports = job.reports([0, 1, 3], deadline_s=40)
    for r, rep in reports.items():
        assert rep.get("ok"), (r, rep)
        assert rep["healthy"] == 0 and rep["still"] == survivor_sum(N, set()), (r, rep)
        assert rep["flag"] == 0b1110 and rep["failed_ranks"] == [2], (r, rep)
        assert rep["sum"] == survivor_sum(N, {2}) and rep["ranks"] == [0, 1, 3], (r, rep)

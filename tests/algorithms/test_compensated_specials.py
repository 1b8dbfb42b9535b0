"""accuracy="compensated" with real processes keeps IEEE special values and overflow as accuracy="fast" has them:
+-inf, NaN, inf - inf, sums past the largest value and -0.0, placed on every rank and at every position
(specials_worker.py), give fast mode's result by every all_reduce algorithm (sum and avg) and by reduce, over
shared memory, TCP, and both at once (faked hosts, so the hierarchical algorithm crosses hosts with its
compensated pairs), at 2, 3 and 4 ranks. Each job runs every case in one go."""

import pytest
from multiproc import Ranks

ALL_REDUCE = {"ring", "halving_doubling", "mesh", "recursive_doubling", "hierarchical"}


def run_job(n, env=None, rank_env=None):
    with Ranks(n, "specials_worker.py", env=env, rank_env=rank_env, timeout=150) as ranks:
        reports = ranks.reports(deadline_s=240)
    for rep in reports.values():
        assert rep.get("ok"), rep
        assert not rep["mismatches"], rep["mismatches"][:20]
        assert rep["specials"] > 1000, rep  # the inputs did hold infinities and NaN
    return {name for rep in reports.values() for name in rep["ran"]}


@pytest.mark.timeout(300)
# Three ranks (uneven chunks) on each transport in the default run; the other sizes under -m stress.
@pytest.mark.parametrize("backend, n", [("shm", 3), ("tcp", 3),
                                        *(pytest.param(b, k, marks=pytest.mark.stress)
                                          for b in ("shm", "tcp") for k in (2, 4))])
def test_compensated_gives_fast_modes_special_values(backend, n, monkeypatch, no_segment_left):
    monkeypatch.setenv("PYCOLL_BACKEND", backend)
    ran = run_job(n)
    reduce = {"reduce shm_slots"} if backend == "shm" else {"reduce binomial_tree", "reduce scatter_gather"}
    assert ran == ALL_REDUCE | reduce | ({"shm_slots"} if backend == "shm" else set()), ran


@pytest.mark.timeout(300)
def test_compensated_pairs_crossing_hosts_keep_special_values(monkeypatch, no_segment_left):
    """Three ranks on two faked hosts (two and one): the default backend runs shared memory within a host and
    TCP between them, and the hierarchical all-reduce sends (sum, comp) pairs across."""
    monkeypatch.delenv("PYCOLL_BACKEND", raising=False)
    ran = run_job(3, rank_env=lambda r: {"PYCOLL_HOSTID": f"fake-host-{r // 2}"})
    assert "hierarchical" in ran, ran

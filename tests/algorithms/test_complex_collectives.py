"""complex64 and complex128 over real rank processes: every collective, every algorithm of the backend, sum, avg
and prod in fast mode, sum and avg in compensated and reproducible mode, exact against NumPy
(tests/scripts/complex_worker.py says how the inputs make that meaningful); min and max refused by name on every
rank, and complex64 against a peer's float32 of the same bytes a MismatchError. One job per case,
each running every combination, so the whole file takes seconds."""
import pytest
from multiproc import Ranks

# Segments and rings that hold no whole number of complex elements (1000 bytes: 62.5 complex128), so a schedule
# that cut an element in two would show in the products.
SMALL_PIECES = {"PYCOLL_RING_SEGMENT_BYTES": "1000", "PYCOLL_SHM_RING_BYTES": "4096"}


def run(n, env, rank_env=None):
    with Ranks(n, "complex_worker.py", env=env, timeout=60, rank_env=rank_env) as job:
        reports = job.reports(deadline_s=120)
    for rep in reports.values():
        assert rep.get("ok"), rep
        assert rep["refusals"] == ["all_reduce max", "reduce_scatter min", "reduce min",
                                   "all_reduce reproducible prod"], rep
        assert rep["mismatch"] == "MismatchError", rep
    return reports


@pytest.mark.timeout(150)
# One size per transport in the default run (and four ranks over TCP); the others under -m stress.
@pytest.mark.parametrize("backend, n", [("tcp", 2), ("shm", 3), ("tcp", 4),
                                        *(pytest.param(b, k, marks=pytest.mark.stress)
                                          for b, k in (("shm", 2), ("tcp", 3), ("shm", 4)))])
def test_complex_collectives_are_exact(backend, n, no_segment_left):
    reports = run(n, dict(SMALL_PIECES, PYCOLL_BACKEND=backend))
    for rep in reports.values():
        assert rep["transport"] == backend
        wanted = {"ring", "halving_doubling", "mesh", "recursive_doubling", "hierarchical"}
        if backend == "shm":
            wanted.add("shm_slots")
        assert wanted <= set(rep["algorithms"]), rep["algorithms"]


@pytest.mark.timeout(150)
def test_complex_hierarchical_across_fake_hosts(no_segment_left):
    """Two ranks on each of two hosts faked by PYCOLL_HOSTID: the hierarchical all-reduce runs its host phases
    over shared memory and its cross-host phase over TCP."""
    reports = run(4, dict(SMALL_PIECES), rank_env=lambda r: {"PYCOLL_HOSTID": f"fake-host-{r // 2}"})
    for rep in reports.values():
        assert rep["transport"] == "shm+tcp" and "hierarchical" in rep["algorithms"], rep

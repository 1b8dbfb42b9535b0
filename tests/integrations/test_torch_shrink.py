"""pycoll.torch.shrink_group (docs/torch.md): DDP training on 4 real processes over the pycoll backend, one
killed (kill -9) in the middle; the survivors catch DDP's error, shrink the default group, build DDP again on it
and keep training: the held-out loss keeps falling and the survivors end with equal weights."""

import os
import signal

import pytest
from multiproc import Ranks

torch = pytest.importorskip("torch", reason="torch is not installed (the torch extra)")
pytest.importorskip("pycoll.torch")

N = 4


@pytest.mark.timeout(120)
@pytest.mark.parametrize("victim", [0, pytest.param(2, marks=pytest.mark.stress)])
def test_ddp_survives_a_killed_rank_through_shrink_group(victim):
    """Rank 0 hosts torch's store: its death must not stop the shrink (nothing of it goes through the store).
    Each case starts 4 torch processes (most of its time): a middle rank's case runs with the stress tests."""
    with Ranks(N, "torch_shrink_worker.py", env={"OMP_NUM_THREADS": "1"}, timeout=20) as job:
        job.wait_ready(range(N))
        os.kill(job.procs[victim].pid, signal.SIGKILL)
        survivors = [r for r in range(N) if r != victim]
        reports = job.reports(survivors, deadline_s=100)
    for r, rep in reports.items():
        assert rep.get("ok"), (r, rep)
        assert rep["lost"] == [victim], (r, rep)
        assert rep["members"] == survivors and rep["new_size"] == N - 1, (r, rep)
        assert rep["new_rank"] == survivors.index(r) and rep["default_is_new"], (r, rep)
        # training went on: the held-out loss fell before the failure and kept falling after it
        assert rep["loss_at_failure"] < rep["first_loss"], (r, rep)
        assert rep["last_loss"] < rep["loss_at_failure"], (r, rep)
    params = [rep["params"] for rep in reports.values()]
    assert all(p == params[0] for p in params), "the survivors' weights differ"


def test_shrink_group_checks_its_arguments_as_torch_does():
    """torch's own checks, before anything collective: an empty list, an unknown flag, pg_options."""
    import pycoll.torch as pt
    with pytest.raises(ValueError, match="cannot be empty"):
        pt.shrink_group([])
    with pytest.raises(ValueError, match="shrink_flags"):
        pt.shrink_group([1], shrink_flags=7)
    with pytest.raises(TypeError, match="must be a list"):
        pt.shrink_group(1)

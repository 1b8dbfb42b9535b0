"""`pycoll tune` measures and stores the cost model; every rank then uses rank 0's model for algorithm="auto"."""

import json
import subprocess
import sys

import pytest

from multiproc import Ranks


@pytest.mark.timeout(120)
def test_pycoll_tune_measures_and_stores_positive_constants(tmp_path):
    path = tmp_path / "model.json"
    done = subprocess.run([sys.executable, "-m", "pycoll", "tune", "-n", "2"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=110, env={**__import__("os").environ, "PYCOLL_TUNE_FILE": str(path)})
    assert done.returncode == 0, done.stdout + done.stderr
    model = json.loads(path.read_text())
    for key in ("alpha_s", "beta_s_per_byte", "gamma_s_per_byte"):
        assert 0 < model[key] < 1, model
    assert "saved to" in done.stdout


def _auto_choice(tmp_path, alpha, beta, gamma, *, rank0_only=False):
    model = tmp_path / "model.json"
    model.write_text(json.dumps({"alpha_s": alpha, "beta_s_per_byte": beta, "gamma_s_per_byte": gamma}))
    missing = tmp_path / "none.json"
    rank_env = lambda r: {"PYCOLL_TUNE_FILE": str(model if r == 0 or not rank0_only else missing)}  # noqa: E731
    with Ranks(4, "comm_worker.py", "auto", rank_env=rank_env) as ranks:
        reports = ranks.reports()
    choices = {rep["algorithm"] for rep in reports.values()}
    assert len(choices) == 1, reports
    return choices.pop()


@pytest.mark.timeout(60)
def test_auto_follows_the_stored_model(tmp_path):
    # Latency dominates: the fewest messages win. Bandwidth dominates: the ring's 2(N-1)/N bytes and hidden
    # reductions win.
    assert _auto_choice(tmp_path, 1.0, 1e-15, 1e-15) == "recursive_doubling"
    assert _auto_choice(tmp_path, 1e-12, 1e-9, 1e-9) == "ring"


@pytest.mark.timeout(60)
def test_every_rank_uses_rank_zeros_model(tmp_path):
    # Only rank 0 has a model file; if the others used their defaults they could pick another algorithm and
    # the collective would fail with a mismatch.
    assert _auto_choice(tmp_path, 1.0, 1e-15, 1e-15, rank0_only=True) == "recursive_doubling"

"""`pycoll tune` measures and stores the cost model; every rank then uses rank 0's model for algorithm="auto"."""

import json
import os
import subprocess
import sys
import time

import pytest
from multiproc import Ranks

import pycoll
from pycoll import cost_model
from pycoll._bindings import sim as _sim
from pycoll._bindings.comm import COST_MODEL_LEN
from pycoll.algorithms import ALGORITHMS
from pycoll.tools import tuning


@pytest.mark.timeout(120)
def test_pycoll_tune_measures_and_stores_the_constants_and_each_algorithms_factors(tmp_path):
    path = tmp_path / "model.json"
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pycoll", "tune", "-n", "2"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=110, env={**os.environ, "PYCOLL_TUNE_FILE": str(path)})
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stdout + done.stderr
    assert elapsed < 30, elapsed
    model = json.loads(path.read_text())
    for key in ("alpha_s", "beta_s_per_byte", "gamma_s_per_byte"):
        assert 0 < model[key] < 1, model
    # Every algorithm auto chooses among that the default backend runs (a native one only where it lists it).
    runs = next(set(b.algorithms) for b in pycoll.backends() if b.name == "cpu")
    for key in ("latency_scale", "bandwidth_scale"):
        assert set(model[key]) == set(cost_model.CHOICES) & runs, model
        assert all(factor >= tuning.MIN_SCALE for factor in model[key].values()), model
    assert model["measured_with_ranks"] == 2
    # The table of where auto picks what, from 4 B on, each row naming an algorithm the stored model picks.
    stored = cost_model.CostModel(**{k: v for k, v in model.items() if not k.startswith("measured")})
    table = [line.split("] ", 1)[-1] for line in done.stdout.splitlines() if " .. " in line]
    assert table and table[0].split()[:2] == ["4", "B"], done.stdout
    assert [line.split()[-1] for line in table] == [name for *_, name in tuning.choice_table(stored, 2)]
    assert "saved to" in done.stdout


def test_fit_recovers_each_algorithms_factors_from_two_times():
    constants = (20e-6, 1 / 2e9, 1 / 8e9)
    truth = {name: (0.5 + i, 2.0 - 0.4 * i) for i, name in enumerate(cost_model.CHOICES)}
    model = cost_model.CostModel(*constants, latency_scale={n: f[0] for n, f in truth.items()},
                             bandwidth_scale={n: f[1] for n, f in truth.items()})
    times = {name: tuple(_sim.predict_all_reduce_s(ALGORITHMS[name], 4, nbytes, model.as_array())
                         for nbytes in (tuning.SMALL_BYTES, tuning.LARGE_BYTES)) for name in cost_model.CHOICES}
    fitted = tuning.fit_scales(constants, 4, times)
    for name, (latency, bandwidth) in truth.items():
        assert fitted.latency_scale[name] == pytest.approx(latency)
        assert fitted.bandwidth_scale[name] == pytest.approx(bandwidth)
    # Noise that makes a factor zero or negative is kept at the floor (0 would mean "textbook").
    times["ring"] = (times["ring"][1], times["ring"][1])
    assert tuning.fit_scales(constants, 4, times).bandwidth_scale["ring"] == tuning.MIN_SCALE


def test_load_reads_old_files_and_skips_unknown_algorithms(tmp_path, monkeypatch):
    path = tmp_path / "model.json"
    monkeypatch.setenv("PYCOLL_TUNE_FILE", str(path))
    path.write_text(json.dumps({"alpha_s": 1e-5, "beta_s_per_byte": 1e-9, "gamma_s_per_byte": 1e-10}))
    old = cost_model.load()
    assert old.latency_scale == {} and list(old.as_array()[3:]) == [0.0] * (COST_MODEL_LEN - 3)
    path.write_text(json.dumps({"alpha_s": 1e-5, "beta_s_per_byte": 1e-9, "gamma_s_per_byte": 1e-10,
                                "latency_scale": {"ring": 2.0, "telepathy": 9.0},
                                "bandwidth_scale": {"mesh": 3.0}}))
    model = cost_model.load()
    assert model.latency_scale == {"ring": 2.0} and model.bandwidth_scale == {"mesh": 3.0}
    assert cost_model.CostModel.from_array(model.as_array()) == model
    for bad in ({"ring": -1.0}, {"ring": "fast"}, [2.0]):
        path.write_text(json.dumps({"alpha_s": 1e-5, "beta_s_per_byte": 1e-9, "gamma_s_per_byte": 1e-10,
                                    "latency_scale": bad}))
        assert cost_model.load() is None, bad


def _auto_choice(tmp_path, alpha, beta, gamma, *, rank0_only=False, **scales):
    model = tmp_path / "model.json"
    model.write_text(json.dumps({"alpha_s": alpha, "beta_s_per_byte": beta, "gamma_s_per_byte": gamma,
                                 **scales}))
    missing = tmp_path / "none.json"
    rank_env = lambda r: {"PYCOLL_TUNE_FILE": str(model if r == 0 or not rank0_only else missing)}  # noqa: E731
    # Over TCP: the choices below are among the algorithms every transport runs (shared memory adds its own).
    with Ranks(4, "comm_worker.py", "auto", rank_env=rank_env, env={"PYCOLL_BACKEND": "tcp"}) as ranks:
        reports = ranks.reports()
    choices = {rep["algorithm"] for rep in reports.values()}
    assert len(choices) == 1, reports
    return choices.pop()


def _default_scales():
    defaults = cost_model.CostModel.from_array(_sim.default_cost_model())
    return defaults, {"latency_scale": defaults.latency_scale, "bandwidth_scale": dict(defaults.bandwidth_scale)}


@pytest.mark.timeout(60)
def test_auto_follows_the_stored_model(tmp_path):
    # Latency dominates: the fewest messages win. Bandwidth dominates: the ring's 2(N-1)/N bytes and hidden
    # reductions win. (Files without factors: the textbook formulas.)
    assert _auto_choice(tmp_path, 1.0, 1e-15, 1e-15) == "recursive_doubling"
    assert _auto_choice(tmp_path, 1e-12, 1e-9, 1e-9) == "ring"


@pytest.mark.timeout(60)
def test_stored_factors_change_the_choice(tmp_path):
    # The worker all-reduces 1 MiB over 4 ranks: halving-doubling with the default factors; a huge bandwidth
    # factor for it moves auto to another algorithm.
    defaults, scales = _default_scales()
    constants = (defaults.alpha_s, defaults.beta_s_per_byte, defaults.gamma_s_per_byte)
    assert _auto_choice(tmp_path, *constants, **scales) == "halving_doubling"
    scales["bandwidth_scale"]["halving_doubling"] = 1e3
    assert _auto_choice(tmp_path, *constants, **scales) not in ("halving_doubling", "auto")


@pytest.mark.timeout(60)
def test_every_rank_uses_rank_zeros_model(tmp_path):
    # Only rank 0 has a model file; if the others used their defaults they could pick another algorithm and
    # the collective would fail with a mismatch.
    assert _auto_choice(tmp_path, 1.0, 1e-15, 1e-15, rank0_only=True) == "recursive_doubling"
    # The factors travel too: with the default constants and factors the others would pick halving-doubling.
    defaults, scales = _default_scales()
    scales["bandwidth_scale"]["halving_doubling"] = 1e3
    assert _auto_choice(tmp_path, defaults.alpha_s, defaults.beta_s_per_byte, defaults.gamma_s_per_byte,
                        rank0_only=True, **scales) != "halving_doubling"

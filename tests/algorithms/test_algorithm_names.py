"""One meaning per name: an algorithm's name is never a backend's or a transport's ("shm" was all three), and
the shared-memory transport's own algorithm, now "shm_slots", is still reached by its former name "shm", with
a DeprecationWarning naming the new one, wherever a user gives an algorithm name."""

import json
import warnings

import numpy as np
import pytest

import pycoll
from pycoll import cost_model
from pycoll.algorithms import ALGORITHM_ALIASES, ALGORITHMS, NATIVE_ONLY, algorithm_name, default_algorithm
from pycoll.tools import simulate

TRANSPORTS = ("shm", "tcp", "shm+tcp")  # what Communicator.transport says for the host backends


@pytest.mark.timeout(10)
def test_no_algorithm_is_named_like_a_backend_or_a_transport():
    backends = {spec.name for spec in pycoll.backends()}
    assert "shm" in backends  # the backend keeps its name
    # "auto" is the one shared word, with one meaning in both places: pycoll chooses.
    assert set(ALGORITHMS) & (backends | set(TRANSPORTS)) == {"auto"}
    assert NATIVE_ONLY == ("shm_slots",)


@pytest.mark.timeout(10)
def test_the_former_name_is_the_new_one_with_a_warning_at_the_callers_line():
    with pytest.warns(DeprecationWarning, match="'shm' is deprecated.*use 'shm_slots'") as caught:
        assert algorithm_name("shm") == "shm_slots"
    assert caught[0].filename == __file__  # shown by Python's default filters: the caller's code, not pycoll's
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new name and the others warn of nothing
        assert algorithm_name("shm_slots") == "shm_slots" and algorithm_name("ring") == "ring"
    with pytest.raises(ValueError, match="unknown algorithm 'shm_slot'.*shm_slots"):
        algorithm_name("shm_slot")


@pytest.mark.timeout(10)
def test_pycoll_algorithm_and_the_simulator_take_the_former_name(monkeypatch):
    monkeypatch.setenv("PYCOLL_ALGORITHM", "shm")
    with pytest.warns(DeprecationWarning, match="use 'shm_slots'"):
        assert default_algorithm() == "shm_slots"
    with pytest.warns(DeprecationWarning, match="use 'shm_slots'"):
        assert simulate._algorithm_id("shm") == ALGORITHMS["shm_slots"]


@pytest.mark.timeout(10)
def test_a_tune_file_written_with_the_former_name_keeps_its_factors(tmp_path, monkeypatch):
    model = cost_model.CostModel(1e-6, 2e-10, 1e-10, latency_scale={"ring": 1.5, "shm": 0.25},
                             bandwidth_scale={"ring": 0.75, "shm": 0.5})
    path = tmp_path / "cost_model.json"
    path.write_text(json.dumps({"alpha_s": model.alpha_s, "beta_s_per_byte": model.beta_s_per_byte,
                                "gamma_s_per_byte": model.gamma_s_per_byte, "latency_scale": model.latency_scale,
                                "bandwidth_scale": model.bandwidth_scale}))
    monkeypatch.setenv("PYCOLL_TUNE_FILE", str(path))
    loaded = cost_model.load()
    assert loaded.latency_scale == {"ring": 1.5, "shm_slots": 0.25}, loaded
    assert loaded.bandwidth_scale == {"ring": 0.75, "shm_slots": 0.5}, loaded
    assert np.all(loaded.as_array()[3:] >= 0)


@pytest.mark.timeout(10)
def test_every_former_name_points_at_a_current_algorithm():
    assert all(old not in ALGORITHMS and new in ALGORITHMS for old, new in ALGORITHM_ALIASES.items())

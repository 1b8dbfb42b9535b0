"""The examples a user copies, run as a user runs them, checked against what they claim."""

from pathlib import Path

import numpy as np
import pytest

from multiproc import Ranks

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _params(n):
    with Ranks(n, str(EXAMPLES / "data_parallel_numpy.py"), "--json", env={"PYCOLL_BACKEND": "shm"}) as ranks:
        reports = ranks.reports()
    return reports


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [2, 4])
def test_data_parallel_numpy_trains_the_same_weights_as_one_process_on_the_whole_batch(n):
    single = _params(1)[0]
    reports = _params(n)
    for rep in reports.values():
        assert len(rep["params"]) == len(single["params"])
        for got, want in zip(rep["params"], single["params"]):
            # The same mean gradient up to the order of the summation (float64).
            np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
        assert rep["params"] == reports[0]["params"]  # every rank holds bitwise the same weights
    assert single["loss"] < 0.6  # it learned: the untrained model's loss on that batch is 0.94


def _hybrid(n, backend="shm"):
    with Ranks(n, str(EXAMPLES / "hybrid_parallel.py"), "--json", env={"PYCOLL_BACKEND": backend},
               timeout=60) as ranks:
        return ranks.reports(deadline_s=150)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("n, backend", [(8, "shm"), (4, "tcp")])
def test_hybrid_pp_dp_tp_zero1_trains_the_same_weights_as_one_process(n, backend):
    single = _hybrid(1)[0]
    reports = _hybrid(n, backend)
    shape = reports[0]["shape"]
    assert shape == ({"pp": 2, "dp": 2, "tp": 2} if n == 8 else {"pp": 2, "dp": 1, "tp": 2}), shape
    blocks = {}
    for rep in reports.values():
        np.testing.assert_allclose(rep["losses"], single["losses"], rtol=1e-9)
        for i, (w1, w2) in rep["weights"].items():
            blocks.setdefault(i, []).append((w1, w2))
    assert sorted(blocks) == sorted(single["weights"])  # every block lives on some stage
    for i, copies in blocks.items():
        want_w1, want_w2 = single["weights"][i]
        for w1, w2 in copies:  # the same on every dp and tp rank of the stage, and equal to one process's
            np.testing.assert_allclose(w1, want_w1, rtol=1e-9, atol=1e-12)
            np.testing.assert_allclose(w2, want_w2, rtol=1e-9, atol=1e-12)
    assert single["losses"][-1] < 0.3 * single["losses"][0]  # it learned

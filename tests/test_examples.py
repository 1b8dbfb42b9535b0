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

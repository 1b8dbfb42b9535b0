"""x and out that share memory other than exactly (a shifted view of one array): every collective refuses them
with ValueError naming both, before anything is sent, over both transports; exact aliasing stays in place."""

import pytest
from multiproc import backend_fixture, scenario_reports

backend = backend_fixture(["shm", "tcp"])

COLLECTIVES = ["all_reduce", "all_reduce out before x", "reduce_scatter", "all_gather", "all_to_all",
               "all_gather counts", "reduce_scatter counts"]


@pytest.mark.timeout(90)
def test_partly_overlapping_out_and_x_raise_value_error_naming_both_and_in_place_still_works(backend):
    reports = scenario_reports(2, "overlap_worker.py", "", timeout=30)
    for rank, rep in reports.items():
        assert rep["accepted"] == [], rep["accepted"]
        names = COLLECTIVES + [f"{c} root {rank}" for c in ("reduce", "gather", "scatter")]
        want = sorted(names + [name + " async" for name in names] + ["GradientBuckets"])
        assert sorted(rep["refused"]) == want
        for name, message in rep["refused"].items():
            if name == "GradientBuckets":
                assert "arrays[1]" in message and "arrays[2]" in message and "overlaps" in message, message
            else:
                assert message.startswith("out overlaps x in "), (name, message)
        assert rep["in_place_ok"] and rep["async_in_place_ok"] and rep["reduce_in_place_ok"], rep
        assert rep["all_gather_in_place_ok"], rep

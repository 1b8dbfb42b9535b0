"""An argument one rank cannot serve fails the collective on every rank within moments, never at the group's
timeout (60 s here): the refusing rank raises its own ValueError, the other MismatchError naming that reason;
ranks that disagree on a size both get MismatchError naming both calls. Where both ranks refuse alike, both
raise at once and the group stays usable. 2 real ranks; each case in a fresh group."""

import pytest
from multiproc import Ranks

pytest.importorskip("torch")

PROMPT_S = 10  # the group's timeout is 60 s: anything near it means a rank waited for the refusing one


@pytest.fixture(scope="module")
def reports():
    with Ranks(2, "torch_refusal_worker.py") as job:
        return job.reports(deadline_s=100)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case, reason", [
    ("all_reduce_band", "reduceOp: pycoll has no BAND"),
    ("all_gather_short_list", "output_tensor_list: one list of 2 tensors expected"),
    ("all_gather_into_tensor_size", "all_gather: recv_count must be size * send_count = 8, got 6"),
    ("async_all_reduce_bool_avg", "avg of bool tensors is not defined"),
])
def test_a_call_one_rank_refuses_fails_both_at_once(reports, case, reason):
    refused, waiting = reports[1][case], reports[0][case]
    assert refused["raised"] in ("ValueError", "TypeError") and reason in refused["message"], refused
    assert waiting["raised"] == "MismatchError", waiting
    assert "rank 1 refused" in waiting["message"] and reason in waiting["message"], waiting
    assert refused["seconds"] < PROMPT_S and waiting["seconds"] < PROMPT_S, (refused, waiting)


@pytest.mark.timeout(120)
def test_a_broadcast_of_different_sizes_fails_both_at_once(reports):
    for rank in (0, 1):
        rep = reports[rank]["broadcast_sizes"]
        assert rep["raised"] == "MismatchError" and rep["seconds"] < PROMPT_S, (rank, rep)
        assert "float32 x 8" in rep["message"] and "float32 x 4" in rep["message"], (rank, rep)


@pytest.mark.timeout(120)
def test_ranks_refusing_alike_raise_at_once_and_the_group_still_works(reports):
    for rank in (0, 1):
        rep = reports[rank]
        assert rep["both_refuse"]["raised"] == "ValueError", rep["both_refuse"]
        assert "BXOR" in rep["both_refuse"]["message"] and rep["both_refuse"]["seconds"] < PROMPT_S
        assert rep["after_both_refuse"]["raised"] is None, rep["after_both_refuse"]
        assert rep["after_value"] == [2.0] * 4

"""A pycoll error inside a torch collective reaches the caller as gloo's would: with the peer absent and a 1 s
timeout, a barrier entered alone, a blocking all_reduce, Work.wait() and the Work's future all raise (pycoll's
own Timeout from wait() and the blocking calls; a torch future error naming it from the future), after about
the deadline, never a silent return with the tensor unchanged."""

import pytest
from multiproc import Ranks

pytest.importorskip("torch")


@pytest.mark.timeout(60)
def test_timeout_raises_from_barrier_blocking_call_wait_and_future():
    with Ranks(2, "torch_errors_worker.py") as job:
        rep = job.reports(deadline_s=45)[0]
    barrier = rep["barrier"]
    assert barrier["raised"] == "Timeout" and "PycollError" in barrier["mro"], barrier
    assert 0.9 <= barrier["seconds"] < 10, barrier  # by the group's 1 s deadline, not at once, not never
    assert rep["all_reduce"]["raised"] == "Timeout", rep["all_reduce"]
    assert rep["unchanged"]
    assert rep["work_wait"]["raised"] == "Timeout", rep["work_wait"]
    for key in ("future_wait", "future_then"):  # torch futures carry errors as RuntimeError with the text
        assert rep[key]["raised"] == "RuntimeError" and "Timeout: rank 0 timed out" in rep[key]["message"], rep[key]

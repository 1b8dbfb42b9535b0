"""pycoll as a c10d backend of current torch, on 2 real ranks: named groups (new_group, then
destroy_process_group of it), init_device_mesh and functional collectives, DTensor and FSDP2 with the numbers
of one process, uneven all_to_all (list form and single), all_gather_coalesced, recv from any source, bool and
non-contiguous tensors copied in and out, arguments the ranks disagree on failing every rank (MismatchError),
an op pycoll lacks raising NotImplementedError; init_method="file://..." without MASTER_ADDR. And, in one
process with stand-in communicators, CUDA tensors routed to a NCCL communicator made on first use (no GPU here)."""

import datetime

import pytest
from multiproc import Ranks

torch = pytest.importorskip("torch")


@pytest.mark.timeout(90)
def test_named_groups_mesh_functional_dtensor_fsdp2_and_the_ops_gloo_has():
    with Ranks(2, "torch_c10d_worker.py", "c10d") as job:
        reports = job.reports(deadline_s=80)
    for rank, rep in reports.items():
        assert rep["failed"] == [], (rank, rep["failed"])


@pytest.mark.timeout(60)
def test_file_init_without_master_addr(tmp_path):
    with Ranks(2, "torch_c10d_worker.py", "file", str(tmp_path / "rendezvous")) as job:
        reports = job.reports(deadline_s=50)
    assert all(rep["failed"] == [] for rep in reports.values()), reports


class _DoneHandle:
    """A pycoll engine handle that has already completed, for the stand-in communicators."""
    algorithm = "stand-in"

    def wait(self, timeout):
        return True

    def done(self):
        return True

    def error(self):
        return None


class _StandIn:
    """Records the collectives called on it; each returns a completed pycoll Work."""

    def __init__(self, name, calls):
        self.name, self.calls = name, calls

    def all_reduce(self, x, op, *, async_op):
        import pycoll

        self.calls.append((self.name, "all_reduce", op))
        return pycoll.Work(_DoneHandle(), x, None)

    def barrier(self):  # a refused call still takes its slot with a barrier (see ProcessGroup._refuse)
        self.calls.append((self.name, "barrier"))

    def close(self):
        self.calls.append((self.name, "close"))


def test_cuda_tensors_go_to_a_nccl_communicator_made_on_first_use(monkeypatch):
    import pycoll
    from pycoll.torch import process_group as pg

    # Stand-in for a GPU: float64 tensors count as CUDA tensors.
    monkeypatch.setattr(pg, "_device_type", lambda t: "cuda" if t.dtype == torch.float64 else "cpu")
    made = []

    def fake_init(backend=None, **kwargs):
        made.append((backend, kwargs["rank"], kwargs["world_size"]))
        return _StandIn(backend or "host", calls)

    calls = []
    monkeypatch.setattr(pycoll, "init", fake_init)
    group = pg.create_process_group(torch.distributed.HashStore(), 0, 1, datetime.timedelta(seconds=5))
    assert made == [(None, 0, 1)]  # the host communicator only, until a CUDA tensor comes
    group.allreduce([torch.ones(2)]).wait()
    group.allreduce([torch.ones(2, dtype=torch.float64)]).wait()
    group.allreduce([torch.ones(2, dtype=torch.float64)], torch.distributed.AllreduceOptions()).wait()
    assert made == [(None, 0, 1), ("nccl", 0, 1)]  # made once, on the first CUDA call
    assert calls == [("host", "all_reduce", "sum"), ("nccl", "all_reduce", "sum"), ("nccl", "all_reduce", "sum")]
    with pytest.raises(TypeError, match="one device type"):
        group.allreduce_coalesced([torch.ones(1), torch.ones(1, dtype=torch.float64)])
    group.shutdown()
    assert calls[-2:] == [("host", "close"), ("nccl", "close")]

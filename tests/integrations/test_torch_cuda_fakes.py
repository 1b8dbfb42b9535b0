"""The torch backend's whole collective set on CUDA tensors, on 2 real ranks against the fake NCCL (no GPU here:
tests/fakes/fake_torch_cuda.py presents CPU tensors as CUDA ones, the fake's device memory is host memory):
all_reduce, broadcast, reduce, the list and flat all_gathers (all_gather_coalesced included), the list and flat
reduce_scatters, all_to_all (equal, uneven single, list), gather, scatter, send/recv and barrier, each exact. The
list forms stage through a flat buffer, which must be on the tensors' device; send/recv, gather, scatter and the
all-to-alls run over the NCCL communicator's grouped send/recv."""

import pytest
from fakes.vendor_harness import fake_library_env
from multiproc import Ranks

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def nccl(tmp_path_factory):
    return fake_library_env("nccl", tmp_path_factory.mktemp("nccl"))


@pytest.mark.timeout(120)
def test_every_collective_of_the_torch_backend_on_cuda_tensors(nccl, tmp_path):
    # A small per-peer buffer: the 256 KiB send completes only once its receive is posted, as on a GPU.
    env = dict(nccl, FAKE_COLL_LOG=str(tmp_path / "log"), FAKE_P2P_BUFFER_BYTES="16384")
    with Ranks(2, "torch_cuda_fake_worker.py", env=env, timeout=60) as job:
        reports = job.reports(deadline_s=110)
    for rank, rep in reports.items():
        assert rep["failed"] == [], (rank, rep["failed"])
        assert rep["cuda_backend"] == "nccl"
    log = (tmp_path / "log").read_text()
    # Every CUDA collective went to the NCCL communicator, the point-to-point ones as its grouped send/recv.
    for call in ("ncclAllReduce", "ncclBroadcast", "ncclReduce", "ncclAllGather", "ncclReduceScatter", "ncclSend",
                 "ncclRecv"):
        assert f"{call} rank=0" in log and f"{call} rank=1" in log, call


@pytest.mark.timeout(120)
def test_wait_on_a_cuda_tensor_orders_the_current_stream_without_a_host_wait(nccl, tmp_path):
    # As ProcessGroupNCCL's Work.wait(): the host goes on while the device still runs the collective, and the
    # current stream's later work runs after it. Every buffer is device memory here; each collective takes 0.4 s.
    kernel_s = 0.4
    env = dict(nccl, FAKE_COLL_LOG=str(tmp_path / "log"), FAKE_CUDA_MEMORY_TYPE="2",
               FAKE_KERNEL_US=str(int(kernel_s * 1e6)))
    with Ranks(2, "torch_cuda_stream_worker.py", env=env, timeout=60) as job:
        reports = job.reports(deadline_s=110)
    for rank, rep in reports.items():
        assert rep["waited"] < kernel_s / 2 and rep["pending"], (rank, rep)
        assert rep["synced"] >= kernel_s * 0.9, (rank, rep)
        assert rep["coalesced_waited"] < kernel_s / 2, (rank, rep)
        assert rep["coalesced_synced"] >= 2 * kernel_s * 0.9, (rank, rep)  # both, one after the other
        assert rep["right"], (rank, rep)

"""How a vendor backend's failures reach the user, the same for NCCL and HCCL: a dead peer (the deadline, then
the vendor's teardown), every vendor result an injected failure can give, and a missing library. Against the
fake libraries (tests/fakes/fake_nccl.c, fake_hccl.c) in real processes."""

import re

import pytest
from fakes.vendor_harness import fakes_fixture, job_env, probe_without_library, run_dead_peer, run_injected

INJECTED = "injected by FAKE_COLL_FAIL"  # the fake NCCL's last-error text: pycoll appends it to the message


fakes = fakes_fixture()


@pytest.fixture
def env(fakes, vendor, tmp_path):
    return job_env(fakes(vendor), tmp_path)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("vendor, accuracy, deadline, timed_out_text, teardown", [
    ("nccl", "fast", 1.5, r"did not complete within 1\.500 s.*aborted", "ncclCommAbort rank=0"),
    # pycoll's own schedules over ncclSend/ncclRecv
    ("nccl", "compensated", 1.5, r"ncclSend/ncclRecv did not complete within 1\.500 s.*aborted",
     "ncclCommAbort rank=0"),
    # HCCL's destroy waits behind the task stuck on the dead peer (fake_hccl.c): begun, then left to finish alone
    ("hccl", "fast", 1.0, r"HcclAllReduce did not complete within 1\.000 s", "HcclCommDestroy begins rank=0"),
], ids=["nccl", "nccl-compensated", "hccl"])
def test_dead_peer_times_out_and_tears_the_communicator_down(env, vendor, accuracy, deadline, timed_out_text,
                                                             teardown):
    timed_out, closed = run_dead_peer(vendor, env, deadline, accuracy=accuracy)
    assert re.search(timed_out_text, timed_out) and "earlier error" in closed
    assert teardown in open(env["FAKE_COLL_LOG"]).read()


# vendor, accuracy, FAKE_COLL_FAIL, the exception raised, what its message names
INJECTED_FAILURES = [
    ("nccl", "fast", "async=6", "PeerFailure", ["ncclRemoteError, code 6", INJECTED]),
    ("nccl", "fast", "ncclAllReduce=4", "ValueError", ["ncclInvalidArgument", INJECTED]),
    ("nccl", "fast", "ncclAllReduce=1", "PycollError", ["ncclUnhandledCudaError", INJECTED]),
    ("nccl", "fast", "ncclAllReduce=2", "PycollError", ["ncclSystemError", INJECTED]),
    ("nccl", "fast", "ncclAllReduce=8", "Timeout", ["ncclTimeout", INJECTED]),
    ("nccl", "compensated", "ncclRecv=6", "PeerFailure", ["ncclRecv failed", INJECTED]),
    ("nccl", "compensated", "ncclSend=4", "ValueError", ["ncclSend failed", INJECTED]),
    ("nccl", "compensated", "ncclGroupEnd=2", "PycollError", ["ncclGroupEnd failed", INJECTED]),
    ("hccl", "fast", "async=21", "PeerFailure", ["HcclResult 21"]),
    ("hccl", "fast", "HcclAllReduce=1", "ValueError", ["HcclResult 1"]),
    ("hccl", "fast", "HcclAllReduce=9", "Timeout", ["HcclResult 9"]),
    ("hccl", "fast", "HcclAllReduce=5", "PycollError", ["HcclResult 5"]),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("vendor, accuracy, fail, error, texts", INJECTED_FAILURES,
                         ids=[f"{vendor}-{fail}" for vendor, _, fail, _, _ in INJECTED_FAILURES])
def test_vendor_results_map_to_pycoll_errors(env, vendor, accuracy, fail, error, texts):
    # float64: the compensated cases run pycoll's schedules (over send/recv), not the vendor's all-reduce
    name, message = run_injected(vendor, env, fail, dtype="float64" if accuracy == "compensated" else "float32",
                                 accuracy=accuracy)
    assert name == error, message
    for text in texts:
        assert text in message


@pytest.mark.parametrize("vendor, texts", [
    ("nccl", ["libnccl.so.2 not found -- pip install nvidia-nccl-cu12", "PYCOLL_NCCL_LIBRARY"]),
    ("hccl", ["libhccl.so not found", "PYCOLL_HCCL_LIBRARY"]),
], ids=["nccl", "hccl"])
def test_probe_names_what_to_install(tmp_path, vendor, texts):
    out = probe_without_library(vendor, tmp_path)
    for text in texts:
        assert text in out

"""How a vendor backend's failures reach the user, the same for NCCL and HCCL: a dead peer (the deadline, then
the vendor's teardown), every vendor result an injected failure can give, and a missing library. Against the
fake libraries (tests/fakes/fake_nccl.c, fake_hccl.c) in real processes."""

import functools
import re
import threading
import time

import numpy as np
import pytest
from fakes.vendor_harness import (
    buffer,
    fakes_fixture,
    job_env,
    make_engine,
    probe_without_library,
    run_dead_peer,
    run_injected,
    run_ranks,
)
from multiproc import raised

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


ABORT_DEADLINE_S = 4.0


def _aborted_rank(vendor, accuracy, rank, world):
    """Rank 1 never calls; rank 0's all_reduce waits on it until another thread requests an abort (a failure seen
    elsewhere, as backend "auto" passes one on). Rank 0 returns the error, how long the call took, and what the
    next call raised."""
    engine = make_engine(vendor, rank, world, ABORT_DEADLINE_S)
    if rank == 1:
        return None
    x = np.ones(4, np.float64 if accuracy == "compensated" else np.float32)
    threading.Timer(0.3, engine.request_abort, (1, "rank 1 is gone (noticed elsewhere)")).start()
    outcomes = []
    for _ in range(2):
        start = time.monotonic()
        outcomes.append((raised(lambda: engine.all_reduce(buffer(x), buffer(x), 0, "auto", accuracy)),
                         time.monotonic() - start))
    engine.close()
    return outcomes


@pytest.mark.timeout(60)
@pytest.mark.parametrize("vendor, accuracy", [("nccl", "fast"), ("nccl", "compensated"), ("hccl", "fast")],
                         ids=["nccl", "nccl-compensated", "hccl"])
def test_an_abort_requested_from_another_thread_ends_the_stuck_call_as_peer_failure(env, vendor, accuracy):
    status, value = run_ranks(functools.partial(_aborted_rank, vendor, accuracy), 2, env)[0]
    assert status == "ok", value
    ((kind, message), elapsed), ((next_kind, next_message), _) = value
    assert kind == "PeerFailure" and "rank 1 is gone (noticed elsewhere)" in message, (kind, message)
    assert 0.25 < elapsed < ABORT_DEADLINE_S / 2, elapsed
    assert next_kind == "CommunicatorClosed" and "earlier error" in next_message, (next_kind, next_message)


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

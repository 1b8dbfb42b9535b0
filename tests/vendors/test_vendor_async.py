"""async_op=True on a vendor backend (backends/common/vendor_async.c): the collective is enqueued and returns;
the communicator's one watchdog thread completes its work when the event recorded behind it has completed, or
fails it with the vendor's asynchronous error or at the deadline (aborting the communicator), as torch's
ProcessGroupNCCL does. Against the fake libnccl, whose kernels take FAKE_KERNEL_US and whose events complete
with the work queued before them (tests/fakes/fake_nccl.c)."""

import functools
import os
import time
from pathlib import Path

import numpy as np
import pytest
from fakes.vendor_harness import (
    buffer,
    fakes_fixture,
    job_env,
    make_engine,
    run_ranks_ok,
    vendor_fixtures,
)

from pycoll.errors import PeerFailure, Timeout
from pycoll.work import CompletedHandle

SUM = 0
fake_env, env = vendor_fixtures("nccl")
fakes = fakes_fixture()


def _threads():
    return len(os.listdir("/proc/self/task"))


def _returns_before_completion(vendor, rank, world):
    engine = make_engine(vendor, rank, world, 10.0)
    x = np.full(1000, rank + 1.0, np.float32)
    engine.all_reduce(buffer(x), buffer(x), SUM, "auto", "fast")  # warm: the communicator exists
    x[:] = rank + 1.0
    threads = _threads()
    started = time.monotonic()
    handles = [engine.start("all_reduce", buffer(x), buffer(x), SUM, "auto", "fast") for _ in range(3)]
    returned = time.monotonic() - started
    pending = [not h.done() for h in handles]
    more_threads = _threads() - threads
    finished = [h.wait(20.0) for h in handles]
    errors = [h.error() for h in handles]
    engine.close()
    return returned, pending, finished, errors, more_threads, x


@pytest.mark.timeout(60)
@pytest.mark.parametrize("vendor", ["nccl", "hccl"])
def test_async_op_returns_once_enqueued_and_the_watchdog_completes_it(fakes, tmp_path, vendor):
    kernel_s = 0.4
    env = job_env(fakes(vendor), tmp_path)
    outs = run_ranks_ok(functools.partial(_returns_before_completion, vendor), 2,
                        dict(env, FAKE_KERNEL_US=str(int(kernel_s * 1e6))), timeout=50)
    for returned, pending, finished, errors, more_threads, x in outs:
        assert returned < kernel_s, returned  # three calls enqueued in less than one kernel's time
        assert pending == [True, True, True]
        assert finished == [True, True, True] and errors == [None, None, None]
        assert more_threads <= 1, more_threads  # one watchdog per communicator, not a thread per call
        np.testing.assert_array_equal(x, np.full(1000, 3.0 * 4, np.float32))  # (1 + 2) doubled twice
    log = Path(env["FAKE_COLL_LOG"]).read_text()
    assert log.count({"nccl": "cudaEventRecord", "hccl": "aclrtRecordEvent"}[vendor]) >= 6


def _peer_failure(rank, world):
    engine = make_engine("nccl", rank, world, 10.0)
    x = np.ones(4, np.float32)
    handle = engine.start("all_reduce", buffer(x), buffer(x), SUM, "auto", "fast")
    enqueued = not isinstance(handle, CompletedHandle)  # a work of the watchdog's, not a call that already failed
    finished = handle.wait(20.0)
    error = handle.error()
    engine.close()
    return enqueued, finished, type(error).__name__, str(error)


@pytest.mark.timeout(60)
def test_a_peer_failure_surfaces_through_the_work(env):
    # The kernel runs a while before it hits the dead peer: the error comes after the call has returned.
    outs = run_ranks_ok(_peer_failure, 2, dict(env, FAKE_COLL_FAIL="async=6", FAKE_KERNEL_US="300000"), timeout=50)
    for enqueued, finished, name, message in outs:
        assert enqueued and finished, message
        assert name == PeerFailure.__name__, message
        assert "ncclRemoteError" in message, message


def _dead_peer(timeout, rank, world):
    engine = make_engine("nccl", rank, world, timeout)
    if rank == 1:
        return None  # leaves without calling
    x = np.ones(4, np.float32)
    started = time.monotonic()
    handle = engine.start("all_reduce", buffer(x), buffer(x), SUM, "auto", "fast")
    returned = time.monotonic() - started
    finished = handle.wait(20.0)
    elapsed = time.monotonic() - started
    error = handle.error()
    engine.close()
    return returned, finished, elapsed, type(error).__name__, str(error)


@pytest.mark.timeout(60)
def test_the_deadline_aborts_the_communicator_and_fails_the_work(env):
    timeout = 1.0
    outs = run_ranks_ok(functools.partial(_dead_peer, timeout), 2, env, timeout=50)
    returned, finished, elapsed, name, message = outs[0]
    assert returned < timeout / 2, returned
    assert finished and name == Timeout.__name__, message
    assert timeout - 0.1 < elapsed < timeout + 5.0, elapsed
    assert "did not complete within 1.000 s" in message and "aborted" in message, message
    assert "ncclCommAbort rank=0" in Path(env["FAKE_COLL_LOG"]).read_text()


def _close_with_pending_work(rank, world):
    engine = make_engine("nccl", rank, world, 10.0)
    x = np.full(4, rank + 1.0, np.float32)
    handle = engine.start("all_reduce", buffer(x), buffer(x), SUM, "auto", "fast")
    engine.close()  # before the kernel is done: the work still finishes, and says how
    return handle.wait(0.0), handle.error(), x


@pytest.mark.timeout(60)
def test_close_lets_pending_work_finish(env):
    for finished, error, x in run_ranks_ok(_close_with_pending_work, 2, dict(env, FAKE_KERNEL_US="300000"),
                                           timeout=50):
        assert finished and error is None, error
        np.testing.assert_array_equal(x, np.full(4, 3.0, np.float32))

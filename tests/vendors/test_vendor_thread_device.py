"""The watchdog thread of async vendor work (backends/common/vendor_async.c) queries events and the vendor's
asynchronous error from a thread pycoll started, which has no current device: it must take the communicator's
first. Otherwise the CUDA runtime makes device 0's primary context current on it -- an extra context on GPU 0 for
every rank of a node -- and AscendCL refuses the queries. The fakes record what each thread has current
(tests/fakes/fake_nccl.c, fake_hccl.c) and log a query made without one."""

import functools

import numpy as np
import pytest
from fakes.vendor_harness import buffer, fakes_fixture, job_env, make_engine, run_ranks_ok

SUM = 0
fakes = fakes_fixture()


def _async_sums(vendor, device, rank, world):
    """Three async all_reduces on `device`, waited for; each work's error (None when it completed) and the
    result."""
    engine = make_engine(vendor, rank, world, 10.0)
    x = np.full(64, rank + 1.0, np.float32)
    buf = buffer(x)
    buf.device_id = device
    handles = [engine.start("all_reduce", buf, buf, SUM, "auto", "fast") for _ in range(3)]
    finished = [h.wait(20.0) for h in handles]
    errors = [h.error() and str(h.error()) for h in handles]
    engine.close()
    return finished, errors, x


def _run(vendor, device, fakes, tmp_path, extra):
    env = dict(job_env(fakes(vendor), tmp_path), **extra)
    outs = run_ranks_ok(functools.partial(_async_sums, vendor, device), 2, env, timeout=50)
    for finished, errors, x in outs:
        assert finished == [True, True, True] and errors == [None, None, None], errors
        np.testing.assert_array_equal(x, np.full(64, 3.0 * 2 ** 2, np.float32))  # (1 + 2) summed thrice
    return (tmp_path / "log").read_text()


@pytest.mark.timeout(60)
def test_the_nccl_watchdog_sets_the_communicators_device_before_it_queries(fakes, tmp_path):
    # Each rank's main thread has device 1 current (the framework set it): the communicator is on device 1.
    log = _run("nccl", 1, fakes, tmp_path, {"FAKE_CUDA_DEVICE_COUNT": "2", "FAKE_CUDA_CURRENT_DEVICE": "1"})
    assert "no device set on this thread" not in log, log
    assert log.count("cudaSetDevice device=1") == 2, log  # once per rank: its watchdog, before any query
    assert "cudaSetDevice device=0" not in log, log


@pytest.mark.timeout(60)
def test_the_hccl_watchdog_sets_the_communicators_acl_context_before_it_queries(fakes, tmp_path):
    log = _run("hccl", 0, fakes, tmp_path, {})
    assert "without an ACL context" not in log, log
    assert log.count("aclrtSetCurrentContext primary") >= 2, log


@pytest.mark.timeout(60)
def test_a_watchdog_that_cannot_set_the_device_fails_the_works_saying_so(fakes, tmp_path):
    env = dict(job_env(fakes("nccl"), tmp_path), FAKE_CUDA_DEVICE_COUNT="2", FAKE_CUDA_CURRENT_DEVICE="1",
               FAKE_COLL_FAIL="cudaSetDevice=101")
    for finished, errors, _ in run_ranks_ok(functools.partial(_async_sums, "nccl", 1), 2, env, timeout=50):
        assert finished == [True, True, True], finished
        assert all("watchdog thread could not make the communicator's device (1) current" in e for e in errors), errors
    assert "no device set on this thread" not in (tmp_path / "log").read_text()  # it never queried without it

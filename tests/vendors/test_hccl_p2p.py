"""HCCL's point-to-point under pycoll (backends/hccl/hccl_vendor.c): the vendor struct's group issued as one
HcclBatchSendRecv, so pycoll_vendor_send_recv and pycoll's own schedules (native/algorithms) run over HCCL as
over NCCL; the symbols older CANN lacks (HcclGetErrorString, HcclGetCommAsyncError, HcclBatchSendRecv) are
optional; newer HcclResult codes are named; teardown threads set the ACL context first. Against the fake
libhccl (tests/fakes/fake_hccl.c) in real processes. Its "NPU" memory is host memory, which pycoll's
guarded test memory table (tests/fakes/guarded_memory.c, through PYCOLL_TEST_MEMORY_TABLE) stands in for a device
kernel table on."""

import functools
import time
from pathlib import Path

import numpy as np
import pytest
from fakes import guarded_memory
from fakes.vendor_harness import (
    buffer,
    fake_library_env,
    job_env,
    make_engine,
    run_injected,
    run_ranks_ok,
    vendor_fixtures,
)
from multiproc import raised

from pycoll.errors import PycollError

FLOAT32 = 6
SUM = 0
BUFFER = 16 * 1024

fake_env, env = vendor_fixtures("hccl")


def _guarded_table():
    """The variable that makes the guarded test table the transport's table for "NPU" memory."""
    return {guarded_memory.VARIABLE: guarded_memory.library_path()}


def _ptr(a):
    return a.__array_interface__["data"][0]


def _exchange_rank(count, rank, world):
    """Both ranks send each other `count` floats and receive at once (one HcclBatchSendRecv)."""
    engine = make_engine("hccl", rank, world, 8.0)
    mine = np.full(count, rank + 1, np.float32)
    got = np.zeros(count, np.float32)
    peer = 1 - rank
    engine._comm("auto").send_recv(_ptr(mine), count, peer, _ptr(got), count, peer, FLOAT32, 0)
    engine.close()
    return got


@pytest.mark.timeout(60)
def test_send_recv_is_one_batch_that_progresses_together(env):
    count = 1 << 18  # 1 MiB each way, far past the per-peer buffer: the two halves must progress together
    outs = run_ranks_ok(functools.partial(_exchange_rank, count), 2, dict(env, FAKE_P2P_BUFFER_BYTES=str(BUFFER)),
                        timeout=50)
    np.testing.assert_array_equal(outs[0], np.full(count, 2, np.float32))
    np.testing.assert_array_equal(outs[1], np.full(count, 1, np.float32))
    log = Path(env["FAKE_COLL_LOG"]).read_text()
    assert "HcclBatchSendRecv rank=0 items=2" in log


COUNT = 3 * (1 << 16) + 7


def _own_rank(rank, world):
    """pycoll's own schedules over HCCL: the compensated ring and the mesh, multi-segment."""
    engine = make_engine("hccl", rank, world, 8.0)
    comm = engine._comm("auto")
    out = {}
    for algorithm, accuracy in (("ring", "compensated"), ("mesh", "fast"), ("recursive_doubling", "fast")):
        x = (np.arange(COUNT) % 89 + rank).astype(np.float32)
        y = np.empty_like(x)
        out[algorithm] = comm.own("all_reduce", _ptr(x), _ptr(y), COUNT, FLOAT32, SUM, -1, 0, algorithm, accuracy), y
    engine.close()
    return out


@pytest.mark.timeout(90)
@pytest.mark.parametrize("world", [2, 3])
def test_own_schedules_and_compensated_ring_run_over_hccl(env, world):
    outs = run_ranks_ok(_own_rank, world,
                        dict(env, FAKE_P2P_BUFFER_BYTES=str(BUFFER), **_guarded_table()), timeout=80)
    expected = sum((np.arange(COUNT) % 89 + r).astype(np.float64) for r in range(world)).astype(np.float32)
    for out in outs:
        for algorithm, (ran, y) in out.items():
            assert ran == algorithm
            np.testing.assert_array_equal(y, expected, err_msg=algorithm)


def test_npu_memory_without_a_kernel_table_is_refused_by_name(env):
    """Without the test table, NPU memory has no pycoll kernels: refused, naming why, the communicator usable."""
    outs = run_ranks_ok(_refused_rank, 2, env, timeout=50)
    for (name, message), x in outs:
        assert name == "BackendUnavailable", message
        assert "pycoll has no kernels for hccl's device memory" in message
        np.testing.assert_array_equal(x, np.full(8, 2, np.float32))


def _refusal(call):
    """None where call() runs, else the PycollError it raised as (class name, message)."""
    return raised(call, PycollError)


def _refused_rank(rank, world):
    engine = make_engine("hccl", rank, world, 5.0)
    x = np.ones(8, np.float32)
    result = _refusal(lambda: engine._comm("auto").own("all_reduce", _ptr(x), _ptr(x), 8, FLOAT32, SUM, -1, 0,
                                                       "ring", "compensated"))
    engine.all_reduce(buffer(x, "npu"), buffer(x, "npu"), SUM, "auto", "fast")  # still usable
    engine.close()
    return result, x


@pytest.mark.timeout(60)
@pytest.mark.parametrize("code, name, error", [(24, "HCCL_E_OOM", "MemoryError"),
                                               (23, "HCCL_E_OPRETRY_FAIL", "PycollError"),
                                               (1041, "HCCL_E_IN_STATUS", "PycollError")])
def test_newer_hccl_results_are_named(env, code, name, error):
    exc_name, message = run_injected("hccl", env, f"HcclAllReduce={code}")
    assert exc_name == error, message
    assert f"({name}, HcclResult {code})" in message, message


def test_teardown_threads_set_the_acl_context(env):
    """The bounded destroy runs on a thread of its own, which first sets the communicator's ACL context."""
    run_ranks_ok(_close_rank, 2, env, timeout=50)
    log = Path(env["FAKE_COLL_LOG"]).read_text()
    assert "without an ACL context" not in log, log
    assert log.count("aclrtSetCurrentContext primary") == 2, log
    assert log.count("HcclCommDestroy rank=") == 2, log


def _close_rank(rank, world):
    engine = make_engine("hccl", rank, world, 5.0)
    x = np.ones(4, np.float32)
    engine.all_reduce(buffer(x, "npu"), buffer(x, "npu"), SUM, "auto", "fast")
    engine.close()


# ---- older CANN: no HcclGetErrorString, HcclGetCommAsyncError, HcclBatchSendRecv ----

@pytest.fixture(scope="module")
def old_cann_env(tmp_path_factory):
    return fake_library_env("hccl", tmp_path_factory.mktemp("hccl_old"), defines=("FAKE_HCCL_OLD_CANN",))


def _old_cann_rank(rank, world):
    engine = make_engine("hccl", rank, world, 5.0)
    x = np.full(4, rank + 1.0, np.float32)
    engine.all_reduce(buffer(x, "npu"), buffer(x, "npu"), SUM, "auto", "fast")
    got = np.zeros(4, np.float32)
    refused = _refusal(lambda: engine._comm("auto").send_recv(_ptr(x), 4, 1 - rank, _ptr(got), 4, 1 - rank,
                                                              FLOAT32, 0))
    engine.all_reduce(buffer(x, "npu"), buffer(x, "npu"), SUM, "auto", "fast")  # still usable
    engine.close()
    return x, refused


@pytest.mark.timeout(60)
def test_older_cann_without_the_weak_symbols_loads_and_runs(old_cann_env, tmp_path):
    outs = run_ranks_ok(_old_cann_rank, 2, job_env(old_cann_env, tmp_path), timeout=50)
    for x, refused in outs:
        np.testing.assert_array_equal(x, np.full(4, 6, np.float32))
        assert refused is not None and refused[0] == "PycollError", refused
        assert "HcclBatchSendRecv refused the group" in refused[1], refused
        assert "(HCCL_E_NOT_SUPPORT, HcclResult 5); the communicator is still usable" in refused[1], refused


@pytest.mark.timeout(60)
def test_older_cann_error_message_without_hccl_get_error_string(old_cann_env, tmp_path):
    exc_name, message = run_injected("hccl", job_env(old_cann_env, tmp_path), "HcclAllReduce=4")
    assert exc_name == "PycollError", message
    assert "(this CANN has no HcclGetErrorString) (HCCL_E_INTERNAL, HcclResult 4)" in message, message


def _abort_behind_a_stuck_task(rank, world):
    """Rank 1 never joins the collective, so rank 0's enqueued all_reduce is a task that never finishes; then a
    schedule of pycoll's own is refused (no HcclBatchSendRecv in this CANN) and pycoll aborts the transport:
    HCCL's abort is its destroy, which waits behind that task. It must return within the timeout."""
    engine = make_engine("hccl", rank, world, 2.0)
    if rank == 1:
        return None
    x = np.ones(8, np.float32)
    handle = engine.start("all_reduce", buffer(x, "npu"), buffer(x, "npu"), SUM, "auto", "fast")
    started = time.monotonic()
    try:
        engine._comm("auto").own("all_reduce", _ptr(x), _ptr(x), 8, FLOAT32, SUM, -1, 0, "ring", "compensated")
        error = None
    except PycollError as exc:
        error = str(exc)
    elapsed = time.monotonic() - started
    handle.wait(10.0)
    return error, elapsed


@pytest.mark.timeout(60)
def test_transport_abort_is_bounded_like_every_teardown(old_cann_env, tmp_path):
    env = dict(job_env(old_cann_env, tmp_path), FAKE_DEADLOCK_S="8", **_guarded_table())
    error, elapsed = run_ranks_ok(_abort_behind_a_stuck_task, 2, env, timeout=50)[0]
    assert error is not None, error  # the refused group failed the schedule
    assert elapsed < 5.0, elapsed  # the destroy was left to finish alone after the timeout (2 s), not 8 s
    assert "HcclCommDestroy begins rank=0" in Path(env["FAKE_COLL_LOG"]).read_text()

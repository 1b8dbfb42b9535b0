"""Stream order of the vendor collectives (backends/common/vendor_streams.c, vendor_async.c, pycoll/work.py), as
torch's ProcessGroupNCCL orders them: each collective runs on a stream of the communicator's own, after the
caller's stream's earlier work (an event), and an async Work's wait() orders the caller's stream after the
collective's end event instead of blocking the host; its arrays live until that event has passed; the watchdog
still aborts at the deadline. Against the fake NCCL, whose streams run their work asynchronously on threads of
their own (tests/fakes/fake_nccl.c), with every buffer reported as device memory (FAKE_CUDA_MEMORY_TYPE=2); not
on a GPU."""

import ctypes
import functools
import gc
import os
import time
import weakref
from pathlib import Path

import numpy as np
import pytest
from fakes.vendor_harness import FakeDeviceArray, fakes_fixture, job_env, run_ranks, run_ranks_ok
from multiproc import free_port

fakes = fakes_fixture()

COUNT = 1024
KERNEL_S = 0.4  # each fake collective's run time: long past a call that only enqueues
NON_BLOCKING, HOST_TO_DEVICE, DEVICE_TO_HOST = 1, 1, 2


def _runtime():
    rt = ctypes.CDLL(os.environ["PYCOLL_CUDART_LIBRARY"])
    rt.cudaMemcpyAsync.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
    rt.fake_stream_sleep.argtypes = [ctypes.c_void_p, ctypes.c_longlong]
    return rt


def _side_stream(rt):
    s = ctypes.c_void_p()
    assert rt.cudaStreamCreateWithFlags(ctypes.byref(s), NON_BLOCKING) == 0
    return s


def _init(port, rank, world, timeout=20.0):
    import pycoll
    return pycoll.init("nccl", rank=rank, world_size=world, master_addr="127.0.0.1", master_port=port,
                       timeout=timeout)


def _env(fakes, tmp_path, **extra):
    return {**job_env(fakes("nccl"), tmp_path), "FAKE_CUDA_MEMORY_TYPE": "2", **extra}


def _wait_without_host_block(port, rank, world):
    rt = _runtime()
    comm = _init(port, rank, world)
    side = _side_stream(rt)
    x = np.full(COUNT, rank + 1.0, np.float32)
    comm.all_reduce(FakeDeviceArray(x, stream=side.value))  # warm: the communicator and its stream exist
    x[:] = rank + 1.0
    started = time.monotonic()
    work = comm.all_reduce(FakeDeviceArray(x, stream=side.value), async_op=True)
    work.wait()
    waited = time.monotonic() - started
    pending = not work.is_completed()
    # A later "kernel" on the caller's stream: a copy to pageable host memory, which returns once it has run.
    seen = np.empty_like(x)
    assert rt.cudaMemcpyAsync(seen.ctypes.data, x.ctypes.data, x.nbytes, DEVICE_TO_HOST, side) == 0
    copied = time.monotonic() - started
    work.synchronize()
    comm.close()
    return waited, pending, copied, seen, f"{side.value:#x}"


@pytest.mark.timeout(60)
def test_wait_orders_the_callers_stream_after_the_collective_without_a_host_wait(fakes, tmp_path):
    env = _env(fakes, tmp_path, FAKE_KERNEL_US=str(int(KERNEL_S * 1e6)))
    outs = run_ranks_ok(functools.partial(_wait_without_host_block, free_port()), 2, env, timeout=50)
    log = Path(env["FAKE_COLL_LOG"]).read_text().splitlines()
    for waited, pending, copied, seen, side in outs:
        assert waited < KERNEL_S / 2, waited  # wait() returned while the device still ran the collective
        assert pending
        assert copied >= KERNEL_S * 0.9, copied  # the stream's later copy ran only after the collective's end
        np.testing.assert_array_equal(seen, np.full(COUNT, 3.0, np.float32))
        # The collectives ran on the communicator's stream, ordered after the caller's by an event, and wait()
        # ordered the caller's after the collective.
        ran_on = {line.partition(" stream=")[2].split()[0] for line in log if line.startswith("ncclAllReduce")}
        own = {line.split()[1].partition("=")[2] for line in log
               if line.startswith("cudaStreamWaitEvent") and line.endswith(f"on={side}")}
        assert len(own) == 1 and own <= ran_on and side not in ran_on, (side, own, ran_on)
        assert f"cudaStreamWaitEvent stream={side} on={own.pop()}" in log, log


def _input_from_side_stream(port, rank, world):
    rt = _runtime()
    comm = _init(port, rank, world)
    side = _side_stream(rt)
    want = np.arange(COUNT, dtype=np.float32) + rank
    x = np.zeros(COUNT, np.float32)  # written by the side stream's work after its 0.3 s kernel
    rt.fake_stream_sleep(side, 300_000)
    assert rt.cudaMemcpyAsync(x.ctypes.data, want.ctypes.data, x.nbytes, HOST_TO_DEVICE, side) == 0
    comm.all_reduce(FakeDeviceArray(x, stream=side.value))
    comm.close()
    return x


@pytest.mark.timeout(60)
def test_an_input_written_on_the_callers_side_stream_is_read_after_it_is_written(fakes, tmp_path):
    outs = run_ranks_ok(functools.partial(_input_from_side_stream, free_port()), 2, _env(fakes, tmp_path),
                        timeout=50)
    for x in outs:
        np.testing.assert_array_equal(x, 2 * np.arange(COUNT, dtype=np.float32) + 1)


def _arrays_outlive_the_collective(port, rank, world):
    comm = _init(port, rank, world)
    warm = np.ones(COUNT, np.float32)
    comm.all_reduce(FakeDeviceArray(warm))
    array = FakeDeviceArray(np.ones(COUNT, np.float32))  # the input: held by nothing but the Work once dropped
    out = np.zeros(COUNT, np.float32)
    alive = weakref.ref(array)
    work = comm.all_reduce(array, out=FakeDeviceArray(out), async_op=True)
    work.wait()  # returns at once: the collective still reads the input on the device
    del array, work
    gc.collect()
    while_running = alive() is not None
    time.sleep(KERNEL_S * 1.5)
    comm.all_reduce(FakeDeviceArray(warm))  # the next call forgets the Works seen complete
    gc.collect()
    after = alive() is not None
    comm.close()
    return while_running, after, out


@pytest.mark.timeout(60)
def test_the_arrays_of_a_waited_work_live_until_its_end_event(fakes, tmp_path):
    env = _env(fakes, tmp_path, FAKE_KERNEL_US=str(int(KERNEL_S * 1e6)))
    for while_running, after, out in run_ranks_ok(functools.partial(_arrays_outlive_the_collective, free_port()),
                                                  2, env, timeout=50):
        assert while_running  # dropped by the caller, kept while the device may still read it
        assert not after  # released once its end event passed
        np.testing.assert_array_equal(out, np.full(COUNT, 2.0, np.float32))


def _dead_peer(port, timeout, rank, world):
    from pycoll.errors import Timeout
    comm = _init(port, rank, world, timeout)
    if rank == 1:
        return None  # leaves without calling
    x = np.ones(COUNT, np.float32)
    started = time.monotonic()
    work = comm.all_reduce(FakeDeviceArray(x), async_op=True)
    work.wait()
    waited = time.monotonic() - started
    with pytest.raises(Timeout) as timed_out:
        work.synchronize()
    elapsed = time.monotonic() - started
    return waited, elapsed, str(timed_out.value), type(work.exception()).__name__


@pytest.mark.timeout(60)
def test_the_watchdog_aborts_a_waited_work_at_its_deadline(fakes, tmp_path):
    timeout = 1.0
    env = _env(fakes, tmp_path)
    status, value = run_ranks(functools.partial(_dead_peer, free_port(), timeout), 2, env, timeout=50)[0]
    assert status == "ok", value
    waited, elapsed, message, exception = value
    assert waited < timeout / 2, waited  # wait() did not block on the host
    assert timeout - 0.1 < elapsed < timeout + 5.0, elapsed
    assert "did not complete within 1.000 s" in message and "aborted" in message, message
    assert exception == "Timeout"
    assert "ncclCommAbort rank=0" in Path(env["FAKE_COLL_LOG"]).read_text()


def _host_waits(rank, world):
    from fakes.vendor_harness import buffer, make_engine
    engine = make_engine("nccl", rank, world, 10.0)
    rt = ctypes.CDLL(os.environ["PYCOLL_CUDART_LIBRARY"])
    rt.fake_cuda_wait_calls.restype = ctypes.c_longlong
    x = np.full(COUNT, rank + 1.0, np.float32)
    engine.all_reduce(buffer(x), buffer(x), 0, "auto", "compensated")  # warm: the communicator, its events
    counts = {}
    for accuracy in ("fast", "compensated"):  # NCCL's all_reduce; pycoll's ring over ncclSend/ncclRecv groups
        before = [rt.fake_cuda_wait_calls(i) for i in range(3)]
        engine.all_reduce(buffer(x), buffer(x), 0, "auto", accuracy)
        counts[accuracy] = [rt.fake_cuda_wait_calls(i) - b for i, b in enumerate(before)]
    engine.close()
    return counts, x


@pytest.mark.timeout(60)
def test_the_host_waits_for_events_not_for_the_whole_stream(fakes, tmp_path):
    # Each blocking call, and each step (vendor group) of pycoll's own schedules, is waited for through an event
    # recorded behind it: never cudaStreamQuery or cudaStreamSynchronize of the caller's stream.
    for counts, x in run_ranks_ok(_host_waits, 2, job_env(fakes("nccl"), tmp_path), timeout=50):
        np.testing.assert_array_equal(x, np.full(COUNT, 3.0 * 4, np.float32))
        for accuracy, (stream_queries, event_queries, stream_syncs) in counts.items():
            assert stream_queries == 0 and stream_syncs == 0, (accuracy, counts)
            assert event_queries >= 1, (accuracy, counts)


def _async_then_own_schedule(rank, world):
    from fakes.vendor_harness import buffer, make_engine
    engine = make_engine("nccl", rank, world, 10.0)
    x = np.full(COUNT, rank + 1.0, np.float32)
    on_caller = functools.partial(buffer, owner=FakeDeviceArray(x, stream=0x7000 + rank))
    handle = engine.start("all_reduce", on_caller(x), on_caller(x), 0, "auto", "fast")
    engine.all_reduce(on_caller(x), on_caller(x), 0, "auto", "compensated")  # no wait for the first: call order
    handle.wait(20.0)
    engine.close()
    return x


@pytest.mark.timeout(60)
def test_what_runs_on_the_callers_stream_keeps_the_call_order_behind_an_async_collective(fakes, tmp_path):
    # pycoll's own schedules (and send/recv) run on the caller's stream; an async collective before them, on
    # the communicator's stream, must still come first on the device.
    env = job_env(fakes("nccl"), tmp_path)
    for x in run_ranks_ok(_async_then_own_schedule, 2, env, timeout=50):
        np.testing.assert_array_equal(x, np.full(COUNT, 6.0, np.float32))
    log = Path(env["FAKE_COLL_LOG"]).read_text().splitlines()
    for rank in range(2):
        caller = f"{0x7000 + rank:#x}"
        at = next(i for i, line in enumerate(log) if line.startswith(f"ncclAllReduce rank={rank}"))
        own = log[at].partition(" stream=")[2].split()[0]
        first_send = next(i for i, line in enumerate(log) if line.startswith(f"ncclSend rank={rank}"))
        assert f"cudaStreamWaitEvent stream={caller} on={own}" in log[at:first_send], log[at:first_send]


def _hccl_wait(rank, world):
    from fakes.vendor_harness import buffer, make_engine

    from pycoll.work import Work
    engine = make_engine("hccl", rank, world, 10.0)
    acl = ctypes.CDLL(os.environ["PYCOLL_ACL_LIBRARY"])
    acl.aclrtSynchronizeStream.argtypes = [ctypes.c_void_p]
    x = np.full(COUNT, rank + 1.0, np.float32)
    engine.all_reduce(buffer(x, "npu"), buffer(x, "npu"), 0, "auto", "fast")  # warm
    x[:] = rank + 1.0
    started = time.monotonic()
    work = Work(engine.start("all_reduce", buffer(x, "npu"), buffer(x, "npu"), 0, "auto", "fast"), x, (x,))
    work.wait()
    waited = time.monotonic() - started
    acl.aclrtSynchronizeStream(None)  # the caller's stream (none named: the default one) now follows the collective
    synced = time.monotonic() - started
    work.synchronize()
    engine.close()
    return waited, synced, x


@pytest.mark.timeout(60)
def test_hccl_wait_orders_the_callers_stream_too(fakes, tmp_path):
    # HCCL's device memory is all device memory to pycoll (AscendCL cannot say where a pointer lives).
    env = dict(job_env(fakes("hccl"), tmp_path), FAKE_KERNEL_US=str(int(KERNEL_S * 1e6)))
    for waited, synced, x in run_ranks_ok(_hccl_wait, 2, env, timeout=50):
        assert waited < KERNEL_S / 2, waited
        assert synced >= KERNEL_S * 0.9, synced
        np.testing.assert_array_equal(x, np.full(COUNT, 3.0, np.float32))
    assert "aclrtCreateStream" in Path(env["FAKE_COLL_LOG"]).read_text()

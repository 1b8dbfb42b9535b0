"""pycoll's own schedules over the vendor's send/recv on device memory (backends/common/vendor_p2p.c) issue their
steps without a host wait between them where the memory table is stream-ordered (a device's: its kernels, copies
and frees queued on the collective's stream): each step's group of sends and receives, and the reductions
after it, are ordered by the stream alone, and the host waits once, at the end of the call. Against the fake
NCCL, whose streams run their work asynchronously in order on threads of their own, with a stream-ordered test
table (tests/fakes/streamed_memory.c) whose every entry runs on the same fake stream after a delay: a step
issued before the work it depends on would read stale (or poisoned) data, so exact results show that stream
order suffices, and the fake runtime counts the host's completed waits. Not on a GPU."""

import ctypes
import os

import numpy as np
import pytest
from fakes.vendor_harness import FakeDeviceArray, buffer, fakes_fixture, job_env, make_engine, run_ranks_ok

fakes = fakes_fixture()

COUNT = 1001
SUM = 0
NON_BLOCKING = 1
DELAY_US = 2000  # each queued entry of the streamed table: long past what the host takes to issue the next step
CALLS = (("all_reduce", "ring", "compensated"), ("all_reduce", "recursive_doubling", "fast"),
         ("reduce_scatter", "ring", "compensated"), ("reduce", None, "compensated"),
         ("all_reduce", "ring", "reproducible"))


def _steps_rank(rank, world):
    from fakes import guarded_memory

    runtime_path = os.environ["PYCOLL_CUDART_LIBRARY"]
    rt = ctypes.CDLL(runtime_path)
    rt.fake_cuda_wait_calls.restype = ctypes.c_longlong
    stream = ctypes.c_void_p()
    assert rt.cudaStreamCreateWithFlags(ctypes.byref(stream), NON_BLOCKING) == 0
    engine = make_engine("nccl", rank, world, 20.0)
    guarded_memory.install_streamed(stream.value, runtime_path, DELAY_US)

    def dev(a):
        return buffer(a, owner=FakeDeviceArray(a, stream.value))

    results, waits = {}, {}
    for kind, algorithm, accuracy in CALLS:
        x = (np.arange(COUNT * world, dtype=np.float32) % 97) * (rank + 1)
        out = np.zeros(COUNT if kind == "reduce_scatter" else COUNT * world, np.float32)
        before = [rt.fake_cuda_wait_calls(i) for i in range(4)]
        if kind == "reduce":
            engine.reduce(dev(x), dev(out), SUM, 0, accuracy)
        else:
            getattr(engine, kind)(dev(x), dev(out), SUM, algorithm, accuracy)
        waits[(kind, accuracy)] = [rt.fake_cuda_wait_calls(i) - b for i, b in enumerate(before)]
        results[(kind, accuracy)] = out
    engine.close()
    return results, waits, guarded_memory.streamed_failures(), guarded_memory.counts()["corrupt"]


@pytest.mark.timeout(120)
def test_own_schedules_on_a_stream_ordered_table_wait_once_and_stay_exact(fakes, tmp_path):
    world = 2
    env = {**job_env(fakes("nccl"), tmp_path), "FAKE_CUDA_MEMORY_TYPE": "2"}
    full = sum((np.arange(COUNT * world, dtype=np.float64) % 97) * (r + 1) for r in range(world))
    for rank, (results, waits, failures, corrupt) in enumerate(run_ranks_ok(_steps_rank, world, env,
                                                                              timeout=100)):
        assert failures == 0 and corrupt == 0, (failures, corrupt)
        for (kind, accuracy), out in results.items():
            if kind == "reduce_scatter":
                want = full[rank * COUNT:(rank + 1) * COUNT]
            elif kind == "reduce" and rank != 0:
                continue  # only the root's result is defined
            else:
                want = full
            np.testing.assert_array_equal(out, want.astype(np.float32), err_msg=f"{kind} {accuracy}")
        for call, (stream_queries, _, stream_syncs, completed) in waits.items():
            # One host wait per call: the end of the schedule (pycoll_vendor_comm_sync); never one per step.
            assert stream_queries == 0 and stream_syncs == 0, (call, waits)
            assert completed == 1, (call, waits)

"""Stream order of a mixed job's host staging (pycoll/islands/staging.py): a rank's input written by work on a
non-blocking side stream (as torch's pool streams are) must be read after that work, not before it. The fake CUDA
runtime runs stream work asynchronously, in order per stream, with the legacy default stream's semantics
(tests/fakes/fake_nccl.c): a cudaMemcpy on the legacy stream does not wait for a non-blocking stream."""

import ctypes
import functools
import os

import numpy as np
import pytest
from fakes.vendor_harness import FakeDeviceArray, fakes_fixture, run_ranks_ok
from multiproc import free_port

fakes = fakes_fixture()

COUNT = 4096
KERNEL_US = 300_000  # the side stream's work before the write: long past any staging copy
NON_BLOCKING, HOST_TO_DEVICE, DEVICE_TO_HOST = 1, 1, 2


def _side_stream_rank(devices, port, rank, world):
    import pycoll
    comm = pycoll.init("auto", rank=rank, world_size=world, master_addr="127.0.0.1", master_port=port,
                       device=devices[rank], timeout=20.0)
    want = np.arange(COUNT, dtype=np.float32) + rank
    if devices[rank] == "host":
        x = want.copy()
        comm.all_reduce(x)
        comm.close()
        return x
    runtime = ctypes.CDLL(os.environ["PYCOLL_CUDART_LIBRARY"])
    runtime.cudaMemcpyAsync.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                        ctypes.c_void_p]
    runtime.fake_stream_sleep.argtypes = [ctypes.c_void_p, ctypes.c_longlong]
    side = ctypes.c_void_p()
    assert runtime.cudaStreamCreateWithFlags(ctypes.byref(side), NON_BLOCKING) == 0
    x = np.zeros(COUNT, np.float32)  # "device" memory: the side stream's kernel writes it after KERNEL_US
    runtime.fake_stream_sleep(side, KERNEL_US)
    assert runtime.cudaMemcpyAsync(x.ctypes.data, want.ctypes.data, x.nbytes, HOST_TO_DEVICE, side) == 0
    comm.all_reduce(FakeDeviceArray(x, stream=side.value))  # the caller's current stream: the side stream
    # Later work on the side stream reads the result (a copy to pageable host memory returns once done).
    seen = np.empty_like(x)
    assert runtime.cudaMemcpyAsync(seen.ctypes.data, x.ctypes.data, x.nbytes, DEVICE_TO_HOST, side) == 0
    comm.close()
    return seen


@pytest.mark.timeout(60)
@pytest.mark.parametrize("crossing", ["hierarchical", "host-staged"])
def test_an_island_input_written_on_a_non_blocking_side_stream_is_read_after_that_work(fakes, tmp_path, crossing):
    devices = ("host", "cuda")
    env = {**fakes("nccl"), "FAKE_COLL_DIR": str(tmp_path), "PYCOLL_ISLANDS_CROSSING": crossing}
    outs = run_ranks_ok(functools.partial(_side_stream_rank, devices, free_port()), 2, env, timeout=50)
    want = 2 * np.arange(COUNT, dtype=np.float32) + 1
    for out in outs:
        np.testing.assert_array_equal(out, want)

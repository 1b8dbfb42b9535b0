"""The fake CUDA runtime's streams (tests/fakes/fake_nccl.c over fake_collectives.c), which the stream-order tests
rely on: work runs off the caller's thread, in order per stream; the legacy default stream waits for blocking
streams but not for non-blocking ones; events order one stream after another; each thread has its own current
device. Checked in a fresh process (the fake's state is per process) with ctypes."""

import subprocess
import sys
import textwrap

import pytest
from fakes.vendor_harness import fakes_fixture

fakes = fakes_fixture()

SCRIPT = textwrap.dedent("""
    import ctypes, sys, threading
    import numpy as np
    rt = ctypes.CDLL(sys.argv[1])
    rt.cudaMemcpyAsync.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
    rt.cudaMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    rt.fake_stream_sleep.argtypes = [ctypes.c_void_p, ctypes.c_longlong]
    rt.cudaStreamQuery.argtypes = rt.cudaStreamSynchronize.argtypes = [ctypes.c_void_p]
    rt.cudaEventRecord.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    rt.cudaStreamWaitEvent.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint]
    H2D, D2H, DEFAULT = 1, 2, 4

    def stream(flags):
        s = ctypes.c_void_p()
        assert rt.cudaStreamCreateWithFlags(ctypes.byref(s), flags) == 0
        return s

    def late_write(s, dst, value):
        # a 0.2 s kernel, then a write of value into dst, both on s
        src = np.full_like(dst, value)
        rt.fake_stream_sleep(s, 200_000)
        assert rt.cudaMemcpyAsync(dst.ctypes.data, src.ctypes.data, dst.nbytes, H2D, s) == 0

    out = {}
    for name, flags in (("non_blocking", 1), ("blocking", 0)):
        dev, host = np.zeros(4, np.int32), np.empty(4, np.int32)
        s = stream(flags)
        late_write(s, dev, 7)
        out[name + "_busy"] = rt.cudaStreamQuery(s) == 600
        rt.cudaMemcpy(host.ctypes.data, dev.ctypes.data, dev.nbytes, D2H)  # legacy stream, synchronous
        out[name + "_legacy_copy_saw"] = int(host[0])
        rt.cudaStreamSynchronize(s)
    # an event orders a second non-blocking stream after the first
    a, b = stream(1), stream(1)
    dev, host = np.zeros(4, np.int32), np.empty(4, np.int32)
    late_write(a, dev, 9)
    event = ctypes.c_void_p()
    rt.cudaEventCreateWithFlags(ctypes.byref(event), 2)
    rt.cudaEventRecord(event, a)
    rt.cudaStreamWaitEvent(b, event, 0)
    rt.cudaMemcpyAsync(host.ctypes.data, dev.ctypes.data, dev.nbytes, D2H, b)  # pageable: returns once done
    out["after_event"] = int(host[0])
    # a thread that never set a device: its first query makes device 0's context current (logged)
    t = threading.Thread(target=lambda: rt.cudaStreamQuery(None))
    t.start()
    t.join()
    def set_then_query():
        rt.cudaSetDevice(1)
        rt.cudaStreamQuery(None)
    t = threading.Thread(target=set_then_query)
    t.start()
    t.join()
    print(out)
""")


@pytest.mark.timeout(60)
def test_the_fake_runtime_orders_streams_as_cuda_does(fakes, tmp_path):
    env = fakes("nccl")
    log = tmp_path / "log"
    done = subprocess.run([sys.executable, "-c", SCRIPT, env["PYCOLL_CUDART_LIBRARY"]], capture_output=True,
                          text=True, timeout=50, cwd=tmp_path,
                          env={"FAKE_COLL_LOG": str(log), "FAKE_CUDA_DEVICE_COUNT": "2", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    out = eval(done.stdout)  # noqa: S307 -- our own script's dict of ints and bools
    assert out == {"non_blocking_busy": True, "non_blocking_legacy_copy_saw": 0,  # stale: no wait
                   "blocking_busy": True, "blocking_legacy_copy_saw": 7,  # the legacy stream waited
                   "after_event": 9}
    lines = log.read_text().splitlines()
    # the main thread (no FAKE_CUDA_CURRENT_DEVICE) at its first call, and the thread that never set one; not
    # the thread that set device 1 first
    assert sum("no device set on this thread" in line for line in lines) == 2, lines
    assert sum(line.startswith("cudaStreamQuery: no device set") for line in lines) == 1, lines
    assert any(line.startswith("cudaSetDevice device=1") for line in lines), lines

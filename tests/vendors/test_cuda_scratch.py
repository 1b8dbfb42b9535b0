"""Device scratch of pycoll's own schedules on CUDA memory (backends/cuda/cuda_kernels.c's alloc / free): with a
driver that has stream-ordered allocation (CUDA 11.2+) it comes from cuMemAllocAsync on the collective's stream and
goes back with cuMemFreeAsync on that stream at the end of the call; with an older driver, from cuMemAlloc /
cuMemFree, also freed at the end of the call. Nothing is held between collectives (beside the framework's caching
allocator) nor after close, and reduce's per-call scratch takes the same path. Against the fake NCCL (every buffer
"device" memory) and the fake CUDA driver (tests/fakes/fake_cuda_driver.c: it tracks each block, and refuses a
stream-ordered free on another stream or a second free), with the real NVRTC compiling the kernels."""

import ctypes
import os

import numpy as np
import pytest
from fakes.vendor_harness import FakeDeviceArray, buffer, make_engine, run_ranks_ok, vendor_fixtures
from nvidia_wheels import build_fake_cuda_driver, unavailable

SUM = 0
STREAM = 0x5EED  # the framework's stream the arrays name: the collective's stream
COUNT = 1001
BIG = 40_000  # float32 x 40 000 = 160 KB: past reduce's 64 KiB tree limit, so its scatter-gather runs

fake_env, env = vendor_fixtures("nccl")


def _scratch_rank(rank, world):
    """A compensated all_reduce (ring: receive slots and the communicator's workspace) and two compensated reduces
    (tree and scatter-gather: scratch allocated in the call) on "device" arrays; the fake driver's log and its
    count of live blocks after each call and after close."""
    from pycoll._bindings import vendor
    from pycoll.plugins.nccl import nvrtc_candidates
    if not any(vendor.cuda_kernels_load(0, p) is None for p in nvrtc_candidates()):
        return None
    fake = ctypes.CDLL(os.environ["PYCOLL_CUDA_DRIVER_LIBRARY"])
    fake.fake_cuda_log.restype = ctypes.c_char_p
    fake.fake_cuda_register.argtypes = [ctypes.c_size_t, ctypes.c_size_t, ctypes.c_int]
    arrays = [np.ones(n, np.float32) for n in (COUNT, COUNT, BIG, BIG)]
    for a in arrays:
        fake.fake_cuda_register(a.ctypes.data, a.nbytes, 0)
    x, y, big, big_out = arrays

    def dev(a):
        return buffer(a, owner=FakeDeviceArray(a, STREAM))

    engine = make_engine("nccl", rank, world, 30.0)
    live = {}
    engine.all_reduce(dev(x), dev(x), SUM, "auto", "compensated")
    live["all_reduce"] = fake.fake_cuda_live()
    engine.all_reduce(dev(x), dev(y), SUM, "auto", "compensated")
    live["all_reduce again"] = fake.fake_cuda_live()
    mark = len(fake.fake_cuda_log().decode().splitlines())
    engine.reduce(dev(x), dev(y), SUM, 1, "compensated")
    engine.reduce(dev(big), dev(big_out), SUM, 0, "compensated")
    live["reduce"] = fake.fake_cuda_live()
    engine.close()
    live["close"] = fake.fake_cuda_live()
    log = fake.fake_cuda_log().decode().splitlines()
    return log, log[mark:], live


def _run(env, tmp_path, async_alloc):
    (tmp_path / "driver").mkdir()
    driver = build_fake_cuda_driver(tmp_path / "driver", async_alloc)
    ranks = run_ranks_ok(_scratch_rank, 2, dict(env, FAKE_CUDA_MEMORY_TYPE="2", FAKE_CUDA_CC="80,80",
                                                 PYCOLL_CUDA_DRIVER_LIBRARY=driver), timeout=110)
    if None in ranks:
        unavailable("NVRTC not found: pip install nvidia-cuda-nvrtc-cu12")
    return ranks


def _lines(log, prefix):
    return [line for line in log if line.startswith(prefix)]


@pytest.fixture
def stream_ordered(env, tmp_path):
    return _run(env, tmp_path, async_alloc=True)


@pytest.fixture
def older_driver(env, tmp_path):
    return _run(env, tmp_path, async_alloc=False)


@pytest.mark.timeout(120)
def test_scratch_is_stream_ordered_on_the_collectives_stream(stream_ordered):
    for log, reduce_log, live in stream_ordered:
        assert not [line for line in log if "refused" in line], log
        allocs, frees = _lines(log, "cuMemAllocAsync"), _lines(log, "cuMemFreeAsync")
        assert allocs and len(allocs) == len(frees), log
        assert not _lines(log, "cuMemAlloc ") and not _lines(log, "cuMemFree "), log  # never beside the pool
        stream = f"stream={STREAM:#x}"
        assert all(line.endswith(stream) for line in allocs + frees), allocs + frees
        launches = _lines(log, "cuLaunchKernel")
        assert launches and all(stream in line for line in launches), launches  # the kernels' stream too


@pytest.mark.timeout(120)
def test_no_scratch_is_held_between_collectives_nor_after_close(stream_ordered):
    for _, _, live in stream_ordered:
        assert live == {"all_reduce": 0, "all_reduce again": 0, "reduce": 0, "close": 0}, live


@pytest.mark.timeout(120)
def test_reduce_scratch_takes_the_same_path(stream_ordered):
    for _, reduce_log, _ in stream_ordered:
        allocs, frees = _lines(reduce_log, "cuMemAllocAsync"), _lines(reduce_log, "cuMemFreeAsync")
        assert len(allocs) >= 2 and len(allocs) == len(frees), reduce_log  # tree and scatter-gather
        assert not _lines(reduce_log, "cuMemAlloc ") and not [line for line in reduce_log if "refused" in line]


@pytest.mark.timeout(120)
def test_an_older_driver_falls_back_to_cumemalloc_freed_every_call(older_driver):
    for log, reduce_log, live in older_driver:
        assert not [line for line in log if "refused" in line], log
        assert not _lines(log, "cuMemAllocAsync") and not _lines(log, "cuMemFreeAsync"), log
        allocs, frees = _lines(log, "cuMemAlloc "), _lines(log, "cuMemFree ")
        assert allocs and len(allocs) == len(frees), log
        assert _lines(reduce_log, "cuMemAlloc "), reduce_log
        assert live == {"all_reduce": 0, "all_reduce again": 0, "reduce": 0, "close": 0}, live


def test_the_fake_refuses_a_free_on_another_stream_and_a_second_free(tmp_path):
    """The checks above are not vacuous: the fake driver refuses what a wrong pairing would do."""
    fake = ctypes.CDLL(build_fake_cuda_driver(tmp_path))
    fake.cuMemAllocAsync.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t, ctypes.c_void_p]
    fake.cuMemFreeAsync.argtypes = [ctypes.c_uint64, ctypes.c_void_p]
    fake.cuMemFree_v2.argtypes = [ctypes.c_uint64]
    ctx = ctypes.c_void_p()
    assert fake.cuInit(0) == 0 and fake.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
    assert fake.cuCtxPushCurrent_v2(ctx) == 0
    block = ctypes.c_uint64()
    assert fake.cuMemAllocAsync(ctypes.byref(block), 64, 0x1) == 0 and fake.fake_cuda_live() == 1
    assert fake.cuMemFreeAsync(block, 0x2) == 1  # CUDA_ERROR_INVALID_VALUE: another stream
    assert fake.cuMemFree_v2(block) == 1  # not cuMemAlloc's
    assert fake.cuMemFreeAsync(block, 0x1) == 0 and fake.fake_cuda_live() == 0
    assert fake.cuMemFreeAsync(block, 0x1) == 1  # freed twice
    assert fake.cuCtxPopCurrent_v2(None) == 0
    (tmp_path / "old").mkdir()
    old = ctypes.CDLL(build_fake_cuda_driver(tmp_path / "old", async_alloc=False))
    assert not hasattr(old, "cuMemAllocAsync") and not hasattr(old, "cuMemFreeAsync")

"""The vendor backends against fakes that enforce the real libraries' rules (tests/fakes/fake_nccl.c and
fake_hccl.c say which rule each mirrors, and where it comes from): each test names the defect of issue #16 it
covers. Bad requests must be refused before the call with the communicator still usable, and every teardown
must be bounded by a deadline (the fakes log "<call> deadlocked" where the real library would hang)."""

import ctypes
import os
import time

import numpy as np
import pytest
from fakes.vendor_harness import FakeDeviceArray, buffer, fakes_fixture, job_env, make_engine, run_ranks_ok
from repo_paths import ROOT

ml_dtypes = pytest.importorskip("ml_dtypes")

# Where the real library would wait forever, the fakes wait this long and log "deadlocked".
DEADLOCK_S = "3"


fakes = fakes_fixture()


@pytest.fixture
def nccl_env(fakes, tmp_path):
    return dict(job_env(fakes("nccl"), tmp_path), FAKE_DEADLOCK_S=DEADLOCK_S)


@pytest.fixture
def hccl_env(fakes, tmp_path):
    return dict(job_env(fakes("hccl"), tmp_path), FAKE_DEADLOCK_S=DEADLOCK_S)


def _log(env):
    return open(env["FAKE_COLL_LOG"]).read()


def _on_stream(x):
    """A Buffer whose array names a stream of its own (as a framework's tensor does), so that only the tests of
    the NULL-stream rule depend on the stream pycoll picks when it has none."""
    return buffer(x, owner=FakeDeviceArray(x, stream=0x6000 + os.getpid()))


def _sum_of_ones(engine, rank, dtype="float32", algorithm="auto"):
    x = np.full(3, rank + 1, dtype)
    ran = engine.all_reduce(_on_stream(x), _on_stream(x), 0, algorithm, "fast")
    return x.tolist(), ran


def _every_rank_sums_exactly_on_auto(rank_fn, env):
    """rank_fn on two ranks, each returning _sum_of_ones with the default algorithm: both sums exact."""
    for got, ran in run_ranks_ok(rank_fn, 2, env):
        assert got == [3.0, 3.0, 3.0] and ran == "auto"


# ---- 1. HCCL refuses a NULL stream: the barrier (no array, no stream) uses the communicator's own ----

def _hccl_barrier(rank, world):
    engine = make_engine("hccl", rank, world, 10.0)
    engine.barrier()
    out = _sum_of_ones(engine, rank)
    engine.barrier()
    engine.close()
    return out


@pytest.mark.timeout(60)
def test_hccl_barrier_never_passes_a_null_stream(hccl_env):
    _every_rank_sums_exactly_on_auto(_hccl_barrier, hccl_env)
    log = _log(hccl_env)
    assert "HcclBarrier rank=0" in log and "NULL stream" not in log


# ---- 2. capabilities checked before the call; a refusal leaves the communicator usable ----

def _hccl_refusals(rank, world):
    from pycoll.errors import PycollError
    engine = make_engine("hccl", rank, world, 10.0)
    refused = {}
    cases = {"uint8 sum": ("uint8", 0), "float64 sum": ("float64", 0), "bfloat16 prod": (ml_dtypes.bfloat16, 1),
             "bfloat16 sum": (ml_dtypes.bfloat16, 0)}
    for name, (dtype, op) in cases.items():
        x = np.ones(2, dtype)
        try:
            engine.all_reduce(_on_stream(x), _on_stream(x), op, "auto", "fast")
            refused[name] = None
        except TypeError as exc:
            refused[name] = str(exc)
    y = np.ones(2, np.float64)
    with pytest.raises(TypeError, match="reduce of float64"):
        engine.reduce(_on_stream(y), _on_stream(y), 0, 0, "fast")
    b = np.full(2, rank, np.uint8)  # data movement is not a reduction: uint8 is fine
    engine.broadcast(_on_stream(b), 1)
    # The backstop: a refusal the tables miss, straight from the vendor layer, still leaves the comm usable.
    comm = engine._comm("auto")
    x = np.ones(2, np.uint8)
    with pytest.raises(PycollError, match="HCCL_E_NOT_SUPPORT.*still usable"):
        comm.all_reduce(buffer(x).ptr, buffer(x).ptr, 2, buffer(x).dtype, 0, 0x6000 + os.getpid())
    out = _sum_of_ones(engine, rank)
    engine.close()
    return refused, b.tolist(), out


@pytest.mark.timeout(60)
@pytest.mark.parametrize("soc, bf16_sum_refused", [("Ascend910B1", False), ("Ascend910ProB", True)])
def test_hccl_refuses_unsupported_dtypes_before_the_call(hccl_env, soc, bf16_sum_refused):
    for refused, b, (got, _) in run_ranks_ok(_hccl_refusals, 2, dict(hccl_env, FAKE_HCCL_SOC=soc)):
        assert "HCCL reduces no uint8" in refused["uint8 sum"]
        assert "only Ascend 950 parts reduce float64" in refused["float64 sum"]
        assert "no prod on bfloat16" in refused["bfloat16 prod"] or bf16_sum_refused
        assert (refused["bfloat16 sum"] is not None) == bf16_sum_refused
        if bf16_sum_refused:
            assert f"on {soc}: Atlas 910" in refused["bfloat16 sum"]
        assert all(r is None or "communicator is still usable" in r for r in refused.values())
        assert b == [1, 1] and got == [3.0, 3.0, 3.0]
    # Only the backstop call reached the vendor with a dtype it refuses.
    assert _log(hccl_env).count("HCCL_E_NOT_SUPPORT") == 2


def _hccl_float64_sums(rank, world):
    engine = make_engine("hccl", rank, world, 10.0)
    x = np.array([0.1, 1e300, -2.5], np.float64) * (rank + 1)
    engine.all_reduce(_on_stream(x), _on_stream(x), 0, "auto", "fast")
    y = np.array([rank + 0.25, 7.0], np.float64)
    out = np.zeros(2, np.float64)
    engine.reduce(_on_stream(y), _on_stream(out), 0, 1, "fast")
    engine.close()
    return x.tolist(), out.tolist()


@pytest.mark.timeout(60)
def test_hccl_reduces_float64_on_ascend_950(hccl_env):
    """CANN 9.0's HCCL reduces float64 on Ascend 950 parts (only): accepted there, and exact."""
    results = run_ranks_ok(_hccl_float64_sums, 2, dict(hccl_env, FAKE_HCCL_SOC="Ascend950PR"))
    want = (np.array([0.1, 1e300, -2.5]) + np.array([0.1, 1e300, -2.5]) * 2).tolist()
    assert [r[0] for r in results] == [want, want]
    assert results[1][1] == [1.5, 14.0]  # rank 1 is the root
    assert "HCCL_E_NOT_SUPPORT" not in _log(hccl_env)


# ---- 3. NCCL runs only what it can per collective; pycoll's own schedules for the rest ----

def _nccl_algorithms(rank, world):
    engine = make_engine("nccl", rank, world, 10.0)
    out = {}
    for algorithm in ("auto", "ring", "halving_doubling", "recursive_doubling", "mesh"):
        out[("all_reduce", algorithm)] = _sum_of_ones(engine, rank, "float32", algorithm)
    for algorithm in ("auto", "ring", "halving_doubling", "mesh"):
        send = np.arange(4, dtype=np.float64) * (rank + 1)
        recv = np.zeros(2, np.float64)
        ran = engine.reduce_scatter(buffer(send), buffer(recv), 0, algorithm, "fast")
        out[("reduce_scatter", algorithm)] = recv.tolist(), ran
    engine.close()
    return out


@pytest.mark.timeout(90)
def test_nccl_algorithms_run_only_where_nccl_can(nccl_env):
    for rank, out in enumerate(run_ranks_ok(_nccl_algorithms, 2, nccl_env)):
        for (kind, algorithm), (got, ran) in out.items():
            assert ran == algorithm, (kind, algorithm, ran)
            want = [3.0] * 3 if kind == "all_reduce" else (np.arange(4) * 3.0)[2 * rank:2 * rank + 2].tolist()
            assert got == want, (kind, algorithm)
    log = _log(nccl_env)
    assert "ncclInvalidUsage" not in log
    # One NCCL communicator for NCCL's choice and one for its Ring; pycoll's schedules share the first.
    assert log.count("ncclCommInitRankConfig rank=0") == 2
    assert "algo=Tree" not in log and "algo=NVLS" not in log


# ---- 4. HCCL_ALGO is read once per process: pycoll offers only HCCL's choice and says so ----

def _hccl_algorithm(rank, world):
    engine = make_engine("hccl", rank, world, 10.0)
    with pytest.raises(ValueError, match="HCCL_ALGO once per process"):
        _sum_of_ones(engine, rank, algorithm="ring")
    out = _sum_of_ones(engine, rank)
    engine.close()
    return out


@pytest.mark.timeout(60)
def test_hccl_offers_only_the_algorithm_it_runs(hccl_env):
    _every_rank_sums_exactly_on_auto(_hccl_algorithm, hccl_env)
    assert _log(hccl_env).count("HcclCommInitRootInfo rank=0 ") == 1


# ---- 5. an asynchronous error aborts at once, and device memory is freed only after the abort ----

def _nccl_async_error(rank, world):
    from pycoll.errors import PeerFailure
    engine = make_engine("nccl", rank, world, 10.0)
    engine.barrier()  # allocates the barrier's device word (freed at close)
    os.environ["FAKE_COLL_FAIL"] = "async=6"
    x = np.ones(2, np.float32)
    with pytest.raises(PeerFailure, match="ncclRemoteError"):
        engine.all_reduce(buffer(x), buffer(x), 0, "auto", "fast")
    log = open(os.environ["FAKE_COLL_LOG"]).read()
    # stopped at once: revoked where the library can (the survivors may shrink it), else aborted
    aborted = f"ncclCommRevoke rank={rank}" in log or f"ncclCommAbort rank={rank}" in log
    start = time.monotonic()
    engine.close()
    return aborted, time.monotonic() - start


@pytest.mark.timeout(60)
def test_nccl_async_error_aborts_at_once_and_close_does_not_hang(nccl_env):
    for aborted, close_s in run_ranks_ok(_nccl_async_error, 2, nccl_env):
        assert aborted  # before close(): the error itself aborted the communicator
        assert close_s < 1.0
    log = _log(nccl_env)
    assert "deadlocked" not in log
    assert log.count("ncclCommAbort rank=") == 2  # a revoked communicator still holds its resources: released


# ---- 6. teardown with a dead peer is bounded: finalize until the deadline, then abort ----

def _nccl_teardown_dead_peer(rank, world):
    engine = make_engine("nccl", rank, world, 1.0)
    _sum_of_ones(engine, rank)
    if rank == 1:
        time.sleep(3.0)  # gone for rank 0's close: it never finalizes in time
        return None
    start = time.monotonic()
    engine.close()
    return time.monotonic() - start


def _nccl_teardown_healthy(rank, world):
    engine = make_engine("nccl", rank, world, 10.0)
    _sum_of_ones(engine, rank)
    engine.barrier()
    engine.close()
    return rank


@pytest.mark.timeout(60)
def test_nccl_teardown_with_a_dead_peer_is_bounded(nccl_env):
    close_s = run_ranks_ok(_nccl_teardown_dead_peer, 2, nccl_env)[0]
    assert 0.9 < close_s < 2.0, close_s
    log = _log(nccl_env)
    assert "ncclCommFinalize rank=0" in log and "ncclCommAbort rank=0" in log
    assert "deadlocked" not in log


def _hccl_collective_with_a_dead_peer(rank, world):
    import pycoll

    engine = make_engine("hccl", rank, world, 1.0)
    _sum_of_ones(engine, rank)
    if rank == 1:
        time.sleep(4.0)  # gone: never joins rank 0's next all-reduce
        return None
    start = time.monotonic()
    with pytest.raises(pycoll.Timeout):
        _sum_of_ones(engine, rank)
    failed_s = time.monotonic() - start
    engine.close()
    lib = ctypes.CDLL(pycoll.get_library())
    lib.pycoll_vendor_abandoned_releases.restype = ctypes.c_int64
    return failed_s, time.monotonic() - start, lib.pycoll_vendor_abandoned_releases()


@pytest.mark.timeout(60)
def test_hccl_destroy_behind_a_stuck_task_is_bounded(hccl_env):
    """HCCL has no abort: at the deadline pycoll destroys the communicator, and HcclCommDestroy waits for the
    task stuck on the dead peer (fake_hccl.c's rule; FAKE_DEADLOCK_S = 3 s here). The destroy gets the
    communicator's timeout (1 s), then is left to finish on its own thread, and the device memory with it."""
    failed_s, closed_s, abandoned = run_ranks_ok(_hccl_collective_with_a_dead_peer, 2, hccl_env)[0]
    assert 1.9 < failed_s < 3.0, failed_s  # the collective's 1 s, then the destroy's 1 s
    assert closed_s - failed_s < 0.5, (failed_s, closed_s)  # close has nothing left to wait for
    assert abandoned == 1


@pytest.mark.timeout(60)
def test_nccl_healthy_teardown_finalizes_then_destroys(nccl_env):
    assert run_ranks_ok(_nccl_teardown_healthy, 2, nccl_env) == [0, 1]
    log = _log(nccl_env)
    for rank in (0, 1):
        assert f"ncclCommFinalize rank={rank}" in log and f"ncclCommDestroy rank={rank}" in log
    assert "ncclCommAbort" not in log and "deadlocked" not in log


# ---- 7. HCCL_CONNECT_TIMEOUT within HCCL's range, set once per process (HCCL reads it once), not left behind ----

def _hccl_connect_timeouts(rank, world):
    import warnings
    out = []
    for timeout in (5.0, 300.0, 100.0):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            engine = make_engine("hccl", rank, world, timeout)
        out.append((os.environ.get("HCCL_CONNECT_TIMEOUT"), [str(w.message) for w in caught]))
        engine.close()
    return out


@pytest.mark.timeout(60)
def test_hccl_connect_timeout_is_clamped_and_set_once_per_process(hccl_env):
    for (env1, warned1), (env2, warned2), (env3, warned3) in run_ranks_ok(_hccl_connect_timeouts, 2, hccl_env):
        assert (env1, env2, env3) == (None, None, None) and warned1 == [] and warned3 == []  # 100 s clamps to 120
        assert len(warned2) == 1 and "HCCL_CONNECT_TIMEOUT=300" in warned2[0] and "keeps 120 s" in warned2[0]
    log = _log(hccl_env)
    assert log.count("rank=0 nranks=2 algo= connect_timeout=120") == 3  # 5 s is below HCCL's 120 s minimum


@pytest.mark.timeout(60)
def test_hccl_connect_timeout_the_user_set_is_kept(hccl_env):
    got = run_ranks_ok(_hccl_connect_timeouts, 2, dict(hccl_env, HCCL_CONNECT_TIMEOUT="600"))
    assert got == [[("600", [])] * 3] * 2
    assert "connect_timeout=120" not in _log(hccl_env)


# ---- 11. HCCL's reduce may write the non-roots' receive buffer: pycoll gives it scratch there ----

def _hccl_reduce(rank, world):
    engine = make_engine("hccl", rank, world, 10.0)
    send = np.array([1.0, 2.0], np.float32) * (rank + 1)
    recv = np.full(2, -7.0, np.float32)
    engine.reduce(_on_stream(send), _on_stream(recv), 0, 0, "fast")
    send2 = np.array([1.0, 2.0], np.float32) * (rank + 1)
    engine.reduce(_on_stream(send2), None if rank else _on_stream(np.zeros(2, np.float32)), 0, 0, "fast")
    engine.close()
    return send.tolist(), recv.tolist(), send2.tolist()


@pytest.mark.timeout(60)
def test_hccl_reduce_leaves_non_root_buffers_unchanged(hccl_env):
    (s0, r0, _), (s1, r1, s1b) = run_ranks_ok(_hccl_reduce, 2, hccl_env)
    assert r0 == [3.0, 6.0] and s0 == [1.0, 2.0]
    assert r1 == [-7.0, -7.0] and s1 == [2.0, 4.0] and s1b == [2.0, 4.0]


# ---- the documented capabilities are the ones the code checks ----

@pytest.mark.timeout(30)
def test_capability_tables_in_the_docs_are_the_checked_ones():

    from pycoll.plugins.vendor_capabilities import DOCS, documented, generated_block
    root = ROOT
    for doc in DOCS:
        assert documented((root / doc).read_text()) == generated_block(), (
            f"{doc} is stale: run python -m pycoll.plugins.vendor_capabilities")



# ---- 10. a small collective does not pay a polling sleep ----

def _nccl_small_collectives(rank, world):
    engine = make_engine("nccl", rank, world, 10.0)
    for _ in range(30):
        _sum_of_ones(engine, rank)
    engine.close()
    return rank


@pytest.mark.timeout(60)
def test_nccl_completion_is_noticed_without_a_polling_sleep(nccl_env):
    # Each "kernel" runs 6 ms: a backoff that has grown to 1 ms by then notices its end ~0.5 ms late on average.
    run_ranks_ok(_nccl_small_collectives, 2, dict(nccl_env, FAKE_KERNEL_US="6000"))
    # The host polls the collective's end event (a blocking call), or the stream (pycoll's own schedules).
    lags = [int(line.rsplit("=", 1)[1]) for line in _log(nccl_env).splitlines()
            if line.startswith(("cudaStreamQuery noticed_after_us=", "cudaEventQuery noticed_after_us="))]
    assert len(lags) >= 60
    assert np.median(lags) < 200, sorted(lags)

# ---- 8, 9. torch device tensors: NPU by its device, CUDA through DLPack first, requires_grad named ----

class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32), ("dtype", _DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class FakeTorchTensor:
    """What torch's CUDA and torch_npu tensors show pycoll (a numpy array's memory stands in for the device's):
    a CUDA tensor's DLPack capsule says kDLCUDA; its __cuda_array_interface__ gives bfloat16 as "<V2" and raises
    for a tensor that requires grad; a torch_npu tensor's __dlpack_device__ raises (torch's privateuse1)."""

    def __init__(self, arr, device_type, requires_grad=False):
        self.arr, self.requires_grad = arr, requires_grad
        self.device = type("device", (), {"type": device_type, "index": 0})()
        self.dtype = f"torch.{arr.dtype.name}"

    def __dlpack_device__(self):
        if self.device.type == "npu":
            raise RuntimeError("Unsupported device type privateuse1 for DLPack")  # as torch does
        return (2, 0)

    def __dlpack__(self, stream=None, max_version=None):
        if self.requires_grad:
            raise RuntimeError("Can't export tensors that require gradient, use tensor.detach()")
        self._shape = (ctypes.c_int64 * 1)(self.arr.size)
        code = {"f": 2, "i": 0, "u": 1, "V": 4}[self.arr.dtype.kind]  # kDLFloat, kDLInt, kDLUInt, kDLBfloat
        tensor = _DLTensor(self.arr.ctypes.data, _DLDevice(2, 0), 1, _DLDataType(code, self.arr.dtype.itemsize * 8, 1),
                           self._shape, None, 0)
        self._managed = _DLManagedTensor(tensor, None, None)  # kept alive by self; no deleter to call
        new = ctypes.pythonapi.PyCapsule_New
        new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        return new(ctypes.addressof(self._managed), b"dltensor", None)

    @property
    def __cuda_array_interface__(self):
        if self.device.type == "npu":
            raise AttributeError("an NPU tensor has no __cuda_array_interface__")
        if self.requires_grad:
            raise RuntimeError("Can't get __cuda_array_interface__ on Variable that requires grad")
        typestr = "<V2" if self.arr.dtype.name == "bfloat16" else self.arr.dtype.str
        return {"shape": self.arr.shape, "typestr": typestr, "data": (self.arr.ctypes.data, False), "version": 2}

    def is_contiguous(self):
        return True

    def data_ptr(self):
        return self.arr.ctypes.data

    def numel(self):
        return self.arr.size

    def element_size(self):
        return self.arr.dtype.itemsize


FakeTorchTensor.__module__ = "torch"  # how pycoll recognises a torch tensor without importing torch


@pytest.mark.timeout(30)
def test_torch_cuda_bfloat16_tensor_goes_through_dlpack():
    from pycoll.buffers import as_buffer
    from pycoll.dtypes import DTYPES
    arr = np.arange(4).astype(ml_dtypes.bfloat16)
    t = FakeTorchTensor(arr, "cuda")
    buf = as_buffer(t, name="out", writable=True)
    assert (buf.memory, buf.dtype, buf.count, buf.ptr, buf.readonly) == (
        "cuda", DTYPES["bfloat16"], 4, arr.ctypes.data, False)
    assert buf.owner is t  # its framework names the stream the collective goes on


@pytest.mark.timeout(30)
def test_torch_npu_tensor_is_recognised_by_its_device():
    from pycoll.buffers import as_buffer
    from pycoll.dtypes import DTYPES
    arr = np.ones(3, np.float32)
    buf = as_buffer(FakeTorchTensor(arr, "npu"), name="x")
    assert (buf.memory, buf.dtype, buf.count, buf.ptr) == ("npu", DTYPES["float32"], 3, arr.ctypes.data)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("device", ["cuda", "npu"])
def test_device_tensor_that_requires_grad_is_refused_by_name(device):
    from pycoll.buffers import as_buffer
    with pytest.raises(TypeError, match=r"x requires grad: pass x\.detach\(\)"):
        as_buffer(FakeTorchTensor(np.ones(2, np.float32), device, requires_grad=True), name="x")


# ---- 12. the NCCL header's version notes say what nccl.h says ----

@pytest.mark.timeout(30)
def test_nccl_api_version_notes():
    text = (ROOT / "backends" / "nccl" / "nccl_api.h").read_text()
    assert "ncclTimeout: NCCL 2.30" in text
    assert "minCTAs, maxCTAs and netName arrived in 2.17" in text
    assert "ncclConfig_t as of NCCL 2.14" not in text

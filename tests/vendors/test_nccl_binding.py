"""pycoll's NCCL binding end to end against a fake libnccl (tests/fakes/fake_nccl.c) in 2 real processes:
argument marshalling, dtype/op mapping, the unique id through the store, error codes and the abort path.
These are binding tests, not proof on hardware: the fake runs the collectives on host memory."""

import os
import re

import numpy as np
import pytest
from fakes.vendor_harness import (
    FakeDeviceArray,
    FileStore,
    buffer,
    make_engine,
    run_ranks_ok,
    vendor_fixtures,
    with_engine,
)

ml_dtypes = pytest.importorskip("ml_dtypes")


fake_env, env = vendor_fixtures("nccl")
engine_per_rank = with_engine("nccl", 20.0)


DTYPES = ["int8", "uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64"]
OPS = {0: "sum", 1: "prod", 2: "min", 3: "max", 4: "avg"}


def _data(rank, dtype, n=5):
    dt = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    base = np.array([1, -2, 3, 4, -5][:n] if np.dtype(dt).kind != "u" else [1, 2, 3, 4, 5][:n])
    return (base * (rank + 1)).astype(dt)


def _expected(dtype, op, world):
    parts = [_data(r, dtype).astype(np.float64) for r in range(world)]
    out = {0: sum(parts), 1: np.prod(parts, axis=0), 2: np.min(parts, axis=0), 3: np.max(parts, axis=0),
           4: sum(parts) / world}[op]
    if dtype in ("float16", "bfloat16", "float32", "float64"):
        return out
    return np.trunc(out)


@engine_per_rank
def _all_reduce_every_dtype_and_op(engine, rank, world):
    results = {}
    for dtype in DTYPES:
        for op in OPS:
            x = _data(rank, dtype)
            engine.all_reduce(buffer(x), buffer(x), op, "auto", "fast")
            results[(dtype, op)] = x.astype(np.float64)
    return results


@pytest.mark.timeout(60)
def test_all_reduce_every_dtype_and_op(env):
    for value in run_ranks_ok(_all_reduce_every_dtype_and_op, 2, env):
        for (dtype, op), got in value.items():
            np.testing.assert_array_equal(got, _expected(dtype, op, 2), err_msg=f"{dtype} {OPS[op]}")
    log = open(env["FAKE_COLL_LOG"]).read()
    # pycoll ids -> NCCL's: min is ncclMin (3), max ncclMax (2), avg ncclAvg (4); bfloat16 is ncclBfloat16 (9)
    assert "ncclAllReduce rank=0 count=5 dtype=9 op=4" in log
    assert "ncclAllReduce rank=0 count=5 dtype=7 op=3" in log  # float32 min
    assert "ncclAllReduce rank=0 count=5 dtype=4 op=2" in log  # int64 max
    assert "blocking=0 version=21400 magic=0xcafebeef" in log  # non-blocking init, a config NCCL accepts


@engine_per_rank
def _other_collectives(engine, rank, world):
    out = {}
    send = np.arange(6, dtype=np.float32) + 10 * rank
    recv = np.zeros(3, np.float32)
    engine.reduce_scatter(buffer(send), buffer(recv), 0, "auto", "fast")
    out["reduce_scatter"] = recv.copy()
    gathered = np.zeros(4, np.int32)
    mine = np.array([rank, rank + 100], np.int32)
    engine.all_gather(buffer(mine), buffer(gathered))
    out["all_gather"] = gathered
    b = np.full(4, rank + 7, np.int64)
    engine.broadcast(buffer(b), 1)
    out["broadcast"] = b
    r_send = np.array([1.5, 2.5], np.float64) * (rank + 1)
    r_recv = np.zeros(2, np.float64)
    engine.reduce(buffer(r_send), buffer(r_recv), 3, 0, "fast")
    out["reduce"] = r_recv
    engine.barrier()
    return out


@pytest.mark.timeout(60)
def test_reduce_scatter_all_gather_broadcast_reduce_barrier(env):
    for rank, out in enumerate(run_ranks_ok(_other_collectives, 2, env)):
        full = (np.arange(6) + np.arange(6) + 10).astype(np.float32)
        np.testing.assert_array_equal(out["reduce_scatter"], full[3 * rank:3 * rank + 3])
        np.testing.assert_array_equal(out["all_gather"], [0, 100, 1, 101])
        np.testing.assert_array_equal(out["broadcast"], [8] * 4)
        np.testing.assert_array_equal(out["reduce"], [3.0, 5.0] if rank == 0 else [0.0, 0.0])


@engine_per_rank
def _streams_and_algorithms(engine, rank, world):
    x = np.ones(3, np.float32)
    engine.all_reduce(buffer(x, owner=FakeDeviceArray(x, stream=0x5000 + rank)),
                      buffer(x, owner=FakeDeviceArray(x, stream=0x5000 + rank)), 0, "auto", "fast")
    ran = engine.all_reduce(buffer(x), buffer(x), 0, "ring", "fast")
    assert ran == "ring"
    with pytest.raises(ValueError, match="algorithm"):
        engine.all_reduce(buffer(x), buffer(x), 0, "bogus", "fast")
    assert engine.all_reduce(buffer(x), buffer(x), 0, "mesh", "compensated") == "ring"  # pycoll's own ring
    assert os.environ.get("NCCL_ALGO") is None  # set only while the ring communicator was created
    return x


@pytest.mark.timeout(60)
def test_stream_from_array_and_algorithm_communicators(env):
    for x in run_ranks_ok(_streams_and_algorithms, 2, env):
        np.testing.assert_array_equal(x, [8, 8, 8])
    log = open(env["FAKE_COLL_LOG"]).read()
    # The array's stream orders the collective, which runs on the communicator's own stream.
    assert "cudaEventRecord stream=0x5001" in log
    assert re.search(r"cudaStreamWaitEvent stream=(0x[0-9a-f]+) on=0x5001\n(?:.*\n)*?ncclAllReduce rank=1 count=3 "
                     r"dtype=7 op=0 root=-1 stream=\1 ", log), log
    assert "algo=Ring" in log


def _init_without_peer(rank, world):
    from pycoll.errors import Timeout
    with pytest.raises(Timeout, match="ncclCommInitRankConfig did not complete"):
        make_engine("nccl", rank, 2, timeout=1.0)  # a 2-rank job whose rank 1 never starts
    return "timed out"


@pytest.mark.timeout(60)
def test_init_without_peer_times_out(env):
    assert run_ranks_ok(_init_without_peer, 1, env) == ["timed out"]
    assert "ncclCommAbort rank=0" in open(env["FAKE_COLL_LOG"]).read()


@pytest.mark.gpu
@pytest.mark.timeout(120)
def test_real_gpu_single_rank(tmp_path):
    cupy = pytest.importorskip("cupy", reason="needs CuPy and an NVIDIA GPU")
    from pycoll.plugins.nccl import NcclBackend
    reason = NcclBackend().probe()
    if reason:
        pytest.skip(f"needs NCCL on an NVIDIA GPU: {reason}")
    engine = NcclBackend().create(rank=0, world_size=1, store=FileStore(tmp_path), timeout=60, options={})
    x = cupy.arange(8, dtype=cupy.float32)
    buf = buffer(np.empty(8, np.float32), owner=x)
    buf.ptr = x.data.ptr
    engine.all_reduce(buf, buf, 4, "auto", "fast")
    engine.barrier()
    engine.close()
    np.testing.assert_array_equal(cupy.asnumpy(x), np.arange(8, dtype=np.float32))

"""pycoll's HCCL binding end to end against a fake libhccl (tests/fakes/fake_hccl.c) in 2 real processes:
the 4108-byte root info through the store, dtype/op mapping, avg as sum-then-divide, HcclResult mapping and
the destroy-on-deadline path. Binding tests, not proof on hardware: the fake runs on host memory."""

import os

import numpy as np
import pytest
from fakes.vendor_harness import FileStore, buffer, run_ranks_ok, vendor_fixtures, with_engine

ml_dtypes = pytest.importorskip("ml_dtypes")


fake_env, env = vendor_fixtures("hccl")
engine_per_rank = with_engine("hccl", 20.0)


@engine_per_rank
def _collectives(engine, rank, world):
    out = {}
    for dtype in ("int8", "int32", "int64", "float16", "float32"):  # HCCL reduces no float64 (test_vendor_strict)
        for op in (0, 1, 2, 3, 4):
            x = (np.array([2, -4, 6, 9]) * (rank + 1)).astype(dtype)
            engine.all_reduce(buffer(x), buffer(x), op, "auto", "fast")
            out[(dtype, op)] = x
    bf = (np.array([1.5, -3.0]) * (rank + 1)).astype(ml_dtypes.bfloat16)
    engine.all_reduce(buffer(bf), buffer(bf), 4, "auto", "fast")
    out["bf16 avg"] = bf.astype(np.float64)
    send = np.arange(4, dtype=np.float32) * (rank + 1)
    recv = np.zeros(2, np.float32)
    engine.reduce_scatter(buffer(send), buffer(recv), 4, "auto", "fast")
    out["reduce_scatter avg"] = recv
    gathered = np.zeros(2, np.int64)
    engine.all_gather(buffer(np.array([rank * 5], np.int64)), buffer(gathered))
    out["all_gather"] = gathered
    b = np.full(3, rank, np.uint8)
    engine.broadcast(buffer(b), 1)
    out["broadcast"] = b
    engine.barrier()
    from pycoll.errors import PycollError
    with pytest.raises(PycollError, match="accuracy='compensated' is not supported"):
        engine.all_reduce(buffer(send), buffer(send), 0, "auto", "compensated")
    assert "HCCL_ALGO" not in os.environ
    return out


@pytest.mark.timeout(60)
def test_collectives_and_avg_as_sum_then_divide(env):
    base = np.array([2, -4, 6, 9], np.float64)
    parts = [base, 2 * base]
    expect = {0: parts[0] + parts[1], 1: parts[0] * parts[1], 2: np.minimum(*parts), 3: np.maximum(*parts),
              4: (parts[0] + parts[1]) / 2}
    for rank, out in enumerate(run_ranks_ok(_collectives, 2, env)):
        for dtype in ("int8", "int32", "int64", "float16", "float32"):  # HCCL reduces no float64 (test_vendor_strict)
            for op, want in expect.items():
                want = np.trunc(want) if np.dtype(dtype).kind == "i" else want
                np.testing.assert_array_equal(out[(dtype, op)], want.astype(dtype), err_msg=f"{dtype} op {op}")
        np.testing.assert_array_equal(out["bf16 avg"], [2.25, -4.5])
        np.testing.assert_array_equal(out["reduce_scatter avg"], (np.arange(4) * 1.5)[2 * rank:2 * rank + 2])
        np.testing.assert_array_equal(out["all_gather"], [0, 5])
        np.testing.assert_array_equal(out["broadcast"], [1, 1, 1])
    log = open(env["FAKE_COLL_LOG"]).read()
    assert "HcclAllReduce rank=0 count=4 dtype=4 op=3" in log   # float32 min -> HCCL_REDUCE_MIN (3)
    assert "HcclAllReduce rank=0 count=2 dtype=11 op=0" in log  # bfloat16 avg -> BFP16, sum
    assert " op=4" not in log  # HCCL never sees an avg


@pytest.mark.gpu
@pytest.mark.timeout(120)
def test_real_npu_single_rank(tmp_path):
    torch = pytest.importorskip("torch", reason="needs torch_npu and an Ascend NPU")
    pytest.importorskip("torch_npu", reason="needs torch_npu and an Ascend NPU")
    from pycoll.plugins.hccl import HcclBackend
    reason = HcclBackend().probe()
    if reason:
        pytest.skip(f"needs HCCL on an Ascend NPU: {reason}")
    engine = HcclBackend().create(rank=0, world_size=1, store=FileStore(tmp_path), timeout=60, options={})
    x = torch.arange(8, dtype=torch.float32).npu()
    buf = buffer(np.empty(8, np.float32), memory="npu", owner=x)
    buf.ptr = x.data_ptr()
    engine.all_reduce(buf, buf, 4, "auto", "fast")
    engine.close()
    assert x.cpu().tolist() == list(range(8))

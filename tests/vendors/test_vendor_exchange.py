"""gather, scatter and all-to-all on the vendor engine as one group of sends and receives (pycoll_vendor_exchange,
backends/common/vendor_p2p.c), and its send/recv, in real processes against the fakes: 3 ranks, blocks far past the
fake's per-peer buffer, so a call whose messages were not issued together would block. Each result exact; the
block a rank sends itself is copied by the memory's table, which NPU memory lacks (refused, saying so)."""

import numpy as np
import pytest
from fakes import guarded_memory
from fakes.vendor_harness import buffer, fakes_fixture, job_env, make_engine, run_ranks, run_ranks_ok

BUFFER = 16 * 1024
N = 8192  # float64 per block: 64 KiB, four times the per-peer buffer

fakes = fakes_fixture()


def _block(src, dst, n):
    return np.arange(n, dtype=np.float64) + 1000 * src + dst


def _exchanges(rank, world):
    engine = make_engine("nccl", rank, world, 20.0)
    out = {}
    x = np.concatenate([_block(rank, j, N) for j in range(world)])
    y = np.zeros_like(x)
    engine.all_to_all(buffer(x), buffer(y), None)
    out["all_to_all"] = y
    # Uneven: rank r sends (r + j + 1) * 1000 elements to rank j.
    send = [(rank + j + 1) * 1000 for j in range(world)]
    recv = [(r + rank + 1) * 1000 for r in range(world)]
    x = np.concatenate([_block(rank, j, send[j]) for j in range(world)])
    y = np.zeros(sum(recv))
    engine.all_to_all(buffer(x), buffer(y), send + recv)
    out["uneven"] = y
    root = 1
    y = np.zeros(N * world) if rank == root else None
    engine.gather(buffer(_block(rank, root, N)), None if y is None else buffer(y), root)
    out["gather"] = y
    root = world - 1
    x = np.concatenate([_block(root, j, N) for j in range(world)]) if rank == root else None
    y = np.zeros(N)
    engine.scatter(None if x is None else buffer(x), buffer(y), root)
    out["scatter"] = y
    got = np.zeros(N)
    if rank == 0:
        engine.send(buffer(_block(0, 1, N)), 1, 0)
    elif rank == 1:
        engine.recv(buffer(got), 0, 0)
    out["recv"] = got
    engine.close()
    return out


@pytest.mark.timeout(90)
def test_gather_scatter_all_to_all_and_send_recv_over_nccl(fakes, tmp_path):
    world = 3
    outs = run_ranks_ok(_exchanges, world, dict(job_env(fakes("nccl"), tmp_path),
                                                FAKE_P2P_BUFFER_BYTES=str(BUFFER)), timeout=80)
    for rank, out in enumerate(outs):
        np.testing.assert_array_equal(out["all_to_all"], np.concatenate([_block(r, rank, N) for r in range(world)]))
        np.testing.assert_array_equal(out["uneven"], np.concatenate(
            [_block(r, rank, (r + rank + 1) * 1000) for r in range(world)]))
        if rank == 1:
            np.testing.assert_array_equal(out["gather"], np.concatenate([_block(r, 1, N) for r in range(world)]))
            np.testing.assert_array_equal(out["recv"], _block(0, 1, N))
        else:
            assert out["gather"] is None
        np.testing.assert_array_equal(out["scatter"], _block(world - 1, rank, N))
    log = (tmp_path / "log").read_text()
    assert "ncclSend rank=0 peer=2" in log and "ncclRecv rank=2 peer=0" in log


def _hccl_all_to_all(rank, world):
    from pycoll.errors import PycollError

    engine = make_engine("hccl", rank, world, 20.0)
    x = np.concatenate([_block(rank, j, 4) for j in range(world)])
    y = np.zeros_like(x)
    try:
        engine.all_to_all(buffer(x, memory="npu"), buffer(y, memory="npu"), None)
    except PycollError as exc:
        return type(exc).__name__, str(exc)
    finally:
        engine.close()
    return y


@pytest.mark.timeout(90)
def test_hccl_all_to_all_needs_a_table_for_the_own_block(fakes, tmp_path):
    env = job_env(fakes("hccl"), tmp_path)
    results = run_ranks(_hccl_all_to_all, 2, env, timeout=60)
    for rank in range(2):
        status, value = results[rank]
        assert status == "ok" and value[0] == "PycollError", value
        assert "pycoll has no kernels for hccl's device memory" in value[1], value
    # With a table for "NPU" memory (the guarded test table), the same call runs, exact.
    (tmp_path / "store").rename(tmp_path / "store0")
    (tmp_path / "store").mkdir()
    env = dict(env, **{guarded_memory.VARIABLE: guarded_memory.library_path()})
    for rank, y in enumerate(run_ranks_ok(_hccl_all_to_all, 2, env, timeout=60)):
        np.testing.assert_array_equal(y, np.concatenate([_block(r, rank, 4) for r in range(2)]))

"""pycoll's own schedules over a vendor's send/recv (backends/common/vendor_p2p.c) against the fake libnccl's
stricter point-to-point (tests/fakes/fake_collectives.c): a send completes only once its peer has received all
but FAKE_P2P_BUFFER_BYTES of the channel, as NCCL's per-peer buffer (NCCL_BUFFSIZE) allows, and a group's sends
and receives progress together. Multi-segment rings (many step-0 segments in flight), the mesh's one exchange
with every rank and the other schedules must complete: each wait issues as one group exactly the operations that
must progress together."""

import functools

import numpy as np
import pytest
from fakes.vendor_harness import (
    buffer,
    make_engine,
    run_ranks,
    run_ranks_ok,
    vendor_fixtures,
)

from pycoll.errors import PycollError

SUM = 0
BUFFER = 16 * 1024  # bytes a send may run ahead of its receive: far below one ring segment (512 KiB)
# Per rank blocks of 2^17 float32 (512 KiB): 2 segments each in compensated mode, whose partials are 8 bytes wide.
COUNT = 3 * (1 << 17) + 5

fake_env, env = vendor_fixtures("nccl")


def _inputs(rank, count, dtype=np.float32):
    return (np.arange(count, dtype=np.float64) % 97 + rank).astype(dtype)


def _schedules_rank(cases, rank, world):
    engine = make_engine("nccl", rank, world, 8.0)
    out = {}
    try:
        for kind, algorithm, accuracy in cases:
            x = _inputs(rank, COUNT)
            if kind == "all_reduce":
                y = np.empty_like(x)
                out[(kind, algorithm, accuracy)] = engine.all_reduce(buffer(x), buffer(y), SUM, algorithm, accuracy)
            elif kind == "reduce_scatter":
                full = _inputs(rank, COUNT * world)
                y = np.empty(COUNT, np.float32)
                out[(kind, algorithm, accuracy)] = engine.reduce_scatter(buffer(full), buffer(y), SUM, algorithm,
                                                                        accuracy)
            else:
                y = x.copy()
                engine.reduce(buffer(x), buffer(y), SUM, 0, accuracy)
            out[(kind, algorithm, accuracy, "result")] = y
    finally:
        engine.close()
    return out


def _check(outs, world, cases):
    expected = sum(_inputs(r, COUNT).astype(np.float64) for r in range(world))
    full = sum(_inputs(r, COUNT * world).astype(np.float64) for r in range(world))
    for kind, algorithm, accuracy in cases:
        for rank, out in enumerate(outs):
            y = out[(kind, algorithm, accuracy, "result")]
            if kind == "reduce_scatter":
                np.testing.assert_array_equal(y, full[rank * COUNT:(rank + 1) * COUNT].astype(np.float32))
            elif kind == "all_reduce" or rank == 0:
                np.testing.assert_array_equal(y, expected.astype(np.float32), err_msg=str((kind, algorithm)))


# The ring (compensated), its reduce-scatter and the reduce's scatter-gather: every rank posts all its step-0
# segments, then waits on one receive. Mesh, halving-doubling and recursive doubling (fast) over send/recv.
CASES = [("all_reduce", "auto", "compensated"), ("reduce_scatter", "auto", "compensated"),
         ("reduce", "auto", "compensated"), ("all_reduce", "mesh", "fast"),
         ("all_reduce", "halving_doubling", "fast"), ("all_reduce", "recursive_doubling", "fast")]


@pytest.mark.timeout(110)
@pytest.mark.parametrize("world", [2, 3])
def test_multi_segment_schedules_complete_under_bounded_send_buffering(env, world):
    outs = run_ranks_ok(functools.partial(_schedules_rank, CASES), world,
                        dict(env, FAKE_P2P_BUFFER_BYTES=str(BUFFER)), timeout=100)
    _check(outs, world, CASES)


def _mismatch_rank(rank, world):
    """Rank 0 sends 8 floats, rank 1 receives 4: nccl.h wants the same count on both sides."""
    engine = make_engine("nccl", rank, world, 3.0)
    comm = engine._comm("auto")
    x = np.ones(8 if rank == 0 else 4, np.float32)
    ptr = x.__array_interface__["data"][0]
    try:
        if rank == 0:
            comm.send_recv(ptr, 8, 1, 0, 0, -1, 6, 0)
        else:
            comm.send_recv(0, 0, -1, ptr, 4, 0, 6, 0)
    except (PycollError, ValueError) as exc:
        return type(exc).__name__, str(exc)
    return None


@pytest.mark.timeout(60)
def test_fake_reports_a_send_recv_count_mismatch(env):
    results = run_ranks(_mismatch_rank, 2, env, timeout=50)
    status, value = results[1]
    assert status == "ok", value
    assert value is not None and value[0] == "ValueError", value
    assert "ncclInvalidUsage" in value[1], value
